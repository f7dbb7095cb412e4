"""The history store costs the server neither memory nor its event loop (issue 43, items 1.2,
1.4 and 1.5): an off store lets go of the samples it hears, a page's catch-up reads the
store on another thread, and /history.csv streams a month in bounded pieces, with a bound
on how many such reads run at once."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import http.client
import json
import sqlite3
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import psutil
import pytest

from jupyterlab_nvdashboard.config import load_config
from jupyterlab_nvdashboard.metrics import GpuReading, History, HostReading
from jupyterlab_nvdashboard.store import COARSE_TIER, HistoryStore
from tests.support.servers import TEST_TOKEN, get, in_process_server
from tests.support.store_clock import ScriptedClock
from tests.support.store_fill import DAY_S, fill_store
from tests.support.stream_client import open_stream
from tests.support.waiting import until

START_S = 1_699_999_980.0
GPUS = 8
INTERVAL_S = 0.2  # the busy sampling interval: what fills memory fastest
HOUR_TICKS = int(3600 / INTERVAL_S)
WEEK_S = 7 * DAY_S


@pytest.fixture
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nvdashboard-store-io-") as name:
        yield Path(name)


def tick(history: History, clock: ScriptedClock, step: int) -> None:
    """One sample of 8 GPUs with readings of its own, as the sampler makes each tick."""
    gpus = tuple(GpuReading(i, False, float(step % 100), 10.0 + i, 2e9 + step, 8e10, None,
                            1e6 + step, 2e6 + step, False, None, None, 50.0 + i, 250.0 + step)
                 for i in range(GPUS))
    history.append(clock.wall, gpus, HostReading(12.0 + step % 7, 4e9, 16e9, 0.0, 0.0, 0.0,
                                                 0.0), monotonic_s=clock.mono)
    clock.advance(INTERVAL_S)


def bytes_per_kept_sample() -> float:
    """What one tick's sample takes while something keeps it (measured, not assumed)."""
    clock, history, kept = ScriptedClock(START_S, 100.0), History(10), []
    history.add_listener(kept.append)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for step in range(300):
            tick(history, clock, step)
        return (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()


def test_an_off_store_fed_for_an_hour_holds_no_samples(folder: Path) -> None:
    path = folder / "history.sqlite"
    path.symlink_to(folder / "elsewhere.sqlite")  # one of the ways a store turns off
    clock = ScriptedClock(START_S, 5_000.0)
    store = HistoryStore(path, clock=clock, device_uuids=dict)
    history = History(10)
    store.attach(history)  # as the server composes it: before the store opens
    store.open()
    assert store.role == "off"
    hour_footprint = bytes_per_kept_sample() * HOUR_TICKS
    gc.collect()
    process = psutil.Process()
    before = process.memory_info().rss
    for step in range(HOUR_TICKS):  # an hour of 8 GPUs at 200 ms, on a scripted clock
        tick(history, clock, step)
    gc.collect()
    grown = process.memory_info().rss - before
    print(f"RSS grew {grown / 2**20:.1f} MiB over the hour; the hour's samples, kept, "
          f"would take {hour_footprint / 2**20:.1f} MiB")
    # Before: every sample stayed in the off store's queue (the hour's whole footprint).
    assert grown < hour_footprint / 4
    assert store.past(START_S, clock.wall, 5).samples == []
    store.close()


def test_a_proxy_server_with_a_store_configured_never_exits_idle_even_if_it_is_off(
        folder: Path) -> None:
    path = folder / "history.sqlite"
    path.symlink_to(folder / "elsewhere.sqlite")  # the store will turn off when opened
    proxy = ["--jupyter-proxy", "--unix-socket", str(folder / "s.sock"), "--store", str(path)]
    # The setting decides, not the outcome: an off store still asks for no hole.
    assert load_config(proxy, {}).idle_exit_s == 0


def info(url: str) -> dict:
    status, body = get(url + "/info.json")
    assert status == 200, body[:300]
    return json.loads(body)


def writing(url: str) -> bool:
    return (info(url)["store"] or {}).get("role") == "writer"


def test_pages_catching_up_on_a_stored_week_read_the_store_off_the_event_loop(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = folder / "history.sqlite"
    fill_store(path, days=8, gpus=2, fine_days=0)  # 8 days of minutes, ending now
    read_on: list[int] = []
    read = HistoryStore.past_samples

    def noting_the_thread(store: HistoryStore, *args: object, **kwargs: object) -> object:
        read_on.append(threading.get_ident())
        return read(store, *args, **kwargs)

    monkeypatch.setattr(HistoryStore, "past_samples", noting_the_thread)
    with in_process_server(gpus=2, profile="h200", store_path=path) as server:
        server.wait_until_gpus_read()
        until(lambda: writing(server.url), "the store opened")
        started = time.time()
        loop_thread = server.on_loop(threading.get_ident)

        async def open_pages() -> list[np.ndarray]:
            pages = await asyncio.gather(*(open_stream(server.url, "/GPU-Resources",
                                                       window_s=WEEK_S) for _ in range(3)))
            for page in pages:
                page.close()
            return [page.column("time") / 1000 for page in pages]

        drawn = asyncio.run(open_pages())
    assert read_on and loop_thread not in read_on  # before: read inside the socket's open
    for times in drawn:  # and each page still draws the stored week before the history
        assert times.min() < started - 6 * DAY_S


def count_minutes(path: Path, start_s: float, end_s: float) -> int:
    """1-minute buckets from the one whose middle (a CSV row's time) is ``start_s`` to the
    last that ends by ``end_s``."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return connection.execute(
            "SELECT count(*) FROM buckets WHERE tier=? AND start_s + 30 >= ? AND "
            "start_s + 60 <= ?", (COARSE_TIER, start_s, end_s)).fetchone()[0]


def read_csv_traced(url: str, seconds: float) -> tuple[int, list[bytes], int, str]:
    """``/history.csv?seconds=`` read a piece at a time and let go (only the server's memory
    is measured): its size, each line's first and last cells, the peak of the memory
    traced meanwhile, and its ``X-Store-Resolution-S``."""
    address = urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=120)
    tracemalloc.start()
    try:
        connection.request("GET", f"/history.csv?seconds={seconds:g}",
                           headers={"Authorization": f"token {TEST_TOKEN}"})
        response = connection.getresponse()
        assert response.status == 200
        size, lines, rows = 0, b"", []
        while chunk := response.read(1 << 16):
            size += len(chunk)
            *complete, lines = (lines + chunk).split(b"\n")
            rows += [line.split(b",", 1)[0] + b"," + line.rsplit(b",", 1)[1]
                     for line in complete]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        connection.close()
    return size, rows, peak, response.getheader("X-Store-Resolution-S")


def test_a_long_csv_is_streamed_in_pieces_so_the_servers_memory_stays_flat(
        folder: Path) -> None:
    path = folder / "history.sqlite"
    days = 10
    # Ending an hour ago: no minute holds both the filled samples and the server's own.
    fill_store(path, days=days, gpus=2, fine_days=0, end_s=time.time() - 3600)
    with in_process_server(gpus=2, profile="h200", store_path=path) as server:
        server.wait_until_gpus_read()
        until(lambda: writing(server.url), "the store opened")
        short_size, _, short_peak, _ = read_csv_traced(server.url, 2 * DAY_S)
        size, rows, peak, resolution = read_csv_traced(server.url, days * DAY_S)
    print(f"{days} days: {size / 2**20:.1f} MiB of CSV, traced peak {peak / 2**20:.1f} MiB; "
          f"2 days: {short_size / 2**20:.1f} MiB, peak {short_peak / 2**20:.1f} MiB")
    assert resolution == "60"
    # Five times the answer, not five times the memory. Before: the whole answer, and every
    # sample it was made from, were held at once (traced peaks 51.0 and 10.1 MiB).
    assert size > 4 * short_size and peak < 2 * short_peak
    times = [float(row.split(b",")[0]) for row in rows[1:]]
    stored = [time_s for time_s, row in zip(times, rows[1:], strict=True)
              if row.endswith(b",60")]
    assert times == sorted(set(times))  # in order, nothing twice at a piece's edge
    # Every stored minute from the first row to the history's start, none lost between
    # pieces (the minute the server started in may be written by now: left out).
    first = times[len(stored)]
    minutes = [time_s for time_s in stored if time_s + 30 <= first]
    assert len(minutes) == count_minutes(path, stored[0], first)


def test_long_reads_past_the_bound_queue_and_then_are_told_to_come_back(
        folder: Path) -> None:
    with in_process_server(gpus=1, profile="h200", store_path=folder / "h.sqlite") as server:
        long_reads = server.server.long_reads
        holders: list[asyncio.Task] = []

        def hold(count: int) -> asyncio.Event:
            """``count`` long reads that hold their slot (or their place) until set."""
            release = asyncio.Event()

            async def held() -> None:
                async with long_reads.slot():
                    await release.wait()

            holders.extend(asyncio.ensure_future(held()) for _ in range(count))
            return release

        releases = [server.on_loop(lambda: hold(long_reads.running))]
        until(lambda: long_reads.admitted == long_reads.running, "the slots taken")
        queued: dict[str, tuple[int, bytes]] = {}
        waiting = threading.Thread(
            target=lambda: queued.update(answer=get(server.url + "/history.csv?seconds=5")))
        waiting.start()
        until(lambda: long_reads.admitted == long_reads.running + 1, "the request queued")
        assert "answer" not in queued  # it waits its turn
        releases.append(server.on_loop(lambda: hold(long_reads.waiting - 1)))
        until(lambda: long_reads.admitted == long_reads.running + long_reads.waiting,
              "the queue full")
        address = urlsplit(server.url)
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
        connection.request("GET", "/history.csv?seconds=5",
                           headers={"Authorization": f"token {TEST_TOKEN}"})
        busy = connection.getresponse()
        assert busy.status == 429 and int(busy.getheader("Retry-After")) > 0
        assert b"try again" in busy.read()
        # A cell's span older than the in-memory history is a long read too (issue 53):
        # told to come back under the same bound, before anything is read.
        until(lambda: writing(server.url), "the store opened")
        old_end = time.time() - 3 * 3600
        connection.request("GET", f"/cell.json?kernel=6f1c2a8e-0d4b-4c55-9a1e-3b7d2c9e8f01"
                                  f"&start={old_end - 60:.0f}&end={old_end:.0f}",
                           headers={"Authorization": f"token {TEST_TOKEN}"})
        busy = connection.getresponse()
        said = busy.read()
        assert busy.status == 429 and int(busy.getheader("Retry-After") or 0) > 0, \
            (busy.status, said)
        connection.close()
        for release in releases:
            server.on_loop(release.set)
        waiting.join(60)
        status, body = queued["answer"]
        assert status == 200 and body.startswith(b"time_unix_s,")
        until(lambda: long_reads.admitted == 0, "every slot given back")
