"""A clock for the history store (``store.service.Clock``) that a test or benchmark moves by
hand: the wall clock and the monotonic clock, each stepped on its own."""

from __future__ import annotations


class ScriptedClock:
    def __init__(self, wall: float, monotonic: float = 0.0) -> None:
        self.wall, self.mono = wall, monotonic

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def __call__(self) -> float:  # as the pages' clocks are called: epoch seconds
        return self.wall

    def advance(self, seconds: float) -> None:
        """Both clocks move on together, as they do while nothing steps either."""
        self.wall += seconds
        self.mono += seconds
