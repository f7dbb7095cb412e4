"""A page's document is built off the event loop (``page_handler.py``): Bokeh builds a new
session's document on its loop, and every other page's frames, each websocket and each JSON
route waited for it (issue 52, item 3's loop-stall walk: /GPU-Resources 57 ms, /Workload
217 ms). Here a real Bokeh server serves one page whose build notes its thread and holds it
until the loop has run a callback of its own: the build runs on the page thread, the loop
runs other work meanwhile (on the loop, the build would wait for it in vain), the page's
periodic callback (added during the build) runs once the session exists, and the document
is the one built."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from bokeh.application import Application
from bokeh.models import Div
from bokeh.server.server import Server
from tornado.ioloop import IOLoop

from jupyterlab_nvdashboard.page_handler import PageHandler
from tests.support.bokeh_client import document_models, open_session
from tests.support.servers import free_port


def test_a_page_is_built_off_the_loop_and_the_loop_answers_meanwhile() -> None:
    built_on: list[str] = []
    ticks: list[float] = []
    loop_ran: list[bool] = []
    servers: list[Any] = []

    def page(doc: Any) -> None:
        built_on.append(threading.current_thread().name)
        other_work = threading.Event()  # what another page or route asks of the loop
        servers[0].io_loop.add_callback(other_work.set)
        loop_ran.append(other_work.wait(10))
        doc.add_root(Div(text="built", name="the-page"))
        doc.add_periodic_callback(lambda: ticks.append(time.monotonic()), 50)

    port = free_port()
    loop_thread: dict[str, Any] = {}
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        server = Server({"/page": Application(PageHandler(page))}, port=port,
                        address="127.0.0.1", io_loop=IOLoop.current(),
                        allow_websocket_origin=[f"127.0.0.1:{port}"])
        server.start()
        servers.append(server)
        loop_thread.update(server=server, name=threading.current_thread().name)
        started.set()
        server.io_loop.start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(30)
    server = loop_thread["server"]
    try:
        async def visit() -> Any:
            session = await open_session(f"http://127.0.0.1:{port}", "/page")
            await asyncio.sleep(0.5)
            return session.document

        document = asyncio.run(visit())
        assert built_on and all(name.startswith("nvdashboard-page") for name in built_on), \
            (built_on, loop_thread["name"])
        assert any(m.get("attributes", {}).get("name") == "the-page"
                   for m in document_models(document))
        assert ticks, "the periodic callback added while building never ran"
        assert loop_ran == [True]  # the loop ran other work while the page was built
    finally:
        server.io_loop.add_callback(server.io_loop.stop)
        thread.join(10)
