"""A version 1 store, written by the version 1 store code itself
(``tests/fixtures/schema-1-history.sqlite``, made by ``tests/fixtures/make_schema_1_store.py``),
keeps its GPU history through the upgrade: drawn under its GPUs, keyed by the UUIDs of the
machine's GPUs at the first sample after the upgrade (store/upgraded_rows.py)."""

from __future__ import annotations

import contextlib
import logging
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.store import SCHEMA_VERSION, HistoryStore, file
from jupyterlab_nvdashboard.store.buckets import is_gap
from tests.support.store_clock import ScriptedClock
from tests.support.store_feed import UUIDS, Feeder

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


def test_a_store_upgraded_by_an_earlier_start_keeps_its_rows_apart(
        old_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upgraded to version 2 before the GPUs were noted: which GPUs its rows were is not
    known now, so they are drawn under none of today's (never under whichever GPU has that
    row now), and the host readings stay."""
    clock = ScriptedClock(START_S + MINUTES * 60 + 3600, 9_000.0)
    with monkeypatch.context() as version_2:
        version_2.setattr(file, "MIGRATIONS", {v: file.MIGRATIONS[v] for v in (1, 2)})
        version_2.setattr(file, "SCHEMA_VERSION", 2)
        store = HistoryStore(old_store, clock=clock, device_uuids=lambda: UUIDS)
        store.open()
        store.close()
    store = HistoryStore(old_store, clock=clock, device_uuids=lambda: UUIDS)
    store.open()
    Feeder(store, clock, interval_s=5.0).run(20)
    store.step(final=True)
    with contextlib.closing(sqlite3.connect(old_store)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert layouts(old_store)[0] == "index:0,index:1"
    window = store.past(START_S, START_S + MINUTES * 60, 60, rows="mean").samples
    assert [s.gpus for s in window if not is_gap(s)] == [()] * MINUTES
    assert all(s.host.cpu_pct == pytest.approx(12.0) for s in window if not is_gap(s))
    store.close()
