"""Load: 64 pages (Bokeh session + stream) on the standalone server for 20 s.

Counts, not times: every page receives every frame, in order, with no gap (each frame
says which one it continues), and in them every sample; all pages reach the same sample;
no page gets an error; ``/index.json`` keeps answering. Latency and CPU under this load
are measured by ``benchmarks/dashboard_overhead.py``, not asserted here. Marked slow,
still run by default.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from tornado.httpclient import AsyncHTTPClient

from jupyterlab_nvdashboard.apps.components import TimelineFeed
from tests.support.bokeh_client import auth_headers, open_session
from tests.support.servers import cli_server
from tests.support.stream_client import open_stream

pytestmark = pytest.mark.slow

VIEWERS = 64
DURATION_S = 20.0
INTERVAL_S = 0.2


async def _load(url: str) -> tuple[list[int], list[int], int]:
    sessions = [await open_session(url, "/GPU-Resources") for _ in range(VIEWERS)]
    streams = [await open_stream(url, "/GPU-Resources") for _ in range(VIEWERS)]
    stop_at = time.monotonic() + DURATION_S
    last_seqs: list[int] = [0] * VIEWERS
    rows: list[int] = [0] * VIEWERS

    async def read(position: int) -> None:
        stream = streams[position]
        while time.monotonic() < stop_at:
            # Raises on a gap, a duplicate or a closed socket.
            frame = await stream.receive(10)
            rows[position] += frame.header["rows"]
        last_seqs[position] = stream.seq

    async def poll_index() -> int:
        answered, client = 0, AsyncHTTPClient()
        while time.monotonic() < stop_at:
            response = await client.fetch(url + "/index.json", headers=auth_headers(),
                                          request_timeout=30)
            answered += response.code == 200
            await asyncio.sleep(0.25)
        return answered

    *_, answered = await asyncio.gather(*(read(p) for p in range(VIEWERS)), poll_index())
    for page in [*sessions, *streams]:
        page.close()
    return rows, last_seqs, answered


def test_64_pages_each_get_every_frame() -> None:
    with cli_server(["--simulate", "4", "--interval", str(INTERVAL_S)]) as (url, process):
        rows, last_seqs, answered = asyncio.run(_load(url))
        assert process.poll() is None
    # Pages stop reading at slightly different moments; the newest sample each reached
    # differs by at most one frame's rows (a timeline's frame carries the samples of one
    # repaint), and no frame was skipped on the way.
    one_frame = TimelineFeed.refresh_s / INTERVAL_S + 1
    assert max(last_seqs) - min(last_seqs) <= one_frame, last_seqs
    assert min(rows) >= 0.5 * DURATION_S / INTERVAL_S, rows
    assert answered >= 10
