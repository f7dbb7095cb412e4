"""Every device's diagnosis over a window of the live history, shared by every reader.

The one part of ``diagnosis/`` that holds state: a cache, so that ``/diagnosis.json``, each
open ``/GPU-Activity`` page and each ``/metrics`` scrape do not each diagnose every GPU.
Each window is diagnosed at most once every ``every_s`` (or a sixtieth of the window, if
longer); the rules stay pure (``rules.py``), and nothing here reads hardware: it reads the
history the sampler already filled, and before its oldest sample, for a longer window, what
the store kept (``past``: the means of its buckets, about ``MAX_STORED_ROWS`` of them).

``current`` is called on the event loop, so it diagnoses there only windows up to
``INLINE_WINDOW_S`` that the in-memory history holds whole: a window that reaches past it
(``--history`` under 2 minutes, or the first minutes after a start) reads the store, which
never happens on an event loop, so it goes to a thread like a long one. A longer one
(30 minutes of 8 GPUs: 130-185 ms of CPU, over a second
of wall time on a busy 2-core machine) is diagnosed on a thread of its own while
``current`` answers with its last result; ``compute`` waits for it, for callers off the
event loop. Each device is diagnosed on its own: one that raises is logged once and left
out, and the others stand.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..metrics import Metrics, PastSource, past_span, window_with_past
from .findings import Diagnosis
from .rules import diagnose

log = logging.getLogger(__name__)

REFRESH_S = 2.0
WINDOWS_PER_REFRESH = 60  # a window is redone after 1/60 of it has passed (2 s at least)
DEFAULT_WINDOW_S = 120.0  # what /GPU-Activity shows first: its 2-minute window
INLINE_WINDOW_S = DEFAULT_WINDOW_S  # longer windows are diagnosed off the caller's thread
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
        self._running: dict[float, threading.Thread] = {}  # long windows being diagnosed
        self._failing: set[tuple[int, str]] = set()  # (row, error) already logged
        self.computed = 0  # how many times a window was diagnosed (tests and benchmarks)

    def current(self, window_s: float = DEFAULT_WINDOW_S) -> list[Diagnosis]:
        """The diagnoses over ``window_s``, never waiting for a long window: until its
        first diagnosis is done, that is an empty list."""
        return self.current_with_resolution(window_s)[0]

    def current_with_resolution(self, window_s: float = DEFAULT_WINDOW_S
                                ) -> tuple[list[Diagnosis], float]:
        """``current``, and the resolution of the part of the window read from the store
        (0: the whole window came from the in-memory history)."""
        key = float(window_s)
        fresh, cached, due = self._lookup(key)
        if fresh is not None:
            return fresh
        if key <= INLINE_WINDOW_S and self._memory_holds(key):
            # On the caller's thread, maybe an event loop: from memory alone. A tick after
            # the check the history may have dropped its oldest sample, and the window
            # would read the store for it, which no loop may (a 500 under load).
            return self._diagnose(key, *due, from_memory=True)
        with self._lock:
            if key not in self._running:
                thread = threading.Thread(target=self._diagnose, args=(key, *due),
                                          daemon=True, name="nvdashboard-diagnosis")
                self._running[key] = thread
                thread.start()
        return cached

    def _memory_holds(self, key: float) -> bool:
        """Whether the window reads nothing from the store: no store, or the in-memory
        history holds all of it."""
        if self.past is None:
            return True
        history = self.metrics.history
        ends = [sample for sample in (history.oldest(), history.latest()) if sample]
        return past_span(ends, key, key / MAX_STORED_ROWS) is None

    def compute(self, window_s: float = DEFAULT_WINDOW_S) -> list[Diagnosis]:
        """``current``, waiting for a long window's diagnosis (off the event loop only)."""
        return self._compute(float(window_s))[0]

    def _compute(self, key: float) -> tuple[list[Diagnosis], float]:
        fresh, _, due = self._lookup(key)
        if fresh is not None:
            return fresh
        with self._lock:
            running = self._running.get(key)
        if running is not None:
            running.join()
            return self._lookup(key)[1]
        return self._diagnose(key, *due)

    def _lookup(self, key: float) -> tuple[tuple[list[Diagnosis], float] | None,
                                           tuple[list[Diagnosis], float], tuple[float, int]]:
        """(the cached diagnoses and resolution if still fresh, the newest ones held,
        (now, newest seq))."""
        latest = self.metrics.history.latest()
        seq = latest.seq if latest is not None else -1
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key)
        # A longer window changes more slowly: a 30-minute one is redone every 30 s.
        every_s = max(self.every_s, key / WINDOWS_PER_REFRESH)
        held = (cached[2], cached[3]) if cached is not None else ([], 0.0)
        if cached is not None and (cached[1] == seq or now - cached[0] < every_s):
            return held, held, (now, seq)
        return None, held, (now, seq)

    def _diagnose(self, key: float, now: float, seq: int, from_memory: bool = False
                  ) -> tuple[list[Diagnosis], float]:
        metrics = self.metrics
        try:
            samples, resolution = window_with_past(metrics.history, key,
                                                   None if from_memory else self.past,
                                                   key / MAX_STORED_ROWS, rows="mean")
            result = []
            for fact in metrics.facts:
                try:
                    result.append(diagnose(samples, metrics.facts, fact.index,
                                           simulated=metrics.simulated))
                except Exception as error:  # noqa: BLE001 - one device must not hide the rest
                    self._failed(fact.label, fact.index, error)
            with self._lock:
                self._cache[key] = (now, seq, result, resolution)
                if len(self._cache) > 16:  # a client asking for many windows: keep it bounded
                    self._cache.pop(next(iter(self._cache)))
                self.computed += 1
            return result, resolution
        finally:
            with self._lock:
                if self._running.get(key) is threading.current_thread():
                    del self._running[key]

    def _failed(self, label: str, row: int, error: Exception) -> None:
        with self._lock:
            first = (row, type(error).__name__) not in self._failing
            self._failing.add((row, type(error).__name__))
        if first:
            log.warning("the diagnosis of %s failed (%s: %s); the other devices' stand",
                        label, type(error).__name__, error)

    def as_json(self, window_s: float = DEFAULT_WINDOW_S) -> dict[str, object]:
        """``/diagnosis.json``: the window, the resolution it was read at (every sample of
        the in-memory history; where the window reaches past it, the store's bucket means
        at ``store_resolution_s``), and each device's findings (waits for a long window:
        call it off the event loop)."""
        diagnoses, resolution = self._compute(float(window_s))
        return {"window_s": window_s, "simulated": self.metrics.simulated,
                "sample_interval_s": self.metrics.interval_s,
                "store_resolution_s": resolution or None,
                "resolution_s": max(resolution, self.metrics.interval_s),
                "devices": [diagnosis.to_json() for diagnosis in diagnoses]}
