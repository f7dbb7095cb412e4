"""A version 1 store, written by the version 1 store code itself
(``tests/fixtures/schema-1-history.sqlite``, made by ``tests/fixtures/make_schema_1_store.py``),
keeps its GPU history through the upgrade: drawn under its GPUs, keyed by the UUIDs of the
machine's GPUs at the first sample after the upgrade (store/upgraded_rows.py); where those
cannot be known, drawn and exported as "GPU N (before upgrade)", never under today's GPU N."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import logging
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from jupyterlab_nvdashboard.store import SCHEMA_VERSION, HistoryStore, file
from jupyterlab_nvdashboard.store.buckets import before_upgrade_readings, is_gap
from tests.support.bokeh_client import open_session
from tests.support.servers import cli_server, get
from tests.support.store_clock import ScriptedClock
from tests.support.store_feed import UUIDS, Feeder
from tests.support.stream_client import StreamClient, open_stream
from tests.support.waiting import until

FIXTURE = Path(__file__).parent / "fixtures" / "schema-1-history.sqlite"
# What the fixture holds (make_schema_1_store.py): ten minutes from START_S of two GPUs,
# GPU 0 at 80% and GPU 1 at 20%, written by row number.
START_S, MINUTES = 1_699_999_980.0, 10


@pytest.fixture
def old_store() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nvdashboard-upgrade-") as name:
        path = Path(name) / "history.sqlite"
        shutil.copyfile(FIXTURE, path)
        yield path


def layouts(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return [text for (text,) in connection.execute("SELECT gpus FROM layouts ORDER BY id")]


def upgrade_to_version_2(path: Path) -> None:
    """What an nvdashboard of store version 2 did to a version 1 store at its start: its
    layouts rewritten as "index:N", and the GPUs of that start never noted."""
    with pytest.MonkeyPatch.context() as version_2:
        version_2.setattr(file, "MIGRATIONS", {v: file.MIGRATIONS[v] for v in (1, 2)})
        version_2.setattr(file, "SCHEMA_VERSION", 2)
        file.open_store(path).connection.close()


def stored_gpu_history(store: HistoryStore) -> list[list[tuple[int, float | None]]]:
    """Each stored minute of the old span: (row, utilization) of every GPU drawn."""
    window = store.past(START_S, START_S + MINUTES * 60, 60, rows="mean").samples
    return [[(g.index, g.utilization_pct) for g in s.gpus] for s in window if not is_gap(s)]


def test_the_fixture_is_a_version_1_store(old_store: Path) -> None:
    # Read from a copy: a WAL store's reader leaves -wal and -shm files beside it.
    with contextlib.closing(sqlite3.connect(old_store)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
        assert db.execute("SELECT gpus FROM layouts").fetchall() == [("0,1",)]
        assert db.execute("SELECT count(*) FROM buckets WHERE tier=1").fetchone()[0] == MINUTES


def test_an_upgraded_store_draws_its_gpu_history_under_its_gpus(
        old_store: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="nvdashboard")
    clock = ScriptedClock(START_S + MINUTES * 60 + 3600, 9_000.0)  # an hour later
    store = HistoryStore(old_store, clock=clock, device_uuids=lambda: UUIDS)
    store.open()
    assert store.role == "writer", store.problem
    Feeder(store, clock, interval_s=5.0).run(60)  # the first samples name the GPUs
    store.step(final=True)
    assert layouts(old_store)[0] == f"{UUIDS[0]},{UUIDS[1]}"
    assert stored_gpu_history(store) == [[(0, pytest.approx(80.0)),
                                          (1, pytest.approx(20.0))]] * MINUTES
    assert "keyed by the UUIDs" in caplog.text
    store.close()
    # The next start (GPU A taken out: GPU B is row 0 now) draws each GPU's past under the
    # row it has now: the keys were noted once, at the upgrade.
    store = HistoryStore(old_store, clock=clock, device_uuids=lambda: {0: UUIDS[1]})
    store.open()
    Feeder(store, clock, interval_s=5.0).run(10)
    assert stored_gpu_history(store) == [[(0, pytest.approx(20.0))]] * MINUTES
    store.close()


def test_the_upgrade_waits_for_a_sample_that_names_the_gpus(old_store: Path) -> None:
    """NVML is read on a thread of its own and may not have answered when the store opens:
    the row numbers wait for the first sample with UUIDs, across a restart too."""
    clock = ScriptedClock(START_S + MINUTES * 60 + 3600, 9_000.0)
    shown: dict[int, str] = {}
    store = HistoryStore(old_store, clock=clock, device_uuids=lambda: shown)
    store.open()
    Feeder(store, clock, interval_s=5.0).run(20)  # no GPU read yet
    store.stop()
    assert layouts(old_store)[0] == "index:0,index:1"
    shown.update(UUIDS)
    store = HistoryStore(old_store, clock=clock, device_uuids=lambda: shown)
    store.open()
    Feeder(store, clock, interval_s=5.0).run(20)
    assert stored_gpu_history(store)[0] == [(0, pytest.approx(80.0)), (1, pytest.approx(20.0))]
    store.close()


def test_a_store_upgraded_by_an_earlier_start_keeps_its_rows_apart(old_store: Path) -> None:
    """Upgraded to version 2 before the GPUs were noted: which GPUs its rows were is not
    known now, so they are drawn under none of today's (never under whichever GPU has that
    row now), and the host readings stay."""
    clock = ScriptedClock(START_S + MINUTES * 60 + 3600, 9_000.0)
    upgrade_to_version_2(old_store)
    store = HistoryStore(old_store, clock=clock, device_uuids=lambda: UUIDS)
    store.open()
    Feeder(store, clock, interval_s=5.0).run(20)
    store.step(final=True)
    with contextlib.closing(sqlite3.connect(old_store)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert layouts(old_store)[0] == "index:0,index:1"
    assert store.rows_before_upgrade == (0, 1)
    window = store.past(START_S, START_S + MINUTES * 60, 60, rows="mean").samples
    old = [s for s in window if not is_gap(s)]
    assert [s.gpus for s in old] == [()] * MINUTES  # today's GPUs have none of it
    # ... it is the "before upgrade" GPUs' own, by their old rows.
    assert [[(r.index, r.utilization_pct) for r in before_upgrade_readings(s)]
            for s in old] == [[(0, pytest.approx(80.0)), (1, pytest.approx(20.0))]] * MINUTES
    assert all(s.host.cpu_pct == pytest.approx(12.0) for s in old)
    store.close()


FAST = ["--simulate", "1", "--interval", "0.2", "--idle-interval", "0.2"]
SIX_HOURS_S = 6 * 3600.0


def test_a_gpu_from_before_the_upgrade_goes_with_its_last_bucket(old_store: Path) -> None:
    """Past the retention its buckets are deleted, and the timelines draw it no more."""
    clock = ScriptedClock(START_S + MINUTES * 60 + 60, 9_000.0)  # a minute after the old span
    upgrade_to_version_2(old_store)
    store = HistoryStore(old_store, clock=clock, device_uuids=lambda: UUIDS,
                         retention_5s_s=600.0, retention_1min_s=1200.0)
    store.open()
    assert store.rows_before_upgrade == (0, 1)
    feeder = Feeder(store, clock, interval_s=5.0)
    feeder.run(300)
    store.step(final=True)  # prunes: the old span is not yet past 20 minutes
    assert store.rows_before_upgrade == (0, 1)
    feeder.run(1200)
    store.step(final=True)
    assert store.rows_before_upgrade == ()
    store.close()


@dataclass(frozen=True)
class UpgradedServer:
    url: str
    old_start_s: float  # the fixture's span, as moved to three hours ago
    old_end_s: float


@pytest.fixture(scope="module")
def upgraded_server() -> Iterator[UpgradedServer]:
    """A real server on a store upgraded to version 2 by an earlier start, which cannot know
    its GPUs; the fixture's ten minutes moved to three hours ago (whole minutes: buckets
    stay aligned), within the 6-hour window and the 5-second tier. The server's one GPU
    (simulated) is today's GPU 0."""
    with tempfile.TemporaryDirectory(prefix="nvdashboard-upgrade-") as name:
        path = Path(name) / "history.sqlite"
        shutil.copyfile(FIXTURE, path)
        shift = (time.time() - 3 * 3600 - START_S) // 60 * 60
        with contextlib.closing(sqlite3.connect(path)) as connection, connection:
            connection.execute("UPDATE buckets SET start_s = start_s + ?", (shift,))
        upgrade_to_version_2(path)
        with cli_server(FAST, env={"NVDASHBOARD_STORE": str(path)}) as (url, _):
            yield UpgradedServer(url, START_S + shift, START_S + shift + MINUTES * 60)


