"""Starts and stops the one workload run the dashboard may launch.

``RunLauncher`` starts the bundled workload module only, from arguments validated by
``build_command``; nothing from a request ever reaches a shell. One run at a time, in a
process group of its own. A GPU run is pinned to one GPU by ``CUDA_VISIBLE_DEVICES`` (that
GPU's UUID comes from the server's NVML facts, never from a request); a CPU run sees no GPU.
Both name that GPU in ``NVDASHBOARD_RUN_GPU``, so the run's events say which GPU judges it.

Stopping escalates: SIGINT first (the run writes its summary and exits), SIGTERM after
``SIGTERM_AFTER_S`` seconds (the run still writes an ``end`` event), SIGKILL
``SIGKILL_AFTER_S`` seconds later, each to the run's whole process group. When the server
stops, ``shutdown()`` does the same with shorter delays and waits for it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ..workload.cli import build_command
from ..workload.config import RUN_GPU_ENV, RUNS_DIR_ENV

log = logging.getLogger(__name__)

SIGTERM_AFTER_S = 10.0  # after Ctrl-C, how long a run may take to write its summary
SIGKILL_AFTER_S = 5.0  # after SIGTERM, how long before the process group is killed
SHUTDOWN_SIGTERM_AFTER_S = 3.0  # the same, when the server itself is stopping
SHUTDOWN_SIGKILL_AFTER_S = 2.0
STDERR_LINES_KEPT = 20


class PinnedGpu(NamedTuple):
    index: int  # the server's device row
    uuid: str


class RunLauncher:
    """Starts the bundled workload with validated arguments, one run at a time."""

    def __init__(self, runs_dir: Path, environ: Mapping[str, str] | None = None,
                 on_exit: Callable[[int, int, str], None] | None = None) -> None:
        """``on_exit(pid, exit status, last stderr line)`` is called when a run exits."""
        self.runs_dir = Path(runs_dir)
        self._on_exit = on_exit
        self._environ = dict(os.environ if environ is None else environ)
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.last_error = ""

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self, params: dict[str, Any], gpu: PinnedGpu | None = None) -> str:
        """Launch a run; returns a one-line status. Raises ValueError for bad parameters."""
        command = build_command(params)  # the schema check: only known keys and values
        with self._lock:
            if self.running:
                raise ValueError("a run is already in progress; stop it first")
            environment = {**self._environ, RUNS_DIR_ENV: str(self.runs_dir)}
            environment.pop(RUN_GPU_ENV, None)
            on_gpu = params.get("device") == "gpu"
            if gpu is not None:
                # A GPU run sees only its GPU; a CPU run sees none, and is judged against it.
                environment["CUDA_VISIBLE_DEVICES"] = gpu.uuid if on_gpu else ""
                environment[RUN_GPU_ENV] = f"{gpu.index}:{gpu.uuid}"
            self.last_error = ""
            self._stopping.clear()
            self._process = subprocess.Popen(  # noqa: S603 - argv from build_command only
                command, env=environment, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            )
            threading.Thread(target=self._watch_exit, args=(self._process,), daemon=True,
                             name="nvdashboard-run-exit").start()
        where = ""
        if gpu is not None:
            where = f" on GPU {gpu.index}" if on_gpu else f" on the CPU, watching GPU {gpu.index}"
        return f"started {params['path']} on preset {params['preset']}{where}"

    def _watch_exit(self, process: subprocess.Popen) -> None:
        tail: deque[str] = deque(maxlen=STDERR_LINES_KEPT)  # bounded, however chatty the run
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode(errors="replace").strip()
            if line:
                tail.append(line[:500])
        process.wait()
        last = tail[-1] if tail else f"exit status {process.returncode}"
        if process.returncode not in (0, 130, -signal.SIGINT) and not self._stopping.is_set():
            self.last_error = last
        if self._on_exit is not None:
            try:
                self._on_exit(process.pid, process.returncode, last)
            except Exception as error:  # noqa: BLE001 - a report must not kill this thread
                log.warning("after the run exited: %s: %s", type(error).__name__, error)

    def stop(self) -> str:
        """Ctrl-C the run; SIGTERM and SIGKILL follow if it does not exit in time."""
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                return "no run in progress"
            self._stopping.set()
            _signal_group(process, signal.SIGINT)
        threading.Thread(target=_escalate, args=(process, SIGTERM_AFTER_S, SIGKILL_AFTER_S),
                         daemon=True, name="nvdashboard-run-stop").start()
        return (f"stopping the run (Ctrl-C; SIGTERM after {SIGTERM_AFTER_S:.0f} s, "
                f"SIGKILL {SIGKILL_AFTER_S:.0f} s later)")

    def shutdown(self) -> None:
        """Stop the run and wait for it: the server is stopping, no child outlives it."""
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                return
            self._stopping.set()
            _signal_group(process, signal.SIGINT)
        _escalate(process, SHUTDOWN_SIGTERM_AFTER_S, SHUTDOWN_SIGKILL_AFTER_S)


def _signal_group(process: subprocess.Popen, number: int) -> None:
    try:
        os.killpg(process.pid, number)  # the run's own group (start_new_session=True)
    except (ProcessLookupError, PermissionError):
        pass


def _escalate(process: subprocess.Popen, term_after_s: float, kill_after_s: float) -> None:
    for number, wait_s in ((signal.SIGTERM, term_after_s), (signal.SIGKILL, kill_after_s)):
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            log.info("the run did not stop in %.0f s; sending %s", wait_s, number.name)
            _signal_group(process, number)
    process.wait()
