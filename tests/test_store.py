"""The history store (store/) on a scripted clock: tiers, roll-up, pruning, clock steps, bad
files, two servers on one file. No server, no waiting: the writer is stepped by hand."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import resource
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from jupyterlab_nvdashboard.store import (
    APPLICATION_ID,
    COARSE_TIER,
    FINE_TIER,
    SCHEMA_VERSION,
    HistoryStore,
    StoreReadOnEventLoop,
    file,
    holders,
)
from jupyterlab_nvdashboard.store.buckets import Bucket, column_count, is_gap
from jupyterlab_nvdashboard.store.holders import DeviceActivity, HolderReading, PassRecord
from tests.support.store_clock import ScriptedClock
from tests.support.store_feed import (
    DAY_S,
    START_S,
    UUIDS,
    Feeder,
    open_writer,
    stored,
)
from tests.support.waiting import until


@pytest.fixture
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nvdashboard-store-") as name:
        yield Path(name)


def test_tiers_roll_up_with_mean_min_and_max(folder: Path) -> None:
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(folder / "history.sqlite", clock)
    feeder = Feeder(store, clock)
    # GPU 0 climbs 0, 1, 2, ... one step a second for three minutes.
    feeder.run(180, value=lambda t: t - START_S)
    store.step(final=True)
    fine, coarse = stored(store.path, FINE_TIER), stored(store.path, COARSE_TIER)
    assert [start for start, _ in fine] == [int(START_S) + 5 * i for i in range(36)]
    assert all(samples == 5 for _, samples in fine)
    assert coarse == [(int(START_S) + 60 * i, 60) for i in range(3)]
    window = store.past(START_S, START_S + 180, 60, rows="mean")
    assert window.tier_s == 60 and window.resolution_s == 60
    means = [s.gpus[0].utilization_pct for s in window.samples]
    assert means == pytest.approx([29.5, 89.5, 149.5])
    minmax = store.past(START_S, START_S + 180, 60)
    assert [s.gpus[0].utilization_pct for s in minmax.samples] == [0, 59, 60, 119, 120, 179]
    # The finest tier that is fine enough: 5-second buckets for a 5-second resolution.
    assert store.past(START_S, START_S + 180, 5).tier_s == 5
    store.close()


def test_means_weigh_the_time_each_sample_covers_not_the_sample_count(folder: Path) -> None:
    start = START_S + 60  # a multiple of 120: the two minutes fold into one 2-minute span
    clock = ScriptedClock(start, 5_000.0)
    store = open_writer(folder / "history.sqlite", clock)
    feeder = Feeder(store, clock, interval_s=2.0)
    feeder.run(60, value=lambda t: 100.0)  # a minute busy with nobody watching: every 2 s
    feeder.interval_s = 0.2
    feeder.run(60, value=lambda t: 0.0)  # a minute idle with a page open: every 200 ms
    store.step(final=True)
    minutes = store.past(start, start + 120, 60, rows="mean").samples
    assert [m.gpus[0].utilization_pct for m in minutes] == pytest.approx([100.0, 0.0])
    # Both minutes rolled into one span: half busy, as long as it was busy.
    [both] = store.past(start, start + 120, 120, rows="mean").samples
    assert both.gpus[0].utilization_pct == pytest.approx(50.0, abs=0.5)
    # A restart inside a 5-second bucket merges by time too: 2 s at 100% (a sample a
    # second), then 3 s at 0% (fifteen samples) is 40%.
    clock.wall = round(clock.wall)  # 600 steps of 0.2 s drift by microseconds
    assert clock.wall % 5 == 0
    feeder.interval_s = 1.0
    feeder.run(2, value=lambda t: 100.0)
    store.stop()
    store = open_writer(store.path, clock)
    feeder = Feeder(store, clock, interval_s=0.2)
    feeder.run(3, value=lambda t: 0.0)
    store.step(final=True)
    [bucket] = store.past(clock.wall - 5, clock.wall, 5, rows="mean").samples
    assert bucket.gpus[0].utilization_pct == pytest.approx(40.0, abs=0.5)
    store.close()


def test_stored_series_follow_their_gpu_by_uuid_across_a_swap(folder: Path) -> None:
    clock = ScriptedClock(START_S, 5_000.0)
    shown = dict(UUIDS)  # what NVML enumerates now: row -> UUID
    path = folder / "history.sqlite"
    store = HistoryStore(path, clock=clock, device_uuids=lambda: shown)
    store.open()
    feeder = Feeder(store, clock)
    feeder.run(60)  # row 0 (GPU A) at 50%, row 1 (GPU B) at 7%
    store.stop()
    # GPU A is taken out: B is row 0 now, and a new GPU C row 1.
    shown.clear()
    shown.update({0: UUIDS[1], 1: "GPU-2c2c2c2c-0000-4000-8000-000000000002"})
    store = HistoryStore(path, clock=clock, device_uuids=lambda: shown)
    store.open()
    feeder = Feeder(store, clock)
    feeder.run(60)  # row 0 (GPU B now) at 50%, row 1 (GPU C) at 7%
    store.step(final=True)
    before, after = store.past(START_S, START_S + 120, 60, rows="mean").samples
    # GPU B's past under the row it has now; GPU A's under none; GPU C has no past.
    assert [(g.index, g.utilization_pct) for g in before.gpus] == [(0, 7.0)]
    assert [(g.index, g.utilization_pct) for g in after.gpus] == [(0, 50.0), (1, 7.0)]
    store.close()


def test_buckets_past_their_retention_are_deleted(folder: Path) -> None:
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(folder / "history.sqlite", clock, retention_5s_s=60,
                        retention_1min_s=3600)
    feeder = Feeder(store, clock, interval_s=5.0)
    feeder.run(2 * 3600)
    store.step(final=True)
    newest = stored(store.path, FINE_TIER)[-1][0]
    assert stored(store.path, FINE_TIER)[0][0] >= newest - 60
    minutes = [start for start, _ in stored(store.path, COARSE_TIER)]
    assert minutes[0] >= newest - 3600 and len(minutes) <= 61
    assert store.stats.pruned > 0
    store.close()


def test_wall_clock_step_back_merges_into_stored_buckets_and_prunes_nothing(
        folder: Path) -> None:
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(folder / "history.sqlite", clock, retention_5s_s=600)
    feeder = Feeder(store, clock)
    feeder.run(120, value=lambda t: 10.0)
    clock.wall -= 60  # NTP steps the wall clock a minute back; monotonic time goes on
    feeder.run(60, value=lambda t: 90.0)
    store.step(final=True)
    fine = dict(stored(store.path, FINE_TIER))
    # The second minute was recorded twice: its buckets hold both runs' samples, merged.
    assert fine[int(START_S) + 60] == 10 and fine[int(START_S)] == 5
    minute = store.past(START_S + 60, START_S + 120, 60, rows="mean").samples
    assert minute[0].gpus[0].utilization_pct == pytest.approx(50.0)
    assert store.stats.merged > 0 and store.stats.pruned == 0
    store.close()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_clock_set_a_year_ahead_deletes_no_history_and_its_buckets_are_set_aside(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ScriptedClock(START_S, 5_000.0)
    path = folder / "history.sqlite"
    retention = {"retention_5s_s": 3600.0, "retention_1min_s": 2 * 3600.0}
    store = open_writer(path, clock, **retention)
    feeder = Feeder(store, clock, interval_s=5.0)
    feeder.run(3600)  # an hour of real history
    real_minutes = stored(path, COARSE_TIER)
    # `date -s` a year ahead while the server runs; two minutes later the clock is put right
    # (NTP) and the server restarts.
    clock.wall += 365 * DAY_S
    feeder.run(120)
    store.stop()
    assert stored(path, COARSE_TIER)[:len(real_minutes)] == real_minutes  # nothing deleted
    clock.wall -= 365 * DAY_S
    assert not warnings_of(caplog)
    store = open_writer(path, clock, **retention)
    feeder = Feeder(store, clock, interval_s=5.0)
    feeder.run(600)  # ten more minutes, pruned every minute
    store.step(final=True)
    # The real hour is all there; what was stamped a year ahead is out of the history, kept.
    minutes = stored(path, COARSE_TIER)
    assert minutes[:len(real_minutes)] == real_minutes
    assert max(start for start, _ in minutes) < clock.wall
    assert max(start for start, _ in stored(path, FINE_TIER)) < clock.wall
    with contextlib.closing(sqlite3.connect(path)) as connection:
        aside = connection.execute("SELECT min(start_s), count(*) FROM set_aside").fetchone()
    assert aside[0] > clock.wall + 300 * DAY_S and aside[1] == store.stats.set_aside > 0
    [line] = warnings_of(caplog)
    assert "ahead of the clock" in line and "set aside" in line
    window = store.past(START_S, clock.wall, 60, rows="mean").samples
    assert window[0].time_s < START_S + 60 and window[-1].time_s < clock.wall
    # Retention still counts from now: an hour and a half later the first half hour goes.
    feeder.run(5400)
    store.step(final=True)
    assert stored(path, COARSE_TIER)[0][0] >= clock.wall - 2 * 3600 - 60
    store.close()


def test_a_planted_future_bucket_is_set_aside_and_the_rest_kept(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ScriptedClock(START_S, 5_000.0)
    path = folder / "history.sqlite"
    store = open_writer(path, clock)
    Feeder(store, clock).run(120)
    store.stop()
    before = stored(path, FINE_TIER)
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("INSERT INTO buckets (tier, start_s, layout, samples, covered_s, "
                           "data) SELECT tier, start_s + 10 * 365 * 86400, layout, samples, "
                           "covered_s, data FROM buckets WHERE tier=1 LIMIT 1")
    store = open_writer(path, clock)
    Feeder(store, clock).run(60)
    store.step(final=True)
    assert stored(path, FINE_TIER)[:len(before)] == before
    assert store.stats.set_aside == 1 and "ahead of the clock" in one_line(caplog)
    store.close()


def test_wall_clock_step_forward_is_a_gap_and_monotonic_jump_flushes_once(
        folder: Path) -> None:
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(folder / "history.sqlite", clock)
    feeder = Feeder(store, clock)
    feeder.run(60)
    clock.wall += 3600  # wall clock jumps an hour (suspend, NTP)
    clock.mono += 7200  # and the monotonic clock by more: one batch, nothing counted twice
    feeder.run(60)
    store.step(final=True)
    window = store.past(START_S, clock.wall, 5)
    gaps = [s for s in window.samples if is_gap(s)]
    assert len(gaps) == 1 and START_S + 60 < gaps[0].time_s < START_S + 3660
    assert sum(samples for _, samples in stored(store.path, FINE_TIER)) == 120
    store.close()


def test_kill_loses_at_most_the_open_bucket_and_a_restart_rolls_up_the_rest(
        folder: Path) -> None:
    clock = ScriptedClock(START_S, 5_000.0)
    path = folder / "history.sqlite"
    store = open_writer(path, clock)
    feeder = Feeder(store, clock)
    feeder.run(90)  # a minute and a half, stepped every 5 s; then killed: no final step
    store.close()  # what kill -9 leaves: the connection gone, nothing more written
    fine = stored(path, FINE_TIER)
    assert fine[-1][0] + 5 >= START_S + 90 - store.batch_s - 5  # at most the last batch
    assert [start for start, _ in stored(path, COARSE_TIER)] == [int(START_S)]
    again = open_writer(path, clock)  # the next server rolls up the minute the kill left
    assert [start for start, _ in stored(path, COARSE_TIER)] == [int(START_S),
                                                                 int(START_S) + 60]
    again.close()


def test_two_stores_on_one_file_one_writes_the_other_reads_then_takes_over(
        folder: Path) -> None:
    path = folder / "history.sqlite"
    clock = ScriptedClock(START_S, 5_000.0)
    first = open_writer(path, clock)
    second = HistoryStore(path, clock=clock, device_uuids=lambda: UUIDS)
    second.open()
    assert second.role == "reader"
    Feeder(first, clock).run(30)
    first.step(final=True)
    Feeder(second, clock).run(30)  # the reader's own samples are not written
    second.step()
    assert sum(n for _, n in stored(path, FINE_TIER)) == 30
    assert len(second.past(START_S, START_S + 30, 5).samples) == 12  # it reads the writer's
    first.stop()  # the writer ends; the reader takes over at its next try
    clock.mono += 60
    second.step()
    assert second.role == "writer"
    second.close()


def a_minute_stored(folder: Path) -> tuple[Path, ScriptedClock]:
    """A store in ``folder`` with a minute of history written and closed, and its clock."""
    path = folder / "history.sqlite"
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(path, clock)
    Feeder(store, clock).run(60)
    store.stop()
    return path, clock


def one_line(caplog: pytest.LogCaptureFixture) -> str:
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, lines
    assert "\n" not in lines[0] and "Traceback" not in lines[0]
    return lines[0]


def test_a_damaged_store_is_set_aside_and_a_new_one_made(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    path, clock = a_minute_stored(folder)
    data = bytearray(path.read_bytes())
    data[4096:8192] = os.urandom(4096)  # a damaged page, the header still ours
    path.write_bytes(bytes(data))
    store = HistoryStore(path, clock=clock, device_uuids=lambda: UUIDS)
    store.open()
    line = one_line(caplog)
    assert store.role == "writer" and "set aside" in line
    aside = [p for p in folder.iterdir() if ".corrupt-" in p.name]
    assert aside and aside[0].read_bytes()[:4096] == bytes(data[:4096])  # kept, not deleted
    store.close()


def test_a_store_left_in_rollback_journal_mode_is_used_and_put_back_in_wal(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    path, clock = a_minute_stored(folder)
    with contextlib.closing(sqlite3.connect(path)) as shell:  # as `sqlite3` the shell might
        assert shell.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    caplog.set_level(logging.INFO, logger="nvdashboard")
    store = open_writer(path, clock)
    assert len(store.past(START_S, START_S + 60, 5).samples) == 24  # the history kept
    assert [r.getMessage() for r in caplog.records if "rollback-journal" in r.getMessage()]
    assert not warnings_of(caplog)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


@pytest.mark.parametrize("damage", ["a layout of x", "a start that is text",
                                    "a blob that is a number"])
def test_a_row_the_writer_did_not_write_is_set_aside_with_one_line_and_the_rest_served(
        folder: Path, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    path, clock = a_minute_stored(folder)
    first = int(START_S)
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        if damage == "a layout of x":  # a store with our marker, a row we never write
            connection.execute("INSERT INTO layouts (gpus) VALUES ('x')")
            connection.execute("UPDATE buckets SET layout = (SELECT id FROM layouts WHERE "
                               "gpus = 'x') WHERE start_s = ?", (first,))
        elif damage == "a start that is text":
            connection.execute("UPDATE buckets SET start_s = 'x' WHERE start_s = ?", (first,))
        else:
            connection.execute("UPDATE buckets SET data = 7 WHERE start_s = ?", (first,))
    # The writer's own thread opens it, as a server runs it; the batches are stepped here
    # (the thread's own come every hour of real time: never, in this test).
    store = HistoryStore(path, clock=clock, device_uuids=lambda: UUIDS, batch_s=3600.0)
    store.start()
    until(lambda: store.role != "starting", "the store to open", 30)
    Feeder(store, clock).run(60)
    store.stop()  # writes everything
    assert "set aside" in one_line(caplog)
    assert store.role == "writer" and store.stats.set_aside == 2  # the first 5 s and minute
    # Everything else is kept, and written on: the store is repaired, not set off.
    assert [start for start, _ in stored(path, FINE_TIER)] == [
        first + 5 * i for i in range(1, 24)]
    reader = HistoryStore(path, clock=clock, device_uuids=lambda: UUIDS)
    reader.open()
    assert len(reader.past(START_S, START_S + 120, 5, rows="mean").samples) == 23
    reader.close()


def test_a_writer_that_fails_unforeseen_says_so_and_is_off(
        folder: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyterlab_nvdashboard.store import service

    def defect(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a defect no check foresaw")

    monkeypatch.setattr(service, "fold_samples", defect)
    clock = ScriptedClock(START_S, 5_000.0)
    store = HistoryStore(folder / "history.sqlite", clock=clock, device_uuids=lambda: UUIDS,
                         batch_s=0.05)
    Feeder(store, clock).run(1)
    store.start()  # the writer's own thread meets the defect at its first batch
    until(lambda: store.role == "off", "the store to turn off", 30)
    assert store.info()["role"] == "off" and "a defect no check foresaw" in one_line(caplog)
    store.stop()


def test_a_read_while_the_store_opens_waits_for_it_and_none_runs_on_an_event_loop(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page opened as the server starts read a store still "starting", and drew its long
    window with nothing stored (CI saw a restart's first /info.json say "starting")."""
    from jupyterlab_nvdashboard.store import service

    path, clock = a_minute_stored(folder)
    opening = threading.Event()
    real_open_store = service.open_store

    def slow_open_store(store_path: Path) -> object:
        opening.set()
        time.sleep(0.5)  # a loaded machine, or a big file's migration
        return real_open_store(store_path)

    monkeypatch.setattr(service, "open_store", slow_open_store)

    def started() -> HistoryStore:
        store = HistoryStore(path, clock=clock, device_uuids=lambda: UUIDS)
        store.start()
        assert opening.wait(10)
        opening.clear()
        return store

    store = started()
    assert store.role == "starting"
    assert len(store.past(START_S, START_S + 60, 5).samples) == 24  # its 12 buckets' min, max
    assert store.role == "writer"
    store.stop()

    # On an event loop nothing waits, and nothing is read: the read is refused.
    store = started()

    async def on_the_loop() -> int:
        return len(store.past(START_S, START_S + 60, 5).samples)

    with pytest.raises(StoreReadOnEventLoop):
        asyncio.run(on_the_loop())
    assert store.role == "starting"
    until(lambda: store.role == "writer", "the store to open", 10)
    with pytest.raises(StoreReadOnEventLoop):
        asyncio.run(on_the_loop())
    store.stop()