def test_history_csv_has_columns_of_the_gpus_from_before_the_upgrade(
        upgraded_server: UpgradedServer) -> None:
    def rows_with_recent() -> list[dict[str, str]] | None:
        """The CSV's rows once it has rows of the in-memory history (a server just started
        on a loaded machine may not have sampled yet)."""
        status, body = get(upgraded_server.url + f"/history.csv?seconds={SIX_HOURS_S:g}")
        assert status == 200, body[:300]
        rows = list(csv.DictReader(io.StringIO(body.decode())))
        return rows if any(row["resolution_s"] == "0.2" for row in rows) else None

    rows = until(rows_with_recent, "a CSV with rows of the in-memory history", seconds=60)
    old = [row for row in rows
           if upgraded_server.old_start_s <= float(row["time_unix_s"]) < upgraded_server.old_end_s]
    assert len(old) == MINUTES * 12  # every 5-second bucket of the fixture
    assert {row["resolution_s"] for row in old} == {"5"}
    assert {float(row["gpu0_before_upgrade_utilization_pct"]) for row in old} == {80.0}
    assert {float(row["gpu1_before_upgrade_utilization_pct"]) for row in old} == {20.0}
    assert {float(row["gpu0_before_upgrade_memory_used_bytes"]) for row in old} == {2e9}
    assert all(float(row["host_cpu_pct"]) == pytest.approx(12.0) for row in old)
    # Today's GPU 0 has no reading in that span: the old GPU 0's history is not its.
    assert {row["gpu0_utilization_pct"] for row in old} == {""}
    # The rows of the in-memory history have those columns too, empty.
    recent = [row for row in rows if row["resolution_s"] == "0.2"]
    assert recent and {row["gpu0_before_upgrade_utilization_pct"] for row in recent} == {""}


