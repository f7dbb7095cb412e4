"""A run started by the dashboard server never outlives that server.

The server names itself in ``NVDASHBOARD_PARENT_PID`` when it starts a run. The run then
asks Linux for a parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGTERM)``) and checks once
that its parent is still the server (one that died before the request gets no signal).
Where there is no parent-death signal, it watches its parent PID twice a second instead.
Never both: the two would send one death two SIGTERMs, and the second would land while the
run writes its ``end`` event. Either way the run gets SIGTERM, stops like Ctrl-C and writes
that event (``runner.sigterm_stops``). A run started by hand sets none of this.

``process_start_ticks`` names one process beyond its PID: the run writes its own into its
``start`` event, and the server matches the run it launched by both.

The run also sets its own SIGINT disposition: a process started from a non-interactive
shell's ``cmd &`` inherits SIGINT as ignored, and Stop (which sends Ctrl-C) would then wait
10 s for SIGTERM.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

PARENT_PID_ENV = "NVDASHBOARD_PARENT_PID"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_INTERVAL_S = 0.5


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, Linux): with the PID, what names one
    process, since PIDs are reused. None where unknown (elsewhere, or no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            # The name in parentheses may hold spaces: fields count from after it.
            return int(stat_file.read().rpartition(b")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def own_signal_dispositions() -> None:
    """Ctrl-C raises KeyboardInterrupt whatever this process inherited (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def parent_death_signal(number: int = signal.SIGTERM) -> bool:
    """Ask Linux to send ``number`` when the parent dies; False where that is unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(number), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def end_with_parent(environ: Mapping[str, str] | None = None) -> int | None:
    """Arrange for SIGTERM when the server named in ``NVDASHBOARD_PARENT_PID`` is gone.

    Returns the parent PID being watched, or None when the run was not started by a server.
    """
    text = (os.environ if environ is None else environ).get(PARENT_PID_ENV, "")
    try:
        parent = int(text)
    except ValueError:
        return None
    if parent <= 1:
        return None
    if parent_death_signal():
        if os.getppid() != parent:  # it died before the request: no signal will come
            os.kill(os.getpid(), signal.SIGTERM)
        return parent

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(WATCH_INTERVAL_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="nvdashboard-parent-watch", daemon=True).start()
    return parent


@contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Hold a Ctrl-C that lands inside the block until the block is done, then raise it.

    An iteration's time and its event are recorded together, so the end summary always
    counts exactly the iteration events written (a Ctrl-C between the two made them differ);
    a shard's step is not cut between two collectives its peers wait on.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach only the main thread
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, _frame: held.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt
