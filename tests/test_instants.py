"""The one parser of times a request names (``instants.py``)."""

from __future__ import annotations

import pytest

from jupyterlab_nvdashboard.instants import parse_instant, parse_span


@pytest.mark.parametrize(("text", "expected"), [
    ("1764936000", 1764936000.0),
    ("1764936000.25", 1764936000.25),
    ("2025-12-05T12:00:00Z", 1764936000.0),
    ("2025-12-05T12:00:00.123456Z", 1764936000.123456),
    ("2025-12-05T13:00:00+01:00", 1764936000.0),
    ("  2025-12-05T12:00:00.5+00:00 ", 1764936000.5),
])
def test_iso_times_with_their_zone_and_unix_seconds_are_read(text: str, expected: float) -> None:
    assert parse_instant(text) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(("text", "words"), [
    ("2025-12-05T12:00:00", "has no zone"),
    ("yesterday", "neither an ISO 8601 time nor Unix seconds"),
    ("nan", "finite"),
    ("inf", "finite"),
    ("-5", "non-negative"),
    ("", "ISO 8601"),
    ("1" * 100, "ISO 8601"),
])
def test_bad_times_get_one_line_naming_the_argument(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as error:
        parse_instant(text, "start")
    assert str(error.value).startswith("start") and "\n" not in str(error.value)


def test_a_span_that_ends_before_it_starts_is_refused() -> None:
    assert parse_span("10", "2025-12-05T12:00:00Z") == (10.0, 1764936000.0)
    with pytest.raises(ValueError, match="end is before start"):
        parse_span("20", "10")
