"""Neighbours cannot rewrite the history (store/permissions.py, store/file.py): a store file
others could write is made private, a folder others could write is refused, and a file with
nvdashboard's mark but other tables is found out read-only and left untouched. One log line
each; the writer is opened by hand, no server."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.store import APPLICATION_ID, SCHEMA_VERSION, HistoryStore
from tests.support.store_clock import ScriptedClock
from tests.support.store_feed import START_S, UUIDS, Feeder, open_writer


@pytest.fixture
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nvdashboard-neighbours-") as name:
        yield Path(name)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def a_store_written(path: Path) -> ScriptedClock:
    clock = ScriptedClock(START_S, 5_000.0)
    store = open_writer(path, clock)
    Feeder(store, clock).run(30)
    store.stop()
    return clock


def test_a_store_file_others_can_write_is_set_to_600_with_one_line(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = folder / "history.sqlite"
    clock = a_store_written(path)
    os.chmod(path, 0o666)  # a umask of 0, a `chmod a+w`, a copy from a shared folder
    store = open_writer(path, clock)
    assert mode_of(path) == 0o600
    assert all(mode_of(Path(f"{path}{s}")) == 0o600 for s in ("-wal", "-shm")
               if Path(f"{path}{s}").exists())
    [line] = warnings_of(caplog)
    assert "666" in line and "600" in line
    assert len(store.past(START_S, START_S + 30, 5).samples) == 12  # the history served
    store.close()


@pytest.mark.parametrize("mode", [0o777, 0o770], ids=["0777", "0770"])
def test_a_store_folder_others_can_write_is_refused_with_one_line(
        folder: Path, caplog: pytest.LogCaptureFixture, mode: int) -> None:
    shared = folder / "shared"
    shared.mkdir()
    os.chmod(shared, mode)  # without the sticky bit: anyone may rename our file away
    path = shared / "history.sqlite"
    store = HistoryStore(path, clock=ScriptedClock(START_S, 5_000.0),
                         device_uuids=lambda: UUIDS)
    store.open()
    assert store.role == "off"
    [line] = warnings_of(caplog)
    assert "written by other users" in line and f"{mode:o}" in line
    assert list(shared.iterdir()) == []  # nothing made there, not even the writer's lock


def test_a_store_in_a_sticky_shared_folder_is_used(folder: Path) -> None:
    shared = folder / "tmp-like"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # /tmp: each user may rename only their own files
    store = HistoryStore(shared / "history.sqlite", clock=ScriptedClock(START_S, 5_000.0),
                         device_uuids=lambda: UUIDS)
    store.open()
    assert store.role == "writer", store.problem
    store.close()


def test_a_file_with_our_mark_but_other_tables_is_checked_read_only_and_left_untouched(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = folder / "history.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute(f"PRAGMA application_id={APPLICATION_ID}")
        connection.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        with connection:  # our mark and version, someone else's tables (rollback journal)
            connection.execute("CREATE TABLE buckets (name TEXT, value REAL)")
            connection.execute("INSERT INTO buckets VALUES ('theirs', 1.0)")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    store = HistoryStore(path, clock=ScriptedClock(START_S, 5_000.0),
                         device_uuids=lambda: UUIDS)
    store.open()
    assert store.role == "off"
    # Not a byte written: no journal-mode switch to WAL (header bytes 18-19 stay 1, 1).
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in folder.iterdir()) == ["history.sqlite",
                                                       "history.sqlite.writer"]
    [line] = warnings_of(caplog)
    assert "nvdashboard's mark" in line and "left untouched" in line
    assert "no such" not in line
