"""Workload runs as the dashboard server sees them: watched event files and one launcher.

``RunsWatcher`` tails the ``*.jsonl`` event files in the runs directory from one thread,
so runs started anywhere (a notebook, a terminal, the dashboard) appear on ``/Workload``.
``RunLauncher`` starts the bundled workload module only, from arguments validated by
``build_command``; nothing from a request ever reaches a shell. One run at a time.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cli import build_command

log = logging.getLogger(__name__)

MAX_RUNS = 20  # newest event files followed; older ones drop off the dashboard
MAX_ITERATIONS_KEPT = 20_000


@dataclass
class Run:
    """What one event file has said so far."""

    run_id: str
    start: dict[str, Any] = field(default_factory=dict)
    iterations: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None

    @property
    def path(self) -> str:
        return str(self.start.get("path", "?"))

    @property
    def device(self) -> str:
        return str(self.start.get("device", "?"))

    @property
    def preset(self) -> str:
        return str(self.start.get("preset", "?"))

    @property
    def started_s(self) -> float | None:
        return self.start.get("time")

    @property
    def finished(self) -> bool:
        return self.end is not None

    @property
    def label(self) -> str:
        return f"{self.path} ({self.device}) {self.run_id[-8:]}"


class _Tail:
    """Reads only the complete lines appended to one file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial = path, 0, b""

    def new_events(self) -> list[dict[str, Any]]:
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        events = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn or foreign line: skip it, keep the rest
            if isinstance(event, dict):
                events.append(event)
        return events


class RunsWatcher:
    """Polls the runs directory from its own thread; readers take consistent snapshots."""

    def __init__(self, runs_dir: Path, poll_s: float = 0.5) -> None:
        self.runs_dir, self.poll_s = Path(runs_dir), poll_s
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self._tails: dict[Path, _Tail] = {}
        self.version = 0  # bumped on every change, so dashboards skip idle ticks cheaply
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> None:
        """Read whatever was appended since the last poll (public for tests)."""
        try:
            files = sorted(self.runs_dir.glob("*.jsonl"), key=_mtime, reverse=True)[:MAX_RUNS]
        except OSError:
            return
        changed = False
        for path in files:
            tail = self._tails.setdefault(path, _Tail(path))
            try:
                events = tail.new_events()
            except OSError:
                continue
            if events:
                changed = True
                with self._lock:
                    for event in events:
                        self._apply(path.stem, event)
        if changed:
            with self._lock:
                for run_id in sorted(self._runs, key=lambda r: self._runs[r].started_s or 0)[
                        :-MAX_RUNS]:
                    del self._runs[run_id]
                self.version += 1

    def _apply(self, file_stem: str, event: dict[str, Any]) -> None:
        run_id = str(event.get("run_id") or file_stem)
        run = self._runs.setdefault(run_id, Run(run_id))
        kind = event.get("event")
        if kind == "start":
            run.start = event
        elif kind == "iteration" and len(run.iterations) < MAX_ITERATIONS_KEPT:
            run.iterations.append(event)
        elif kind == "end":
            run.end = event

    def runs(self) -> list[Run]:
        """Snapshot of the followed runs, oldest first."""
        with self._lock:
            return [Run(r.run_id, dict(r.start), list(r.iterations), r.end)
                    for r in sorted(self._runs.values(), key=lambda r: r.started_s or 0)]

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def start(self) -> None:
        if self._thread is None:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            self.poll()
            self._thread = threading.Thread(target=self._loop, name="nvdashboard-runs",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class RunLauncher:
    """Starts the bundled workload with validated arguments, one run at a time."""

    def __init__(self, runs_dir: Path, environ: Mapping[str, str] | None = None) -> None:
        self.runs_dir = Path(runs_dir)
        self._environ = dict(os.environ if environ is None else environ)
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self.last_error = ""

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, params: dict[str, Any]) -> str:
        """Launch a run; returns a one-line status. Raises ValueError for bad parameters."""
        command = build_command(params)  # the schema check: only known keys and values
        with self._lock:
            if self.running:
                raise ValueError("a run is already in progress; stop it first")
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            environment = {**self._environ, "NVDASHBOARD_RUNS_DIR": str(self.runs_dir)}
            self._process = subprocess.Popen(  # noqa: S603 - argv from build_command only
                command, env=environment, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            )
            threading.Thread(target=self._watch_exit, args=(self._process,), daemon=True).start()
        return f"started {params['path']} on preset {params['preset']}"

    def _watch_exit(self, process: subprocess.Popen) -> None:
        _, stderr = process.communicate()
        lines = (stderr or b"").decode(errors="replace").strip().splitlines()
        self.last_error = lines[-1] if process.returncode not in (0, 130) and lines else ""

    def stop(self) -> str:
        """Ctrl-C the run, so it writes its summary and exits cleanly."""
        with self._lock:
            if not self.running:
                return "no run in progress"
            assert self._process is not None
            self._process.send_signal(signal.SIGINT)
        return "stopping the run"


class WorkloadService:
    """The server's one watcher and one launcher for a runs directory."""

    def __init__(self, runs_dir: Path) -> None:
        self.watcher = RunsWatcher(runs_dir)
        self.launcher = RunLauncher(runs_dir)

    def start(self) -> None:
        self.watcher.start()

    def stop(self) -> None:
        self.watcher.stop()
        self.launcher.stop()
