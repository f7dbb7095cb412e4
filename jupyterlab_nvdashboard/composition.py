"""Which NVML the metrics layer reads: the real driver, or the simulated one.

The one place that knows about both ``metrics/`` and ``simnvml/``: in simulate mode it
builds the simulated machine from the settings and hands its library to the real
nvidia-ml-py; otherwise the binding loads the real ``libnvidia-ml.so.1``. The server and the
Dask worker plugin build their metrics here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .config import Config, ConfigError, SimulationConfig
from .metrics import Metrics, build_metrics
from .simnvml import SimulatedNvml


def create_simulator(simulation: SimulationConfig) -> SimulatedNvml:
    """The simulated machine the settings describe, faults applied.

    Raises ConfigError (one line) for an unknown profile or a malformed fault spec."""
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
    try:
        simulator.set_scenario(simulation.scenario)
    except ValueError as error:
        raise ConfigError(f"NVDASHBOARD_SIMULATE_SCENARIO: {error}") from None
    return simulator


def create_metrics(config: Config, environ: Mapping[str, str] | None = None,
                   simulator: Any = None, only: Collection[str] | None = None) -> Metrics:
    """Build (but do not start) the sampler for ``config``: over the simulated driver in
    simulate mode (or over ``simulator``, a test's own), else over the real one; ``only``
    limits it to some device UUIDs (a Dask worker reads the GPUs it owns)."""
    if simulator is None and config.simulation.enabled:
        simulator = create_simulator(config.simulation)
    library = None if simulator is None else simulator.library
    return build_metrics(config, environ, library=library, simulator=simulator,
                               only=only)
