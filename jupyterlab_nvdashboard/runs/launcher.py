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

A run never outlives its server: it gets ``NVDASHBOARD_PARENT_PID`` and ends itself, with
its ``end`` event, when that process is gone (``workload/lifetime.py``), even after a
``kill -9`` of the server. While a run lives, ``RUN_LOCK_NAME`` in the runs folder names it
(PID and start time): a server started later on the same folder finds it, shows it as
running, refuses a second run and can stop it. "One run at a time" holds across restarts
and across servers sharing a folder.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..workload.cli import MODULE, build_command
from ..workload.config import RUN_GPU_ENV, RUNS_DIR_ENV
from ..workload.lifetime import PARENT_PID_ENV, process_start_ticks

log = logging.getLogger(__name__)

SIGTERM_AFTER_S = 10.0  # after Ctrl-C, how long a run may take to write its summary
SIGKILL_AFTER_S = 5.0  # after SIGTERM, how long before the process group is killed
SHUTDOWN_SIGTERM_AFTER_S = 3.0  # the same, when the server itself is stopping
SHUTDOWN_SIGKILL_AFTER_S = 2.0
STDERR_LINES_KEPT = 20
RUN_LOCK_NAME = ".nvdashboard-run.lock"
POLL_S = 0.1  # how often a run this server did not start is checked while it stops
EXEC_WAIT_S = 10.0  # the longest a start waits for its run's exec to show in /proc


def alive(pid: int, started: int | None) -> bool:
    """True while the process ``pid`` exists, is the one that started at ``started``, leads
    its own process group (as every run does) and, where /proc tells, runs the workload
    module: a lock naming any other process (a planted one, naming the user's shell) is
    never signalled."""
    try:
        os.kill(pid, 0)
        if os.getpgid(pid) != pid:
            return False
    except (ProcessLookupError, PermissionError):
        return False
    if not sys.platform.startswith("linux"):
        return True
    if not _runs_workload(pid):
        return False
    return started is None or process_start_ticks(pid) == started


