"""The history store behind real servers: restarts (clean and kill -9) keep the history on the
long windows with the time between drawn as a gap; two servers on one store; the routes that
read past the in-memory history say their resolution."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from jupyterlab_nvdashboard.metrics import GpuReading, History, HostReading
from jupyterlab_nvdashboard.store import HistoryStore
from jupyterlab_nvdashboard.stream.downsample import bucket_seconds
from tests.support.servers import cli_server, get, server_output
from tests.support.simulated_devices import simulated_device_uuids
from tests.support.store_clock import ScriptedClock
from tests.support.stream_client import open_stream
from tests.support.waiting import until

ROUTE = "/GPU-Resources"
DAY_S = 24 * 3600.0
FAST = ["--simulate", "1", "--interval", "0.2", "--idle-interval", "0.2"]


@pytest.fixture
def store_path() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nvdashboard-store-") as folder:
        yield Path(folder) / "history.sqlite"


def info(url: str) -> dict:
    status, body = get(url + "/info.json")
    assert status == 200, body[:300]
    return json.loads(body)


def wait_for(condition, timeout_s: float = 60.0, what: str = "") -> None:  # noqa: ANN001
    until(condition, what, timeout_s, every_s=0.2)


def wait_for_batches(url: str, batches: int) -> None:
    wait_for(lambda: (info(url)["store"] or {}).get("batches", 0) >= batches, 60,
             f"{batches} store batches")


def window_of(url: str, window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """A window of /GPU-Resources as a page gets it: times (s) and GPU 0's memory."""
    async def catch_up() -> tuple[np.ndarray, np.ndarray]:
        page = await open_stream(url, ROUTE, window_s=window_s)
        page.close()
        return page.column("time") / 1000, page.column("memory0")

    return asyncio.run(catch_up())


