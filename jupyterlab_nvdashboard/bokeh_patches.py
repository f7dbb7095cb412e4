"""Small corrections to Bokeh's server, applied once by ``server.make_server``.

Bokeh offers no option for any of them, and each matters for a server that may face a
burst of page loads, hostile input or a hostile web page:

1. A protocol ``ERROR`` reply carries the server's full Python traceback (file paths,
   code) back to whoever sent the bad message. We keep the one-line error text only;
   the traceback still goes to the server's log.
2. ``<route>/autoload.js`` (for embedding a dashboard in another site's page) answers
   every origin with permissive CORS headers, and its ``OPTIONS`` handler raises a 500
   when a request has no ``Origin`` header. NVDashboard never embeds that way, so it
   sends no CORS headers at all: browsers then refuse cross-origin reads of it, and
   ``OPTIONS`` answers an empty 204.
3. Destroying a session's document runs a full ``gc.collect()`` (about 70 ms here), and
   the unused-session sweep destroys every expired session in one pass: 100 page loads
   that never opened a websocket froze every dashboard for 11 s when they expired. We run
   one collection shortly after a burst of destroys instead of one per destroy.
4. Bokeh logs a client's malformed message with a traceback and the whole message (which
   can be megabytes), and warns on every push to a tab that just closed; Tornado logs
   every 404 with the whole URL. ``one_line_logs`` makes each of their records one short
   line and drops that routine warning.
5. Bokeh's static file handlers (BokehJS under ``/static/`` and ``<route>/static/``, and
   extension files) never ask the server's auth provider, so a server that asks for a
   token would still hand BokehJS to anyone. They now ask it first, as Bokeh's page and
   websocket handlers do, and a refusal is a 403. A NUL byte in their file path is a 400
   (it was a 500).
6. Bokeh's pages are cacheable and may be framed by any site; each page, and every
   response that carries a session, is now ``no-store`` with ``frame-ancestors 'self'``
   (``auth.PAGE_HEADERS``).
7. With signed sessions, a page request whose ``bokeh-session-id`` has non-ASCII
   characters, or whose ``bokeh-token`` is not a token at all, makes Bokeh's signature
   check raise (a 500). Such a request is refused with a 403 before Bokeh reads it.
8. A websocket handshake without Bokeh's subprotocol or a valid session token makes
   ``WSHandler.open`` close the socket and then raise, which Tornado logs as "Uncaught
   exception" with a traceback. It is one plain line instead; the socket is still closed.
9. Bokeh's ``Server`` builds a plain tornado ``HTTPServer``, with no way to cap how many
   connections it holds. It builds ``http_edge.CappedHTTPServer`` instead, which takes a
   ``max_connections`` among the ``http_server_kwargs`` (without one, it has no cap).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from types import ModuleType
from typing import Any

import bokeh.document.document as bokeh_document
import bokeh.server.server as bokeh_server
from bokeh.protocol.exceptions import ProtocolError
from bokeh.protocol.messages.error import error as ErrorMessage
from bokeh.server.views.autoload_js_handler import AutoloadJsHandler
from bokeh.server.views.multi_root_static_handler import MultiRootStaticHandler
from bokeh.server.views.session_handler import SessionHandler
from bokeh.server.views.static_handler import StaticHandler
from bokeh.server.views.ws import WSHandler
from bokeh.util.token import get_session_id
from tornado.web import HTTPError, RequestHandler

from .auth import PAGE_HEADERS, scrub_secrets
from .http_edge import CappedHTTPServer

_applied = False
log = logging.getLogger(__name__)
# Long enough that one sweep's destroys share a collection, short enough that memory
# comes back promptly.
COLLECT_DELAY_S = 1.0
LOG_LINE_LIMIT = 300
_CLOSED_TAB_WARNING = "Failed sending message as connection was closed"


def apply() -> None:
    """Idempotent: patch Bokeh once per process."""
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

    bokeh_document.gc = DeferredCollector()  # type: ignore[attr-defined]

    for static in (StaticHandler, MultiRootStaticHandler):
        static.prepare = ask_auth_provider  # type: ignore[method-assign]

    get_session = SessionHandler.get_session

    async def get_well_formed_session(self: SessionHandler) -> Any:
        for name, value in PAGE_HEADERS.items():
            self.set_header(name, value)
        refuse_malformed_session_arguments(self)
        return await get_session(self)

    SessionHandler.get_session = get_well_formed_session  # type: ignore[method-assign]

    WSHandler.open = refuse_bad_handshake_in_one_line(WSHandler.open)  # type: ignore[method-assign]

    bokeh_server.HTTPServer = CappedHTTPServer  # type: ignore[misc]


def refuse_bad_handshake_in_one_line(open_socket: Any) -> Any:
    """Wrap ``WSHandler.open``: a refused handshake is one log line, not a traceback."""

    def open_or_refuse(self: WSHandler) -> None:
        try:
            open_socket(self)
        except ProtocolError as error:
            self.close()  # Bokeh closed it already; closing again is a no-op
            log.warning("websocket refused: %s", _shorten(str(error)))

    return open_or_refuse


def refuse_malformed_session_arguments(handler: RequestHandler) -> None:
    """403 for a session id or token that Bokeh's signature check would choke on."""
    session_ids = [handler.get_argument("bokeh-session-id", None),
                   handler.request.headers.get("Bokeh-Session-Id")]
    token = handler.get_argument("bokeh-token", None)
    if token is not None:
        try:
            session_ids.append(get_session_id(token))
        except (ValueError, TypeError, KeyError):  # not base64, not JSON, no session id
            raise HTTPError(403, reason="malformed bokeh-token") from None
    if not all(session_id is None or (isinstance(session_id, str) and session_id.isascii())
               for session_id in session_ids):
        raise HTTPError(403, reason="malformed session id")


