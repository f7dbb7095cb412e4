"""Byte rates from cumulative counters and the real time between two readings.

Nothing here assumes the sampling interval: a rate is always
(counter delta) / (timestamp delta), so a late tick gives the right answer.
"""

from __future__ import annotations

from collections.abc import Hashable


class CounterRates:
    """Turns (key, cumulative value, timestamp in seconds) readings into per-second rates."""

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[float, float]] = {}
        self._last_rate: dict[Hashable, float] = {}

    def update(self, key: Hashable, value: float | None, timestamp_s: float) -> float | None:
        """Return the rate since the previous reading of ``key``.

        ``None`` means "not available": the first reading, a missing value, or a
        counter that went backwards (reset or wrapped). When the source has not
        refreshed its counter since the last read (same timestamp), the previous
        rate is repeated rather than reporting a false zero.
        """
        if value is None:
            self._last.pop(key, None)
            self._last_rate.pop(key, None)
            return None
        previous = self._last.get(key)
        if previous is not None and timestamp_s <= previous[1]:
            return self._last_rate.get(key)
        self._last[key] = (value, timestamp_s)
        if previous is None or value < previous[0]:
            self._last_rate.pop(key, None)
            return None
        rate = (value - previous[0]) / (timestamp_s - previous[1])
        self._last_rate[key] = rate
        return rate

    def forget(self, key_prefix: Hashable) -> None:
        """Drop every key whose first element is ``key_prefix`` (a GPU that was lost)."""
        for key in [k for k in self._last if isinstance(k, tuple) and k[0] == key_prefix]:
            self._last.pop(key, None)
            self._last_rate.pop(key, None)