@pytest.mark.parametrize("case", ["not-sqlite", "another-program", "newer-schema", "symlink",
                                  "read-only-folder", "locked", "cut-short-by-an-older-version"])
def test_a_store_that_is_not_usable_gives_one_line_and_no_store(
        folder: Path, caplog: pytest.LogCaptureFixture, case: str) -> None:
    path = folder / "state" / "history.sqlite"
    path.parent.mkdir()
    clock = ScriptedClock(START_S, 5_000.0)
    holder = None
    if case == "not-sqlite":
        path.write_text("my notes, not a database\n")
    elif case == "another-program":
        with contextlib.closing(sqlite3.connect(path)) as other:
            other.execute("CREATE TABLE t (x)")
            other.commit()
    elif case == "cut-short-by-an-older-version":
        # What a kill left when an older nvdashboard had switched a new file to WAL mode and
        # no more: an SQLite header, no tables, no application id.
        with contextlib.closing(sqlite3.connect(path)) as older:
            older.execute("PRAGMA journal_mode=WAL")
    elif case == "newer-schema":
        open_writer(path, clock).close()
        with contextlib.closing(sqlite3.connect(path)) as newer:
            newer.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    elif case == "symlink":
        target = folder / "elsewhere.sqlite"
        target.write_bytes(b"")
        path.symlink_to(target)
    elif case == "read-only-folder":
        if os.geteuid() == 0:  # root writes into any folder of a writable file system
            path = Path("/sys/nvdashboard-history.sqlite")
        else:
            path.parent.chmod(0o500)
    elif case == "locked":
        ready = open_writer(path, clock)
        ready.close()
        holder = sqlite3.connect(path, timeout=0)
        holder.execute("PRAGMA journal_mode=DELETE")  # another program's lock mode
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("CREATE TABLE held (x)")
    before = {p.name: p.read_bytes() for p in path.parent.iterdir() if p.is_file()} \
        if path.parent.parent == folder else {}
    store = HistoryStore(path, clock=clock, device_uuids=lambda: UUIDS)
    store.open()
    try:
        assert store.role == "off"
        line = one_line(caplog)
        assert str(path) in line or str(path.parent) in line
        assert store.past(START_S - 60, START_S, 5).samples == []
        assert store.readable is False and store.longest_s == 0
        after = {p.name: p.read_bytes() for p in path.parent.iterdir()
                 if p.is_file() and p.name in before}
        assert after == before  # nothing it did not make was changed, renamed or deleted
        if case == "symlink":
            assert path.is_symlink() and (folder / "elsewhere.sqlite").read_bytes() == b""
        if case == "cut-short-by-an-older-version":  # it says what to do, and blames no one
            assert "remove it" in line and "another program" not in line
    finally:
        store.close()
        if holder is not None:
            holder.close()
        (folder / "state").chmod(0o700)


