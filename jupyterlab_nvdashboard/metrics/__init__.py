"""The metrics layer: the only code that talks to NVML and psutil.

``create_metrics(config)`` builds the process's one sampler and its history; everything
else (dashboards, JSON endpoints) reads ``Metrics.history`` and ``Metrics.nvml.facts``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..config import Config, ConfigError
from .attribution import OWNER_FAMILY, ProcessAttributor, ProcessOwner
from .families import PROCESS_FAMILY, ProcessReading
from .gpm import GpmReader
from .health import HealthReader
from .host import HostReader, HostReading
from .nvml import GpuFacts, GpuReading, NvmlReader, NvmlState
from .processes import ProcessReader
from .sampler import History, Sample, Sampler
from .simulated import SimulatedNvml

__all__ = [
    "GpuFacts", "GpuReading", "History", "HostReading", "Metrics", "NvmlState", "OWNER_FAMILY",
    "PROCESS_FAMILY", "ProcessOwner", "ProcessReading", "Sample", "SimulatedNvml",
    "create_metrics",
]


@dataclass
class Metrics:
    """What the dashboards may read: the history and the static facts."""

    sampler: Sampler
    simulator: SimulatedNvml | None  # set in simulate mode, so tests can inject faults
    processes: ProcessReader | None = None  # per-process readings (processes.py)
    owners: ProcessAttributor | None = None  # who those processes are (attribution.py)

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


def create_metrics(
    config: Config, environ: Mapping[str, str] | None = None, simulator: SimulatedNvml | None = None
) -> Metrics:
    """Build (but do not start) the sampler for ``config``.

    In simulate mode the NVML reader loads a ``SimulatedNvml`` in place of pynvml; a test
    may pass its own ``simulator`` to inject faults.

    Raises ConfigError (one line) for an unknown simulated profile or a malformed fault spec.
    """
    environ = os.environ if environ is None else environ
    simulation = config.simulation
    if simulator is None and simulation.enabled:
        try:
            simulator = SimulatedNvml(simulation.gpu_count, nvlink=simulation.nvlink,
                                      profile=simulation.profile, host=simulation.host)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        try:
            simulator.apply_fault_spec(simulation.faults)
        except ValueError as error:
            raise ConfigError(f"NVDASHBOARD_SIMULATE_FAULTS: {error}") from None
        simulator.set_processes_file(simulation.processes_file)
    # CUDA's own variables decide which devices this process sees, and in what order.
    cuda = {"cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES"),
            "cuda_device_order": environ.get("CUDA_DEVICE_ORDER")}
    if simulator is not None:
        nvml = NvmlReader(simulator.load, **cuda)
    else:
        nvml = NvmlReader(**cuda)
    history = History(config.history_length)
    processes = ProcessReader(nvml)
    sampler = Sampler(nvml, HostReader(), history, config.interval_s, config.idle_interval_s,
                      families=[GpmReader(nvml), HealthReader(nvml), processes])
    # A simulated driver lives in this PID namespace, so its PIDs are this namespace's.
    owners = ProcessAttributor(lambda: processes.latest,
                               host_namespace=True if simulator is not None else None)
    sampler.slow_families.append(owners.family)
    return Metrics(sampler, simulator, processes, owners)
