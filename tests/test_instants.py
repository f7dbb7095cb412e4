"""The one parser of times a request names (``instants.py``)."""

from __future__ import annotations

import pytest

from jupyterlab_nvdashboard.instants import jupyter_time, parse_instant, parse_span


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


@pytest.mark.parametrize(("text", "expected"), [
    # Jupyter's message header dates and REST API times (jupyter_client.jsonutil).
    ("2025-12-05T12:00:00.123456Z", 1764936000.123456),
    ("2025-12-05T12:00:00.123Z", 1764936000.123),
    ("2025-12-05T12:00:00.1234567Z", 1764936000.123456),  # beyond microseconds: cut
    ("2025-12-05 12:00:00z", 1764936000.0),
    ("2025-12-05T12:00Z", 1764936000.0),
    ("2025-12-05T07:00:00-0500", 1764936000.0),
    ("2025-12-05T13:00:00+01", 1764936000.0),
])
def test_every_form_jupyter_writes_is_read_on_every_python(text: str, expected: float) -> None:
    """Python 3.10's ``fromisoformat`` refused each ``…Z`` here: no span was recorded."""
    assert parse_instant(text) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("text", [
    "20251205T120000Z",  # basic form: 3.11's fromisoformat reads it, 3.10's does not
    "2025-W49-5T12:00:00Z", "2025-12-05T25:00:00Z", "2025-02-30T12:00:00Z",
    "2025-12-05T12:00:00+24:00", "2025-12-05T12:00:00Zjunk",
])
def test_texts_outside_the_grammar_are_refused_alike_on_every_python(text: str) -> None:
    with pytest.raises(ValueError, match="neither an ISO 8601 time"):
        parse_instant(text, "start")


def test_the_apis_times_share_the_parser_and_read_a_zoneless_time_as_utc() -> None:
    assert jupyter_time("2025-12-05T12:00:00.5Z") == pytest.approx(1764936000.5)
    assert jupyter_time("2025-12-05T12:00:00") == pytest.approx(1764936000.0)
    assert jupyter_time("soon") is None and jupyter_time(None) is None
    assert jupyter_time(1764936000) is None  # the API writes text
