"""The device rows a simulated server (``--simulate N``) shows, for tests and benchmarks that
write a history store by hand for such a server to read: the store keys series by UUID."""

from __future__ import annotations

from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig


def simulated_device_uuids(gpu_count: int, profile: str = "mixed") -> dict[int, str]:
    """Row -> UUID of the devices ``--simulate gpu_count --simulate-profile profile`` shows
    (read from the simulated driver itself, without starting a sampler)."""
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=gpu_count,
                                                                profile=profile)), environ={})
    metrics.nvml.ensure_initialized()
    return {facts.index: facts.uuid for facts in metrics.facts}
