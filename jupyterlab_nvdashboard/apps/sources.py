"""What the dashboards read, put side by side by the server: the metrics and the workload runs.

``metrics/`` knows nothing of the workload (a lower layer never imports a higher one); the
server composes the two here, and starts and stops both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Config
from ..jupyter_sessions import JupyterSessions, find_parent_server
from ..metrics import Metrics
from ..workload.runs import WorkloadService


@dataclass
class DashboardSources:
    metrics: Metrics
    # Workload runs (event files and the one launcher) that /Workload shows beside the GPU.
    workload: WorkloadService | None = None
    # Whether pages may start and stop workload runs (off with --no-token; see auth.py).
    run_control: bool = True
    # Notebook paths of Jupyter kernels, from the Jupyter server this one runs under.
    jupyter: JupyterSessions | None = None

    @classmethod
    def for_config(cls, config: Config, metrics: Metrics) -> DashboardSources:
        owners = metrics.owners

        def kernels_hold_gpus() -> bool:
            return owners is not None and any(o.kernel_id for o in owners.latest.values())

        jupyter = JupyterSessions(find_parent_server(), wanted=kernels_hold_gpus)
        return cls(metrics, WorkloadService(config.runs_dir), run_control=config.run_control,
                   jupyter=jupyter)

    def start(self) -> None:
        self.metrics.start()
        if self.workload is not None:
            self.workload.start()
        if self.jupyter is not None:
            self.jupyter.start()

    def stop(self) -> None:
        self.metrics.stop()
        if self.workload is not None:
            self.workload.stop()
        if self.jupyter is not None:
            self.jupyter.stop()
