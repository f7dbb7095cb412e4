"""The metrics layer: the only code that talks to NVML and psutil.

``create_metrics(config)`` builds the process's one sampler and its history; everything
else (dashboards, JSON endpoints) reads ``Metrics.history`` and ``Metrics.nvml.facts``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..config import Config
from ..workload.runs import WorkloadService
from .host import HostReader, HostReading
from .nvml import GpuFacts, GpuReading, NvmlReader, NvmlState
from .sampler import History, Sample, Sampler
from .simulated import SimulatedNvml

__all__ = [
    "GpuFacts", "GpuReading", "History", "HostReading", "Metrics", "NvmlState", "Sample",
    "SimulatedNvml", "create_metrics",
]


@dataclass
class Metrics:
    """What the dashboards may read: the history and the static facts."""

    sampler: Sampler
    simulator: SimulatedNvml | None  # set in simulate mode, so tests can inject faults
    # Workload runs (event files and the one launcher) that /Workload shows beside the GPU.
    workload: WorkloadService | None = None

    def start(self) -> None:
        self.sampler.start()
        if self.workload is not None:
            self.workload.start()

    def stop(self) -> None:
        self.sampler.stop()
        if self.workload is not None:
            self.workload.stop()

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
        return any(facts.nvlink_links > 0 for facts in self.facts)


def create_metrics(
    config: Config, environ: Mapping[str, str] | None = None, simulator: SimulatedNvml | None = None
) -> Metrics:
    """Build (but do not start) the sampler for ``config``.

    In simulate mode the NVML reader loads a ``SimulatedNvml`` in place of pynvml; a test
    may pass its own ``simulator`` to inject faults.
    """
    environ = os.environ if environ is None else environ
    simulation = config.simulation
    if simulator is None and simulation.enabled:
        simulator = SimulatedNvml(simulation.gpu_count, nvlink=simulation.nvlink)
        simulator.apply_fault_spec(simulation.faults)
    if simulator is not None:
        nvml = NvmlReader(lambda: simulator, environ.get("CUDA_VISIBLE_DEVICES"))
    else:
        nvml = NvmlReader(cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"))
    history = History(config.history_length)
    sampler = Sampler(nvml, HostReader(), history, config.interval_s)
    return Metrics(sampler, simulator, WorkloadService(config.runs_dir))
