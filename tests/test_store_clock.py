"""A wall clock wrong when the server starts deletes and hides no history (store/clock_check.py):
ahead and behind by 10 minutes, 8 hours and a year, then a restart with the clock put right.
Buckets set aside as "ahead of the clock" come back when the clock reaches them. The writer
is stepped by hand on a scripted clock: no server, no waiting."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.store import COARSE_TIER, FINE_TIER, TIER_WIDTHS_S
from jupyterlab_nvdashboard.store.buckets import is_gap
from tests.support.store_clock import ScriptedClock
from tests.support.store_feed import DAY_S, START_S, Feeder, open_writer, stored

RETENTION = {"retention_5s_s": 3600.0, "retention_1min_s": 2 * 3600.0}
REAL_S = 3 * 3600.0  # more than the longest retention: the store is full
WRONG_RUN_S = 180.0  # how long the server runs with the wrong clock, then with the right one


@pytest.fixture
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nvdashboard-store-clock-") as name:
        yield Path(name)


def real_history(path: Path) -> tuple[ScriptedClock, dict[int, list[int]]]:
    """Three hours written with the right clock; the clock at their end and each tier's
    bucket starts as they are then."""
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(path, clock, **RETENTION)
    Feeder(store, clock, interval_s=5.0).run(REAL_S)
    store.stop()
    return clock, {tier: [start for start, _ in stored(path, tier)]
                   for tier in (FINE_TIER, COARSE_TIER)}


def clock_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.INFO and "wall clock" in r.getMessage()]


def assert_real_history_kept(path: Path, clock: ScriptedClock,
                             real: dict[int, list[int]]) -> None:
    """Every real bucket still within its retention (by the right clock) is in the history,
    and a window over it draws it: none deleted, none set aside."""
    now = clock.wall
    for tier, retention in ((FINE_TIER, RETENTION["retention_5s_s"]),
                            (COARSE_TIER, RETENTION["retention_1min_s"])):
        due = [start for start in real[tier] if start >= now - retention + 60]
        kept = {start for start, _ in stored(path, tier)}
        missing = [start for start in due if start not in kept]
        assert not missing, (f"tier {tier}: {len(missing)} of {len(due)} real buckets gone, "
                             f"the first at {missing[0] - real[tier][-1]:+.0f} s")


def assert_drawn(path: Path, clock: ScriptedClock, real: dict[int, list[int]]) -> None:
    """The window over the real history's last hour draws every minute of it."""
    store = open_writer(path, clock, **RETENTION)
    try:
        minutes = [s for s in real[COARSE_TIER] if s >= real[COARSE_TIER][-1] - 3600]
        window = store.past(minutes[0], minutes[-1] + 60, 60, rows="mean").samples
        drawn = [s for s in window if not is_gap(s)]
        assert len(drawn) == len(minutes)
        assert all(s.gpus and s.gpus[0].utilization_pct == pytest.approx(50.0) for s in drawn)
    finally:
        store.close()


OFFSETS = {"10 min": 600.0, "8 h": 8 * 3600.0, "a year": 365 * DAY_S}


@pytest.mark.parametrize("way", ["ahead", "behind"])
@pytest.mark.parametrize("by", list(OFFSETS))
def test_a_clock_wrong_at_start_deletes_and_hides_nothing_real(
        folder: Path, caplog: pytest.LogCaptureFixture, way: str, by: str) -> None:
    caplog.set_level(logging.INFO, logger="nvdashboard")
    path = folder / "history.sqlite"
    clock, real = real_history(path)
    true_end = clock.wall
    offset = OFFSETS[by] if way == "ahead" else -OFFSETS[by]
    # The server starts with the clock wrong (an RTC in local time, a restored VM), runs
    # three minutes (pruning every minute), and stops.
    caplog.clear()
    clock.wall = true_end + offset
    store = open_writer(path, clock, **RETENTION)
    state = store.info().get("clock") or {}
    Feeder(store, clock, interval_s=5.0).run(WRONG_RUN_S)
    store.stop()
    lines = clock_lines(caplog)
    # NTP puts the clock right; the server starts again and runs three more minutes.
    clock.wall = true_end + WRONG_RUN_S
    store = open_writer(path, clock, **RETENTION)
    Feeder(store, clock, interval_s=5.0).run(WRONG_RUN_S)
    store.stop()
    assert_real_history_kept(path, clock, real)
    assert_drawn(path, clock, real)
    # The wrong start said so, in one line and in /info.json.
    assert state["state"] == ("ahead of the store" if way == "ahead" else "behind the store")
    assert state["clock_minus_newest_s"] == pytest.approx(offset, abs=10)
    assert len(lines) == 1, lines


def test_buckets_set_aside_as_ahead_come_back_when_the_clock_reaches_them(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = folder / "history.sqlite"
    clock, real = real_history(path)
    # A server with its clock an hour ahead wrote a minute, apart from the history.
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("INSERT INTO buckets (tier, start_s, layout, samples, covered_s, "
                           "data) SELECT tier, start_s + 3600 + 60, layout, samples, "
                           "covered_s, data FROM buckets WHERE tier=? AND start_s=?",
                           (COARSE_TIER, real[COARSE_TIER][-1]))
    ahead = real[COARSE_TIER][-1] + 3660
    store = open_writer(path, clock, **RETENTION)
    assert ahead not in {start for start, _ in stored(path, COARSE_TIER)}
    assert store.stats.set_aside == 1
    said = caplog.text
    # An hour later the clock has reached it: it is history again, merged with what the
    # server wrote there.
    Feeder(store, clock, interval_s=5.0).run(3600 + 120)
    store.step(final=True)
    [(_, samples)] = [row for row in stored(path, COARSE_TIER) if row[0] == ahead]
    assert samples == 2 * 12
    assert store.stats.brought_back == 1
    assert "set aside until the clock reaches them" in said
    with contextlib.closing(sqlite3.connect(path)) as connection:
        assert connection.execute("SELECT count(*) FROM set_aside").fetchone()[0] == 0
    store.close()


def test_what_an_older_nvdashboard_set_aside_under_a_clock_behind_comes_back(
        folder: Path) -> None:
    """Before this check, a start with the clock a year behind set the whole history aside
    as "ahead of the clock", for good: the next start with the clock right brings it back."""
    path = folder / "history.sqlite"
    clock, real = real_history(path)
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("INSERT INTO set_aside (why, tier, start_s, layout, samples, "
                           "covered_s, data) SELECT 'ahead of the clock', tier, start_s, "
                           "layout, samples, covered_s, data FROM buckets")
        connection.execute("DELETE FROM buckets")
    store = open_writer(path, clock, **RETENTION)
    store.close()
    assert_real_history_kept(path, clock, real)
    assert_drawn(path, clock, real)


def test_a_right_clock_after_a_short_stop_agrees_and_prunes_as_before(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="nvdashboard")
    path = folder / "history.sqlite"
    clock, _ = real_history(path)
    clock.advance(30)  # a restart
    store = open_writer(path, clock, **RETENTION)
    assert store.info()["clock"]["state"] == "agrees" and not clock_lines(caplog)
    Feeder(store, clock, interval_s=5.0).run(120)
    store.step(final=True)
    oldest_minute = stored(path, COARSE_TIER)[0][0]
    assert oldest_minute >= clock.wall - RETENTION["retention_1min_s"] - 60
    assert stored(path, FINE_TIER)[0][0] >= clock.wall - RETENTION["retention_5s_s"] - 60
    assert TIER_WIDTHS_S[COARSE_TIER] == 60
    store.close()
