"""The idle judgment in a real ``jupyter lab`` (issue 28 item 1; the notice and the cull
read it): a notebook's real kernel, listed by the simulated driver, holding 3 GiB and doing
no GPU work, is ``idle`` in ``/glance.json`` (read through jupyter-server-proxy); while it
runs a cell (Jupyter's own execution state, as a ``pip install`` would) it is ``busy``, and
afterwards idle again in a new episode counted from the end of the cell; a training loop in
a child process of the kernel makes it ``busy`` while the kernel itself is idle in Jupyter;
a message that runs no cell (which Jupyter's last_activity counts) keeps the episode.
A malformed notice (100,000 nested lists among them) is a 400, logged without a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest

from jupyterlab_nvdashboard.http_edge import EVERY_RESPONSE
from jupyterlab_nvdashboard.idle_cull import CULLS_PATH, NOTICES_PATH
from tests.support.idle_lab import (
    answered_in_jupyter,
    connection_file,
    kernel_state,
    run_cell,
    start_notebook,
)
from tests.support.jupyter import JupyterLab, cell_reply, jupyter_lab, shell_client
from tests.support.waiting import until
from tests.test_lab_processes import NOTEBOOK, call, fork_child, kernel_pid

pytestmark = pytest.mark.lab

GIB = 2**30
ROOT = str(Path(__file__).resolve().parents[1])


def idle_of(lab: JupyterLab, kernel_id: str) -> dict | None:
    status, body = lab.get("nvdashboard/glance.json")
    assert status == 200, body[:300]
    found = [k for k in json.loads(body)["kernels"] if k["kernel_id"] == kernel_id]
    return found[0]["idle"] if found else None


def wait_for(lab: JupyterLab, kernel_id: str, predicate, what: str,  # noqa: ANN001
             seconds: float = 90) -> dict:
    deadline = time.monotonic() + seconds
    idle = None
    while time.monotonic() < deadline:
        idle = idle_of(lab, kernel_id)
        if idle is not None and predicate(idle):
            return idle
        time.sleep(0.3)
    raise AssertionError(f"{what}: {idle}")


@pytest.fixture(scope="module")
def lab(processes_file: Path):  # noqa: ANN201
    # The proxied dashboard server imports this checkout (it runs with the lab's cwd).
    with jupyter_lab(simulate=2, extra_env={
            "NVDASHBOARD_SIMULATE_PROCESSES": str(processes_file),
            "NVDASHBOARD_SIMULATE_SCENARIO": "idle", "PYTHONPATH": ROOT}) as running:
        yield running


def test_a_real_kernel_idle_busy_in_a_cell_and_idle_again(lab: JupyterLab,
                                                          processes_file: Path) -> None:
    from jupyter_client import BlockingKernelClient

    call(lab, "PUT", "api/contents/held.ipynb", {"type": "notebook", "content": NOTEBOOK})
    session = call(lab, "POST", "api/sessions", {"path": "held.ipynb", "name": "held.ipynb",
                                                 "type": "notebook",
                                                 "kernel": {"name": "python3"}})
    kernel_id = session["kernel"]["id"]  # type: ignore[index]
    pid = kernel_pid(lab, kernel_id)
    runtime = next(Path(arg).parent for arg in psutil.Process(pid).cmdline()
                   if arg.endswith(f"kernel-{kernel_id}.json"))
    client = BlockingKernelClient(connection_file=str(runtime / f"kernel-{kernel_id}.json"))
    client.load_connection_file()
    client.start_channels()
    try:
        processes_file.write_text(json.dumps([{"gpu": 1, "pid": pid, "sm_pct": 0,
                                               "used_memory_bytes": 3 * GIB,
                                               "until_exit": True}]))
        # Jupyter says "starting" until the kernel first answers a request (JupyterLab asks
        # for its kernel_info on connecting): busy until then, never idle.
        starting = wait_for(lab, kernel_id, lambda i: True, "listed")
        assert starting["state"] == "busy" and starting["figures"]["execution_state"] == \
            "starting", starting
        answered_in_jupyter(lab, pid, kernel_id)
        first = wait_for(lab, kernel_id, lambda i: i["state"] == "idle", "idle")
        assert first["signal"] == "per-process SM samples" and first["held_bytes"] == 3 * GIB
        assert first["text"].startswith("held.ipynb holds 3.0 GiB on GPU 1 and has done no "
                                        "GPU work for ")
        # A cell that runs pip (no network here: a listing, then a wait as long as an
        # install's), with the GPU memory held and no GPU work all along.
        cell_end = time.time() + 12  # at the earliest
        client.execute("import subprocess, sys, time\n"
                       "subprocess.run([sys.executable, '-m', 'pip', 'list'], "
                       "capture_output=True)\ntime.sleep(12)")
        busy = wait_for(lab, kernel_id, lambda i: i["state"] == "busy", "busy in a cell")
        assert busy["signal"] == "Jupyter's execution state" and busy["idle_s"] is None
        assert "busy in Jupyter" in busy["text"]
        again = wait_for(lab, kernel_id, lambda i: i["state"] == "idle", "idle again", 60)
        # A new episode, counted from the end of the cell (Jupyter's last_activity).
        assert again["episode"] != first["episode"]
        assert again["idle_s"] <= time.time() - cell_end
        # A training loop in a child of the kernel: busy, though the kernel is idle in Jupyter.
        child = fork_child(runtime, kernel_id, processes_file.with_name("idle-child.pid"))
        processes_file.write_text(json.dumps([
            {"gpu": 1, "pid": pid, "sm_pct": 0, "used_memory_bytes": 3 * GIB,
             "until_exit": True},
            {"gpu": 0, "pid": child, "sm_pct": 90, "used_memory_bytes": 10 * GIB,
             "until_exit": True}]))
        training = wait_for(lab, kernel_id, lambda i: i["state"] == "busy"
                            and i["held_bytes"] == 13 * GIB, "busy by its child")
        assert training["signal"] == "per-process SM samples", training
        psutil.Process(child).kill()
    finally:
        client.stop_channels()


def test_a_kernel_whose_first_answer_jupyter_missed_is_still_seen_idle(lab: JupyterLab) -> None:
    # Jupyter learns a kernel's state from status messages on its IOPub, and what the kernel
    # publishes before Jupyter's subscription has joined is lost to it (loaded run S left a
    # notebook "starting" for good). Here Jupyter is stopped (SIGSTOP, as an unscheduled
    # process) from just after it launched the kernel until the kernel has answered a cell.
    # Whether its subscription joined before the stop is up to its I/O thread: where it had
    # (Jupyter then reads the cell's messages, "idle"), the case did not arise, and a new
    # kernel tries again.
    call(lab, "PUT", "api/contents/missed.ipynb", {"type": "notebook", "content": NOTEBOOK})
    server = lab.process.pid
    for _ in range(3):
        session = call(lab, "POST", "api/sessions", {"path": "missed.ipynb",
                                                     "name": "missed.ipynb",
                                                     "type": "notebook",
                                                     "kernel": {"name": "python3"}})
        os.kill(server, signal.SIGSTOP)
        try:
            kernel_id = session["kernel"]["id"]  # type: ignore[index]
            pid = kernel_pid(lab, kernel_id)
            assert cell_reply(connection_file(pid, kernel_id), "pass")["status"] == "ok"
        finally:
            os.kill(server, signal.SIGCONT)
        if kernel_state(lab, kernel_id) == "starting":  # Jupyter read none of that
            break
        call(lab, "DELETE", f"api/sessions/{session['id']}")  # type: ignore[index]
    else:
        raise AssertionError("Jupyter's subscription joined before its stop three times")
    try:
        answered_in_jupyter(lab, pid, kernel_id)
        until(lambda: kernel_state(lab, kernel_id) == "idle", "idle in Jupyter")
    finally:
        call(lab, "DELETE", f"api/sessions/{session['id']}")  # type: ignore[index]


def test_a_malformed_notice_is_a_400_without_a_traceback(lab: JupyterLab) -> None:
    # 100,000 nested lists: Python's JSON parser runs out of stack (RecursionError, which is
    # no ValueError) long before the end; that was a 500 with a traceback in Jupyter's log.
    log = Path(psutil.Process(lab.process.pid).cwd()) / "jupyter.log"
    before = len(log.read_text(errors="replace"))
    for body in (b"[" * 100_000, b"{not json", json.dumps({"kernel_id": 1}).encode()):
        request = urllib.request.Request(lab.url + NOTICES_PATH, data=body, method="POST",
                                         headers={**lab.auth,
                                                  "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert refused.value.code == 400, body[:20]
        for name, value in EVERY_RESPONSE.items():
            assert refused.value.headers.get(name) == value, name
    status, _ = lab.get(CULLS_PATH)
    assert status == 200
    # Jupyter's own lines for each refused API request (its access line, the reason, "wrote
    # error"), once written, and no traceback.

    def reasons() -> list[str] | None:
        written = log.read_text(errors="replace")[before:]
        lines = [line for line in written.splitlines()
                 if "400 POST" in line and "expected {kernel_id" in line]
        return lines if len(lines) >= 3 else None

    until(reasons, "Jupyter logs the three refusals with their reason")
    after = log.read_text(errors="replace")[before:]
    assert "Traceback" not in after and "RecursionError" not in after, after[-3000:]


def test_a_message_that_runs_no_cell_does_not_restart_the_idle_clock(
        lab: JupyterLab, processes_file: Path) -> None:
    """Issue 44: the notice said 61 s four minutes after the last cell, once a page had
    reconnected. Jupyter's last_activity moves for messages that run no cell (here the
    ``comm_open`` a widget frontend sends on connecting, answered with a ``comm_close``):
    "no cell run" counts from the last execution, which Jupyter's own IOPub shows."""
    quiet_id, quiet_pid = start_notebook(lab, "quiet.ipynb")
    other_id, other_pid = start_notebook(lab, "other.ipynb")
    processes_file.write_text(json.dumps([
        {"gpu": 1, "pid": quiet_pid, "sm_pct": 0, "used_memory_bytes": 3 * GIB,
         "until_exit": True},
        {"gpu": 0, "pid": other_pid, "sm_pct": 0, "used_memory_bytes": GIB,
         "until_exit": True}]))
    try:
        run_cell(quiet_pid, quiet_id, "x = 1")
        first = wait_for(lab, quiet_id, lambda i: i["state"] == "idle" and i["idle_s"] >= 3,
                         "idle a while after its cell")
        before = call(lab, "GET", f"api/kernels/{quiet_id}")["last_activity"]  # type: ignore[index]
        with shell_client(connection_file(quiet_pid, quiet_id)) as client:
            client.shell_channel.send(client.session.msg("comm_open", {
                "comm_id": uuid.uuid4().hex, "target_name": "jupyter.widget.control",
                "data": {}}))
            until(lambda: call(lab, "GET", f"api/kernels/{quiet_id}")[  # type: ignore[index]
                "last_activity"] != before, "Jupyter counts the message as activity")
        # The dashboard has read Jupyter's sessions since: it sees the other kernel running
        # a cell started after the message.
        run_cell(other_pid, other_id, "import time; time.sleep(600)", wait=False)
        wait_for(lab, other_id, lambda i: i["state"] == "busy", "the other kernel busy")
        after = idle_of(lab, quiet_id)
        assert after is not None and after["state"] == "idle", after
        assert after["episode"] == first["episode"], (first, after)
    finally:
        for kernel_id in (quiet_id, other_id):
            call(lab, "DELETE", f"api/kernels/{kernel_id}")
