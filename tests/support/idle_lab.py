"""Helpers for the idle-kernel tests under a real ``jupyter lab``: notebooks with real
kernels, code run in a kernel as a user would (through its own connection file), the
user's JupyterLab settings written through Jupyter's settings API, and ``/glance.json``
read through the proxy."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from tests.support.jupyter import JupyterLab, cell_reply, shell_client
from tests.support.waiting import until
from tests.test_lab_processes import NOTEBOOK, call, kernel_pid

GIB = 2**30
PLUGIN = "jupyterlab-nvdashboard:plugin"


def start_notebook(lab: JupyterLab, name: str) -> tuple[str, int]:
    """A notebook with a running kernel that Jupyter knows to be idle, as once JupyterLab
    has opened it: (kernel id, kernel PID)."""
    call(lab, "PUT", f"api/contents/{name}", {"type": "notebook", "content": NOTEBOOK})
    session = call(lab, "POST", "api/sessions", {"path": name, "name": name,
                                                 "type": "notebook",
                                                 "kernel": {"name": "python3"}})
    kernel_id = session["kernel"]["id"]  # type: ignore[index]
    pid = kernel_pid(lab, kernel_id)
    answered_in_jupyter(lab, pid, kernel_id)
    until(lambda: kernel_state(lab, kernel_id) == "idle", f"{name}'s kernel idle in Jupyter")
    return kernel_id, pid


def kernel_state(lab: JupyterLab, kernel_id: str) -> str:
    """The kernel's execution state as Jupyter reports it."""
    return call(lab, "GET", f"api/kernels/{kernel_id}")["execution_state"]  # type: ignore[index,return-value]


def answered_in_jupyter(lab: JupyterLab, pid: int, kernel_id: str) -> None:
    """Ask the kernel for its kernel_info, as JupyterLab does on connecting, until Jupyter
    has read an answer: it says "starting" until it reads a status on the kernel's IOPub.
    Jupyter subscribes to IOPub only once the kernel is ready, and what the kernel published
    before that subscription joined is lost to it, so one request is not enough: a loaded
    machine left a notebook "starting" for good (loaded run S)."""
    with shell_client(connection_file(pid, kernel_id)) as client:
        until(lambda: client.kernel_info(reply=True, timeout=60)
              and kernel_state(lab, kernel_id) != "starting",
              "Jupyter reads the kernel's answer", every_s=0.2)


def connection_file(pid: int, kernel_id: str) -> Path:
    """The kernel's connection file, from its command line."""
    return next(Path(arg) for arg in psutil.Process(pid).cmdline()
                if arg.endswith(f"kernel-{kernel_id}.json"))


def run_cell(pid: int, kernel_id: str, code: str, wait: bool = True) -> None:
    """Run ``code`` in the kernel; with ``wait``, until its reply says it ran without error,
    else until the kernel says it runs it."""
    from jupyter_client import BlockingKernelClient

    if wait:
        reply = cell_reply(connection_file(pid, kernel_id), code)
        assert reply["status"] == "ok", reply
        return
    client = BlockingKernelClient(connection_file=str(connection_file(pid, kernel_id)))
    client.load_connection_file()
    client.start_channels(hb=False)
    try:
        # Until a kernel_info reply and an IOPub message arrive: IOPub is a subscription,
        # and what the kernel publishes before it is connected is lost.
        client.wait_for_ready(timeout=60)
        msg_id = client.execute(code)
        while True:
            message = client.get_iopub_msg(timeout=60)
            if message["parent_header"].get("msg_id") == msg_id \
                    and message["msg_type"] == "status" \
                    and message["content"]["execution_state"] == "busy":
                break
    finally:
        client.stop_channels()


def write_settings(lab: JupyterLab, values: dict[str, Any]) -> None:
    """The user's GPU Dashboards settings, as the Settings Editor saves them."""
    call(lab, "PUT", f"lab/api/settings/{PLUGIN}", {"raw": json.dumps(values)})


def glance(lab: JupyterLab) -> dict:
    status, body = lab.get("nvdashboard/glance.json")
    assert status == 200, body[:300]
    return json.loads(body)


def kernel_entry(data: dict, kernel_id: str) -> dict | None:
    return next((k for k in data.get("kernels", []) if k["kernel_id"] == kernel_id), None)


def wait_glance(lab: JupyterLab, predicate: Callable[[dict], bool], what: str,
                timeout_s: float = 90.0) -> dict:
    """Read ``/glance.json`` until ``predicate`` holds (generous: the machine is shared)."""
    deadline = time.monotonic() + timeout_s
    data: dict = {}
    while time.monotonic() < deadline:
        data = glance(lab)
        if predicate(data):
            return data
        time.sleep(0.5)
    raise AssertionError(f"{what}: {json.dumps(data)[:3000]}")


def judged(data: dict, kernel_id: str, state: str) -> bool:
    entry = kernel_entry(data, kernel_id)
    return bool(entry and (entry.get("idle") or {}).get("state") == state)


def place(processes_file: Path, processes: list[dict]) -> None:
    """What the simulated driver lists (each process listed while its PID lives)."""
    processes_file.write_text(json.dumps([{"until_exit": True, **p} for p in processes]))


TOAST = ".Toastify__toast"


def toasts_in_place(page) -> None:  # noqa: ANN001 - playwright Page
    """Wait until every notification has slid into the window (for a screenshot)."""
    # Its entrance is a finite animation (a hidden progress bar runs for ever).
    page.wait_for_function(f"""() => [...document.querySelectorAll('{TOAST}')].every(
      t => t.getAnimations({{subtree: true}}).every(a => a.playState !== 'running'
        || a.effect.getComputedTiming().iterations === Infinity))""", timeout=10_000)
