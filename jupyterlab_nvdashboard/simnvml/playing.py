"""A simulated GPU playing a scenario (``scenarios.py``): its figures at an instant, in NVML's
units, and the cumulative byte and GPM counters they integrate to.

The scenarios state rates and shares at an instant; the driver's counters are integrals.
``ScenarioPlayer`` integrates each figure numerically (trapezoids of at most
``STEP_S``) from the start of the simulation, once, caching the running sum per GPU and
figure, so a counter read twice at one time gives one value and never runs backwards.
"""

from __future__ import annotations

import threading
from typing import Any

from .scenarios import Limits, load, readings

STEP_S = 0.05
# Bytes per second per lane, per direction, after line encoding (PCI Express base spec:
# 2.5, 5, 8, 16, 32, 64 GT/s with 8b/10b up to Gen2, 128b/130b from Gen3).
PCIE_LANE_BYTES_PER_S = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969e6, 5: 3938e6, 6: 7877e6}
MIB = 2**20


def limits_of(model: Any) -> Limits:
    """A simulated GPU model's own maxima, which a scenario's shares are of."""
    active = model.nvlink_link_count - len(model.nvlink_down)
    return Limits(
        memory_total_bytes=float((model.memory_mib - model.reserved_mib) * MIB),
        power_limit_w=model.power_limit_mw / 1000 or None,
        sm_clock_max_mhz=float(model.max_sm_clock_mhz),
        pcie_max_bytes_per_s=PCIE_LANE_BYTES_PER_S.get(model.pcie_generation, 0.0)
        * model.pcie_width or None,
        nvlink_max_bytes_per_s=active * model.nvlink_link_mbps * 1e6 or None,
    )


class ScenarioPlayer:
    """Every GPU of one simulated machine playing scenario ``name``."""

    def __init__(self, name: str) -> None:
        load(name, 0.0, 0)  # raises ValueError (one line) for an unknown scenario
        self.name = name
        self._sums: dict[tuple[int, str], tuple[float, float]] = {}  # -> (time, integral)
        self._lock = threading.Lock()

    def now(self, gpu: int, model: Any, elapsed_s: float) -> dict[str, Any]:
        """Every figure of GPU ``gpu`` at ``elapsed_s``, in NVML's units."""
        return readings(load(self.name, elapsed_s, gpu), limits_of(model))

    def integral(self, gpu: int, model: Any, figure: str, elapsed_s: float) -> float:
        """The integral of ``figure`` (a key of ``now``) from 0 to ``elapsed_s``."""
        with self._lock:
            since, total = self._sums.get((gpu, figure), (0.0, 0.0))
            if elapsed_s < since:  # an earlier time than cached: integrate afresh
                since, total = 0.0, 0.0
            limits = limits_of(model)

            def value(t: float) -> float:
                return float(readings(load(self.name, t, gpu), limits)[figure] or 0.0)

            t, left = since, value(since)
            while t < elapsed_s:
                step = min(STEP_S, elapsed_s - t)
                right = value(t + step)
                total += (left + right) / 2 * step
                t, left = t + step, right
            self._sums[gpu, figure] = (elapsed_s, total)
            return total
