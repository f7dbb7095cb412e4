"""Who is using the GPU, end to end: a real ``jupyter lab`` (token, base_url /user/alice/,
simulated GPUs) runs two notebooks' kernels; the simulated driver lists those kernels' real
PIDs, and a child one kernel forks, on GPUs 0 and 1 (written to the test-only
``NVDASHBOARD_SIMULATE_PROCESSES`` file); ``/GPU-Processes``'s data, read through
jupyter-server-proxy, names the notebooks. A rename and a shutdown show up within a counted
number of refreshes.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.support.jupyter import JupyterLab, jupyter_lab
from tests.support.waiting import until_ended

pytestmark = pytest.mark.lab

GB = 10**9
NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def call(lab: JupyterLab, method: str, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(lab.url + path, data=data, method=method,
                                     headers={**lab.auth, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        text = response.read()
    return json.loads(text) if text else None


def kernel_pid(lab: JupyterLab, kernel_id: str) -> int:
    deadline = time.monotonic() + 120  # a deadline, not a count of polls: load slows them
    while time.monotonic() < deadline:
        for process in psutil.Process(lab.process.pid).children(recursive=True):
            try:
                if any(f"kernel-{kernel_id}.json" in arg for arg in process.cmdline()):
                    return process.pid
            except psutil.Error:
                continue
        time.sleep(0.2)
    raise AssertionError(f"no process for kernel {kernel_id}")


def fork_child(lab_home: Path, kernel_id: str, out: Path) -> int:
    """Make the kernel fork a worker (as multiprocessing's fork does); returns its PID."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(lab_home / f"kernel-{kernel_id}.json"))
    client.load_connection_file()
    client.start_channels()
    try:
        client.execute("import os, time\n_pid = os.fork()\nif _pid == 0:\n"
                       "    time.sleep(600)\n    os._exit(0)\n"
                       f"open({str(out)!r}, 'w').write(str(_pid))\n")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if out.exists() and out.read_text():
                return int(out.read_text())
            time.sleep(0.1)
    finally:
        client.stop_channels()
    raise AssertionError("the kernel did not fork")


def table(lab: JupyterLab) -> dict:
    status, body = lab.get("nvdashboard/processes.json")
    assert status == 200, body[:300]
    return json.loads(body)


def wait_for(lab: JupyterLab, predicate, what: str, seconds: float = 120) -> dict:  # noqa: ANN001
    deadline = time.monotonic() + seconds  # a deadline, not a count of polls: load slows them
    while time.monotonic() < deadline:
        data = table(lab)
        if predicate(data):
            return data
        time.sleep(0.2)
    raise AssertionError(f"{what}: {json.dumps(data)[:2000]}")


def rows_for(data: dict, notebook: str) -> list[dict]:
    return [row for row in data["rows"] if row["notebook"] == notebook]


@pytest.fixture(scope="module")
def lab(processes_file):
    with jupyter_lab(simulate=2, extra_env={
            "NVDASHBOARD_SIMULATE_PROCESSES": str(processes_file)}) as running:
        yield running


def test_notebooks_rename_and_shutdown(lab: JupyterLab, processes_file: Path) -> None:
    for name in ("alpha.ipynb", "beta.ipynb"):
        call(lab, "PUT", f"api/contents/{name}", {"type": "notebook", "content": NOTEBOOK})
    sessions = {name: call(lab, "POST", "api/sessions", {
        "path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}})
        for name in ("alpha.ipynb", "beta.ipynb")}
    alpha, beta = (sessions[n]["kernel"]["id"] for n in ("alpha.ipynb", "beta.ipynb"))
    alpha_pid, beta_pid = kernel_pid(lab, alpha), kernel_pid(lab, beta)
    # The kernel's connection file (on its command line) lets this test run code in it.
    runtime = next(Path(arg).parent for arg in psutil.Process(alpha_pid).cmdline()
                   if arg.endswith(f"kernel-{alpha}.json"))
    child = fork_child(runtime, alpha, processes_file.with_name("child.pid"))
    try:
        processes_file.write_text(json.dumps([
            {"gpu": 0, "pid": alpha_pid, "used_memory_bytes": 3 * GB, "sm_pct": 40,
             "until_exit": True},
            {"gpu": 1, "pid": child, "used_memory_bytes": 1 * GB, "until_exit": True},
            {"gpu": 1, "pid": beta_pid, "used_memory_bytes": 5 * GB, "until_exit": True},
        ]))
        data = wait_for(lab, lambda d: len(rows_for(d, "alpha.ipynb")) == 2
                        and len(rows_for(d, "beta.ipynb")) == 1, "both notebooks named")
        by_pid = {row["pid"]: row for row in data["rows"]}
        assert by_pid[alpha_pid]["memory_bytes"] == 3 * GB and by_pid[alpha_pid]["device"] == 0
        assert by_pid[child]["memory_bytes"] == 1 * GB and by_pid[child]["device"] == 1
        assert by_pid[child]["kernel_id"] == alpha and "child of kernel" in by_pid[child]["what"]
        assert by_pid[beta_pid]["memory_bytes"] == 5 * GB and by_pid[beta_pid]["device"] == 1
        assert by_pid[alpha_pid]["lab_url"] == "/user/alice/lab/tree/alpha.ipynb"
        # The current user's processes first, then by memory.
        assert [row["pid"] for row in data["rows"]] == [beta_pid, alpha_pid, child]

        # Rename, as JupyterLab does it: the file, then its session's path.
        call(lab, "PATCH", "api/contents/alpha.ipynb", {"path": "renamed.ipynb"})
        call(lab, "PATCH", f"api/sessions/{sessions['alpha.ipynb']['id']}",
             {"path": "renamed.ipynb"})
        renamed_after = table(lab)["sessions_refreshes"]
        data = wait_for(lab, lambda d: len(rows_for(d, "renamed.ipynb")) == 2, "renamed")
        assert data["sessions_refreshes"] <= renamed_after + 2  # the next full refresh
        assert not rows_for(data, "alpha.ipynb")

        # Shut beta's kernel down: its row goes within two process passes of its exit.
        call(lab, "DELETE", f"api/sessions/{sessions['beta.ipynb']['id']}")
        until_ended(beta_pid, 30)
        exited_after = table(lab)["process_passes"]
        data = wait_for(lab, lambda d: beta_pid not in {r["pid"] for r in d["rows"]},
                        "beta's row gone")
        assert data["process_passes"] <= exited_after + 2
        assert {row["pid"] for row in data["rows"]} == {alpha_pid, child}
    finally:
        try:
            os.kill(child, 9)
        except ProcessLookupError:
            pass
