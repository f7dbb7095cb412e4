"""``/glance/stream``: the glance sent to JupyterLab when what it shows changes
(``stream/changes.py``), over real websockets.

The send-on-change rule runs over a scripted document (each build takes the next one), so
what counts as a change is the test's and not the simulated GPUs'; the route itself runs on
a real server, with its token, Origin and argument checks, and keeps a proxy-started server
from its idle exit while a page holds it open. Nothing here is timed: messages are counted.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.ioloop import IOLoop
from tornado.web import Application
from tornado.websocket import websocket_connect

from jupyterlab_nvdashboard.stream.changes import HEARTBEAT, ChangeFeed, ChangeSocket
from tests.support.bokeh_client import auth_headers
from tests.support.servers import cli_server, free_port, in_process_server, server_output
from tests.support.waiting import until


class Script:
    """Documents handed out one per build; the last one repeats."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self.documents, self.builds = documents, 0

    def build(self) -> dict[str, Any]:
        document = self.documents[min(self.builds, len(self.documents) - 1)]
        self.builds += 1
        return document


@contextmanager
def scripted_server(script: Script, keepalive_s: float = 3600.0) -> Iterator[str]:
    """A tornado server with one ``/stream`` over ``script``, on its own loop thread."""
    port, started = free_port(), threading.Event()
    holder: dict[str, Any] = {}

    def serve() -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        app = Application([(r"/stream", ChangeSocket,
                            {"feed": ChangeFeed(script.build), "keepalive_s": keepalive_s})])
        holder["server"] = app.listen(port, address="127.0.0.1")
        holder["loop"] = IOLoop.current()
        started.set()
        holder["loop"].start()
        holder["server"].stop()
        holder["loop"].close(all_fds=True)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield f"ws://127.0.0.1:{port}/stream?interval=0.5"
    finally:
        holder["loop"].add_callback(holder["loop"].stop)
        thread.join(10)


async def read_messages(url: str, count: int, headers: dict[str, str] | None = None,
                        timeout_s: float = 30.0) -> list[dict[str, Any]]:
    connection = await websocket_connect(HTTPRequest(url, headers=headers or {},
                                                     request_timeout=30))
    try:
        messages: list[dict[str, Any]] = []
        while len(messages) < count:
            text = await asyncio.wait_for(connection.read_message(), timeout_s)
            assert text is not None, connection.close_reason
            if text != HEARTBEAT:  # a tick with nothing new: the server is alive
                messages.append(json.loads(text))
        return messages
    finally:
        connection.close()


def glance_at(time_s: float, utilization_pct: float) -> dict[str, Any]:
    return {"time": time_s, "devices": [{"index": 0, "utilization_pct": utilization_pct}]}


def test_the_same_glance_twice_is_sent_once_and_a_change_at_once() -> None:
    # Two readings with the same content (only their time differs), then a change.
    script = Script([glance_at(1.0, 40), glance_at(2.0, 40), glance_at(3.0, 90)])
    with scripted_server(script) as url:
        first, second = asyncio.run(read_messages(url, 2))
    assert first == glance_at(1.0, 40)
    assert second == glance_at(3.0, 90)  # the second reading was built and not sent
    assert script.builds >= 3


def test_an_unchanged_glance_is_sent_again_after_the_keepalive() -> None:
    # The views say which reading they show: an unchanged glance still moves its time on.
    script = Script([glance_at(1.0, 40), glance_at(2.0, 40), glance_at(3.0, 40)])
    with scripted_server(script, keepalive_s=0.5) as url:
        messages = asyncio.run(read_messages(url, 2))
    assert messages[0] == glance_at(1.0, 40)
    assert messages[1]["time"] > 1.0 and messages[1]["devices"] == messages[0]["devices"]


def glance_stream_url(http_url: str, interval: str = "0.5") -> str:
    return http_url.replace("http://", "ws://") + f"/glance/stream?interval={interval}"


async def refusal(url: str, headers: dict[str, str]) -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as refused:
        await websocket_connect(HTTPRequest(url, headers=headers, request_timeout=30))
    return refused.value.code, refused.value.message or ""


def test_the_route_sends_the_glance_and_guards_its_door() -> None:
    with in_process_server(gpus=2) as server:
        server.wait_until_gpus_read()
        url = glance_stream_url(server.url)
        [glance] = asyncio.run(read_messages(url, 1, auth_headers()))
        assert [d["index"] for d in glance["devices"]] == [0, 1]
        assert {"time", "kernels", "diagnoses", "reading_gpus"} <= set(glance)
        # No token, another site's page, a malformed pace: refused before the upgrade,
        # and the server keeps serving.
        assert asyncio.run(refusal(url, {}))[0] == 403
        assert asyncio.run(refusal(url, auth_headers({"Origin": "http://evil.example"})))[0] \
            == 403
        for bad in ("abc", "0.01", "1e9", "nan"):
            code, reason = asyncio.run(refusal(glance_stream_url(server.url, bad),
                                               auth_headers()))
            assert code == 400 and "interval must be" in reason and "\n" not in reason
        assert len(asyncio.run(read_messages(url, 1, auth_headers()))) == 1


def test_an_open_glance_stream_keeps_the_server_from_exiting() -> None:
    # The status bar's socket is a viewer for the idle exit (its polls were), or the proxy
    # would restart the server, losing its history, while a Lab shows it. The idle limit
    # leaves a loaded machine 4 s between two ticks of the socket.
    with cli_server(["--simulate", "1", "--exit-after-idle", "4"]) as (url, process):
        async def hold_open() -> int:
            connection = await websocket_connect(HTTPRequest(
                glance_stream_url(url, "1"), headers=auth_headers(), request_timeout=30))
            held_until, messages = time.monotonic() + 9, 0  # twice the idle limit and more
            while time.monotonic() < held_until:
                try:
                    if await asyncio.wait_for(connection.read_message(), 1.0) is not None:
                        messages += 1
                except asyncio.TimeoutError:
                    pass
                assert process.poll() is None, server_output(process)[-500:]
            connection.close()
            return messages

        assert asyncio.run(hold_open()) >= 1
        until(lambda: process.poll() is not None, "the server exits once the socket closed")
        assert "no page open for 4 s: exiting" in server_output(process)
