"""What the benchmark scripts share to run what they measure: a dashboard server from a
tree in a process of its own, stopping it, asking it for a file by a signal, and the CPU
time of processes (Chromium's by process type, a server's, a lab's children).

Not run by itself; the scripts import it (``from benchmarks.harness import ...``). Labs come
from ``tests.support.jupyter`` (``jupyter_lab``, ``dashboard_servers``), as the tests' do.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import psutil

from tests.support.bokeh_client import TEST_TOKEN
from tests.support.servers import wait_until_serving


# ----- processes' CPU --------------------------------------------------------------------
def cpu_s(process: psutil.Process) -> float:
    """CPU seconds so far of one process (user and system)."""
    times = process.cpu_times()
    return times.user + times.system


def cpu_s_by_pid(processes: Iterable[psutil.Process]) -> dict[int, float]:
    """CPU seconds so far of each process that is still there, by PID."""
    seconds = {}
    for process in processes:
        try:
            seconds[process.pid] = cpu_s(process)
        except psutil.Error:
            continue
    return seconds


def children_cpu_s(process: psutil.Process) -> float:
    """CPU seconds so far of all of ``process``'s children (a lab's dashboard server...)."""
    return sum(cpu_s_by_pid(process.children(recursive=True)).values())


def chromium_cpu_s() -> dict[str, float]:
    """CPU seconds so far of each Chromium process type (browser, renderer, gpu-process,
    utility...), summed over this process's Chromium children."""
    by_type: dict[str, float] = {}
    for child in psutil.Process().children(recursive=True):
        try:
            if "chrom" in child.name().lower():
                kind = next((part.split("=", 1)[1] for part in child.cmdline()
                             if part.startswith("--type=")), "browser")
                by_type[kind] = by_type.get(kind, 0.0) + cpu_s(child)
        except psutil.Error:
            continue
    return by_type


def per_process_pct(before: dict[str, float], after: dict[str, float],
                    window_s: float) -> dict[str, float]:
    """% of one core per Chromium process type over a window, dearest first."""
    return {kind: 100 * (cpu - before.get(kind, 0.0)) / window_s
            for kind, cpu in sorted(after.items(), key=lambda item: -item[1])}


# ----- servers ---------------------------------------------------------------------------
def stop(process: subprocess.Popen, timeout_s: float = 15) -> None:
    """Ctrl-C, as a user stops a server; killed if it has not stopped in ``timeout_s``."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def file_by_signal(process: subprocess.Popen, path: Path, timeout_s: float,
                   what: str, poll_s: float = 0.02) -> object:
    """The JSON a server of ours writes to ``path`` when sent SIGUSR1 (its call counts, its
    loop probe); ``TimeoutError`` saying ``what`` did not come when it does not."""
    path.unlink(missing_ok=True)
    process.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(poll_s)
    return json.loads(path.read_text())


class DashboardServer:
    """A dashboard server from ``source`` (this checkout or a revision's worktree) on
    ``port``: ``python ARGUMENTS`` with the tests' token and ``source`` first on the path,
    waited for until it serves ``/``."""

    def __init__(self, source: Path, port: int, arguments: Sequence[str],
                 env: dict[str, str] | None = None) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [sys.executable, *arguments],
            # The server asks for a token; the clients here send this one.
            env={**os.environ, "NVDASHBOARD_TOKEN": TEST_TOKEN, "PYTHONPATH": str(source),
                 **(env or {})},
            cwd=source, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        wait_until_serving(self.url + "/", process=self.process)
        self.ps = psutil.Process(self.process.pid)

    def cpu_s(self) -> float:
        return cpu_s(self.ps)

    def rss_mb(self) -> float:
        return self.ps.memory_info().rss / 1e6

    def stop(self) -> None:
        stop(self.process)
