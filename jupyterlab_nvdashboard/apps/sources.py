"""What the dashboards read, put side by side by the server: the metrics and the workload runs.

``metrics/`` knows nothing of the workload (a lower layer never imports a higher one); the
server composes the two here, and starts and stops both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import Config
from ..metrics import Metrics
from ..workload.runs import WorkloadService

if TYPE_CHECKING:  # distributed is an optional extra, imported only in cluster mode
    from ..cluster.view import ClusterView


@dataclass
class DashboardSources:
    metrics: Metrics
    # Workload runs (event files and the one launcher) that /Workload shows beside the GPU.
    workload: WorkloadService | None = None
    # Whether pages may start and stop workload runs (off with --no-token; see auth.py).
    run_control: bool = True
    # The GPUs of a Dask cluster's workers (--dask-scheduler); None outside cluster mode.
    cluster: ClusterView | None = None

    @classmethod
    def for_config(cls, config: Config, metrics: Metrics) -> DashboardSources:
        """Raises ImportError (one line) when cluster mode lacks ``distributed``."""
        cluster = None
        if config.dask_scheduler:
            from ..cluster.view import ClusterView

            cluster = ClusterView.connect_to(config.dask_scheduler)
        return cls(metrics, WorkloadService(config.runs_dir), run_control=config.run_control,
                   cluster=cluster)

    def start(self) -> None:
        self.metrics.start()
        if self.workload is not None:
            self.workload.start()
        if self.cluster is not None:
            self.cluster.start()

    def stop(self) -> None:
        self.metrics.stop()
        if self.workload is not None:
            self.workload.stop()
        if self.cluster is not None:
            self.cluster.stop()
