"""Every device's diagnosis over a window of the live history, shared by every reader.

The one part of ``diagnosis/`` that holds state: a cache, so that ``/diagnosis.json``, each
open ``/GPU-Activity`` page and each ``/metrics`` scrape do not each diagnose every GPU.
Each window is diagnosed at most once every ``every_s`` (or a sixtieth of the window, if
longer); the rules stay pure (``rules.py``),
and nothing here reads hardware: it reads the history the sampler already filled, and
before its oldest sample, for a longer window, what the store kept (``past``: the means of
its buckets, about ``MAX_STORED_ROWS`` of them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..metrics import Metrics, PastSource, window_with_past
from .findings import Diagnosis
from .rules import diagnose

REFRESH_S = 2.0
WINDOWS_PER_REFRESH = 60  # a window is redone after 1/60 of it has passed (2 s at least)
DEFAULT_WINDOW_S = 120.0  # what /GPU-Activity shows first: its 2-minute window
MAX_STORED_ROWS = 2000  # a long window's stored part is read at window / this, or coarser


class DeviceDiagnoses:
    """``current(window_s)``: every device row's diagnosis over the last ``window_s``."""

    def __init__(self, metrics: Metrics, every_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic,
                 past: PastSource | None = None) -> None:
        self.metrics, self.every_s, self._clock = metrics, every_s, clock
        self.past = past
        self._cache: dict[float, tuple[float, int, list[Diagnosis], float]] = {}
        self._lock = threading.Lock()
        self.computed = 0  # how many times a window was diagnosed (tests and benchmarks)

    def current(self, window_s: float = DEFAULT_WINDOW_S) -> list[Diagnosis]:
        return self.current_with_resolution(window_s)[0]

    def current_with_resolution(self, window_s: float = DEFAULT_WINDOW_S
                                ) -> tuple[list[Diagnosis], float]:
        """``current``, and the resolution of the part of the window read from the store
        (0: the whole window came from the in-memory history)."""
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
                return cached[2], cached[3]
        samples, resolution = window_with_past(metrics.history, window_s, self.past,
                                               window_s / MAX_STORED_ROWS, rows="mean")
        facts = metrics.facts
        result = [diagnose(samples, facts, fact.index, simulated=metrics.simulated)
                  for fact in facts]
        with self._lock:
            self._cache[key] = (now, seq, result, resolution)
            if len(self._cache) > 16:  # a client asking for many windows: keep it bounded
                self._cache.pop(next(iter(self._cache)))
            self.computed += 1
        return result, resolution

    def as_json(self, window_s: float = DEFAULT_WINDOW_S) -> dict[str, object]:
        """``/diagnosis.json``: the window, the resolution it was read at (every sample of
        the in-memory history; where the window reaches past it, the store's bucket means
        at ``store_resolution_s``), and each device's findings."""
        diagnoses, resolution = self.current_with_resolution(window_s)
        return {"window_s": window_s, "simulated": self.metrics.simulated,
                "sample_interval_s": self.metrics.interval_s,
                "store_resolution_s": resolution or None,
                "resolution_s": max(resolution, self.metrics.interval_s),
                "devices": [diagnosis.to_json() for diagnosis in diagnoses]}