def stored_until(path: Path) -> float:
    """The end of the newest 5-second bucket in the store file."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return connection.execute("SELECT max(start_s) FROM buckets WHERE tier=0"
                                  ).fetchone()[0] + 5.0


def move_back(path: Path, seconds: int) -> None:
    """Make everything stored ``seconds`` older: as if the server had been off that long
    since (a real 24-hour window draws a few seconds off as less than a pixel)."""
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("UPDATE buckets SET start_s = start_s - ?", (seconds,))


def test_restarts_keep_the_history_with_the_time_off_drawn_as_a_gap(store_path: Path) -> None:
    env = {"NVDASHBOARD_STORE": str(store_path)}
    with cli_server(FAST, env=env) as (url, process):
        first_started = time.time()
        wait_for_batches(url, 2)
        process.kill()  # kill -9: no clean stop, no last write
        process.wait(10)
        killed = time.time()
    # At most the last batch (5 s) and the bucket still open (5 s) are lost.
    assert stored_until(store_path) >= killed - 15
    time.sleep(7)  # longer than a gap's slack: the store must show the time it was off
    with cli_server(FAST, env=env) as (url, process):
        second_started = time.time()
        times, memory = window_of(url, 600)  # the 10-minute window, read past the restart
        known, gaps = times[np.isfinite(memory)], times[np.isnan(memory)]
        assert known.min() < first_started + 5 and ((known > killed - 15) & (known < killed)).any()
        assert ((gaps > killed - 10) & (gaps < second_started + 5)).any(), (gaps, killed)
        assert not ((known > killed + 1) & (known < second_started - 1)).any()  # no line across
        wait_for_batches(url, 2)
    stopped = time.time()  # stopped cleanly by Ctrl-C: every open bucket written
    assert stored_until(store_path) >= stopped - 6
    move_back(store_path, 6 * 3600)  # both servers ran 6 hours ago; since then, nothing
    with cli_server(FAST, env=env) as (url, process):
        # At once: the page's read waits for the store to open (CI saw "starting" here).
        times, memory = window_of(url, DAY_S)
        assert info(url)["store"]["role"] == "writer"
        csv_status, body = get(url + f"/history.csv?seconds={DAY_S:g}")
        _, diagnosis = get(url + f"/diagnosis.json?seconds={DAY_S:g}")
    known, gaps = times[np.isfinite(memory)], times[np.isnan(memory)]
    before_s = 6 * 3600
    # A point is drawn at the start of its span, which may begin up to a span before the
    # first reading in it, twice over: the store folds its buckets into spans of the page's
    # width, and the page cuts those into its own buckets (each aligned to its own grid).
    drawn_early_s = 2 * bucket_seconds(DAY_S, 0.2)
    assert ((known > first_started - before_s - drawn_early_s)
            & (known < stopped - before_s)).any(), (known, first_started, stopped)
    assert ((gaps > stopped - before_s) & (gaps < time.time() - 60)).any(), gaps
    # The line is never drawn across the six hours off: no reading inside them.
    assert not ((known > stopped - before_s + 200) & (known < time.time() - 200)).any()
    # /history.csv and /diagnosis.json read the store too, and say at what resolution.
    assert csv_status == 200
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    stored = [row for row in rows if row["resolution_s"] == "5"]
    assert stored and float(stored[0]["time_unix_s"]) < killed - before_s
    assert {row["resolution_s"] for row in rows} <= {"5", "0.2"}
    found = json.loads(diagnosis)
    assert found["store_resolution_s"] > 0 and found["sample_interval_s"] == 0.2
    assert found["devices"][0]["samples"] > 0


def test_two_servers_on_one_store_one_writes(store_path: Path) -> None:
    env = {"NVDASHBOARD_STORE": str(store_path)}
    with cli_server(FAST, env=env) as (writer, _):
        wait_for_batches(writer, 2)
        with cli_server(FAST, env=env) as (reader, _):
            reader_started = time.time()
            # The reader draws, before its own first sample, what the writer stored.
            times, memory = window_of(reader, 600)
            assert info(writer)["store"]["role"] == "writer"
            assert info(reader)["store"]["role"] == "reader"
            assert (times[np.isfinite(memory)] < reader_started - 5).any()
            wait_for_batches(writer, info(writer)["store"]["batches"] + 1)
            assert info(reader)["store"]["batches"] == 0  # it never writes


def test_no_store_keeps_the_windows_of_memory_only(store_path: Path) -> None:
    with cli_server(FAST + ["--no-store"]) as (url, _):
        assert info(url)["store"] is None
        assert get(url + f"/diagnosis.json?seconds={DAY_S:g}")[0] == 400
        header = get(url + "/history.csv?seconds=2")[1].decode().splitlines()[0].split(",")
        assert header[-1] == "resolution_s"


def test_a_bad_store_gives_one_line_and_a_working_server(store_path: Path) -> None:
    store_path.parent.mkdir(exist_ok=True)
    store_path.write_text("not a database\n")
    with cli_server(FAST, env={"NVDASHBOARD_STORE": str(store_path)}) as (url, process):
        store = info(url)["store"]
        assert store["role"] == "off" and "not an nvdashboard store" in store["problem"]
        assert get(url + ROUTE)[0] == 200
        lines = [line for line in server_output(process).splitlines() if "history store" in line]
        assert len(lines) == 1 and "Traceback" not in server_output(process)
    assert store_path.read_text() == "not a database\n"


def test_a_store_with_a_row_we_never_write_is_repaired_and_served(store_path: Path) -> None:
    # Half an hour of the simulated GPU, stored by hand up to a minute ago; then a layout row
    # of "x", which this nvdashboard never writes, under the oldest buckets.
    uuids = simulated_device_uuids(1)
    clock = ScriptedClock(time.time() - 1800)
    store = HistoryStore(store_path, clock=clock, device_uuids=lambda: uuids)
    store.open()
    history = History(10)
    store.attach(history)
    while clock.wall < time.time() - 60:
        history.append(clock.wall, (GpuReading(0, False, 40.0, 10.0, 2e9, 8e10, None, 1e6,
                                               2e6, False, None, None, 50.0, 250.0),),
                       HostReading(12.0, 4e9, 16e9, 0.0, 0.0, 0.0, 0.0),
                       monotonic_s=clock.mono)
        clock.advance(5)
    store.stop()
    with contextlib.closing(sqlite3.connect(store_path)) as connection, connection:
        connection.execute("INSERT INTO layouts (gpus) VALUES ('x')")
        connection.execute("UPDATE buckets SET layout = (SELECT id FROM layouts WHERE "
                           "gpus = 'x') WHERE start_s < ?", (time.time() - 1500,))
    with cli_server(FAST, env={"NVDASHBOARD_STORE": str(store_path)}) as (url, process):
        wait_for_batches(url, 1)  # it writes on
        assert info(url)["store"]["role"] == "writer"
        csv_status, body = get(url + "/history.csv?seconds=1800")
        diagnosis_status, diagnosis = get(url + "/diagnosis.json?seconds=1800")
        assert csv_status == 200 and diagnosis_status == 200, (body[:300], diagnosis[:300])
        rows = list(csv.DictReader(io.StringIO(body.decode())))
        assert [row for row in rows if row["resolution_s"] == "5"]  # the rest of the store
        output = server_output(process)
    lines = [line for line in output.splitlines() if "history store" in line]
    assert len(lines) == 1 and "set aside" in lines[0] and "Traceback" not in output
