"""The dashboard server's side of cluster mode: the cluster's GPUs, their states and history.

A thread of its own connects to the scheduler as a Dask client and, once a second, asks it
for every worker's GPU snapshot in one call (``scheduler_side.gpu_view``). ``ClusterState``
turns the answers into one entry per GPU:

* **one reporter per GPU:** each worker reads only the GPUs it owns (``ownership.py``);
  should two workers still report one GPU (keyed by host and UUID), one of them is chosen
  the same way every time: a fresh one before a stale one, then the lowest address. Never
  "the freshest heartbeat", which would alternate between them;
* **static facts once:** a worker's identity (its GPUs' labels) comes once, from the
  scheduler's metadata or the first snapshot after a change, and is kept per worker; each
  heartbeat's snapshot carries live values only;
* **stale** when none of the workers that report it has had a heartbeat for
  ``STALE_HEARTBEATS`` heartbeat intervals;
* **lost** when every worker that reported it has left the cluster; it stays on the page,
  drawn as lost, and comes back when a worker reports it again;
* **simulated** when its reporter's identity says it reads the simulated driver: each GPU
  carries its own flag, since a cluster may mix real and simulated hosts.

Each poll appends one ``ClusterTick`` to a ``History`` of its own (one sample a second), so
the per-UUID history and the /Cluster-GPUs stream reuse the broadcast path unchanged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..export.dcgm import ExportedGpu
from ..metrics import History, HostReading, Sample
from .snapshot import NodeIdentity, decode, decode_identity

log = logging.getLogger(__name__)

CLUSTER_FAMILY = "cluster"  # Sample.extra key of a ClusterTick
STALE_HEARTBEATS = 3
POLL_INTERVAL_S = 1.0
CLUSTER_HISTORY_S = 1800.0
_NO_HOST = HostReading(None, None, None, None, None, None, None)

OK, STALE, LOST = "ok", "stale", "lost"


class ClusterGpu(NamedTuple):
    """One GPU of the cluster at one tick."""

    gpu: ExportedGpu  # hostname, identity (labels), values in export.dcgm.FIELDS order
    state: str  # OK, STALE or LOST
    workers: tuple[str, ...]  # the workers that report it now
    simulated: bool = False  # its reporter reads the simulated driver (the identity says)

    @property
    def key(self) -> tuple[str, str]:
        return (self.gpu.hostname, self.gpu.identity.key)


class ClusterTick(NamedTuple):
    time_s: float
    gpus: tuple[ClusterGpu, ...]  # sorted by host, then nvidia-smi index
    workers: int
    heartbeat_s: float  # how often the scheduler asks each worker to report

    @property
    def layout(self) -> tuple[tuple[str, str], ...]:
        """The GPUs' keys in drawing order: a page is built for one layout."""
        return tuple(gpu.key for gpu in self.gpus)


def _order(gpu: ClusterGpu) -> tuple[str, int, int]:
    identity = gpu.gpu.identity
    return (gpu.gpu.hostname, identity.gpu, -1 if identity.gpu_instance_id is None
            else identity.gpu_instance_id)


class ClusterState:
    """Folds the scheduler's answers into one entry per GPU (pure: no Dask here)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], ClusterGpu] = {}
        self._identities: dict[str, NodeIdentity] = {}  # worker -> its current identity
        self.rejected: dict[str, str] = {}  # worker -> why its snapshot was refused

    def _reject(self, address: str, error: ValueError) -> None:
        if self.rejected.get(address) != str(error):
            log.warning("worker %s: %s", address, error)
        self.rejected[address] = str(error)

    def _identity(self, address: str, worker: dict[str, Any],
                  payload: Any) -> NodeIdentity | None:
        """The identity a snapshot is read with: the one of its epoch, from the snapshot
        itself, the scheduler's metadata or what this worker reported before."""
        epoch = str(payload.get("e")) if isinstance(payload, dict) else None
        known = self._identities.get(address)
        if known is not None and known.epoch == epoch:
            return known
        for candidate in (payload.get("id") if isinstance(payload, dict) else None,
                          worker.get("identity")):
            if candidate is None:
                continue
            try:
                identity = decode_identity(candidate)
            except ValueError as error:
                self._reject(address, error)
                continue
            if identity.epoch == epoch:
                self._identities[address] = identity
                return identity
        return known  # decode() says why it does not fit

    def update(self, view: dict[str, Any]) -> ClusterTick:
        now = float(view.get("now") or time.time())
        stale_after = STALE_HEARTBEATS * float(view.get("heartbeat_s") or 1.0)
        reports: dict[tuple[str, str], list[tuple[bool, str, ExportedGpu, bool]]] = {}
        workers = view.get("workers") or {}
        for address in [address for address in self._identities if address not in workers]:
            del self._identities[address]
        for address, worker in workers.items():
            payload = worker.get("snapshot")
            if payload is None:
                continue  # no plugin (yet) on this worker
            identity = self._identity(address, worker, payload)
            try:
                if identity is None:
                    if isinstance(payload, dict) and payload.get("v") == 2 and "e" in payload:
                        continue  # its identity has not arrived yet: next poll
                    raise ValueError("not a version-2 nvdashboard snapshot")
                node = decode(payload, identity)
            except ValueError as error:
                self._reject(address, error)
                continue
            self.rejected.pop(address, None)
            stale = now - float(worker.get("last_seen") or 0.0) > stale_after
            for gpu in node.gpus.values():
                key = (gpu.hostname, gpu.identity.key)
                reports.setdefault(key, []).append((stale, address, gpu, identity.simulated))
        current: dict[tuple[str, str], ClusterGpu] = {}
        for key, seen in reports.items():
            # One reporter, chosen the same way every time: fresh first, then by address.
            stale, _, chosen, simulated = min(seen, key=lambda report: report[:2])
            state = STALE if stale else OK
            if chosen.lost:
                state = LOST  # the worker is there, the GPU fell off its bus
            current[key] = ClusterGpu(chosen, state,
                                      tuple(sorted(report[1] for report in seen)), simulated)
        for key, before in self._known.items():
            if key not in current:  # every worker that saw it has left
                current[key] = before._replace(state=LOST, workers=())
        self._known = current
        gpus = tuple(sorted(current.values(), key=_order))
        return ClusterTick(now, gpus, len(view.get("workers") or {}),
                           float(view.get("heartbeat_s") or 1.0))