async def ask_auth_provider(handler: RequestHandler) -> None:
    """What Bokeh's ``AuthRequestHandler.prepare`` and ``@authenticated`` do together."""
    provider = handler.application.auth_provider  # type: ignore[attr-defined]
    if provider.get_user_async is not None:
        handler.current_user = await provider.get_user_async(handler)
    elif provider.get_user is not None:
        handler.current_user = provider.get_user(handler)
    else:
        return
    if not handler.current_user:
        raise HTTPError(403)
    # A NUL byte in a file path makes the file lookup raise ValueError: a 500 and a logged
    # exception for what is only a bad request.
    if any("\x00" in argument for argument in handler.path_args
           if isinstance(argument, str)):
        raise HTTPError(400, reason="a file path cannot contain a NUL byte")


class DeferredCollector(ModuleType):
    """Stands in for the ``gc`` module inside ``bokeh.document.document``.

    ``collect()`` on the event loop schedules one collection ``COLLECT_DELAY_S`` later,
    shared by every call until it runs; off the loop it collects at once, as before.
    """

    def __init__(self) -> None:
        super().__init__("gc")
        self.collections = 0
        # The loop that will run the pending collection; a loop stopped before it ran
        # must not block collections on the next one.
        self._scheduled_on: asyncio.AbstractEventLoop | None = None

    @property
    def pending(self) -> bool:
        return self._scheduled_on is not None

    def collect(self, generation: int = 2) -> int:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._collect_now(generation)
        if self._scheduled_on is not loop:
            self._scheduled_on = loop
            loop.call_later(COLLECT_DELAY_S, self._collect_now)
        return 0

    def _collect_now(self, generation: int = 2) -> int:
        self._scheduled_on = None
        self.collections += 1
        return gc.collect(generation)

    def __getattr__(self, name: str) -> Any:
        return getattr(gc, name)


class OneLineLibraryLogs(logging.Filter):
    """Bokeh's and Tornado's records as one short line each, without tracebacks.

    Their errors are mostly about what a client sent (a 404 for an 8 kB URL, a malformed
    protocol message); our own loggers keep their tracebacks. Tornado's access lines
    carry the URL: any ``token=`` in it (ours, or Jupyter's forwarded through the proxy)
    is scrubbed, since behind Jupyter these lines land in Jupyter's own log.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(("bokeh", "tornado")):
            return True
        text = record.getMessage()
        if text == _CLOSED_TAB_WARNING:
            return False
        text = _shorten(scrub_secrets(text))
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            text += " [" + _shorten(scrub_secrets(f"{type(error).__name__}: {error}")) + "]"
        record.msg, record.args = text, None
        record.exc_info = record.exc_text = None
        return True


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > LOG_LINE_LIMIT:
        return text[:LOG_LINE_LIMIT] + f"... ({len(text)} characters)"
    return text


def one_line_logs(handlers: list[logging.Handler]) -> None:
    for handler in handlers:
        handler.addFilter(OneLineLibraryLogs())
