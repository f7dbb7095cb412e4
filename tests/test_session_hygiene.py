"""Closed tabs and pages that never opened their websocket stop costing anything promptly.

Two rounds of 500 sessions (page GET, websocket open, document pulled, close; plus pages
fetched without a websocket) against a server with a short unused-session lifetime: the
live-session count returns to zero within lifetime + check interval, and memory after the
second round is within 10% of memory after the first.
"""

from __future__ import annotations

import asyncio
import gc
import time

import psutil
from tornado.httpclient import AsyncHTTPClient

from jupyterlab_nvdashboard.config import check_interval_ms
from tests.support.bokeh_client import open_session
from tests.support.servers import in_process_server

SESSIONS = 500
PAGES_WITHOUT_WEBSOCKET = 50
CONCURRENCY = 4
LIFETIME_MS = 1000


async def _round(url: str) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(number: int) -> None:
        async with gate:
            route = "/GPU-Utilization" if number % 2 else "/PCIe-Throughput"
            session = await asyncio.wait_for(open_session(url, route), 60)
            session.close()

    async def page_only() -> None:
        async with gate:
            await AsyncHTTPClient().fetch(url + "/GPU-Memory", request_timeout=60)

    await asyncio.gather(*(one(n) for n in range(SESSIONS)),
                         *(page_only() for _ in range(PAGES_WITHOUT_WEBSOCKET)))


def _drained_within(server, seconds: float) -> float:  # noqa: ANN001
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if server.live_sessions() == 0:
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"{server.live_sessions()} sessions still alive after {seconds} s")


def test_sessions_are_discarded_and_memory_is_stable() -> None:
    check_ms = check_interval_ms(LIFETIME_MS)
    # The live count must reach zero within lifetime + one check interval (+ 0.5 s for the
    # discards themselves on a busy 2-core machine).
    limit_s = (LIFETIME_MS + check_ms) / 1000 + 0.5
    me = psutil.Process()
    with in_process_server(gpus=2, interval_s=0.2, unused_session_lifetime_ms=LIFETIME_MS,
                           check_unused_sessions_ms=check_ms) as server:
        rss = []
        for _ in range(2):
            asyncio.run(_round(server.url))
            _drained_within(server, limit_s)
            gc.collect()
            time.sleep(0.5)
            rss.append(me.memory_info().rss)
    assert rss[1] <= rss[0] * 1.10, [r / 1e6 for r in rss]
