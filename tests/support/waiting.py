"""Waiting on a condition, not on the clock: poll until it holds, or fail after a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import psutil

T = TypeVar("T")


def until(condition: Callable[[], T], what: str, seconds: float = 60.0,
          every_s: float = 0.05) -> T:
    """``condition()``'s first true value, polled every ``every_s``; AssertionError naming
    ``what`` after ``seconds`` (deadlines are set to hold on a loaded machine)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"not within {seconds:g} s: {what}")


def until_ended(pid: int, seconds: float = 60.0) -> None:
    """Until process ``pid`` has ended, at once if it already has; psutil.TimeoutExpired
    after ``seconds``. A process can end between any check and ``psutil.Process(pid)``,
    which then raises: a loaded run lost the idle-notice test to that (loaded run T)."""
    try:
        psutil.Process(pid).wait(seconds)
    except psutil.NoSuchProcess:
        pass
