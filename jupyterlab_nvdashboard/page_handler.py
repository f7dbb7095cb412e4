"""How a dashboard page's Bokeh document is made: off the event loop, and with no
credential in its session token.

**Off the loop.** Bokeh builds a new session's document on the server's event loop
(``initialize_document``), and a page's views take 10–90 ms to build on a quiet 2-core VM
(``/Workload`` the most): every other page's frames, each websocket and each JSON route
waited that long for each page load (issue 52, item 3's loop-stall walk). Bokeh awaits its
handlers' ``on_session_created`` before that, with the session's document not yet shared
with anything (``with_locked_document`` gives it then without a lock); ``PageHandler``
builds the document there, on a thread of its own, and Bokeh's later call to
``modify_document`` finds it built. The loop then only waits for the GIL's switch
interval while a page builds. One thread: page builds queue behind each other, as they did
on the loop, and never behind a store read (``long_reads.py`` has its own threads). A
document built there touches nothing of the loop's: its periodic callbacks are handed to
the session when Bokeh makes it, after the build.

**No credential.** Bokeh copies every request argument into the signed session token it
writes into the page, where page scripts and the ``Sec-WebSocket-Protocol`` header can
read it (a JWT is signed, not encrypted): ``?token=``, and Jupyter's token behind the proxy.
``process_request`` replaces those arguments with the page's own (``PAGE_ARGUMENTS``);
headers and cookies are left out by the ``Server``.
"""

from __future__ import annotations

import asyncio
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bokeh.application.handlers.function import FunctionHandler
from bokeh.document import Document

from .apps.document import PAGE_ARGUMENTS

PAGE_BUILDS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvdashboard-page")


class PageHandler(FunctionHandler):
    """A dashboard's document factory (``func(doc)`` fills ``doc``), run off the loop."""

    def __init__(self, func: Any) -> None:
        super().__init__(func)
        self._built: weakref.WeakSet[Document] = weakref.WeakSet()

    def process_request(self, request: Any) -> dict[str, Any]:
        arguments = getattr(request, "arguments", None) or {}
        return {"arguments": {name: arguments[name] for name in PAGE_ARGUMENTS
                              if name in arguments}}

    async def on_session_created(self, session_context: Any) -> None:
        await super().on_session_created(session_context)
        loop = asyncio.get_running_loop()

        async def build(doc: Document) -> None:
            # FunctionHandler's own modify_document: its errors are handled as ever.
            await loop.run_in_executor(PAGE_BUILDS, super(PageHandler, self).modify_document,
                                       doc)
            self._built.add(doc)

        await session_context.with_locked_document(build)

    def modify_document(self, doc: Document) -> None:
        """Bokeh's call, on the loop: a session's document was built when it was created;
        any other (none in this server) is built here."""
        if doc not in self._built:
            super().modify_document(doc)
