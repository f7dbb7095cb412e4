"""A Python client of ``<route>/stream``, for tests and benchmarks: what a page's script does.

It opens the socket with ``since`` and ``window``, decodes each binary frame with the
server's own ``stream.frames.decode``, and checks that each frame continues the last.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

import numpy as np
from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from jupyterlab_nvdashboard.stream.frames import Rows, decode
from tests.support.bokeh_client import auth_headers


def stream_url(base_url: str, route: str, since: int = -1, window_s: float | None = None) -> str:
    parts = urlsplit(base_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    query: dict[str, Any] = {"since": since}
    if window_s is not None:
        query["window"] = f"{window_s:g}"
    return f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}{route}/stream?{urlencode(query)}"


@dataclass
class Frame:
    header: dict[str, Any]
    rows: Rows
    size_bytes: int
    raw: bytes


@dataclass
class StreamClient:
    connection: WebSocketClientConnection
    frames: list[Frame] = field(default_factory=list)
    seq: int = -1

    async def receive(self, timeout_s: float = 10.0) -> Frame:
        message = await asyncio.wait_for(self.connection.read_message(), timeout_s)
        if message is None:
            raise ConnectionError(f"stream closed: {self.connection.close_code} "
                                  f"{self.connection.close_reason}")
        assert isinstance(message, bytes), "frames are binary"
        header, rows = decode(message)
        frame = Frame(header, rows, len(message), message)
        self.frames.append(frame)
        if not header["reset"]:
            assert header["after"] == self.seq, f"frame after {header['after']}, have {self.seq}"
        self.seq = header["seq"]
        return frame

    def column(self, key: str) -> np.ndarray:
        """Everything received for ``key``, with resets applied as a page applies them."""
        parts: list[np.ndarray] = []
        for frame in self.frames:
            if frame.header["reset"]:
                parts = []
            parts.append(frame.rows.numeric[key])
        return np.concatenate(parts) if parts else np.empty(0)

    def close(self) -> None:
        self.connection.close()


async def open_stream(base_url: str, route: str, since: int = -1, window_s: float | None = None,
                      headers: Mapping[str, str] | None = None,
                      origin: str | None = None) -> StreamClient:
    """Connect and read the catch-up frame."""
    request_headers = auth_headers(dict(headers or {}))  # the test token, unless overridden
    if origin is not None:
        request_headers["Origin"] = origin
    request = HTTPRequest(stream_url(base_url, route, since, window_s),
                          headers=request_headers, request_timeout=10)
    connection = await websocket_connect(request, max_message_size=64 * 1024 * 1024)
    client = StreamClient(connection, seq=since)
    await client.receive()
    return client


async def live_frames(base_url: str, route: str, wanted: int = 3, timeout_s: float = 15.0,
                      **options: Any) -> StreamClient:
    """Open a stream and read up to ``wanted`` live frames after the catch-up, within
    ``timeout_s``; the client's ``frames`` holds them (catch-up first)."""
    client = await open_stream(base_url, route, **options)
    deadline = asyncio.get_running_loop().time() + timeout_s
    try:
        while len(client.frames) <= wanted:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            try:
                await client.receive(left)
            except asyncio.TimeoutError:
                break
    finally:
        client.close()
    return client


def count_live_frames(base_url: str, route: str, wanted: int = 3, timeout_s: float = 15.0,
                      **options: Any) -> int:
    """How many live frames (after the catch-up) arrived, up to ``wanted``."""
    client = asyncio.run(live_frames(base_url, route, wanted, timeout_s, **options))
    return len(client.frames) - 1
