"""The worker side: a ``WorkerPlugin`` that publishes the GPUs its worker reads.

Register it from any client::

    from jupyterlab_nvdashboard.cluster.plugin import GpuMetricsPlugin
    client.register_plugin(GpuMetricsPlugin())

or start workers with ``dask worker --preload jupyterlab_nvdashboard.cluster.preload``.

On ``setup`` the plugin builds the project's metrics layer (the same NVML reader and
sampler as the dashboard server, configured by the same ``NVDASHBOARD_*`` variables, so
``NVDASHBOARD_SIMULATE`` works here too, and the identity says so), reading **only the
GPUs this worker owns** (``ownership.py``: under dask-cuda the first entry of its
``CUDA_VISIBLE_DEVICES``, plus GPUs no other worker of its host owns), and starts its
threads; the worker's event loop never calls NVML. Static facts go to the scheduler once,
whenever the GPUs read change: as scheduler metadata under ``("nvdashboard-gpus", worker
address)`` and in the first heartbeat snapshot after the change. Then Dask calls the entry
in ``worker.metrics`` at each heartbeat and sends the live values it returns
(``snapshot.py``) to the scheduler, which keeps them in ``WorkerState.metrics``. Nothing
in setup, reading or teardown can fail the worker: every error is logged once and the
plugin publishes nothing (or an empty snapshot).

``NVDASHBOARD_GPU_CLAIMS_DIR`` names the folder of the workers' claim locks (default: one
per user in the temporary folder).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from . import METRIC_KEY, PLUGIN_NAME
from .ownership import CLAIMS_DIR_VARIABLE, GpuClaims

log = logging.getLogger(__name__)

# A worker reads its GPUs once a second: Dask's heartbeats come every 0.5-2 s.
WORKER_INTERVAL_S = 1.0
WORKER_HISTORY_S = 30.0
CLAIM_CHECK_S = 1.0  # how often a worker checks which GPUs of its host it reads
# A GPU that is no worker's own is adopted only after this long, so that dask-cuda's
# workers, started together, claim their own GPUs first.
ADOPT_AFTER_S = 2.0


class WorkerGpus:
    """The metrics layer on one worker, its claims, and what it publishes."""

    def __init__(self, environ: dict[str, str] | None = None,
                 claims_dir: Path | None = None) -> None:
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
        visible = environ.get("CUDA_VISIBLE_DEVICES")
        self.own_first = bool(visible and visible.strip())  # dask-cuda's layout
        # Nothing is read until the claims say which GPUs are this worker's.
        self.metrics = create_metrics(config, environ, only=())
        if claims_dir is None and environ.get(CLAIMS_DIR_VARIABLE):
            claims_dir = Path(environ[CLAIMS_DIR_VARIABLE])
        self.claims = GpuClaims(self.hostname, claims_dir, environ)
        self.export = GpuExport(self.metrics, self.hostname)
        self._nonce = secrets.token_hex(3)  # a new identity epoch for every worker start
        self._sent: str | None = None  # the epoch of the last identity sent in a snapshot
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.metrics.start()
        self.check_claims()
        self._stop.clear()
        self._thread = threading.Thread(target=self._claim_loop, name="nvdashboard-claims",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        self.metrics.stop()
        self.claims.release()

    def check_claims(self, adopt: bool | None = None) -> frozenset[str]:
        """One check of this worker's claims; the reader then reads just those GPUs.
        ``adopt``: take up GPUs nobody owns (by default once ``ADOPT_AFTER_S`` have passed)."""
        nvml = self.metrics.nvml
        nvml.ensure_initialized()
        if adopt is None:
            adopt = time.monotonic() - self._started >= ADOPT_AFTER_S
        reading = self.claims.update(nvml.cuda_positions, self.own_first, adopt=adopt)
        nvml.read_only(reading)
        return reading

    def _claim_loop(self) -> None:
        failed = False
        while not self._stop.wait(CLAIM_CHECK_S):
            try:
                self.check_claims()
                failed = False
            except Exception:
                if not failed:
                    log.exception("nvdashboard: checking this worker's GPU claims failed")
                failed = True

    @property
    def reading(self) -> list[str]:
        """The UUIDs of the devices this worker reads now."""
        return [facts.uuid for facts in self.metrics.facts]

    def _current(self) -> tuple[str, list[Any]]:
        """The identity epoch and the identities of the rows read now, taken together."""
        from ..export.dcgm import identities

        nvml = self.metrics.nvml
        for _ in range(3):
            epoch = nvml.session.epoch
            facts = self.metrics.facts
            if nvml.session.epoch == epoch:
                break
        labels = identities(facts)
        return f"{self._nonce}.{epoch}", [labels[f.index] for f in facts if f.index in labels]

    def identity(self) -> dict[str, Any]:
        """The start-up report: static facts of the GPUs this worker reads."""
        from .snapshot import encode_identity

        epoch, labels = self._current()
        return encode_identity(self.hostname, epoch, labels, self.metrics.simulated)

    def snapshot(self) -> dict[str, Any]:
        """Called by Dask on the worker's event loop at each heartbeat: no NVML here."""
        from ..export.dcgm import FIELDS, ExportedGpu
        from .snapshot import encode, encode_identity

        epoch, labels = self._current()
        latest, gpus = self.export.newest()
        by_key = {gpu.identity.key: gpu for gpu in gpus}
        # A sample taken before the GPUs changed has no row for a new one: not available.
        rows = [by_key.get(identity.key) or ExportedGpu(self.hostname, identity, False,
                                                        (None,) * len(FIELDS))
                for identity in labels]
        identity = None
        if epoch != self._sent:
            identity = encode_identity(self.hostname, epoch, labels, self.metrics.simulated)
            self._sent = epoch
        return encode(epoch, latest.time_s if latest else time.time(), rows, identity)


class GpuMetricsPlugin(WorkerPlugin):
    """Publishes the worker's GPUs in ``worker.metrics["nvdashboard-gpus"]``."""

    name = PLUGIN_NAME

    def __init__(self) -> None:
        self._gpus: WorkerGpus | None = None
        self.error: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Sent to workers before setup: the reader and its threads never travel.
        return {"_gpus": None, "error": None}

    @property
    def gpus(self) -> WorkerGpus | None:
        """The worker's metrics layer and claims, once set up."""
        return self._gpus

    def setup(self, worker: Any) -> None:
        try:
            gpus = WorkerGpus()
            gpus.start()
        except Exception as error:  # no GPU layer on this worker: the worker carries on
            self.error = f"{type(error).__name__}: {error}"
            log.warning("nvdashboard: cannot read this worker's GPUs: %s", self.error)
            return
        self._gpus = gpus
        reported: list[str] = []

        def report(payload: dict[str, Any]) -> None:
            """The identity, kept by the scheduler until the next one (no reply awaited)."""
            identity = payload.get("id")
            if identity is None or getattr(worker, "scheduler", None) is None:
                return

            async def send() -> None:
                try:
                    await worker.scheduler.set_metadata(keys=[METRIC_KEY, worker.address],
                                                        value=identity)
                except Exception as error:  # the scheduler is away: the snapshot has it
                    if not reported:
                        log.warning("nvdashboard: GPU identity not sent: %s", error)
                        reported.append(str(error))

            asyncio.ensure_future(send())

        def publish(_: Any) -> dict[str, Any] | None:
            try:
                payload = gpus.snapshot()
                report(payload)
                return payload
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
