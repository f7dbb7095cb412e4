"""A small JSON document sent to each open socket when what it shows changes:
``/glance/stream``, which the JupyterLab status bar, sidebar, toolbar and idle notice read.

Why a socket and not a poll, or a long poll: measured with ``benchmarks/bare_lab.py``, each
``/glance.json`` request the Lab page made every 2 s cost the Lab server more than the
dashboard server (jupyter-server-proxy checks the login, opens a request to the dashboard
server and copies its headers, for every answer), and on the simulated GPUs the glance
changes at nearly every reading, so a long poll (``?after=<etag>``) would have been answered
as often as the poll, at the same price. Over a socket the proxy copies one small message;
the page sends nothing and parses only what changed.

Each socket asks for its pace (``?interval=SECONDS``, the Lab's refresh rate, 0.5 s to an
hour). At each of its ticks the document is built (shared by the sockets that tick within
``FRESH_S`` of each other) and compared with what that socket was last sent, without its
volatile keys (the glance's reading ``time``): the same content is not sent again, except
once ``keepalive_s`` has passed, so that the reading time a view shows ("reading of
09:04:07") is never older than that. A tick that sends nothing else sends ``HEARTBEAT`` (an
empty text message, parsed by nobody), so that the page tells a hung server (SIGSTOP, a
stalled proxy) from a quiet one within about one interval, as its polls timed out.

Each tick also calls ``on_watched``: a page that shows the glance keeps the server from its
idle exit, as its polls of ``/glance.json`` did. The origin and token checks are the
broadcaster's (``GuardedSocket``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from tornado.ioloop import PeriodicCallback
from tornado.web import HTTPError

from .broadcaster import GuardedSocket

# Sockets whose ticks fall this close together share one build of the document.
FRESH_S = 0.25
# What a page may ask for (the Lab's refresh-rate setting has the same bounds).
SHORTEST_INTERVAL_S, LONGEST_INTERVAL_S = 0.5, 3600.0
# An unchanged document is sent again after this long (its reading time moves on).
KEEPALIVE_S = 10.0
# What a tick with nothing new sends: the server is alive.
HEARTBEAT = ""


class ChangeFeed:
    """The document, built at most once per ``FRESH_S``: its text and its content key (the
    text without the ``volatile`` keys)."""

    def __init__(self, build: Callable[[], dict[str, Any]],
                 volatile: Sequence[str] = ("time",)) -> None:
        self.build = build
        self.volatile = tuple(volatile)
        self.builds = 0  # tests and benchmarks
        self._built_at = -math.inf
        self._current: tuple[str, str] = ("", "")

    def current(self) -> tuple[str, str]:
        """``(text, content key)`` of the document now."""
        now = time.monotonic()
        if now - self._built_at >= FRESH_S:
            body = self.build()
            text = json.dumps(body)
            content = {key: value for key, value in body.items() if key not in self.volatile}
            self._current = (text, json.dumps(content, sort_keys=True))
            self._built_at = now
            self.builds += 1
        return self._current


def interval_argument(text: str) -> float:
    """A socket's ``interval`` (seconds). ValueError (one line) when malformed or out of
    bounds."""
    try:
        interval_s = float(text)
    except ValueError:
        raise ValueError(f"interval must be a number of seconds, not {text[:40]!r}") from None
    if not SHORTEST_INTERVAL_S <= interval_s <= LONGEST_INTERVAL_S:
        raise ValueError(f"interval must be between {SHORTEST_INTERVAL_S:g} and "
                         f"{LONGEST_INTERVAL_S:g} s")
    return interval_s


class ChangeSocket(GuardedSocket):
    """One page's socket: the document at once, then at each tick when its content changed
    (or ``keepalive_s`` after the last message). Pages never talk on it."""

    def initialize(self, feed: ChangeFeed, allows: Callable[[Any], bool] = lambda h: True,
                   on_watched: Callable[[], None] = lambda: None,
                   keepalive_s: float = KEEPALIVE_S) -> None:
        super().initialize(allows)
        self.feed, self.on_watched, self.keepalive_s = feed, on_watched, keepalive_s
        self.interval_s = 2.0
        self.ticker: PeriodicCallback | None = None
        self.last_key: str | None = None
        self.last_sent_s = -math.inf
        self.writing = False
        self.messages = 0

    async def get(self, *args: Any, **kwargs: Any) -> None:
        # Refused before the upgrade, so the page (and the proxy's log) reads why.
        try:
            self.interval_s = interval_argument(self.get_argument("interval", "2"))
        except ValueError as error:
            raise HTTPError(400, reason=str(error)) from None
        await super().get(*args, **kwargs)

    def open(self, *args: str, **kwargs: str) -> None:
        self.tick()
        self.ticker = PeriodicCallback(self.tick, self.interval_s * 1000)
        self.ticker.start()

    def tick(self) -> None:
        self.on_watched()
        if self.writing:  # a page that has not taken the last one gets the newest later
            return
        text, key = self.feed.current()
        now = time.monotonic()
        changed = key != self.last_key or now - self.last_sent_s >= self.keepalive_s
        try:
            written = self.write_message(text if changed else HEARTBEAT)
        except Exception:  # noqa: BLE001 - closed meanwhile: on_close stops the ticks
            return
        if changed:
            self.last_key, self.last_sent_s = key, now
            self.messages += 1
        self.writing = True
        written.add_done_callback(self._written)

    def _written(self, written: Any) -> None:
        self.writing = False
        # A page that went away mid-write is ordinary: retrieving the error keeps asyncio
        # from logging it as a traceback.
        if not written.cancelled():
            written.exception()

    def on_message(self, message: str | bytes) -> None:
        pass

    def on_close(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
