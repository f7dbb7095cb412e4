"""The metrics layer: the only code that talks to NVML and psutil.

``build_metrics(config, ...)`` builds the process's one sampler and its history; everything
else (dashboards, JSON endpoints) reads ``Metrics.history`` and ``Metrics.nvml.facts``.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import Config
from .attribution import OWNER_FAMILY, ProcessAttributor, ProcessOwner, host_pid_namespace
from .binding import binding_loader
from .device_nodes import HOLDER_FAMILY, DeviceNodeScanner, NodeHolder
from .families import PROCESS_FAMILY, ProcessReading
from .gpm import GpmReader
from .health import HealthReader
from .host import HostReader, HostReading
from .nvml import GpuFacts, GpuReading, NvmlReader, NvmlState
from .processes import ProcessReader
from .sampler import (
    History,
    PastSource,
    Sample,
    Sampler,
    past_span,
    prepend_past,
    window_with_past,
)
from .session import parent_facts

__all__ = [
    "GpuFacts", "GpuReading", "HOLDER_FAMILY", "History", "HostReading", "Metrics", "NodeHolder",
    "NvmlState", "OWNER_FAMILY", "PROCESS_FAMILY", "PastSource", "ProcessOwner", "ProcessReading",
    "Sample", "build_metrics", "parent_facts", "past_span", "prepend_past", "window_with_past",
]


@dataclass
class Metrics:
    """What the dashboards may read: the history and the static facts."""

    sampler: Sampler
    # The simulated machine in simulate mode (simnvml/, chosen by the composition root), so
    # tests can inject faults; this layer never looks inside it.
    simulator: Any
    processes: ProcessReader | None = None  # per-process readings (processes.py)
    owners: ProcessAttributor | None = None  # who those processes are (attribution.py)
    nodes: DeviceNodeScanner | None = None  # this namespace's GPU node holders

    def start(self) -> None:
        self.sampler.start()

    def stop(self) -> None:
        self.sampler.stop()

    @property
    def history(self) -> History:
        return self.sampler.history

    @property
    def nvml(self) -> NvmlReader:
        return self.sampler.nvml

    @property
    def simulated(self) -> bool:
        return self.simulator is not None

    @property
    def interval_s(self) -> float:
        return self.sampler.interval_s

    @property
    def history_s(self) -> float:
        """Seconds of samples the history holds when full."""
        return self.history.capacity * self.interval_s

    @property
    def facts(self) -> list[GpuFacts]:
        return self.nvml.facts

    @property
    def has_nvlink(self) -> bool:
        return any(facts.nvlink_link_ids for facts in self.facts)


def build_metrics(
    config: Config, environ: Mapping[str, str] | None = None, library: Any = None,
    simulator: Any = None, only: Collection[str] | None = None,
) -> Metrics:
    """Build (but do not start) the sampler for ``config``.

    ``only``: read only the devices with these UUIDs (``NvmlReader.read_only``); None reads
    every device CUDA shows this process.

    ``library`` is the NVML library the binding runs over: None for the real driver, or an
    object that plays ``libnvidia-ml.so.1`` (the composition root passes the simulated
    driver's, with the ``simulator`` it belongs to, so that tests can inject faults).
    """
    environ = os.environ if environ is None else environ
    # CUDA's own variables decide which devices this process sees, and in what order.
    cuda = {"cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES"),
            "cuda_device_order": environ.get("CUDA_DEVICE_ORDER")}
    release = config.simulation.binding or None if library is not None else None
    nvml = NvmlReader(binding_loader(library, release), only=only, **cuda)
    history = History(config.history_length)
    processes = ProcessReader(nvml)
    sampler = Sampler(nvml, HostReader(), history, config.interval_s, config.idle_interval_s,
                      families=[GpmReader(nvml), HealthReader(nvml), processes])
    # Which local process each NVML entry is (identity.py): this server's PID namespace, and
    # its processes that hold GPU nodes, found on the slow thread. The simulated driver
    # registers no device major: its nodes are whatever stands at /dev/nvidia<minor>.
    host_namespace = host_pid_namespace()
    nodes = DeviceNodeScanner(nvml.session, lambda: processes.latest,
                              any_major=library is not None)
    processes.host_namespace = host_namespace
    processes.holders = lambda: nodes.latest
    processes.node_rows = lambda: nodes.node_rows
    # Behind jupyter-server-proxy the Jupyter server that launched this one (named at
    # launch, --jupyter-process: the parent may be gone or another by now) launches the
    # kernels: a kernel is a process it started, with that process's tree.
    launcher = config.jupyter_process.pid if config.jupyter_process else \
        os.getppid() if config.jupyter_proxy else None
    owners = ProcessAttributor(lambda: processes.latest, host_namespace=host_namespace,
                               kernel_launcher_pid=launcher)
    if host_namespace is not True:  # the host's PIDs need no pairing: no scan
        sampler.slow_families.append(nodes.family)
    sampler.slow_families.append(owners.family)
    return Metrics(sampler, simulator, processes, owners, nodes)
