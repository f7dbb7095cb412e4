"""Two small corrections to Bokeh's server, applied once by ``server.make_server``.

Bokeh offers no option for either, and both matter for a server that may face hostile
input or a hostile web page:

1. A protocol ``ERROR`` reply carries the server's full Python traceback (file paths,
   code) back to whoever sent the bad message. We keep the one-line error text only;
   the traceback still goes to the server's log.
2. ``<route>/autoload.js`` (for embedding a dashboard in another site's page) answers
   every origin with permissive CORS headers, and its ``OPTIONS`` handler raises a 500
   when a request has no ``Origin`` header. NVDashboard never embeds that way, so it
   sends no CORS headers at all: browsers then refuse cross-origin reads of it, and
   ``OPTIONS`` answers an empty 204.
"""

from __future__ import annotations

from typing import Any

from bokeh.protocol.messages.error import error as ErrorMessage
from bokeh.server.views.autoload_js_handler import AutoloadJsHandler

_applied = False


def apply() -> None:
    """Idempotent: patch the two Bokeh classes once per process."""
    global _applied
    if _applied:
        return
    _applied = True
    create_with_traceback = ErrorMessage.create.__func__  # type: ignore[attr-defined]

    def create_without_traceback(cls: type, request_id: Any, text: str, **metadata: Any) -> Any:
        message = create_with_traceback(cls, request_id, text, **metadata)
        message.content["traceback"] = None
        return message

    ErrorMessage.create = classmethod(create_without_traceback)  # type: ignore[method-assign]

    def no_cors_headers(self: AutoloadJsHandler) -> None:
        pass

    async def empty_preflight(self: AutoloadJsHandler, *args: Any, **kwargs: Any) -> None:
        self.set_status(204)

    AutoloadJsHandler.set_default_headers = no_cors_headers  # type: ignore[method-assign]
    AutoloadJsHandler.options = empty_preflight  # type: ignore[method-assign]
