"""Follows the run event files in the runs directory, from one thread, defensively.

Nothing in the runs directory can hurt the server: only regular files are read (a FIFO,
a device or a directory named ``x.jsonl`` is skipped), each is opened non-blocking, at most
``MAX_BYTES_PER_POLL`` are read per file and per poll, a line longer than
``MAX_LINE_BYTES`` is dropped without being kept, and each line goes through the workload's
one parser (``workload/events.py``). A line that is not a valid event is skipped and counted
on its run ("n bad lines"). The polling thread survives any exception and logs it as one
line. Memory is bounded: ``MAX_RUNS`` files are followed, ``MAX_ITERATIONS_KEPT`` events each.
It polls at the pace its readers need (``set_poll_s``: the server slows it while no page is
open), and at once for a caller of ``wait_for_poll``.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..workload.events import MAX_LINE_BYTES, parse_event

log = logging.getLogger(__name__)

MAX_RUNS = 20  # newest event files followed; older ones drop off the dashboard
MAX_ITERATIONS_KEPT = 20_000
MAX_BYTES_PER_POLL = 1 << 20  # per file; the rest is read at the next poll
MAX_FILES_LISTED = 10_000  # directory entries looked at per poll


@dataclass
class Run:
    """What one event file has said so far (events already validated by the parser)."""

    run_id: str
    # The event file: what identifies a run here. Two files may carry one run_id (a copy,
    # a hand-written file); each is its own run, and each run's points are its own.
    source: str = ""
    start: dict[str, Any] = field(default_factory=dict)
    iterations: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    warmup_end_s: float | None = None  # when the timed part began
    bad_lines: int = 0
    warmup_done: int = 0  # untimed warm-up iterations done (``warmup_step`` events)
    # The newest iteration event, kept past MAX_ITERATIONS_KEPT: how far the run has got.
    last_iteration: dict[str, Any] | None = None

    @property
    def path(self) -> str:
        return str(self.start.get("path") or "?")

    @property
    def device(self) -> str:
        return str(self.start.get("device") or "?")

    @property
    def preset(self) -> str:
        return str(self.start.get("preset") or "?")

    @property
    def batch(self) -> int | None:
        return (self.start.get("config") or {}).get("batch")

    @property
    def pid(self) -> int | None:
        return self.start.get("pid")

    @property
    def pid_start_ticks(self) -> int | None:
        """When the run's process started (``process_start_ticks``), as it wrote it."""
        return self.start.get("pid_start_ticks")

    @property
    def gpu_uuid(self) -> str | None:
        return (self.start.get("gpu") or {}).get("uuid")

    @property
    def gpu_visible(self) -> str | None:
        """The run's ``CUDA_VISIBLE_DEVICES`` as it was set (resolved by the server)."""
        return (self.start.get("gpu") or {}).get("visible")

    @property
    def gpu_index(self) -> int | None:
        return (self.start.get("gpu") or {}).get("index")

    @property
    def shards(self) -> dict[str, Any] | None:
        """A sharded run's shards (count, placement, backend, emulated, ranks); else None."""
        return self.start.get("shards")

    @property
    def iterations_asked(self) -> int | None:
        """The timed iterations the run was started for (its limit, N)."""
        return self.start.get("iterations")

    @property
    def warmup_asked(self) -> int | None:
        return self.start.get("warmup")

    @property
    def timed_done(self) -> int:
        """Timed iterations done so far (the run's own count, also past the ones kept)."""
        if self.last_iteration is None:
            return 0
        return max(len(self.iterations), self.last_iteration.get("iteration") or 0)

    @property
    def started_s(self) -> float | None:
        return self.start.get("time")

    @property
    def finished(self) -> bool:
        return self.end is not None

    @property
    def label(self) -> str:
        return f"{self.path} ({self.device}) {self.run_id[-8:]}"

    def copy(self) -> Run:
        return Run(self.run_id, self.source, dict(self.start), list(self.iterations),
                   None if self.end is None else dict(self.end), self.warmup_end_s,
                   self.bad_lines, self.warmup_done, self.last_iteration)