def test_a_new_store_is_ours_and_private(folder: Path) -> None:
    path = folder / "new" / "history.sqlite"
    store = open_writer(path, ScriptedClock(START_S, 5_000.0))
    store.close()
    assert int.from_bytes(path.read_bytes()[68:72], "big") == APPLICATION_ID
    assert path.stat().st_mode & 0o077 == 0 and path.parent.stat().st_mode & 0o077 == 0
    with contextlib.closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def killed_at_statement(path: Path, statement: int) -> bool:
    """Open (make, migrate) the store at ``path`` in a forked process that is killed
    (SIGKILL) as its ``statement``-th SQL statement starts: what ``kill -9``, an OOM kill or
    a crash leaves at that step. False when it finished in fewer statements."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            statements = itertools.count(1)
            connect = file.connect

            def killing_connect(where: Path, read_only: bool = False) -> sqlite3.Connection:
                connection = connect(where, read_only)
                connection.set_trace_callback(
                    lambda sql: next(statements) == statement
                    and os.kill(os.getpid(), signal.SIGKILL))
                return connection

            file.connect = killing_connect
            file.open_store(path)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status)


def opened_after_each_kill(source: Path | None, folder: Path) -> Iterator[HistoryStore]:
    """For each step of opening ``source`` (a copy of it; None: a new store), the store a
    server opens after a kill at that step; ends when opening runs to the end unkilled."""
    for step in itertools.count(1):
        place = folder / f"kill-{step}"
        place.mkdir()
        path = place / "history.sqlite"
        if source is not None:
            shutil.copyfile(source, path)
        if not killed_at_statement(path, step):
            assert step > 5  # it was killed at every step before
            return
        store = HistoryStore(path, clock=ScriptedClock(START_S + 120, 5_000.0),
                             device_uuids=lambda: UUIDS)
        store.open()
        yield store
        store.close()


def test_a_kill_at_any_step_of_making_a_store_leaves_one_the_next_start_uses(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    for store in opened_after_each_kill(None, folder):
        assert store.role == "writer", store.problem
        with contextlib.closing(sqlite3.connect(store.path)) as connection:
            assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert not warnings_of(caplog)
    # And the header names it ours in the main file itself, with nothing left in a WAL.
    assert int.from_bytes(store.path.read_bytes()[68:72], "big") == APPLICATION_ID


def made_on_a_full_disk(path: Path, room_bytes: int) -> bool:
    """Make the store at ``path`` in a forked process that may write files of at most
    ``room_bytes`` (RLIMIT_FSIZE: a write past it fails, as on a full disk). True when the
    store was made whole."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        made = False
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a signal
            resource.setrlimit(resource.RLIMIT_FSIZE, (room_bytes, room_bytes))
            file.open_store(path)
            made = True
        except file.StoreUnusable:
            pass
        finally:
            os._exit(0 if made else 1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_a_disk_full_while_making_a_store_leaves_one_the_next_start_uses(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    page = 4096  # SQLite's page: the file and its WAL grow by pages
    for room in itertools.count(0, page):
        path = folder / f"room-{room}" / "history.sqlite"
        path.parent.mkdir()
        if made_on_a_full_disk(path, room):
            break
        store = open_writer(path, ScriptedClock(START_S, 5_000.0))
        store.close()
    assert room > 2 * page and not warnings_of(caplog)


def version_1_store(path: Path) -> None:
    """A store as nvdashboard wrote it at schema version 1: a minute of two GPUs, by row
    ("0,1"), the host's CPU at 12%."""
    layout = ("index:0", "index:1")
    values = np.full(column_count(layout), 12.0)
    blob = Bucket(START_S, 60.0, layout, 60, 60.0, values, values, values).encode()
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute(f"PRAGMA application_id={APPLICATION_ID}")
        connection.execute("PRAGMA journal_mode=WAL")
        with connection:
            for statement in file.MIGRATIONS[1]:
                connection.execute(statement)
            connection.execute("INSERT INTO layouts (id, gpus) VALUES (1, '0,1')")
            connection.executemany(
                "INSERT INTO buckets VALUES (?, ?, 1, ?, ?)",
                [(COARSE_TIER, int(START_S), 60, blob),
                 *((FINE_TIER, int(START_S) + 5 * i, 5, blob) for i in range(12))])
            connection.execute("PRAGMA user_version=1")


def test_a_kill_at_any_step_of_a_migration_leaves_a_store_the_next_start_migrates(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    old = folder / "version-1.sqlite"
    version_1_store(old)
    for store in opened_after_each_kill(old, folder):
        assert store.role == "writer", store.problem
        with contextlib.closing(sqlite3.connect(store.path)) as connection:
            assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            # Migrated once, all of it: a step done twice would name the rows "index:index:0".
            assert connection.execute("SELECT gpus FROM layouts").fetchall() == [
                ("index:0,index:1",)]
            assert connection.execute("SELECT count(*), min(covered_s) FROM buckets "
                                      "WHERE tier=0").fetchone() == (12, 5.0)
        # The minute is kept: its host readings read back; its GPUs, known by row only, are
        # drawn under none of today's.
        [minute] = store.past(START_S, START_S + 60, 60, rows="mean").samples
        assert minute.gpus == () and minute.host.cpu_pct == pytest.approx(12.0)
    assert not warnings_of(caplog)


def test_an_older_schema_is_migrated(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = folder / "history.sqlite"
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(path, clock)
    Feeder(store, clock).run(30)
    store.stop()
    migrations = {**file.MIGRATIONS, SCHEMA_VERSION + 1: ("CREATE TABLE notes (text TEXT)",)}
    monkeypatch.setattr(file, "MIGRATIONS", migrations)
    monkeypatch.setattr(file, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    store = open_writer(path, clock)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert connection.execute("SELECT count(*) FROM notes").fetchone()[0] == 0
    assert len(store.past(START_S, START_S + 30, 5).samples) == 12  # the history kept
    store.close()


def test_not_available_stays_not_available(folder: Path) -> None:
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(folder / "history.sqlite", clock)
    feeder = Feeder(store, clock)
    feeder.run(10, value=lambda t: None)
    store.step(final=True)
    sample = store.past(START_S, START_S + 10, 5, rows="mean").samples[0]
    assert sample.gpus[0].utilization_pct is None  # never 0
    assert sample.gpus[1].utilization_pct == 7.0 and not is_gap(sample)
    assert not math.isnan(np.float64(sample.host.cpu_pct))
    store.close()


def test_behind_jupyter_a_server_with_a_store_keeps_sampling_when_idle() -> None:
    from jupyterlab_nvdashboard.config import load_config

    proxy = ["--jupyter-proxy", "--unix-socket", "/tmp/nvdashboard-x.sock"]
    assert load_config(proxy, {}).idle_exit_s == 0  # the idle interval, never an exit
    assert load_config(proxy + ["--no-store"], {}).idle_exit_s == 1800
    assert load_config(proxy + ["--exit-after-idle", "60"], {}).idle_exit_s == 60
    assert load_config([], {"XDG_STATE_HOME": "/state"}).store_path == \
        Path("/state/nvdashboard/history.sqlite")
    assert load_config(["--store", "off"], {}).store_path is None


def test_a_failed_write_keeps_its_samples_for_the_next_try(
        folder: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyterlab_nvdashboard.store import file

    monkeypatch.setattr(file, "BUSY_TIMEOUT_S", 0.05)  # a locked write fails at once
    clock = ScriptedClock(START_S, 5_000.0)
    path = folder / "history.sqlite"
    store = open_writer(path, clock)
    feeder = Feeder(store, clock)
    feeder.run(20)
    with contextlib.closing(sqlite3.connect(path, timeout=0)) as other:
        other.execute("BEGIN EXCLUSIVE")  # another program holds the write lock a while
        feeder.run(20)
        other.rollback()
    assert store.stats.errors > 0
    assert "kept" in one_line(caplog)
    store.step(final=True)
    assert sum(n for _, n in stored(path, FINE_TIER)) == 40  # none lost
    store.close()


def _holder_pass(time_s: float, sm_pct: float | None, held: float = 4e9,
                 others: int = 0) -> PassRecord:
    """A pass where kernel K of user u holds ``held`` on GPU 0 (alone unless ``others``
    other kernels hold 1 byte there too), and someone's idle process holds nothing on GPU
    1 (a holder that holds nothing adds nothing)."""
    extra = tuple(HolderReading("v", f"other-{i}", UUIDS[0], 1.0, 0.0, False, (("u", "K"),))
                  for i in range(others))
    return PassRecord(time_s, (
        HolderReading("u", "K", UUIDS[0], held, sm_pct, not others,
                      tuple(("v", f"other-{i}") for i in range(others))),
        HolderReading("w", "", UUIDS[1], 0.0, None, True), *extra),
        (DeviceActivity(UUIDS[0], 50.0, 0.5, "utilization"),))


def test_each_holders_evidence_is_kept_per_bucket_and_rolled_up_by_time(folder: Path) -> None:
    """Passes every second for a minute, then every 2 s for a minute (the pace a page's
    closing leaves): the kernel works (its own samples 80%) in the first half of each
    minute and not in the second. Each 5-second bucket keeps its pass mark and the kernel's
    row (none for a holder that holds nothing); each minute folds them, weighted by the
    time their passes stand for: half the minute worked, whatever the pace."""
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(folder / "history.sqlite", clock)
    for second in range(60):
        store.hear_pass(_holder_pass(START_S + second, 80.0 if second < 30 else 0.0))
    for second in range(60, 120, 2):
        store.hear_pass(_holder_pass(START_S + second, 80.0 if second < 90 else 0.0))
    clock.advance(130)
    store.step(final=True)
    fine = store.holder_past("u", "K", START_S, START_S + 120, 5.0)
    assert fine.tier_s == 5.0 and len(fine.marks) == 24 and len(fine.rows) == 24
    first = fine.rows[0]
    assert (first.passes, first.sampled, first.sm_share) == (5, 5, 1.0)
    assert first.sm_mean == pytest.approx(80.0)
    assert first.held_first == first.held_last == first.held_max == 4e9 and first.alone
    assert {row.device for row in fine.rows} == {UUIDS[0]}
    # The minute tier, read for a window past the 5-second tier's reach.
    coarse = store.holder_past("u", "K", START_S, START_S + 120, 60.0)
    assert coarse.tier_s == 60.0 and len(coarse.rows) == 2
    for minute in coarse.rows:
        assert minute.sm_share == pytest.approx(0.5, abs=0.04), minute
        assert minute.device_share == pytest.approx(0.5) and minute.held_max == 4e9
    assert coarse.marks[1].passes == 30 and coarse.marks[0].passes == 60
    store.stop()


def test_a_bucket_keeps_a_bounded_number_of_holders(folder: Path) -> None:
    """A GPU shared by more holders than a bucket keeps: the most memory-holding ones are
    kept, and each names at most a few others (with how many there were)."""
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(folder / "history.sqlite", clock)
    many = holders.MAX_HOLDER_ROWS + 20
    for second in range(5):
        store.hear_pass(_holder_pass(START_S + second, 10.0, others=many))
    clock.advance(10)
    store.step(final=True)
    with contextlib.closing(sqlite3.connect(folder / "history.sqlite")) as connection:
        rows = connection.execute("SELECT count(*) FROM holder_buckets WHERE tier=0 AND "
                                  "device != ''").fetchone()[0]
    assert rows == holders.MAX_HOLDER_ROWS
    [mine] = store.holder_past("u", "K", START_S, START_S + 5, 5.0).rows
    assert len(mine.others) == holders.MAX_OTHERS and mine.others_count == many
    assert not mine.alone
    store.stop()


def test_an_upgraded_store_gets_the_holders_table_empty_and_keeps_its_history(
        folder: Path) -> None:
    """A version 3 store with a minute of buckets, opened by this version: its buckets are
    all there, the holders' table is new and empty, and a read of a holder finds nothing
    (no pass mark: the store kept no holders then)."""
    path = folder / "history.sqlite"
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(path, clock)
    Feeder(store, clock).run(60)
    store.stop()
    # The file a version 3 nvdashboard leaves: the tables of migrations 1 to 3.
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("DROP TABLE holder_buckets")
        connection.execute("PRAGMA user_version=3")
        assert file.tables(connection) == file.expected_tables(3)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        before = connection.execute("SELECT count(*) FROM buckets").fetchone()[0]
    store = open_writer(path, clock)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
        assert connection.execute("SELECT count(*) FROM buckets").fetchone()[0] == before > 0
        assert connection.execute("SELECT count(*) FROM holder_buckets").fetchone()[0] == 0
    found = store.holder_past("u", "K", START_S, START_S + 60, 5.0)
    assert found.marks == [] and found.rows == []

    async def on_the_loop() -> object:
        return store.holder_past("u", "K", START_S, START_S + 60, 5.0)

    with pytest.raises(StoreReadOnEventLoop):
        asyncio.run(on_the_loop())
    store.stop()