def _runs_workload(pid: int) -> bool:
    """Whether ``pid``'s command line is ``python -m`` the workload module (build_command)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
    except OSError:
        return False
    return argv[1:3] == [b"-m", MODULE.encode()]


def _wait_for_exec(process: subprocess.Popen) -> None:
    """Return once ``process`` shows as the workload in /proc (Linux), or has exited.

    Popen returns as soon as the child's exec has begun, and Linux fills in its
    /proc/PID/cmdline a moment later; a server looking in between (``alive``) would see
    no run there, and could start a second one."""
    if not sys.platform.startswith("linux"):
        return
    deadline = time.monotonic() + EXEC_WAIT_S
    while not _runs_workload(process.pid) and process.poll() is None:
        if time.monotonic() > deadline:
            log.warning("the run (pid %d) does not show as the workload after %.0f s",
                        process.pid, EXEC_WAIT_S)
            return
        time.sleep(0.001)


class PinnedGpu(NamedTuple):
    index: int  # the server's device row
    uuid: str


class RunLauncher:
    """Starts the bundled workload with validated arguments, one run at a time."""

    def __init__(self, runs_dir: Path, environ: Mapping[str, str] | None = None,
                 on_exit: Callable[[int, int | None, int, str], None] | None = None) -> None:
        """``on_exit(pid, start ticks, exit status, last stderr line)`` is called when a run
        exits (the start ticks, ``process_start_ticks``, tell a reused PID apart)."""
        self.runs_dir = Path(runs_dir)
        self._on_exit = on_exit
        self._environ = dict(os.environ if environ is None else environ)
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.last_error = ""
        self.lock_path = self.runs_dir / RUN_LOCK_NAME

    @property
    def running(self) -> bool:
        return self._own_running() or self.adopted() is not None

    def _own_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        adopted = self.adopted()
        if adopted is not None:
            return adopted[0]
        return self._process.pid if self._process is not None else None

    def adopted(self) -> tuple[int, int | None] | None:
        """(pid, start ticks) of a live run that another (or an earlier) server started in
        this runs folder, from its lock file; None when there is none. Once this server's
        own run has finished, a run another server started since is found again."""
        if self._own_running():
            return None
        found = read_lock(self.lock_path)
        own = self._process.pid if self._process is not None else None
        if found is None or found[0] == own or not alive(*found):
            return None
        return found

    def start(self, params: dict[str, Any],
              gpu: PinnedGpu | Sequence[PinnedGpu] | None = None) -> str:
        """Launch a run; returns a one-line status. Raises ValueError for bad parameters.

        ``gpu`` may be several GPUs (a sharded run, one per shard): a GPU run then sees
        exactly those, in that order, and is named by the first."""
        command = build_command(params)  # the schema check: only known keys and values
        with self._lock:
            if self._own_running():
                raise ValueError("a run is already in progress; stop it first")
            if (other := self.adopted()) is not None:
                raise ValueError(f"a run is already in progress (pid {other[0]}, started by "
                                 "another or an earlier server); stop it first")
            environment = {**self._environ, RUNS_DIR_ENV: str(self.runs_dir),
                           PARENT_PID_ENV: str(os.getpid())}
            environment.pop(RUN_GPU_ENV, None)
            on_gpu = params.get("device") == "gpu"
            gpus = [] if gpu is None else [gpu] if isinstance(gpu, PinnedGpu) else list(gpu)
            gpu = gpus[0] if gpus else None
            if gpu is not None:
                # A GPU run sees only its GPUs; a CPU run sees none, and is judged against it.
                environment["CUDA_VISIBLE_DEVICES"] = \
                    ",".join(g.uuid for g in gpus) if on_gpu else ""
                environment[RUN_GPU_ENV] = f"{gpu.index}:{gpu.uuid}"
            self.last_error = ""
            self._stopping.clear()
            self._process = subprocess.Popen(  # noqa: S603 - argv from build_command only
                command, env=environment, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            )
            # Read before anything waits for it: until then even a run that died at once
            # is still there (a zombie).
            started = process_start_ticks(self._process.pid)
            _wait_for_exec(self._process)
            try:
                write_lock(self.lock_path, self._process.pid, started)
            except OSError as error:
                # Without its lock a later server could start a second run beside it.
                log.warning("cannot write the run lock %s: %s", self.lock_path,
                            error.strerror or error)
            threading.Thread(target=self._watch_exit, args=(self._process, started),
                             daemon=True, name="nvdashboard-run-exit").start()
        where = ""
        if gpu is not None:
            where = f" on GPU {gpu.index}" if on_gpu else f" on the CPU, watching GPU {gpu.index}"
            if on_gpu and len(gpus) > 1:
                where = " on GPUs " + ", ".join(str(g.index) for g in gpus)
        if params.get("shards", 1) > 1:
            where += f" over {params['shards']} shards"
        return f"started {params['path']} on preset {params['preset']}{where}"

    def _watch_exit(self, process: subprocess.Popen, started: int | None) -> None:
        tail: deque[str] = deque(maxlen=STDERR_LINES_KEPT)  # bounded, however chatty the run
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode(errors="replace").strip()
            if line:
                tail.append(line[:500])
        process.wait()
        remove_lock(self.lock_path, process.pid)
        last = tail[-1] if tail else f"exit status {process.returncode}"
        if process.returncode not in (0, 130, -signal.SIGINT) and not self._stopping.is_set():
            self.last_error = last
        if self._on_exit is not None:
            try:
                self._on_exit(process.pid, started, process.returncode, last)
            except Exception as error:  # noqa: BLE001 - a report must not kill this thread
                log.warning("after the run exited: %s: %s", type(error).__name__, error)

    def stop(self) -> str:
        """Ctrl-C the run; SIGTERM and SIGKILL follow if it does not exit in time."""
        with self._lock:
            process = self._process
            if (other := self.adopted()) is not None:
                os_signal_group(other[0], signal.SIGINT)
                threading.Thread(target=self._escalate_adopted,
                                 args=(*other, SIGTERM_AFTER_S, SIGKILL_AFTER_S),
                                 daemon=True, name="nvdashboard-run-stop").start()
                return (f"stopping the run of another server (pid {other[0]}; SIGTERM after "
                        f"{SIGTERM_AFTER_S:.0f} s, SIGKILL {SIGKILL_AFTER_S:.0f} s later)")
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


    def _escalate_adopted(self, pid: int, started: int | None, term_after_s: float,
                          kill_after_s: float) -> None:
        """``_escalate`` for a run this server did not start (it cannot ``wait()`` for it)."""
        killed = False
        for number, wait_s in ((signal.SIGTERM, term_after_s), (signal.SIGKILL, kill_after_s)):
            deadline = time.monotonic() + wait_s
            while alive(pid, started) and time.monotonic() < deadline:
                time.sleep(POLL_S)
            if not alive(pid, started):
                break
            log.info("the run did not stop in %.0f s; sending %s", wait_s, number.name)
            os_signal_group(pid, number)
            killed = number == signal.SIGKILL
        remove_lock(self.lock_path, pid)
        if killed and self._on_exit is not None:
            self._on_exit(pid, started, -signal.SIGKILL, "")


def read_lock(path: Path) -> tuple[int, int | None] | None:
    """(pid, start ticks) from a run lock file, or None when absent, unreadable or owned by
    another user (who may write in a shared runs folder, but never names our runs)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if os.fstat(descriptor).st_uid != os.geteuid():
            return None
        record = json.loads(os.read(descriptor, 4096))
        pid, started = record["pid"], record.get("start_ticks")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
            return None
        return pid, started if isinstance(started, int) else None
    except (OSError, ValueError, TypeError, KeyError):
        return None
    finally:
        os.close(descriptor)


def write_lock(path: Path, pid: int, start_ticks: int | None) -> None:
    """Name the live run in its folder (replacing a stale lock); never through a symlink."""
    text = json.dumps({"pid": pid, "start_ticks": start_ticks, "server_pid": os.getpid()})
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                         0o600)
    try:
        os.write(descriptor, text.encode())
    finally:
        os.close(descriptor)
    os.replace(temporary, path)  # replaces the name: a symlink there is not followed


def remove_lock(path: Path, pid: int) -> None:
    """Remove the lock if it still names ``pid`` (a newer run's lock stays)."""
    found = read_lock(path)
    if found is not None and found[0] == pid:
        try:
            os.unlink(path)
        except OSError:
            pass


def os_signal_group(pid: int, number: int) -> None:
    try:
        os.killpg(pid, number)  # the run's own group (start_new_session=True)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(process: subprocess.Popen, number: int) -> None:
    os_signal_group(process.pid, number)


def _escalate(process: subprocess.Popen, term_after_s: float, kill_after_s: float) -> None:
    for number, wait_s in ((signal.SIGTERM, term_after_s), (signal.SIGKILL, kill_after_s)):
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            log.info("the run did not stop in %.0f s; sending %s", wait_s, number.name)
            _signal_group(process, number)
    process.wait()
