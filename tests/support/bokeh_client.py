"""A minimal Bokeh-protocol websocket client, for tests and benchmarks.

It does what a browser tab does on the wire, without a browser: GET the page to get a
session token, open ``<route>/ws`` with the ``bokeh`` subprotocol, pull the document,
then receive the server's PATCH-DOC messages as the dashboard updates.

Test servers (``servers.py``) are started with ``TEST_TOKEN``; these helpers send it as
``Authorization: token ...`` unless the caller's own headers set ``Authorization`` (a
Jupyter token through the proxy, or a wrong one on purpose).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

# The Bokeh session token a page carries (what BokehJS sends on the websocket).
SESSION_TOKEN = re.compile(r'"token":\s*"([^"]+)"')
# The access token of every server the test helpers start (NVDASHBOARD_TOKEN, Config.token).
TEST_TOKEN = "nvdashboard-test-token-4f1c9e2a"


def auth_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """``headers`` plus the test token, unless they carry their own Authorization."""
    return {"Authorization": f"token {TEST_TOKEN}", **(headers or {})}


@dataclass
class Message:
    msgtype: str
    content: Any
    received_s: float
    size_bytes: int


@dataclass
class BokehSession:
    connection: WebSocketClientConnection
    route: str
    messages: list[Message] = field(default_factory=list)
    document: Any = None  # the PULL-DOC-REPLY content: the whole document as JSON
    _msgid: int = 0

    async def _frame(self) -> str | bytes:
        frame = await self.connection.read_message()
        if frame is None:
            raise ConnectionError("websocket closed by the server")
        return frame

    async def receive(self) -> Message:
        """Read one whole Bokeh message (header, metadata, content, buffers)."""
        header_frame = await self._frame()
        header = json.loads(header_frame)
        size = len(header_frame)
        metadata = await self._frame()
        content_frame = await self._frame()
        size += len(metadata) + len(content_frame)
        for _ in range(2 * header.get("num_buffers", 0)):
            size += len(await self._frame())
        message = Message(header["msgtype"], json.loads(content_frame), time.time(), size)
        self.messages.append(message)
        return message

    async def send(self, msgtype: str, content: dict | None = None) -> None:
        self._msgid += 1
        header = {"msgid": str(self._msgid), "msgtype": msgtype}
        for part in (header, {}, content or {}):
            await self.connection.write_message(json.dumps(part))

    def close(self) -> None:
        self.connection.close()

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """Close and wait for the server's close reply, as a browser closing a tab does."""
        self.connection.close()
        try:
            async with asyncio.timeout(timeout_s):
                while await self.connection.read_message() is not None:
                    pass
        except TimeoutError:
            pass


async def fetch_token(base_url: str, route: str, headers: dict[str, str] | None = None) -> str:
    response = await AsyncHTTPClient().fetch(base_url.rstrip("/") + route,
                                             headers=auth_headers(headers), request_timeout=60)
    match = SESSION_TOKEN.search(response.body.decode())
    if match is None:
        raise AssertionError(f"no Bokeh session token in {route}")
    return match.group(1)


async def open_session(
    base_url: str, route: str, origin: str | None = None, headers: dict[str, str] | None = None
) -> BokehSession:
    """Open a live dashboard session the way BokehJS does, and pull its document.

    ``origin`` defaults to the server's own; ``headers`` (e.g. a Jupyter token) go on
    both the page request and the websocket upgrade.
    """
    token = await fetch_token(base_url, route, headers)
    ws_url = "ws" + base_url.rstrip("/")[len("http"):] + route + "/ws"
    parsed = urlsplit(base_url)
    own_origin = f"{parsed.scheme}://{parsed.netloc}"
    request = HTTPRequest(ws_url, headers={"Origin": origin or own_origin,
                                           **auth_headers(headers)})
    connection = await websocket_connect(request, subprotocols=["bokeh", token])
    session = BokehSession(connection, route)
    ack = await session.receive()
    assert ack.msgtype == "ACK", ack.msgtype
    await session.send("PULL-DOC-REQ")
    while (reply := await session.receive()).msgtype != "PULL-DOC-REPLY":
        pass
    session.document = reply.content
    return session


def document_models(node: Any) -> Iterator[dict]:
    """Every model object in a Bokeh document's JSON (or any part of it), depth first."""
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield node
        for value in node.values():
            yield from document_models(value)
    elif isinstance(node, list):
        for value in node:
            yield from document_models(value)


def streamed_rows(message: Message) -> int:
    """How many new rows a PATCH-DOC message streamed or sent (0 for other messages)."""
    if message.msgtype != "PATCH-DOC":
        return 0
    rows = 0
    for event in message.content.get("events", []):
        if event.get("kind") in ("ColumnsStreamed", "ModelChanged", "ColumnDataChanged"):
            rows += 1
    return rows
