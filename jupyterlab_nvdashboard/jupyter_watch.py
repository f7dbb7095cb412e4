"""The Jupyter server a proxied dashboard server lives for, and the watch that ends the
dashboard server once that Jupyter server is gone.

``launch_server()`` runs inside the Jupyter server (jupyter-server-proxy calls it there), so
it names that very process on the command line: its PID and when it started
(``--jupyter-process PID:STARTED``, ``config.JupyterProcess``). The dashboard server checks
that identity first thing, before it imports Bokeh or reads a GPU, and then every
``WATCH_EVERY_S`` on a thread of its own, from before its event loop runs until it exits.

Why this and not what the server used before, or the platform's parent-death signal:

- ``os.getppid()`` read once the server was built named whoever the parent was *then*. A
  Jupyter server that died during the seconds of start-up (shut down while the request
  that launched the server was in flight, killed with ``-9``) had already left the server
  re-parented to init, and the server then watched init for ever, holding the store's
  writer lock (issue 57). The identity here is taken inside Jupyter while it runs: no
  moment of the server's start-up can miss it.
- The start time defeats PID reuse: a later process given the same PID has another one.
  On Linux it is the kernel's own (``/proc/PID/stat``, clock ticks since boot), which a
  wall-clock step cannot change; elsewhere psutil's creation time in milliseconds.
- ``PR_SET_PDEATHSIG`` is not used. The child sets it after it starts, so a parent that
  died before is never signalled (a check like this one is needed anyway); it fires when
  the *thread* that forked the child ends, not the process; and its signal lands before
  the server's own handlers are installed, ending it without the store's last batch.

A polled check costs one read of a small ``/proc`` file four times a second.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable

from .config import JupyterProcess

# How often the watch looks: "exits within a second" with room for a loaded machine.
WATCH_EVERY_S = 0.25

# Linux: process states that have ended (a zombie waits only for its parent to reap it).
_ENDED_STATES = (b"Z", b"X", b"x")
# Where each process has its /proc/PID/stat (Linux); elsewhere psutil answers.
_PROC = os.path.isdir("/proc/self")


def start_mark(pid: int) -> int | None:
    """When process ``pid`` started, as a number a later process with the same PID does not
    share; None when there is no such process, or it has ended (a zombie)."""
    if not _PROC:
        return _start_mark_from_psutil(pid)
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The command name (field 2) may hold spaces and parentheses: count after it.
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:  # no such process
        return None
    state, started_ticks = fields[0], fields[19]  # fields 3 and 22 of proc(5)
    return None if state in _ENDED_STATES else int(started_ticks)


def _start_mark_from_psutil(pid: int) -> int | None:
    """Where there is no ``/proc``: psutil's creation time, in milliseconds since the epoch."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return round(process.create_time() * 1000)
    except psutil.Error:
        return None


def this_process() -> JupyterProcess:
    """The process calling this (the Jupyter server, when ``launch_server()`` asks)."""
    pid = os.getpid()
    started = start_mark(pid)
    assert started is not None  # this very process runs
    return JupyterProcess(pid, started)


class JupyterWatch:
    """Says, from the first check on, whether the Jupyter server ``jupyter`` is gone, and
    runs what was asked (``when_gone``) once it is, on the watch's thread."""

    def __init__(self, jupyter: JupyterProcess, every_s: float = WATCH_EVERY_S) -> None:
        self.jupyter, self.every_s = jupyter, every_s
        self.gone = threading.Event()
        self._acts: list[Callable[[], None]] = []
        self._acts_lock = threading.Lock()  # an act is either run at once or left to run
        self._thread: threading.Thread | None = None

    @property
    def reason(self) -> str:
        """The one log line an exiting server writes."""
        return (f"the Jupyter server that started this one (pid {self.jupyter.pid}) is gone: "
                "exiting")

    def alive(self) -> bool:
        return start_mark(self.jupyter.pid) == self.jupyter.started

    def start(self) -> None:
        """Check now (``gone`` is right when this returns), then watch on a daemon thread."""
        if self._thread is not None:
            return
        if not self.alive():
            self._mark_gone()
            return
        self._thread = threading.Thread(target=self._watch, name="nvdashboard-jupyter-watch",
                                        daemon=True)
        self._thread.start()

    def when_gone(self, act: Callable[[], None]) -> None:
        """Run ``act`` once the Jupyter server is gone: now if it already is."""
        with self._acts_lock:
            if not self.gone.is_set():
                self._acts.append(act)
                return
        act()

    def _watch(self) -> None:
        while not self.gone.wait(self.every_s):
            if not self.alive():
                self._mark_gone()

    def _mark_gone(self) -> None:
        with self._acts_lock:
            self.gone.set()
            acts, self._acts = self._acts, []
        for act in acts:
            act()


@functools.cache
def watch_jupyter(jupyter: JupyterProcess) -> JupyterWatch:
    """The one started watch of ``jupyter`` in this process: the server's first lines start
    it before Bokeh is imported, and ``main()`` asks for the same one."""
    watch = JupyterWatch(jupyter)
    watch.start()
    return watch
