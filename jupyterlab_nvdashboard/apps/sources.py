"""What the dashboards read, put side by side by the server: the metrics, the workload runs
and the notebooks of the Jupyter server this one runs under.

``metrics/`` knows nothing of the workload (a lower layer never imports a higher one);
``server.py`` builds the workload service (``runs/``) and puts the two side by side here;
this object starts and stops both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..diagnosis.live import DeviceDiagnoses
from ..jupyter_sessions import JupyterSessions
from ..metrics import Metrics
from ..runs.service import WorkloadService

if TYPE_CHECKING:  # distributed is an optional extra, imported only in cluster mode
    from ..cluster.view import ClusterView


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
    # Every device's diagnosis over a window, shared by /diagnosis.json, /GPU-Activity and
    # the /metrics gauge (made from ``metrics``).
    diagnoses: DeviceDiagnoses = field(init=False)

    def __post_init__(self) -> None:
        self.diagnoses = DeviceDiagnoses(self.metrics)

    def _services(self) -> list[Metrics | WorkloadService | JupyterSessions | ClusterView]:
        """What runs beside the pages, metrics first; the others only where configured."""
        return [service for service in (self.metrics, self.workload, self.jupyter, self.cluster)
                if service is not None]

    def start(self) -> None:
        for service in self._services():
            service.start()

    def stop(self) -> None:
        for service in self._services():
            service.stop()
