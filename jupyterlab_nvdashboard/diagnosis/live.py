"""Every device's diagnosis over a window of the live history, shared by every reader.

The one part of ``diagnosis/`` that holds state: a cache, so that ``/diagnosis.json``, each
open ``/GPU-Activity`` page and each ``/metrics`` scrape do not each diagnose every GPU.
Each window is diagnosed at most once every ``every_s`` (or a sixtieth of the window, if
longer); the rules stay pure (``rules.py``),
and nothing here reads hardware: it reads the history the sampler already filled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..metrics import Metrics
from .findings import Diagnosis
from .rules import diagnose

REFRESH_S = 2.0
WINDOWS_PER_REFRESH = 60  # a window is redone after 1/60 of it has passed (2 s at least)
DEFAULT_WINDOW_S = 120.0  # what /GPU-Activity shows first: its 2-minute window


class DeviceDiagnoses:
    """``current(window_s)``: every device row's diagnosis over the last ``window_s``."""

    def __init__(self, metrics: Metrics, every_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics, self.every_s, self._clock = metrics, every_s, clock
        self._cache: dict[float, tuple[float, int, list[Diagnosis]]] = {}
        self._lock = threading.Lock()
        self.computed = 0  # how many times a window was diagnosed (tests and benchmarks)

    def current(self, window_s: float = DEFAULT_WINDOW_S) -> list[Diagnosis]:
        metrics = self.metrics
        latest = metrics.history.latest()
        seq = latest.seq if latest is not None else -1
        now = self._clock()
        key = float(window_s)
        with self._lock:
            cached = self._cache.get(key)
            # A longer window changes more slowly: a 30-minute one is redone every 30 s.
            every_s = max(self.every_s, key / WINDOWS_PER_REFRESH)
            if cached is not None and (cached[1] == seq or now - cached[0] < every_s):
                return cached[2]
        samples = metrics.history.window(window_s)
        facts = metrics.facts
        result = [diagnose(samples, facts, fact.index, simulated=metrics.simulated)
                  for fact in facts]
        with self._lock:
            self._cache[key] = (now, seq, result)
            if len(self._cache) > 16:  # a client asking for many windows: keep it bounded
                self._cache.pop(next(iter(self._cache)))
            self.computed += 1
        return result

    def as_json(self, window_s: float = DEFAULT_WINDOW_S) -> dict[str, object]:
        """``/diagnosis.json``: the window, and each device's findings."""
        return {"window_s": window_s, "simulated": self.metrics.simulated,
                "devices": [diagnosis.to_json() for diagnosis in self.current(window_s)]}
