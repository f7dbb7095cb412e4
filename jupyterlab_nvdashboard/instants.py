"""A moment in time as a request names it: an ISO 8601 time with its zone, as Jupyter's
message headers carry them (``2026-12-05T12:00:00.123456Z``), or Unix seconds.

One parser for every route that takes a time (``/cell.json``'s span, a timeline page's
``?start=&end=``), so they accept and refuse the same texts with the same words.
"""

from __future__ import annotations

import math
from datetime import datetime

# Texts longer than this are refused before parsing: a time is at most ~35 characters.
MAX_TEXT = 64


def parse_instant(text: str, name: str = "time") -> float:
    """Unix seconds of ``text``; a one-line ``ValueError`` naming ``name`` otherwise.

    A time without a zone is refused: the browser, the server and the kernel may each keep
    another zone, and a guess would move a cell's span by hours."""
    text = text.strip()
    if not text or len(text) > MAX_TEXT:
        raise ValueError(f"{name} must be an ISO 8601 time with its zone or Unix seconds")
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"{name} must be a finite, non-negative number of Unix seconds")
        return seconds
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{name} {text!r} is neither an ISO 8601 time nor Unix seconds"
                         ) from None
    if moment.tzinfo is None:
        raise ValueError(f"{name} {text!r} has no zone: add Z or an offset such as +00:00")
    return moment.timestamp()


def parse_span(start_text: str, end_text: str) -> tuple[float, float]:
    """``(start_s, end_s)`` of a span; a one-line ``ValueError`` when either time is bad or
    the span ends before it starts."""
    start_s, end_s = parse_instant(start_text, "start"), parse_instant(end_text, "end")
    if end_s < start_s:
        raise ValueError("end is before start")
    return start_s, end_s
