"""The worker side: a ``WorkerPlugin`` that publishes this worker's GPUs on its heartbeat.

Register it from any client::

    from jupyterlab_nvdashboard.cluster.plugin import GpuMetricsPlugin
    client.register_plugin(GpuMetricsPlugin())

or start workers with ``dask worker --preload jupyterlab_nvdashboard.cluster.preload``.

On ``setup`` the plugin builds the project's metrics layer (the same NVML reader and
sampler as the dashboard server, configured by the same ``NVDASHBOARD_*`` variables, so
``NVDASHBOARD_SIMULATE`` works here too) and starts its sampler threads; the worker's
event loop never calls NVML. It then adds one entry to ``worker.metrics``: Dask calls it at
each heartbeat and sends what it returns to the scheduler, which keeps it in
``WorkerState.metrics``. Nothing in setup, reading or teardown can fail the worker: every
error is logged once and the plugin publishes nothing (or an empty snapshot).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import replace
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from . import METRIC_KEY, PLUGIN_NAME

log = logging.getLogger(__name__)

# A worker reads its GPUs once a second: Dask's heartbeats come every 0.5-2 s.
WORKER_INTERVAL_S = 1.0
WORKER_HISTORY_S = 30.0


class WorkerGpus:
    """The metrics layer on one worker and the snapshot it publishes."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        from ..composition import create_metrics
        from ..config import load_config
        from ..export.local import GpuExport

        environ = dict(os.environ if environ is None else environ)
        # Only the metrics settings matter here; a worker has no token or port.
        environ.pop("NVDASHBOARD_TOKEN", None)
        config = load_config([], environ)
        config = replace(config, interval_s=max(config.interval_s, WORKER_INTERVAL_S),
                         idle_interval_s=max(config.idle_interval_s, WORKER_INTERVAL_S),
                         history_s=WORKER_HISTORY_S)
        self.hostname = config.simulation.host or socket.gethostname()
        self.metrics = create_metrics(config, environ)
        self.export = GpuExport(self.metrics, self.hostname)

    def start(self) -> None:
        self.metrics.start()

    def stop(self) -> None:
        self.metrics.stop()

    def snapshot(self) -> dict[str, Any]:
        """Called by Dask on the worker's event loop at each heartbeat: no NVML here."""
        from .snapshot import encode

        latest, gpus = self.export.newest()
        return encode(self.hostname, latest.time_s if latest else time.time(), gpus)


class GpuMetricsPlugin(WorkerPlugin):
    """Publishes the worker's GPUs in ``worker.metrics["nvdashboard-gpus"]``."""

    name = PLUGIN_NAME

    def __init__(self) -> None:
        self._gpus: WorkerGpus | None = None
        self.error: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Sent to workers before setup: the reader and its threads never travel.
        return {"_gpus": None, "error": None}

    def setup(self, worker: Any) -> None:
        try:
            gpus = WorkerGpus()
            gpus.start()
        except Exception as error:  # no GPU layer on this worker: the worker carries on
            self.error = f"{type(error).__name__}: {error}"
            log.warning("nvdashboard: cannot read this worker's GPUs: %s", self.error)
            return
        self._gpus = gpus

        def publish(_: Any) -> dict[str, Any] | None:
            try:
                return gpus.snapshot()
            except Exception:
                log.exception("nvdashboard: GPU snapshot failed")
                return None

        worker.metrics[METRIC_KEY] = publish

    def teardown(self, worker: Any) -> None:
        try:
            getattr(worker, "metrics", {}).pop(METRIC_KEY, None)
            if self._gpus is not None:
                self._gpus.stop()
        except Exception:
            log.exception("nvdashboard: plugin teardown failed")
        finally:
            self._gpus = None