def test_a_long_window_draws_the_gpus_from_before_the_upgrade_under_their_own_names(
        upgraded_server: UpgradedServer) -> None:
    """The 6-hour window of /GPU-Resources: a legend entry of each GPU from before the
    upgrade, and its stored values in the window's data at the old span only; today's GPU
    0 has none there."""
    url = upgraded_server.url

    async def long_window() -> tuple[StreamClient, str]:
        page = await open_stream(url, "/GPU-Resources", window_s=SIX_HOURS_S)
        page.close()
        session = await open_session(url, "/GPU-Resources")
        session.close()
        return page, json.dumps(session.document)

    page, document = asyncio.run(long_window())
    assert "GPU 0 (before upgrade)" in document and "GPU 1 (before upgrade)" in document
    columns = page.frames[0].rows.numeric
    assert {"utilization_before_upgrade0", "utilization_before_upgrade1",
            "memory_before_upgrade0"} <= set(columns), sorted(columns)
    times = page.column("time") / 1000
    # A long window's point stands somewhere in its bucket (a minute at most here): before
    # the first reading, or after the last, by up to that much.
    in_old = (times >= upgraded_server.old_start_s - 60) & \
        (times < upgraded_server.old_end_s + 60)
    for key, value in (("utilization_before_upgrade0", 80.0),
                       ("utilization_before_upgrade1", 20.0),
                       ("memory_before_upgrade0", 2e9 / 2**30)):
        drawn = page.column(key)
        assert np.isfinite(drawn[in_old]).any(), key
        assert np.allclose(drawn[np.isfinite(drawn)], value), key  # and nowhere else
        assert not np.isfinite(drawn[~in_old]).any(), key
    assert not np.isfinite(page.column("utilization0")[in_old]).any()
