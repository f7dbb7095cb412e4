"""Byte rates from cumulative counters and the real time between two readings.

Nothing here assumes the sampling interval: a rate is (counter delta) / (time delta).

- **Time.** The delta comes from the source's own timestamps when it gives them (NVML field
  values carry the CPU time they were sampled at) and they are sane: later than the last
  one and within ``TIMESTAMP_TOLERANCE_S`` of the monotonic time that passed. Otherwise (an
  NTP step moved the wall clock, or the timestamps are junk) the monotonic delta is used.
- **Wrap.** A counter narrower than 64 bits wraps: a smaller value is a wrap by its width,
  unless the rate that gives is beyond ``max_rate`` (then it was a reset). Where no maximum
  is known, the counter's own pace tells: a wrap giving more than ``WRAP_OVER_LAST_RATE``
  times its last rate (or coming before any rate) was a reset. A 64-bit counter that goes
  backwards was reset. After a reset there is no rate until the next reading.
- **Totals.** ``total`` is the one rule for a sum of rates with unknown parts (the links'
  totals, the pages' "all GPUs" lines, a sharded run's exchange): unknown when any part
  is, since a partial sum draws a dip that never happened.
- **Threads.** The GPU reader updates while the slow thread may ``forget`` a lost GPU: the
  readings are kept under a lock.
- **Unrefreshed.** A source that has not refreshed its counter (same value, same
  timestamp) repeats its last rate for up to ``HOLD_S`` of monotonic time, then reports
  "not available", so a frozen counter never looks live.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

TIMESTAMP_TOLERANCE_S = 1.0
HOLD_S = 2.0
# Without a known maximum, a wrap is believed up to this many times the counter's last rate:
# traffic may grow that fast between two readings; a reset read as a wrap gives a rate of
# the counter's whole range over one interval (6.4 GB/s for 50 MB/s on a 32-bit counter).
WRAP_OVER_LAST_RATE = 4.0


@dataclass
class _Last:
    value: float
    source_time_s: float | None
    monotonic_s: float
    rate: float | None = None


class CounterRates:
    """Turns (key, cumulative value, timestamps) readings into per-second rates."""

    def __init__(self) -> None:
        self._last: dict[Hashable, _Last] = {}
        self._lock = threading.Lock()

    def update(
        self,
        key: Hashable,
        value: float | None,
        monotonic_s: float,
        source_time_s: float | None = None,
        width_bits: int = 64,
        max_rate: float | None = None,
    ) -> float | None:
        """The rate since the previous reading of ``key``; None means not available."""
        with self._lock:
            return self._update(key, value, monotonic_s, source_time_s, width_bits, max_rate)

    def _update(self, key: Hashable, value: float | None, monotonic_s: float,
                source_time_s: float | None, width_bits: int,
                max_rate: float | None) -> float | None:
        if value is None:
            self._last.pop(key, None)
            return None
        last = self._last.get(key)
        if last is None:
            self._last[key] = _Last(value, source_time_s, monotonic_s)
            return None
        elapsed_monotonic = monotonic_s - last.monotonic_s
        unrefreshed = value == last.value and (
            source_time_s == last.source_time_s if source_time_s is not None
            else elapsed_monotonic <= 0)
        if unrefreshed or elapsed_monotonic <= 0:
            return last.rate if elapsed_monotonic <= HOLD_S else None
        elapsed = elapsed_monotonic
        if source_time_s is not None and last.source_time_s is not None:
            elapsed_source = source_time_s - last.source_time_s
            if elapsed_source > 0 and abs(elapsed_source - elapsed_monotonic) <= \
                    TIMESTAMP_TOLERANCE_S:
                elapsed = elapsed_source
        delta = value - last.value
        if delta < 0 and width_bits < 64:
            wrapped = delta + 2 ** width_bits
            limit = max_rate if max_rate is not None else \
                None if last.rate is None else WRAP_OVER_LAST_RATE * last.rate
            if limit is not None and wrapped / elapsed <= limit:
                delta = wrapped
        rate: float | None = delta / elapsed
        if delta < 0 or (max_rate is not None and rate is not None and rate > max_rate):
            rate = None  # reset: the next reading has a rate again
        self._last[key] = _Last(value, source_time_s, monotonic_s, rate)
        return rate

    def forget(self, key_prefix: Hashable) -> None:
        """Drop every key whose first element is ``key_prefix`` (a GPU that was lost)."""
        with self._lock:
            for key in [k for k in self._last if isinstance(k, tuple) and k[0] == key_prefix]:
                self._last.pop(key, None)

    def retain(self, key_prefixes: set[Hashable]) -> None:
        """Keep only keys whose first element is one of ``key_prefixes`` (GPUs still shown)."""
        with self._lock:
            for key in [k for k in self._last
                        if isinstance(k, tuple) and k[0] not in key_prefixes]:
                self._last.pop(key, None)


def total(parts: Iterable[float | None]) -> float | None:
    """The sum of ``parts``; None (not available) when any part is, or there is none."""
    values = list(parts)
    return None if not values or None in values else sum(values)  # type: ignore[arg-type]
