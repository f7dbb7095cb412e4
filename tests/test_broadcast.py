"""The broadcast data path over real websockets: one encode per tick, whatever the viewers.

Every check here counts (encodes, frames, sequence numbers, bytes) rather than timing, so
it holds on a busy shared machine; what things cost in time is in
``benchmarks/dashboard_overhead.py``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import socket
import time
from urllib.parse import urlsplit

import numpy as np
import pytest

from jupyterlab_nvdashboard.apps.components import rollover, timeline_windows
from jupyterlab_nvdashboard.stream.broadcaster import MAX_PENDING_FRAMES
from jupyterlab_nvdashboard.stream.downsample import MAX_POINTS_PER_LINE, min_max
from jupyterlab_nvdashboard.stream.frames import Rows, decode, encode
from tests.support.bokeh_client import TEST_TOKEN, open_session
from tests.support.servers import cli_server, get, in_process_server, server_output
from tests.support.stream_client import open_stream, stream_url
from tests.support.waiting import until

ROUTE = "/GPU-Resources"
FRAMES = 10


async def _pages_watch(server, viewers: int) -> None:  # noqa: ANN001
    url = server.url
    sessions = [await open_session(url, ROUTE) for _ in range(viewers)]
    streams = [await open_stream(url, ROUTE) for _ in range(viewers)]
    patches: list[str] = []

    async def listen(session) -> None:  # noqa: ANN001
        try:
            while True:
                message = await session.receive()
                patches.append(message.msgtype)
        except (asyncio.CancelledError, ConnectionError):
            pass

    listeners = [asyncio.ensure_future(listen(session)) for session in sessions]
    # Pages opened earlier have had live frames meanwhile: bring all to the same place.
    newest = max(stream.seq for stream in streams)
    for stream in streams:
        while stream.seq < newest:
            await stream.receive()
    family = f"{ROUTE}@120s"
    stats = server.broadcaster.stats

    def counts() -> tuple[int, int, int]:  # read on the server's loop: never mid-publish
        published = server.broadcaster.families[(ROUTE, 120.0)].seq
        return stats.encodes.get(family, 0), stats.frames_sent, published

    encodes_before, sent_before, published_before = await asyncio.to_thread(
        server.on_loop, counts)
    # A frame published before the counters were read may still be on its way: it is
    # received, hashed like the others, but only frames after it are counted.
    hashes: list[list[str]] = [[] for _ in streams]
    counted = 0
    while counted < FRAMES:
        for position, stream in enumerate(streams):
            frame = await stream.receive()
            hashes[position].append(hashlib.sha256(frame.raw).hexdigest())
        counted += stream.seq > published_before
    encodes_after, sent_after, _ = await asyncio.to_thread(server.on_loop, counts)
    encodes, sent = encodes_after - encodes_before, sent_after - sent_before
    await asyncio.sleep(0.3)  # any PATCH-DOC sent meanwhile has arrived
    for listener in listeners:
        listener.cancel()
    for page in [*sessions, *streams]:
        page.close()
    # Every page received the very same bytes, in the same order.
    assert all(page_hashes == hashes[0] for page_hashes in hashes), "pages got different frames"
    # Each frame was encoded once and written to all the pages.
    assert encodes >= FRAMES and sent == viewers * encodes, (encodes, sent, viewers)
    # Live samples never travel as Bokeh messages after the document was pulled.
    assert "PATCH-DOC" not in patches, patches


@pytest.mark.parametrize("viewers", [1, 16, 64])
def test_one_encode_per_tick_and_identical_frames_for_every_page(viewers: int) -> None:
    with in_process_server(gpus=4) as server:
        asyncio.run(_pages_watch(server, viewers))


def test_reconnect_catches_up_with_no_gap_and_no_duplicate() -> None:
    with in_process_server(gpus=2) as server:
        history = server.metrics.history

        async def run() -> list[float]:
            first = await open_stream(server.url, ROUTE)
            for _ in range(5):
                await first.receive()
            times = list(first.column("time"))
            since = first.seq
            first.close()
            await asyncio.sleep(3.0)  # the page is away for 3 s
            again = await open_stream(server.url, ROUTE, since=since)
            assert not again.frames[0].header["reset"]
            assert again.frames[0].header["after"] == since
            assert again.frames[0].header["rows"] >= 20  # 3 s at 0.1 s, in one frame
            for _ in range(3):
                await again.receive()
            return times + list(again.column("time")), again.seq

        times, last_seq = asyncio.run(run())
        expected = [s.time_s * 1000 for s in history.window(server.metrics.history_s)
                    if s.seq <= last_seq]
        assert times == expected[-len(times):]  # no gap, no duplicate, same order
        assert len(set(times)) == len(times)


def _stalled_client(url: str, route: str) -> socket.socket:
    """Open ``route``'s stream with a tiny receive buffer, then never read from it."""
    parts = urlsplit(stream_url(url, route))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((parts.hostname, parts.port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                  "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Authorization: token {TEST_TOKEN}\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    assert b" 101 " in sock.recv(1024).split(b"\r\n", 1)[0]
    return sock


def test_a_stalled_page_is_dropped_and_buffers_stay_bounded() -> None:
    with in_process_server(gpus=8, interval_s=0.05, idle_interval_s=0.05) as server:
        stats = server.broadcaster.stats

        async def run() -> int:
            healthy = await open_stream(server.url, ROUTE)
            stalled = await asyncio.to_thread(_stalled_client, server.url, ROUTE)
            deadline = time.monotonic() + 60
            while not stats.dropped_slow and time.monotonic() < deadline:
                await healthy.receive()  # asserts each frame continues the last
            for _ in range(5):  # and the healthy page carries on
                await healthy.receive()
            stalled.close()
            healthy.close()
            return stats.dropped_slow

        assert asyncio.run(run()) == 1
        assert stats.max_pending_frames <= MAX_PENDING_FRAMES
        deadline = time.monotonic() + 30  # the server sees the healthy page's close soon after
        while server.broadcaster.subscribers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.broadcaster.subscribers == 0


def test_min_max_downsampling_keeps_every_peak() -> None:
    rng = np.random.default_rng(7)
    times_ms = np.arange(0, 60_000, 200.0) + 1_700_000_000_000
    values = rng.normal(50, 20, len(times_ms))
    values[rng.integers(0, len(values), 20)] = np.nan
    reduced = min_max(Rows({"time": times_ms, "v": values}), "time", 1.8,
                      times_ms / 1000 - 1_699_999_000)
    assert len(reduced.numeric["time"]) <= 2 * (60 / 1.8 + 2)
    assert np.nanmax(reduced.numeric["v"]) == np.nanmax(values)
    assert np.nanmin(reduced.numeric["v"]) == np.nanmin(values)


@pytest.mark.parametrize("interval_s", [0.05, 0.2, 1.0])
def test_no_line_draws_more_than_about_2000_points(interval_s: float) -> None:
    for window_s in timeline_windows(1800):
        assert rollover(window_s, interval_s) <= MAX_POINTS_PER_LINE + 4, (window_s, interval_s)


def test_long_window_sends_min_max_buckets_of_the_history() -> None:
    with in_process_server(gpus=2, interval_s=0.5, idle_interval_s=0.5) as server:
        async def run() -> list:
            page = await open_stream(server.url, ROUTE, window_s=1800)
            while len(page.column("time")) < 4:
                await page.receive(10)
            page.close()
            return page.frames

        frames = asyncio.run(run())
        bucket_ms = 1800 / (MAX_POINTS_PER_LINE // 2) * 1000
        times = np.concatenate([f.rows.numeric["time"] for f in frames])
        # Two rows per bucket: its first sample and halfway from there to its end. The
        # buckets after the first are whole widths apart (a sample is taken as each
        # begins, give or take the 0.5 s interval); the first starts where the history
        # does, never before (issue 51: a 7-day window drew the time before the server).
        first_sample_ms = server.metrics.history.window(1800)[0].time_s * 1000
        assert times[0] == pytest.approx(first_sample_ms, abs=1)
        gaps = np.mod(np.diff(times[2::2]), bucket_ms)
        assert np.all((gaps < 500 + 1) | (gaps > bucket_ms - 500 - 1)), gaps
        ends = 2 * times[1::2] - times[::2]
        gaps = np.mod(np.diff(ends), bucket_ms)
        assert np.all((gaps < 1) | (gaps > bucket_ms - 1)), ends


def test_frame_round_trip_carries_nan_and_text() -> None:
    rows = Rows({"time": np.array([1.0, 2.0]), "v": np.array([np.nan, 3.5])},
                {"label": ["a", "é"]})
    header, decoded = decode(encode(rows, after=4, seq=6, reset=False))
    assert header["after"] == 4 and header["seq"] == 6 and header["rows"] == 2
    assert np.isnan(decoded.numeric["v"][0]) and decoded.numeric["v"][1] == 3.5
    assert decoded.text == {"label": ["a", "é"]}


def test_history_csv_has_one_row_per_sample_with_units() -> None:
    with in_process_server(gpus=2, profile="consumer") as server:
        history = server.metrics.history
        until(lambda: history.last_seq >= 10, "ten samples")
        status, body = get(server.url + "/history.csv?seconds=0.5")
        assert status == 200
        lines = body.decode().splitlines()
        header = lines[0].split(",")
        assert header[0] == "time_unix_s" and "gpu0_memory_used_bytes" in header
        assert "gpu1_pcie_tx_bytes_per_s" in header and "host_cpu_pct" in header
        # A row for each sample of the last 0.5 s, as the history holds them: how many there
        # are depends on how busy the machine was (0.5 s at 0.1 s is 6 at most).
        samples = history.window(60)
        stamps = [f"{sample.time_s:.3f}" for sample in samples]
        rows = [line.split(",")[0] for line in lines[1:]]
        first = stamps.index(rows[0])
        assert rows == stamps[first:first + len(rows)] and 1 <= len(rows) <= 6, (rows, stamps)
        newest = samples[first + len(rows) - 1].clock_s
        assert newest - samples[first].clock_s <= 0.5
        assert first == 0 or newest - samples[first - 1].clock_s > 0.5  # none left out
        # The consumer card reports no NVLink: empty cells, not zeros.
        column = header.index("gpu0_nvlink_tx_bytes_per_s")
        assert {line.split(",")[column] for line in lines[1:]} == {""}
        for bad in ("-1", "nan", "abc", "1e99"):
            assert get(server.url + f"/history.csv?seconds={bad}")[0] == 400


def test_idle_server_slows_down_and_wakes_for_the_first_page() -> None:
    with in_process_server(gpus=2, idle_interval_s=1.0) as server:
        sampler = server.metrics.sampler
        deadline = time.monotonic() + 30
        while not sampler.idle and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sampler.idle
        before = server.metrics.history.latest()
        time.sleep(2.5)
        after = server.metrics.history.latest()
        # About one tick a second, by the samples' own clock (a stalled test sleeps longer):
        # ticks keep to a grid of the interval, each at most one interval late.
        ticks, span_s = after.seq - before.seq, after.clock_s - before.clock_s
        assert ticks <= span_s / 1.0 + 2, (ticks, span_s)

        async def watch() -> int:
            page = await open_stream(server.url, ROUTE)
            assert not sampler.idle  # woken by the subscription itself
            for _ in range(10):
                await page.receive(5)
            page.close()
            return page.seq

        seq = asyncio.run(watch())
        assert seq - before.seq >= 10


def test_with_no_page_a_sample_does_not_wake_the_event_loop() -> None:
    """Issue 51, item 7: each sample woke the event loop to publish to nobody. With no page
    it does not; a page that opens gets every sample from its first on, then one publish a
    sample."""
    with in_process_server(gpus=2, interval_s=0.2, idle_interval_s=0.2) as server:
        stats, history = server.broadcaster.stats, server.metrics.history
        until(lambda: history.last_seq >= 3, "a few samples", 30)
        publishes, seq = stats.publishes, history.last_seq
        until(lambda: history.last_seq >= seq + 5, "five more samples", 30)
        assert stats.publishes == publishes

        async def watch() -> None:
            page = await open_stream(server.url, ROUTE)
            try:
                first = page.seq
                for _ in range(5):
                    await page.receive(5)
                assert page.seq >= first + 4 and stats.publishes >= publishes + 4
            finally:
                page.close()

        asyncio.run(watch())


def test_server_behind_the_proxy_exits_when_nobody_watches() -> None:
    with cli_server(["--simulate", "1", "--exit-after-idle", "2"]) as (_, process):
        try:
            process.wait(60)
        except Exception:
            pytest.fail("the idle server did not exit")
        assert process.returncode == 0
        assert "no page open for 2 s: exiting" in server_output(process)


def test_the_status_bar_polling_glance_keeps_the_server_from_exiting() -> None:
    # JupyterLab's status bar polls /glance.json while JupyterLab is visible: that is a viewer
    # for the idle exit, or the proxy would restart the server (losing its history) each time.
    # The idle limit leaves a loaded machine 4 s between two polls.
    with cli_server(["--simulate", "1", "--exit-after-idle", "4"]) as (url, process):
        polled_until = time.monotonic() + 9  # more than twice the idle limit
        while time.monotonic() < polled_until:
            assert get(url + "/glance.json")[0] == 200
            time.sleep(0.25)
        assert process.poll() is None, server_output(process)[-500:]
        process.wait(60)  # nobody polls any more: it exits
        assert "no page open for 4 s: exiting" in server_output(process)


def test_a_feed_that_raises_stops_no_other_family_and_is_logged_once(caplog) -> None:  # noqa: ANN001
    """publish() isolates each family: the families after a broken one keep their live
    frames, the broken one is one log line (not a traceback per tick), and it streams
    again once its feed works."""
    import logging

    from jupyterlab_nvdashboard.metrics import History
    from jupyterlab_nvdashboard.metrics.host import HostReading
    from jupyterlab_nvdashboard.stream.broadcaster import Broadcaster

    class Feed:
        mode = "append"

        def __init__(self, broken: bool) -> None:
            self.broken = broken

        def rows(self, samples) -> Rows:  # noqa: ANN001
            if self.broken:
                raise ValueError("a bad reading")
            return Rows({"time": np.array([s.time_s * 1000 for s in samples])})

    class Page:
        def __init__(self) -> None:
            self.frames: list[bytes] = []

        def send(self, frame: bytes) -> None:
            self.frames.append(frame)

        def close(self, code=None, reason=None) -> None:  # noqa: ANN001
            pass

    history = History(100)
    feeds = {"/broken": Feed(False), "/fine": Feed(False)}
    broadcaster = Broadcaster(history, 0.2, feeds.get, (120.0,))
    pages = {route: Page() for route in feeds}
    for route, page in pages.items():  # the one that breaks publishes first
        broadcaster.subscribe(route, None, -1, page)
    feeds["/broken"].broken = True
    host = HostReading(*([None] * len(HostReading._fields)))
    with caplog.at_level(logging.WARNING, logger="jupyterlab_nvdashboard.stream.broadcaster"):
        for tick in range(5):
            history.append(1000.0 + tick, (), host)
            broadcaster.publish()
        with pytest.raises(ValueError, match="live data failed"):  # a new page: one line
            broadcaster.subscribe("/broken", None, -1, Page())
    assert len(pages["/fine"].frames) == 5  # every tick (subscribe returned the catch-up)
    assert pages["/broken"].frames == []
    assert [r.getMessage() for r in caplog.records if "/broken" in r.getMessage()] == \
        [caplog.records[0].getMessage()]
    assert not any(r.exc_info for r in caplog.records)
    feeds["/broken"].broken = False
    history.append(1005.0, (), host)
    broadcaster.publish()
    assert len(pages["/broken"].frames) == 1


def test_long_window_buckets_are_cut_by_the_monotonic_clock() -> None:
    """The wall clock steps 21.5 s back mid-stream: every bucket a long-window family
    publishes still holds the same count of samples (8 of 0.25 s in 2 s), none split."""
    from jupyterlab_nvdashboard.metrics import History
    from jupyterlab_nvdashboard.metrics.host import HostReading
    from jupyterlab_nvdashboard.stream.broadcaster import Broadcaster

    class Feed:
        mode = "append"

        def rows(self, samples) -> Rows:  # noqa: ANN001
            return Rows({"time": np.array([s.time_s * 1000 for s in samples]),
                         "seq": np.array([float(s.seq) for s in samples])})

    class Page:
        frames: list[bytes] = []

        def send(self, frame: bytes) -> None:
            self.frames.append(frame)

        def close(self, code=None, reason=None) -> None:  # noqa: ANN001
            pass

    history, feed, page = History(1000), Feed(), Page()
    broadcaster = Broadcaster(history, 0.25, lambda route: feed, (2000.0,))
    assert broadcaster.families == {}
    broadcaster.subscribe("/x", 2000.0, -1, page)
    assert broadcaster.families[("/x", 2000.0)].bucket_s == 2.0
    host = HostReading(*([None] * len(HostReading._fields)))
    for i in range(200):
        wall = 1_700_000_000.0 + i * 0.25 - (21.5 if i >= 100 else 0.0)
        history.append(wall, (), host, monotonic_s=100.0 + i * 0.25)
        broadcaster.publish()
    seqs = np.concatenate([decode(frame)[1].numeric["seq"] for frame in page.frames])
    lows, highs = seqs[::2], seqs[1::2]
    assert len(lows) >= 20
    assert list(highs - lows + 1) == [8.0] * len(lows)
