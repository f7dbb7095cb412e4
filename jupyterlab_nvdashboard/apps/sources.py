"""What the dashboards read, put side by side by the server: the metrics, the workload runs
and the notebooks of the Jupyter server this one runs under.

``metrics/`` knows nothing of the workload (a lower layer never imports a higher one);
``server.py`` builds the workload service (``runs/``) and puts the two side by side here;
this object starts and stops both.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..diagnosis.live import DeviceDiagnoses
from ..jupyter_sessions import JupyterSessions
from ..metrics import Metrics, Sample
from ..runs.service import WorkloadService
from ..store import HistoryStore
from .components import timeline_windows
from .stored_span import StoredSpan
from .usage import GpuUsage

if TYPE_CHECKING:  # distributed is an optional extra, imported only in cluster mode
    from ..cluster.view import ClusterView


class RunningCells(Protocol):
    """The user's running cells' verdicts so far (``live_cells.LiveCells``), as the glance
    reads them: named here, not imported, since they are judged from these sources."""

    def so_far(self, kernel_ids: Iterable[str]) -> dict[str, dict[str, Any]]: ...

    def stop(self) -> None: ...


@dataclass
class DashboardSources:
    metrics: Metrics
    # Workload runs (event files and the one launcher) that /Workload shows beside the GPU.
    workload: WorkloadService | None = None
    # Whether pages may start and stop workload runs (off with --no-token; see auth.py).
    run_control: bool = True
    # Notebook paths of Jupyter kernels, from the Jupyter server this one runs under.
    jupyter: JupyterSessions | None = None
    # The GPUs of a Dask cluster's workers (--dask-scheduler); None outside cluster mode.
    cluster: ClusterView | None = None
    # The history store (store/): windows longer than the in-memory history read it.
    store: HistoryStore | None = None
    # Every device's diagnosis over a window, shared by /diagnosis.json, /GPU-Activity and
    # the /metrics gauge (made from ``metrics``).
    diagnoses: DeviceDiagnoses = field(init=False)
    # Who holds GPU memory and whether they use it (issue 28), fed by the history.
    usage: GpuUsage = field(init=False)
    # The user's running cells' verdicts so far, which the glance carries (issue 55); set
    # by the server, which composes it from these sources (live_cells.py judges with them).
    live_cells: RunningCells | None = None

    def __post_init__(self) -> None:
        self.diagnoses = DeviceDiagnoses(self.metrics, past=self.store)
        self.usage = GpuUsage(self.metrics, self.jupyter)
        if self.store is not None:
            # Each holder's evidence per device and bucket: a cell's span judged from the
            # store rests on the kernel's own (issue 53, item 4).
            self.usage.pass_listeners.append(self.store.hear_pass)
        # The stored part of ``history_since``, read off the event loop.
        self.stored_span = StoredSpan(self.store) if self.store is not None else None

    def history_since(self, start_s: float, now_s: float) -> list[Sample]:
        """The samples from ``start_s`` (epoch seconds) to ``now_s``: the in-memory history's,
        and before its oldest, the store's 5-second means (1-minute past their retention).
        A run that finished before a restart is judged from them (``apps/workload.py``). On
        an event loop the stored part is the one read last, until a thread's read lands
        (``stored_span.py``; ``stored_version`` then changes)."""
        recent = self.metrics.history.window(now_s - start_s + 1)
        if self.stored_span is None:
            return recent
        first = recent[0].time_s if recent else now_s
        return self.stored_span.before(start_s, now_s, first) + recent

    @property
    def stored_version(self) -> int:
        """Changes when ``history_since``'s stored part was read anew."""
        return self.stored_span.version if self.stored_span is not None else 0

    @property
    def rows_before_upgrade(self) -> tuple[int, ...]:
        """The GPUs the store knows only by their row before an upgrade (none without a
        store): the GPU timelines draw each as a device of its own."""
        return self.store.rows_before_upgrade if self.store is not None else ()

    @property
    def timeline_windows_s(self) -> tuple[float, ...]:
        """The windows every timeline offers: the history's, then the store's long ones."""
        stored = self.store.longest_s if self.store is not None else 0.0
        return timeline_windows(self.metrics.history_s, stored)

    def _services(self) -> list[Metrics | WorkloadService | JupyterSessions | ClusterView
                                | HistoryStore]:
        """What runs beside the pages, metrics first; the others only where configured."""
        return [service for service in (self.metrics, self.workload, self.jupyter, self.cluster,
                                         self.store)
                if service is not None]

    def start(self) -> None:
        for service in self._services():
            service.start()

    def start_without_waiting(self, on_metrics_started: Callable[[], None] | None = None
                              ) -> threading.Thread:
        """Start every service, the metrics on a thread of their own: NVML's first init and
        read can take minutes (a slow or hung driver), and the server must answer ``/``,
        ``/index.json`` and ``/info.json`` meanwhile (jupyter-server-proxy gives up after
        60 s). Pages say "reading GPUs…" until the first GPU read is done."""
        for service in self._services()[1:]:
            service.start()

        def start_metrics() -> None:
            try:
                self.metrics.start()
                if on_metrics_started is not None:
                    on_metrics_started()
            except Exception as error:  # noqa: BLE001 - one line; the pages say so
                logging.getLogger("nvdashboard").warning(
                    "the GPU readers did not start: %s: %s", type(error).__name__, error)

        thread = threading.Thread(target=start_metrics, name="nvdashboard-metrics-start",
                                  daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        for service in self._services():
            service.stop()
        if self.live_cells is not None:
            self.live_cells.stop()
