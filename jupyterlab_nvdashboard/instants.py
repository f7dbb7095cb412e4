"""A moment in time as a request or Jupyter names it: an ISO 8601 time with its zone, as
Jupyter's message headers and its REST API carry them (``2026-12-05T12:00:00.123456Z``), or
Unix seconds.

One parser for every text that names a time (``/cell.json``'s span, a timeline page's
``?start=&end=``, a kernel message's header date, the sessions API's ``last_activity``), so
they accept and refuse the same texts with the same words, on every Python that
``pyproject.toml`` accepts. ``datetime.fromisoformat`` is not that parser: before 3.11 it
refuses the ``Z`` every Jupyter date ends with, and a fraction of other than 3 or 6 digits,
and from 3.11 it accepts basic and week forms no client sends. The grammar below is the one
Jupyter writes (``jupyter_client.jsonutil``), with a space for ``T`` and any fraction.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone, tzinfo

# Texts longer than this are refused before parsing: a time is at most ~35 characters.
MAX_TEXT = 64

_ISO = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt ]"
    r"(?P<hour>\d{2}):(?P<minute>\d{2})(?::(?P<second>\d{2})(?:[.,](?P<fraction>\d{1,9}))?)?"
    r"(?P<zone>[Zz]|[+-]\d{2}(?::?\d{2})?)?")


def _zone(text: str | None) -> tzinfo | None:
    if text is None:
        return None
    if text in ("Z", "z"):
        return timezone.utc
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    if hours > 23 or minutes > 59:
        raise ValueError("zone out of range")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def _iso_seconds(text: str, naive: tzinfo | None) -> float | None:
    """Unix seconds of an ISO 8601 text; None where it is not one. ``naive``: the zone of a
    text without one (None: such a text is refused)."""
    found = _ISO.fullmatch(text)
    if found is None:
        return None
    try:
        zone = _zone(found["zone"]) or naive
        if zone is None:
            raise LookupError
        year, month, day = map(int, found["date"].split("-"))
        fraction = (found["fraction"] or "0")[:6].ljust(6, "0")  # microseconds, truncated
        moment = datetime(year, month, day, int(found["hour"]), int(found["minute"]),
                          int(found["second"] or 0), int(fraction), tzinfo=zone)
    except ValueError:
        return None
    return moment.timestamp()


def parse_instant(text: str, name: str = "time", naive: tzinfo | None = None) -> float:
    """Unix seconds of ``text``; a one-line ``ValueError`` naming ``name`` otherwise.

    A time without a zone is refused unless the caller knows its zone (``naive``): the
    browser, the server and the kernel may each keep another zone, and a guess would move a
    cell's span by hours."""
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
        moment = _iso_seconds(text, naive)
    except LookupError:
        raise ValueError(f"{name} {text!r} has no zone: add Z or an offset such as +00:00"
                         ) from None
    if moment is None:
        raise ValueError(f"{name} {text!r} is neither an ISO 8601 time nor Unix seconds")
    return moment


def jupyter_time(value: object) -> float | None:
    """A time from Jupyter's REST API (``last_activity``: ``2026-12-02T08:40:26.123456Z``)
    as Unix seconds; None where it is not one. The API writes UTC, so a time without a
    zone is taken as UTC there (and only there)."""
    if not isinstance(value, str):
        return None
    try:
        return parse_instant(value, "time", naive=timezone.utc)
    except ValueError:
        return None


def parse_span(start_text: str, end_text: str) -> tuple[float, float]:
    """``(start_s, end_s)`` of a span; a one-line ``ValueError`` when either time is bad or
    the span ends before it starts."""
    start_s, end_s = parse_instant(start_text, "start"), parse_instant(end_text, "end")
    if end_s < start_s:
        raise ValueError("end is before start")
    return start_s, end_s
