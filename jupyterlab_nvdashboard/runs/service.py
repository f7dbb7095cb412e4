"""The server's one workload service: a watcher and a launcher over one runs directory.

``server.py`` builds it (``metrics/`` never sees it). A runs directory that cannot be made
or written does not stop the server: the service records a one-line ``disabled_reason``,
the run panel shows it and refuses to start runs, and every other dashboard carries on.
Old run files beyond ``keep_runs`` are deleted at start and before each launch, and only
files this project wrote: a ``<run_id>.jsonl`` name whose first line is the workload's own
``start`` event for that run id. Anything else in the folder is never touched. No write
here follows a symlink.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import stat
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..workload.events import MAX_LINE_BYTES, MAX_TEXT_CHARS, parse_event
from .launcher import PinnedGpu, RunLauncher
from .watcher import RunsWatcher

log = logging.getLogger(__name__)

# workload/events.py::new_run_id: YYYYmmdd-HHMMSS-<8 hex>, and the file is <run_id>.jsonl.
RUN_FILE_NAME = re.compile(r"\d{8}-\d{6}-[0-9a-f]{8}\.jsonl")
PRUNE_NAMES_LOGGED = 10
# Never follow a symlink planted in the runs folder, never block on a FIFO.
_NO_FOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def is_run_file(path: str | os.PathLike[str]) -> bool:
    """True for a regular file (not a symlink) this project wrote: a run-id name, and a first
    line that is the workload's ``start`` event for that run id."""
    name = os.path.basename(path)
    if not RUN_FILE_NAME.fullmatch(name):
        return False
    try:
        descriptor = os.open(path, os.O_RDONLY | _NO_FOLLOW)
    except OSError:
        return False  # a symlink (ELOOP), gone, or unreadable
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return False
        first = os.pread(descriptor, MAX_LINE_BYTES + 1, 0).split(b"\n", 1)[0]
    except OSError:
        return False
    finally:
        os.close(descriptor)
    event = parse_event(first)
    return (event is not None and event["event"] == "start"
            and event["run_id"] == name[: -len(".jsonl")])


class WorkloadService:
    """The watcher, the launcher, and whether this runs directory can be used at all."""

    def __init__(self, runs_dir: Path, keep_runs: int = 200, poll_s: float = 0.5,
                 resting_poll_s: float | None = None) -> None:
        self.runs_dir, self.keep_runs = Path(runs_dir), keep_runs
        self.poll_s, self.resting_poll_s = poll_s, max(poll_s, resting_poll_s or poll_s)
        self.watcher = RunsWatcher(self.runs_dir, poll_s)
        self.launcher = RunLauncher(self.runs_dir, on_exit=self._run_exited)
        self.disabled_reason: str | None = None

    def start(self) -> None:
        self.disabled_reason = usable_runs_dir(self.runs_dir)
        if self.disabled_reason:
            log.warning("run panel disabled: %s", self.disabled_reason)
        else:
            self.prune()
        self.watcher.start()  # it shows whatever it can read, even when runs cannot start

    def set_watched(self, watched: bool) -> None:
        """Follow the runs at ``poll_s`` while a page is open (the run panel shows a run's
        progress, ``/GPU-Processes`` names its process); else at ``resting_poll_s``: what
        nobody watches is only read by ``/glance.json`` and ``/processes.json``, to name a
        run's process, and a run's exit asks for its own poll (``wait_for_poll``)."""
        self.watcher.set_poll_s(self.poll_s if watched else self.resting_poll_s)

    def stop(self) -> None:
        self.watcher.stop()
        self.launcher.shutdown()

    def launch(self, params: dict[str, Any],
               gpu: PinnedGpu | Sequence[PinnedGpu] | None = None) -> str:
        """Start a run (a one-line status); ValueError or OSError with a one-line message."""
        reason = usable_runs_dir(self.runs_dir)
        if reason:
            self.disabled_reason = reason
            raise ValueError(f"the run panel is disabled: {reason}")
        self.disabled_reason = None
        self.prune()
        return self.launcher.start(params, gpu)

    def _run_exited(self, pid: int, start_ticks: int | None, returncode: int,
                    last_line: str) -> None:
        """A run killed before its own ``end`` event (SIGKILL, a crash) gets one from here,
        so every run ends with an ``end`` event that says why: in the file of that very
        process (PID and start time), never of an older run that had its PID."""
        if returncode in (0, 130):
            return  # it wrote its own end event
        self.watcher.wait_for_poll()
        found = self.watcher.file_of(pid, start_ticks)
        if found is not None:
            reason = (f"killed by {signal.Signals(-returncode).name}" if returncode < 0
                      else f"exited with status {returncode}: {last_line}")
            append_missing_end(found[0], found[1], reason)

    def prune(self) -> int:
        """Delete the oldest run files beyond ``keep_runs``; returns how many went.

        Only this project's own run files count and go (``is_run_file``): a folder shared
        with other ``.jsonl`` files loses none of them. The deletions are logged."""
        try:
            files = [(entry.stat(follow_symlinks=False).st_mtime, entry.path)
                     for entry in os.scandir(self.runs_dir)
                     if RUN_FILE_NAME.fullmatch(entry.name)
                     and stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode)]
        except OSError:
            return 0
        files.sort(reverse=True)
        removed: list[str] = []
        kept = 0
        for _, path in files:
            if not is_run_file(path):
                continue
            kept += 1
            if kept <= self.keep_runs:
                continue
            try:
                os.unlink(path)  # removes a name, never what a symlink points to
                removed.append(os.path.basename(path))
            except OSError:
                pass  # someone else's file, or gone already
        if removed:
            shown = ", ".join(removed[:PRUNE_NAMES_LOGGED])
            more = f" and {len(removed) - PRUNE_NAMES_LOGGED} more" \
                if len(removed) > PRUNE_NAMES_LOGGED else ""
            log.info("deleted %d run file%s beyond --keep-runs %d (oldest first) from %s: "
                     "%s%s", len(removed), "" if len(removed) == 1 else "s", self.keep_runs,
                     self.runs_dir, shown, more)
        return len(removed)


def append_missing_end(path: Path, run_id: str, error: str) -> bool:
    """Append an ``end`` event with ``error`` unless the file's last event is an ``end``."""
    # O_NOFOLLOW: a symlink put where the event file was must not get our write.
    descriptor = os.open(path, os.O_RDWR | os.O_APPEND | _NO_FOLLOW)
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            return False
        length = min(info.st_size, MAX_LINE_BYTES + 1)  # the last line, if it is an event
        tail = os.pread(descriptor, length, info.st_size - length)
        lines = tail.split(b"\n")
        complete = lines[:-1]
        if complete and (last := parse_event(complete[-1])) is not None and last["event"] == "end":
            return False
        record = {"event": "end", "run_id": run_id, "time": time.time(), "iterations": None,
                  "interrupted": True, "error": error[:MAX_TEXT_CHARS]}
        torn = b"\n" if lines[-1] else b""  # end a line the run left half written
        os.write(descriptor, torn + json.dumps(record).encode() + b"\n")
        return True
    finally:
        os.close(descriptor)


def usable_runs_dir(runs_dir: Path) -> str | None:
    """None when runs can be written to ``runs_dir`` (made if missing); else why not, in one
    line."""
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        if not runs_dir.is_dir():
            return f"the runs directory {runs_dir} is not a directory"
        # Access bits lie under root and on some mounts: write a file to know.
        with tempfile.TemporaryFile(dir=runs_dir):
            pass
    except OSError as error:
        return f"cannot use the runs directory {runs_dir}: {error.strerror or error}"
    return None