class _Tail:
    """Reads the complete lines appended to one regular file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0
        self.partial = b""
        self.skipping = False  # inside an over-long line: drop bytes up to its newline
        self.identity: tuple[int, int] | None = None  # (device, inode) of what was read
        # Set when the file was replaced or truncated since the last call: what was read
        # from it before is no longer its content, and its run starts over.
        self.restarted = False

    def new_lines(self) -> tuple[list[bytes], int]:
        """(complete lines, over-long lines dropped); raises OSError for an unreadable file."""
        descriptor = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode):
                raise NotRegularFile(self.path)
            identity = (info.st_dev, info.st_ino)
            self.restarted = self.identity is not None and (
                identity != self.identity or info.st_size < self.offset)
            if self.restarted:  # replaced (another inode) or truncated: read it from scratch
                self.offset, self.partial, self.skipping = 0, b"", False
            self.identity = identity
            if info.st_size == self.offset:
                return [], 0
            chunk = os.pread(descriptor, min(MAX_BYTES_PER_POLL, info.st_size - self.offset),
                             self.offset)
        finally:
            os.close(descriptor)
        self.offset += len(chunk)
        return self._split(chunk)

    def _split(self, chunk: bytes) -> tuple[list[bytes], int]:
        dropped = 0
        if self.skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                return [], 0
            chunk, self.skipping = chunk[newline + 1:], False
        *lines, rest = (self.partial + chunk).split(b"\n")
        kept = [line for line in lines if len(line) <= MAX_LINE_BYTES]
        dropped += len(lines) - len(kept)
        if len(rest) > MAX_LINE_BYTES:
            rest, self.skipping = b"", True
            dropped += 1
        self.partial = rest
        return kept, dropped


class NotRegularFile(OSError):
    pass


class RunsWatcher:
    """Polls the runs directory from its own thread; readers take consistent snapshots."""

    def __init__(self, runs_dir: Path, poll_s: float = 0.5) -> None:
        self.runs_dir, self.poll_s = Path(runs_dir), poll_s
        self._wake = threading.Event()  # poll now (a faster pace, a waiter, or stop)
        self._lock = threading.Lock()
        self._runs: dict[Path, Run] = {}
        self._tails: dict[Path, _Tail] = {}
        self.version = 0  # bumped on every change, so dashboards skip idle ticks cheaply
        self.errors = 0  # polls that failed (each logged as one line)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._polled = threading.Condition()
        self._polls = 0  # polls finished by the thread

    def _newest_files(self) -> list[Path]:
        found: list[tuple[float, Path]] = []
        with os.scandir(self.runs_dir) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_FILES_LISTED:
                    break
                if not entry.name.endswith(".jsonl"):
                    continue
                try:
                    info = entry.stat()  # follows a symlink: its target must be a regular file
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    found.append((info.st_mtime, Path(entry.path)))
        found.sort(reverse=True)
        return [path for _, path in found[:MAX_RUNS]]

    def poll(self) -> None:
        """Read whatever was appended since the last poll (public for tests)."""
        try:
            files = self._newest_files()
        except OSError:
            return  # no directory (yet), or not readable: nothing to show
        changed = False
        for path in files:
            tail = self._tails.setdefault(path, _Tail(path))
            try:
                lines, dropped = tail.new_lines()
            except OSError:
                continue  # gone, unreadable, or no longer a regular file
            if tail.restarted:
                with self._lock:
                    changed |= self._runs.pop(path, None) is not None
            if not lines and not dropped:
                continue
            events = [parse_event(line) for line in lines if line.strip()]
            with self._lock:
                run = self._runs.setdefault(path, Run(path.stem, str(path)))
                run.bad_lines += dropped + sum(event is None for event in events)
                for event in events:
                    if event is not None:
                        _apply(run, event)
            changed = True
        followed = set(files)
        with self._lock:
            for path in [p for p in self._tails if p not in followed]:
                del self._tails[path]  # a file that dropped off: forget it entirely
                changed |= self._runs.pop(path, None) is not None
            if changed:
                self.version += 1

    def file_of(self, pid: int, start_ticks: int | None = None) -> tuple[Path, str] | None:
        """(event file, run id) of the followed run that process ``pid`` writes, if any.

        PIDs are reused: with the process's start time (``start_ticks``), only the runs
        that recorded that very start count (a run file without one never matches); of
        those, or without it of every run that names ``pid``, the newest that has not
        ended, else the newest."""
        with self._lock:
            candidates = [(path, run) for path, run in self._runs.items() if run.pid == pid
                          and (start_ticks is None or run.pid_start_ticks == start_ticks)]
            if not candidates:
                return None
            path, run = max(candidates,
                            key=lambda item: (not item[1].finished, item[1].started_s or 0.0))
            return path, run.run_id

    def newest(self) -> Run | None:
        """A copy of the newest run (started last), or None: cheaper than ``runs()``."""
        with self._lock:
            if not self._runs:
                return None
            return max(self._runs.values(), key=_order).copy()

    def runs(self) -> list[Run]:
        """Snapshot of the followed runs, oldest first."""
        with self._lock:
            return [run.copy() for run in sorted(self._runs.values(), key=_order)]

    def _loop(self) -> None:
        while True:
            try:
                self.poll()
            except Exception as error:  # noqa: BLE001 - the thread must outlive any file
                self.errors += 1
                log.warning("runs watcher: %s: %s", type(error).__name__, error)
            with self._polled:
                self._polls += 1
                self._polled.notify_all()
            self._wake.wait(self.poll_s)
            self._wake.clear()
            if self._stop.is_set():
                return

    def set_poll_s(self, poll_s: float) -> None:
        """Poll every ``poll_s`` from now on; a faster pace polls at once."""
        faster = poll_s < self.poll_s
        self.poll_s = poll_s
        if faster:
            self._wake.set()

    def wait_for_poll(self, timeout_s: float = 5.0) -> None:
        """Wait until the thread has read everything written before this call."""
        if self._thread is None or not self._thread.is_alive():
            return
        deadline = time.monotonic() + timeout_s
        with self._polled:
            wanted = self._polls + 2  # the poll under way may have listed files already
            # Each poll is asked for now: at a resting pace the next may be seconds away.
            while self._polls < wanted and time.monotonic() < deadline:
                self._wake.set()
                self._polled.wait(min(0.1, max(0.0, deadline - time.monotonic())))

    def start(self) -> None:
        """Start polling; the first poll runs on the thread, so nothing here can block."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="nvdashboard-runs",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()


def _order(run: Run) -> tuple[float, str, str]:
    return (run.started_s or 0, run.run_id, run.source)


def _apply(run: Run, event: dict[str, Any]) -> None:
    kind = event["event"]
    if kind == "start":
        run.start, run.run_id = event, event["run_id"]
    elif kind == "warmup_step":
        run.warmup_done = max(run.warmup_done, event["step"])
    elif kind == "warmup_end":
        run.warmup_end_s = event["time"]
        if event.get("shards") is not None:  # the shards as they run: backend, ranks
            run.start = {**run.start, "shards": event["shards"]}
    elif kind == "iteration":
        run.last_iteration = event
        if len(run.iterations) < MAX_ITERATIONS_KEPT:
            run.iterations.append(event)
    elif kind == "end":
        run.end = event
