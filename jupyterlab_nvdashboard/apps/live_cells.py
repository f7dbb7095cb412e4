"""The running cells' verdicts so far, for the Lab's live cell footers (issue 55).

While a kernel of this server's user holds GPU memory and runs a cell (Jupyter's executions
route says the cell started and has not ended, ``jupyter_sessions.py``), the glance carries,
with that kernel, ``/cell.json``'s answer for the cell so far: ``cells.cell_report`` with
``running``, the same judgment by the same rules as the finished footer's, so what a footer
says while the cell runs is what it says once it has ended. The glance reaches every Lab over
its one socket (``stream/changes.py``): no footer polls.

A judgment costs in proportion to its span (``benchmarks/cell_report.py``: about 13 ms for
10 minutes of 8 GPUs), and the glance is built on the event loop. So the judgments are made
on one thread of their own, and the glance reads the last one made. A cell is judged again
no sooner than ``EVERY_S`` after its last judgment, and no sooner than that judgment's CPU
time over ``CPU_SHARE``: a running cell costs at most ``CPU_SHARE`` of a core, however long it
runs (a short span is judged each second, a long one less often). Nothing is judged while no
glance is built: no Lab watches.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .cells import CellRefused, cell_report, running_span

if TYPE_CHECKING:
    from .sources import DashboardSources

log = logging.getLogger("nvdashboard")

# The live footer's pace: at most a judgment a second (issue 55: "at most once a second").
EVERY_S = 1.0
# The most of a core one running cell's judgments may take: ten running cells' judgments
# 0.5 %, which leaves the rest of issue 55's 1 % for carrying them in the glance
# (benchmarks/live_cells.py measured ten young cells at +0.97 % with 0.1 % a cell, the
# judgments 0.33-0.66 % of it; an older cell's judgment costs more, up to this cap).
CPU_SHARE = 0.0005


@dataclass
class _Running:
    """A kernel's running cell: when it started (the kernel's clock), its last judgment,
    and when (monotonic) the next is due."""

    start_s: float
    report: dict[str, Any] | None = None
    due_s: float = -math.inf


class LiveCells:
    """Each of the user's GPU kernels' running cell and its last judgment so far."""

    def __init__(self, sources: DashboardSources,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._sources = sources
        self._clock = clock
        self._lock = threading.Lock()
        self._cells: dict[str, _Running] = {}  # kernel id -> its running cell
        self._judging: Future[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.judgments = 0  # tests and benchmarks
        self.cpu_s = 0.0  # the judgments' CPU time, all together

    def so_far(self, kernel_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The last judgment of the running cell of each of ``kernel_ids`` that has one (the
        glance's kernels, as it is built): reads only, and asks the thread for the
        judgments that are due."""
        running = self._running(kernel_ids)
        now = self._clock()
        with self._lock:
            for kernel in [k for k, cell in self._cells.items()
                           if running.get(k) != cell.start_s]:
                del self._cells[kernel]  # ended, or another cell started
            for kernel, start_s in running.items():
                self._cells.setdefault(kernel, _Running(start_s))
            due = [k for k, cell in self._cells.items() if cell.due_s <= now]
            if due and self._judging is None:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(
                        1, thread_name_prefix="nvdashboard-live-cells")
                self._judging = self._executor.submit(self._judge, due)
            return {k: cell.report for k, cell in self._cells.items()
                    if cell.report is not None}

    def _running(self, kernel_ids: Iterable[str]) -> dict[str, float]:
        """kernel id -> its running cell's start, as Jupyter says: the newest cell has no end,
        and the kernel is busy (a kernel that died mid-cell never says it ended)."""
        jupyter = self._sources.jupyter
        if jupyter is None:
            return {}
        found = {}
        for kernel in kernel_ids:
            cells = jupyter.cells.get(kernel, ())
            session = jupyter.sessions.get(kernel)
            if cells and cells[-1].end_s is None and (
                    session is None or session.execution_state == "busy"):
                found[kernel] = cells[-1].start_s
        return found

    def _judge(self, kernels: list[str]) -> None:
        """On the thread: judge each of ``kernels``' running cell so far."""
        try:
            for kernel in kernels:
                with self._lock:
                    cell = self._cells.get(kernel)
                if cell is None:
                    continue
                started = time.thread_time()
                report = None
                try:
                    end_s, running = running_span(self._sources, kernel, cell.start_s)
                    if running:
                        report = cell_report(self._sources, kernel, cell.start_s, end_s,
                                             running=True)
                except CellRefused as refusal:  # not the user's, or not yet in the history
                    log.debug("no live verdict for kernel %s: %s", kernel, refusal.reason)
                except Exception as error:  # noqa: BLE001 - one line; the glance goes on
                    log.warning("no live verdict for kernel %s: %s: %s", kernel,
                                type(error).__name__, error)
                took = time.thread_time() - started
                with self._lock:
                    self.judgments += 1
                    self.cpu_s += took
                    cell.report = report
                    cell.due_s = self._clock() + max(EVERY_S, took / CPU_SHARE)
        finally:
            with self._lock:
                self._judging = None

    def stop(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
