"""What every connection and every response of the dashboard server gets, below the routes.

* **A header timeout.** A client has ``HEADER_TIMEOUT_S`` to send a request's headers (and
  as long again for a body): 200 connections that each sent one header line every 5 s, with
  no token, were all still open after 30 s (tornado's default is an hour), each holding a
  file descriptor that a page's sockets need. An idle keep-alive connection is closed after
  as long; a browser opens a new one. Websockets are not affected: tornado stops timing a
  connection once it is upgraded.
* **A cap on open connections** (``connection_cap``): half of the process's open-file
  limit, so a flood of connections within the timeout cannot take the descriptors the
  history store, NVML and the runs folder need. A connection past the cap is answered 503
  and closed at once; the server logs one line each time it reaches the cap.
* **Headers on every response** (``EveryResponseHeaders``), errors and websocket
  handshakes included: ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy:
  same-origin``. ``same-origin`` rather than ``no-referrer``: no URL (a page opened with
  ``?token=``) is sent to another site, while requests to the page's own origin keep their
  Referer, which Jupyter checks on some requests behind the proxy.

Bokeh builds the tornado ``HTTPServer`` itself; ``bokeh_patches`` has it build a
``CappedHTTPServer``, and ``server.make_server`` passes ``server_kwargs()`` to it.
"""

from __future__ import annotations

import logging
import resource
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.httputil import HTTPHeaders
from tornado.iostream import IOStream
from tornado.web import OutputTransform

log = logging.getLogger("nvdashboard")

# A request's headers arrive in one packet; ten seconds is generous even for a slow link.
HEADER_TIMEOUT_S = 10.0
# Past the cap, connections are refused until some close; a thousand is far more than the
# sockets of a hundred open pages (two each).
MOST_CONNECTIONS = 1000
# With a low open-file limit, at least this many: a few pages must still open.
FEWEST_CONNECTIONS = 16
_MOST_DRAIN_READS = 16  # of 64 KiB
EVERY_RESPONSE = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}
_REFUSED = ("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in EVERY_RESPONSE.items())
            + "\r\n").encode()


def connection_cap(open_files_limit: int | None = None) -> int:
    """How many connections the server holds open at once: half the open-file limit (the
    process's own unless given), between ``FEWEST_CONNECTIONS`` and ``MOST_CONNECTIONS``."""
    if open_files_limit is None:
        open_files_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_files_limit == resource.RLIM_INFINITY:
        return MOST_CONNECTIONS
    return max(FEWEST_CONNECTIONS, min(MOST_CONNECTIONS, open_files_limit // 2))


def server_kwargs() -> dict[str, Any]:
    """The ``http_server_kwargs`` of the dashboard server's Bokeh ``Server``."""
    return {"idle_connection_timeout": HEADER_TIMEOUT_S, "body_timeout": HEADER_TIMEOUT_S,
            "max_connections": connection_cap()}


class CappedHTTPServer(HTTPServer):
    """Tornado's ``HTTPServer`` that holds at most ``max_connections`` open (None: no cap)."""

    def initialize(self, *args: Any, max_connections: int | None = None,
                   **kwargs: Any) -> None:
        super().initialize(*args, **kwargs)
        self.max_connections = max_connections
        self.open_streams: set[IOStream] = set()
        self.refused = 0
        self.at_cap = False

    def handle_stream(self, stream: IOStream, address: tuple) -> None:
        if self.max_connections is not None and \
                len(self.open_streams) >= self.max_connections:
            # Pruned only when full: a connection closes by many paths (tornado's, a
            # websocket's, the peer's) and all of them leave the stream closed.
            self.open_streams = {s for s in self.open_streams if not s.closed()}
            if len(self.open_streams) >= self.max_connections:
                self.refuse(stream)
                return
        if self.at_cap:
            self.at_cap = False
            log.info("open connections below the cap of %d again (%d refused)",
                     self.max_connections, self.refused)
        self.open_streams.add(stream)
        super().handle_stream(stream, address)

    def refuse(self, stream: IOStream) -> None:
        self.refused += 1
        if not self.at_cap:
            self.at_cap = True
            log.warning("%d connections open, the most this server holds: new ones are "
                        "answered 503 until some close", self.max_connections)
        try:
            stream.write(_REFUSED).add_done_callback(lambda _: self.close_read(stream))
        except Exception:  # noqa: BLE001 - already closed by the peer: nothing to answer
            stream.close()

    @staticmethod
    def close_read(stream: IOStream) -> None:
        """Close ``stream`` once what the client has sent (its request, unread) is read:
        closing a socket with unread data sends a reset, which can reach the client before
        the 503 and discard it. A bounded read: a client that keeps sending is cut off."""
        try:
            for _ in range(_MOST_DRAIN_READS):
                if not stream.socket.recv(65536):
                    break
        except OSError:  # nothing more to read now (the socket does not block), or reset
            pass
        stream.close()


class EveryResponseHeaders(OutputTransform):
    """Adds ``EVERY_RESPONSE`` to every response of the application, where a handler has not
    set them itself (tornado applies an application's transforms to every handler's output,
    error pages and websocket handshakes included)."""

    def transform_first_chunk(self, status_code: int, headers: HTTPHeaders, chunk: bytes,
                              finishing: bool) -> tuple[int, HTTPHeaders, bytes]:
        for name, value in EVERY_RESPONSE.items():
            if name not in headers:
                headers[name] = value
        return status_code, headers, chunk