def tick_of(sample: Sample) -> ClusterTick | None:
    tick = sample.extra.get(CLUSTER_FAMILY)
    return tick if isinstance(tick, ClusterTick) else None


@dataclass
class ClusterView:
    """The cluster as the dashboards see it; ``start`` begins polling the scheduler."""

    address: str
    poll_interval_s: float = POLL_INTERVAL_S
    history_s: float = CLUSTER_HISTORY_S

    def __post_init__(self) -> None:
        self.state = ClusterState()
        self.history = History(max(1, int(self.history_s / self.poll_interval_s)))
        self.polls = 0
        self.connected = False
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: Any = None

    @classmethod
    def connect_to(cls, address: str) -> ClusterView:
        """Raises ImportError (one line) when ``distributed`` is not installed."""
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise ImportError("--dask-scheduler needs distributed: pip install "
                              "'jupyterlab-nvdashboard[cluster]'") from None
        return cls(address)

    @property
    def interval_s(self) -> float:
        return self.poll_interval_s

    def latest(self) -> ClusterTick | None:
        sample = self.history.latest()
        return tick_of(sample) if sample is not None else None

    def history_of(self, host: str, key: str) -> list[tuple[float, ClusterGpu]]:
        """One GPU's entries over the history, oldest first (per-UUID history)."""
        out = []
        for sample in self.history.window(self.history_s):
            tick = tick_of(sample)
            for gpu in tick.gpus if tick else ():
                if gpu.key == (host, key):
                    out.append((sample.time_s, gpu))
        return out

    def summary(self) -> dict[str, Any]:
        """The ``/cluster.json`` body: the scheduler link and every GPU's newest state."""
        from ..export.dcgm import FIELDS

        position = {field.name: i for i, field in enumerate(FIELDS)}
        tick = self.latest()

        def value(gpu: ClusterGpu, name: str) -> float | None:
            return gpu.gpu.values[position[name]]

        return {
            "scheduler": self.address, "connected": self.connected, "error": self.error,
            "polls": self.polls, "workers": tick.workers if tick else 0,
            "heartbeat_s": tick.heartbeat_s if tick else None,
            "gpus": [{
                "host": gpu.gpu.hostname, "gpu": gpu.gpu.identity.gpu,
                "uuid": gpu.gpu.identity.uuid, "key": gpu.gpu.identity.key,
                "name": gpu.gpu.identity.model_name, "state": gpu.state,
                "simulated": gpu.simulated,
                "workers": list(gpu.workers),
                "utilization_pct": value(gpu, "DCGM_FI_DEV_GPU_UTIL"),
                "memory_used_mib": value(gpu, "DCGM_FI_DEV_FB_USED"),
            } for gpu in (tick.gpus if tick else ())],
        }

    def exported(self, local: Sequence[ExportedGpu]) -> list[ExportedGpu]:
        """/metrics in cluster mode: every node's fresh GPUs, plus this machine's own that
        no worker reports."""
        tick = self.latest()
        cluster = [gpu.gpu for gpu in tick.gpus if gpu.state == OK] if tick else []
        seen = {(gpu.hostname, gpu.identity.key) for gpu in cluster}
        return cluster + [gpu for gpu in local if (gpu.hostname, gpu.identity.key) not in seen]

    # ----- polling ----------------------------------------------------------------------
    def poll_once(self, ask: Callable[[], dict[str, Any]]) -> ClusterTick:
        tick = self.state.update(ask())
        self.polls += 1
        self.history.append(tick.time_s, (), _NO_HOST, None, extra={CLUSTER_FAMILY: tick})
        return tick

    def _ask(self) -> dict[str, Any]:
        from . import METRIC_KEY
        from .scheduler_side import from_scheduler_info, gpu_view

        try:
            return self._client.run_on_scheduler(gpu_view)
        except (ImportError, AttributeError, ModuleNotFoundError):
            # A scheduler without this package: the full identity has the same metrics.
            return from_scheduler_info(self._client.scheduler_info(n_workers=-1),
                                       self._client.get_metadata([METRIC_KEY], default={}))

    def _connect(self) -> None:
        from distributed import Client

        self._client = Client(self.address, timeout="5s", set_as_default=False,
                              name="nvdashboard")
        self.connected, self.error = True, None
        log.info("cluster mode: connected to the Dask scheduler at %s", self.address)

    def _run(self) -> None:
        retry_s = 1.0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if self._client is None:
                    self._connect()
                    retry_s = 1.0
                self.poll_once(self._ask)
            except Exception as error:  # scheduler down or unreachable: keep trying
                message = f"{type(error).__name__}: {error}"
                if message != self.error:
                    log.warning("cluster mode: scheduler %s: %s", self.address, message)
                self.error, self.connected = message, False
                self._close_client()
                self._stop.wait(retry_s)
                retry_s = min(30.0, retry_s * 2)
                continue
            self._stop.wait(max(0.0, self.poll_interval_s - (time.monotonic() - started)))

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close(timeout=2)
            except Exception:
                pass

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="nvdashboard-cluster-reader",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self._close_client()
