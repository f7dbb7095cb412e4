"""One encode per tick per route family, the same bytes written to every subscribed page.

A *family* is a route and a window: ``/GPU-Resources`` drawn over 2 minutes is one family,
over 30 minutes another. Each family remembers the last sequence number it published.
When the sampler appends a sample, ``publish()`` runs on the event loop; each family with
subscribers reads the new samples from the history, encodes one frame
(``stream/frames.py``) and writes it to each of its sockets. A family with nobody watching
costs nothing. Families over long windows publish min/max buckets
(``stream/downsample.py``) as each bucket closes instead of every sample; each of their
frames also carries the bucket still open and the newest sample (``open``), which the page
draws until its next frame. A "replace" family
(bars, tables) sends nothing when its picture did not change, and no more often than its
feed's ``refresh_s`` (tables that people read, not watch, say 1 s).

A window longer than the in-memory history (6 h, 24 h, 7 d) is drawn, before the history's
oldest sample, from the store (``past``, composed by the server): its catch-up reads the
stored buckets at the family's own bucket width, with a gap wherever the server was not
running; what comes after is live, as for every window. A catch-up that may read the store
is built off the event loop, on the server's long-read threads (``executor``): a week of
8 GPUs took the loop 0.4 s, every page and endpoint waiting. Pages that open one window
together share one build, and a second frame takes each from there to where its family
has moved meanwhile.

A page subscribes through ``<route>/stream?since=SEQ&window=SECONDS``. Its first frame is a
catch-up, encoded for it alone, that takes it from ``since`` to where its family is, so a
reconnect neither loses nor repeats a row; ``since=-1`` (or a ``since`` the history no
longer holds) gets the whole window with ``reset``.

Tornado buffers writes without bound, so each socket may have at most
``MAX_PENDING_FRAMES`` frames not yet handed to the kernel; a page further behind is
disconnected (it reconnects with ``since`` and catches up in one frame) and counted in
``dropped_slow``. The kernel's send buffer for these sockets is kept small for the same
reason.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from tornado.ioloop import IOLoop
from tornado.web import HTTPError
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from ..metrics import History, PastSource, Sample, prepend_past
from .downsample import MEAN_SUFFIX, bucket_means, bucket_seconds, complete_buckets, min_max
from .frames import Rows, encode

log = logging.getLogger(__name__)

# About 1.6 s of ticks at the default 200 ms: a page that far behind is dropped.
MAX_PENDING_FRAMES = 8
SEND_BUFFER_BYTES = 16 * 1024
# Close code a page sees when the server's layout changed (a GPU appeared): it reloads.
CLOSE_LAYOUT_CHANGED = 4000
CLOSE_TOO_SLOW = 4001


class Feed(Protocol):
    """What a dashboard streams: rows computed from samples, the same for every page.

    A feed may say how often at most its frames go out (``refresh_s``, seconds): a "replace"
    feed's picture, or an "append" feed's new rows, all of them in one frame.

    An "append" feed may also say how its long windows are cut and reduced, where min/max
    of every column over epoch-aligned buckets does not fit (several rows per sample: the
    cluster heat map): ``bucket_seconds(window_s, interval_s)`` (0: every sample) and
    ``downsample(rows, bucket_s, clocks_s)``, ``clocks_s`` being each sample's
    ``Sample.clock_s`` (``downsample.bucket_starts`` cuts by it)."""

    # "append": rows are new samples (a timeline); "replace": rows are the whole picture
    # drawn from the newest sample (bars).
    mode: str

    def rows(self, samples: Sequence[Sample]) -> Rows: ...


def feed_bucket_seconds(feed: Feed, window_s: float, interval_s: float) -> float:
    """The bucket a family of ``feed`` over ``window_s`` publishes (0: every sample)."""
    if feed.mode == "replace":
        return 0.0
    own = getattr(feed, "bucket_seconds", None)
    return own(window_s, interval_s) if own is not None else bucket_seconds(window_s,
                                                                            interval_s)


TIME_KEY = "time"  # epoch milliseconds, the x column of every appended row


class Subscriber(Protocol):
    def send(self, frame: bytes) -> None: ...

    def close(self, code: int | None = None, reason: str | None = None) -> None: ...


@dataclass
class Family:
    route: str
    window_s: float
    feed: Feed
    bucket_s: float  # 0: every sample
    seq: int = -1  # the last sequence number published to this family's pages
    subscribers: set[Subscriber] = field(default_factory=set)
    # Replace mode: what the last frame carried (rows, not seq), so an unchanged picture is
    # not resent. Any mode: when the last live frame went out (a feed's ``refresh_s``).
    last_rows: bytes | None = None
    last_sent_s: float = -math.inf
    # Where the samples older than the history come from (None: the history only).
    past: PastSource | None = None
    interval_s: float = 0.0
    # The last read of ``past``: (which span, its samples, the ids of those that only bound
    # their bucket: a stored bucket's minima and maxima, whose mean is a sample of its own,
    # so they count in no mean). One value, replaced whole: a read made off the event loop
    # never pairs its samples with another read's bounds. A page that opens the same long
    # window within one of its buckets gets it without reading the store again.
    past_read: tuple[tuple[int, int], list[Sample], frozenset[int]] | None = None
    # Catch-ups built off the event loop, one at a time: the second of ten pages opening
    # a window waits for the first and takes its frame (``whole_window``) or its read.
    building: threading.Lock = field(default_factory=threading.Lock)
    whole_window: tuple[int, bytes] | None = None  # (its seq, the whole-window frame)
    joining: int = 0  # pages whose catch-up is being built off the loop

    @property
    def reads_past(self) -> bool:
        """Whether a page's catch-up may read the store: built off the event loop."""
        return self.past is not None and self.feed.mode == "append"

    def _publishable(self, samples: list[Sample]) -> list[Sample]:
        """The samples whose rows can go out now (oldest first)."""
        if self.feed.mode == "replace":
            return samples[-1:]
        if self.bucket_s:  # a bucket goes out once a later sample has closed it
            return samples[:complete_buckets([s.clock_s for s in samples], self.bucket_s)]
        return samples

    def _rows(self, samples: list[Sample]) -> Rows:
        rows = self.feed.rows(samples)
        if not self.bucket_s:
            return rows
        clocks_s = np.fromiter((s.clock_s for s in samples), float, len(samples))
        own = getattr(self.feed, "downsample", None)
        if own is not None:
            return own(rows, self.bucket_s, clocks_s)
        reduced = min_max(rows, TIME_KEY, self.bucket_s, clocks_s)
        bounds_only = self.past_read[2] if self.past_read is not None else frozenset()
        weights = np.fromiter((0.0 if id(s) in bounds_only else 1.0 for s in samples),
                              float, len(samples))
        reduced.numeric.update(bucket_means(rows, TIME_KEY, self.bucket_s, clocks_s, weights))
        return reduced

    def start(self, history: History) -> None:
        """Position a family that had no pages at the newest sample it can publish."""
        window = history.window(self.window_s)
        self.last_rows = None  # its first page's catch-up is the picture from here on
        publishable = self._publishable(window)
        if publishable:
            self.seq = publishable[-1].seq
        else:  # nothing closed yet: everything from the window's start is still to come
            self.seq = window[0].seq - 1 if window else history.last_seq

    def catch_up(self, history: History, since: int, seq: int | None = None,
                 read_past: bool = True) -> bytes:
        """A frame that takes a page from ``since`` to ``seq`` (default: this family's
        position). Where the window reaches past the history it reads ``past``, or, with
        ``read_past`` False (on the event loop), takes what was last read of it."""
        seq = self.seq if seq is None else seq
        window = [s for s in history.window(self.window_s) if s.seq <= seq]
        reset = (self.feed.mode == "replace" or since < 0 or since > seq
                 or not window or since < window[0].seq - 1)
        if self.feed.mode == "replace":
            samples = window[-1:]
        else:  # everything up to seq is published already, closed buckets included
            samples = self._with_past(window, history, read_past) if reset else [
                s for s in window if s.seq > since]
        rows = self._rows(samples)  # no samples yet: empty columns, still named
        return encode(rows, -1 if reset else since, seq, reset,
                      **self._open_bucket(history))

    def catch_up_off_loop(self, history: History, since: int, seq: int) -> bytes:
        """``catch_up`` for a thread other than the event loop's: builds wait for each
        other, and pages that open the window at the same ``seq`` get one frame."""
        with self.building:
            whole = since < 0
            if whole and self.whole_window is not None and self.whole_window[0] == seq:
                return self.whole_window[1]
            frame = self.catch_up(history, since, seq)
            if whole:
                self.whole_window = (seq, frame)
            return frame

    def advance(self, history: History) -> bytes | None:
        """The frame for what is new since the last one, or None when nothing is."""
        new = history.since(self.seq)
        if not new:
            return None
        # A family that fell behind the history's start starts over from the window.
        reset = new[0].seq != self.seq + 1
        if reset:
            new = history.window(self.window_s)
        publishable = self._publishable(new)
        if not publishable:
            return None
        if reset and self.feed.mode == "append":
            # On the event loop: what the last catch-up read of the store, never a new read.
            publishable = self._with_past(publishable, history, read=False)
        if self.feed.mode == "replace" and not reset:
            return self._replacement(publishable)
        if not reset and self._too_soon():  # the rows wait in the history for the next one
            return None
        before = self.seq
        rows = self._rows(publishable)
        self.seq, self.last_sent_s = publishable[-1].seq, time.monotonic()
        return encode(rows, -1 if reset else before, self.seq, reset,
                      **self._open_bucket(history))

    def _open_bucket(self, history: History) -> dict[str, Any]:
        """A long window's bucket that is still open, reduced as the closed ones are, then
        the newest sample as it is, for the frame's header (``open``: columns of numbers,
        None where not available). The page draws them after the closed buckets until its
        next frame, so the chart reaches now and its legend reads the current value: a
        7-day window's bucket is ten minutes long. Nothing for a window of every sample, or
        a feed that reduces its rows itself (several rows per sample)."""
        if not self.bucket_s or getattr(self.feed, "downsample", None) is not None:
            return {}
        samples = history.since(self.seq)
        if not samples:
            return {}
        reduced, newest = self._rows(samples), self.feed.rows(samples[-1:])
        columns = {}
        for key, bucket in reduced.numeric.items():
            value = newest.numeric[key.removesuffix(MEAN_SUFFIX)]  # a sample is its own mean
            column = np.concatenate([bucket, value])
            if key == TIME_KEY:  # drawn from its first sample to its newest, never ahead
                column = np.clip(column, samples[0].time_s * 1000, value[-1])
            columns[key] = [None if math.isnan(v) else float(v) for v in column]
        return {"open": columns}

    def _with_past(self, window: list[Sample], history: History, read: bool) -> list[Sample]:
        """The window's samples with, before them, what the store kept (a whole-window
        frame of a window longer than the history): up to the history's oldest sample,
        published or not, so that the live frames to come continue it in time order.
        ``read``: read the store where the last read is not of this span (never on the
        event loop); else take the last read as it is."""
        if self.past is None or self.feed.mode != "append":
            return window
        if not read:
            kept = self.past_read[1] if self.past_read is not None else []
            first = window[0].time_s if window else math.inf
            return [s for s in kept if s.time_s < first] + window
        memory = history.window(self.window_s)
        now_s = memory[-1].time_s if memory else time.time()
        before_s = memory[0].time_s if memory else now_s
        resolution = self.bucket_s or self.interval_s
        span = (int(now_s // max(resolution, 5.0)), int(before_s // max(resolution, 5.0)))
        if self.past_read is None or self.past_read[0] != span:
            # Spans on the monotonic grid ``_rows`` cuts buckets on: each in one bucket.
            older, _ = prepend_past([], self.window_s, self.past, resolution, now_s=now_s,
                                    before_s=before_s, monotonic_grid=True)
            # A bucketed window draws each stored bucket's mean too: read on rows of their
            # own, since a bucket's minimum and maximum say nothing of it.
            means, _ = prepend_past([], self.window_s, self.past, resolution, rows="mean",
                                    now_s=now_s, before_s=before_s,
                                    monotonic_grid=True) if self.bucket_s else \
                ([], 0.0)
            bounds_only = frozenset(id(sample) for sample in older) if means else frozenset()
            self.past_read = (span, sorted(older + means, key=lambda sample: sample.time_s),
                              bounds_only)
        first = window[0].time_s if window else before_s
        return [s for s in self.past_read[1] if s.time_s < first] + window

    def _too_soon(self) -> bool:
        """Whether the feed's ``refresh_s`` (0: none) has not passed since the last frame:
        its pages draw every few seconds, and get everything new at once."""
        return time.monotonic() - self.last_sent_s < getattr(self.feed, "refresh_s", 0.0)

    def _replacement(self, publishable: list[Sample]) -> bytes | None:
        """A replace family's next frame: None when too soon after the last one, or when
        the picture is the same (the family then stays at the sample it last sent, so its
        pages' next frame still continues theirs)."""
        if self._too_soon():
            return None
        rows = self._rows(publishable)
        content = encode(rows, 0, 0, False)
        if content == self.last_rows:
            return None
        self.last_rows, self.last_sent_s = content, time.monotonic()
        frame = encode(rows, self.seq, publishable[-1].seq, False)
        self.seq = publishable[-1].seq
        return frame


@dataclass
class BroadcastStats:
    """Counters for tests and benchmarks (``/info.json`` shows them)."""

    encodes: dict[str, int] = field(default_factory=dict)  # per family, live frames only
    catch_ups: int = 0
    publishes: int = 0
    frames_sent: int = 0
    dropped_slow: int = 0
    max_pending_frames: int = 0
    encode_seconds: float = 0.0  # CPU time spent building live frames (/metrics shows it)


class Broadcaster:
    """The families of every streamed route and their subscribers; lives on the event loop."""

    def __init__(self, history: History, interval_s: float,
                 feed_for: Callable[[str], Feed | None],
                 windows_s: Sequence[float], past: PastSource | None = None,
                 executor: Executor | None = None) -> None:
        self.history, self.interval_s = history, interval_s
        self.past = past
        # Where catch-ups that read ``past`` are built (the server's long reads); None: the
        # event loop's default executor.
        self.executor = executor
        self.feed_for = feed_for
        self.windows_s = tuple(windows_s)
        self.families: dict[tuple[str, float], Family] = {}
        self.stats = BroadcastStats()
        self.io_loop: IOLoop | None = None
        # Called with the number of subscribers whenever it changes (idle tracking).
        self.on_viewers_changed: Callable[[int], None] = lambda count: None
        self._failing: set[str] = set()  # families whose last publish raised (logged once)

    @property
    def subscribers(self) -> int:
        return sum(len(family.subscribers) for family in self.families.values())

    def watched_routes(self) -> set[str]:
        """The stream keys (routes) that have a page now, or one joining."""
        return {family.route for family in self.families.values()
                if family.subscribers or family.joining}

    def attach(self, io_loop: IOLoop) -> None:
        """Publish on ``io_loop`` whenever the sampler appends (called from any thread)."""
        self.io_loop = io_loop

        def appended(sample: object) -> None:  # noqa: ARG001 - publish reads the history
            # ``publish`` skips a family with no page: with no page anywhere (an unwatched
            # server), the event loop is not woken for it. A page that joins later starts
            # from the history, this sample included (it was appended before we were told).
            if any(family.subscribers for family in list(self.families.values())):
                io_loop.add_callback(self.publish)

        self.history.add_listener(appended)

    def family_key(self, feed: Feed, window_s: float | None) -> float:
        if feed.mode == "replace":
            return 0.0
        if window_s is None:
            return self.windows_s[0]
        if window_s not in self.windows_s:
            raise ValueError(f"window must be one of {', '.join(map(str, self.windows_s))}")
        return window_s

    def _family(self, route: str, window_s: float | None) -> Family:
        """The family a page of ``route`` over ``window_s`` joins (made, or made anew when
        its route's layout changed). ValueError: bad request."""
        feed = self.feed_for(route)
        if feed is None:
            raise ValueError(f"{route} has no live data on this machine")
        key = (route, self.family_key(feed, window_s))
        family = self.families.get(key)
        if family is None or family.feed is not feed:
            if family is not None:
                self._close_all(family, CLOSE_LAYOUT_CHANGED, "dashboard layout changed")
            family = self.families[key] = Family(
                route, key[1], feed, feed_bucket_seconds(feed, key[1], self.interval_s),
                past=self.past, interval_s=self.interval_s)
        return family

    def subscribe(self, route: str, window_s: float | None, since: int,
                  subscriber: Subscriber) -> bytes:
        """Add a page to its family; returns its catch-up frame, built here (a catch-up
        that reads the store too: ``join`` builds that off the event loop). ValueError: bad
        request."""
        family = self._family(route, window_s)
        name = f"{route}@{family.window_s:g}s"
        try:
            if not family.subscribers:
                family.start(self.history)
            frame = family.catch_up(self.history, since)
        except Exception as error:  # noqa: BLE001 - a broken feed fails its page only
            self._failed(family, name, error)
            raise ValueError(f"{route}: its live data failed") from None
        self._add(family, subscriber)
        return frame

    async def join(self, route: str, window_s: float | None, since: int,
                   subscriber: Subscriber) -> list[bytes]:
        """``subscribe`` for a page's socket, on the event loop, which never waits on the
        store: a catch-up that may read it is built on ``executor``, and a second frame
        (when needed) takes the page from there to where its family moved meanwhile.
        Returns the frames to send, in order. ValueError: bad request."""
        while True:
            family = self._family(route, window_s)
            if not family.reads_past:
                return [self.subscribe(route, window_s, since, subscriber)]
            name = f"{route}@{family.window_s:g}s"
            if not family.subscribers:
                family.start(self.history)
            seq = family.seq
            family.joining += 1
            try:
                frame = await IOLoop.current().run_in_executor(
                    self.executor, family.catch_up_off_loop, self.history, since, seq)
                if self._family(route, window_s) is not family:
                    continue  # the layout changed meanwhile: catch up on the new one
                frames = [frame]
                if family.seq > seq:  # published meanwhile, to the pages already there
                    frames.append(family.catch_up(self.history, seq, read_past=False))
            except ValueError:
                raise
            except Exception as error:  # noqa: BLE001 - a broken feed fails its page only
                self._failed(family, name, error)
                raise ValueError(f"{route}: its live data failed") from None
            finally:
                family.joining -= 1
            self._add(family, subscriber)
            return frames

    def _add(self, family: Family, subscriber: Subscriber) -> None:
        self.stats.catch_ups += 1
        family.subscribers.add(subscriber)
        self.on_viewers_changed(self.subscribers)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        for family in self.families.values():
            family.subscribers.discard(subscriber)
            if not family.subscribers and not family.joining:
                family.whole_window = None  # nobody left to share it with
        self.on_viewers_changed(self.subscribers)

    def publish(self) -> None:
        """Encode each watched family's new rows once and send them to all its pages."""
        self.stats.publishes += 1
        for family in list(self.families.values()):
            if not family.subscribers:
                continue
            if self.feed_for(family.route) is not family.feed:
                self._close_all(family, CLOSE_LAYOUT_CHANGED, "dashboard layout changed")
                continue
            name = f"{family.route}@{family.window_s:g}s"
            started = time.perf_counter()
            try:
                frame = family.advance(self.history)
            except Exception as error:  # noqa: BLE001 - one bad feed must not stop the others
                self._failed(family, name, error)
                continue
            finally:
                self.stats.encode_seconds += time.perf_counter() - started
            self._failing.discard(name)
            if frame is None:
                continue
            self.stats.encodes[name] = self.stats.encodes.get(name, 0) + 1
            for subscriber in list(family.subscribers):
                subscriber.send(frame)
                self.stats.frames_sent += 1

    def _failed(self, family: Family, name: str, error: Exception) -> None:
        """A family whose feed raised (publishing, or a page's catch-up): one log line until
        it works again, and it skips the samples it could not publish (its pages miss them,
        the other families miss nothing; a page that reconnects catches up on the window)."""
        if name not in self._failing:
            self._failing.add(name)
            log.warning("live frames of %s failed (%s: %s); its pages wait for the next one",
                        name, type(error).__name__, error)
        family.seq = self.history.last_seq

    def _close_all(self, family: Family, code: int, reason: str) -> None:
        for subscriber in list(family.subscribers):
            subscriber.close(code, reason)
        family.subscribers.clear()
        self.on_viewers_changed(self.subscribers)


class GuardedSocket(WebSocketHandler):
    """A websocket with the same origin rules as Bokeh's ``/ws``, that upgrades only where
    ``allows`` (the server's token check) says so; 403 otherwise."""

    def initialize(self, allows: Callable[[Any], bool] = lambda handler: True) -> None:
        self.allows = allows

    def check_origin(self, origin: str) -> bool:
        # The same allow-list, and the same check, as Bokeh's own websocket.
        from bokeh.server.views.ws import WSHandler

        return WSHandler.check_origin(self, origin)  # type: ignore[arg-type]

    async def get(self, *args: Any, **kwargs: Any) -> None:
        if not self.allows(self):
            raise HTTPError(403)
        await super().get(*args, **kwargs)


class StreamSocket(GuardedSocket):
    """``<route>/stream``: binary frames for one page."""

    def initialize(self, route: str, broadcaster: Broadcaster,
                   allows: Callable[[Any], bool] = lambda handler: True) -> None:
        super().initialize(allows)
        self.route, self.broadcaster = route, broadcaster
        self.pending = 0
        self.subscribed = False
        self.catching_up = False

    async def open(self, *args: str, **kwargs: str) -> None:
        # Tornado reads nothing from the page until this returns: its close is seen after.
        try:
            since = int(self.get_argument("since", "-1"))
            window_text = self.get_argument("window", "")
            window_s = float(window_text) if window_text else None
            frames = await self.broadcaster.join(self.route, window_s, since, self)
        except ValueError as error:
            self.close(1008, str(error)[:120])
            return
        self.subscribed = True
        # The catch-up can be megabytes (/Cluster-GPUs: 2.9 MB for 512 GPUs): it goes out
        # through the kernel's own buffer, since through 16 kB it took over a second on
        # loopback. The small buffer, which lets a stalled page show as pending frames,
        # applies once it is written.
        self.catching_up = True
        for frame in frames:
            self.send(frame)

    def _limit_send_buffer(self) -> None:
        stream = getattr(self.ws_connection, "stream", None)
        sock = getattr(stream, "socket", None)
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
            except OSError:
                pass

    def send(self, frame: bytes) -> None:
        if self.pending >= MAX_PENDING_FRAMES:
            self.broadcaster.stats.dropped_slow += 1
            self.broadcaster.unsubscribe(self)
            self.close(CLOSE_TOO_SLOW, "too far behind")
            return
        try:
            written = self.write_message(frame, binary=True)
        except WebSocketClosedError:
            self.broadcaster.unsubscribe(self)
            return
        self.pending += 1
        stats = self.broadcaster.stats
        stats.max_pending_frames = max(stats.max_pending_frames, self.pending)
        written.add_done_callback(self._written)

    def _written(self, written: asyncio.Future) -> None:
        self.pending -= 1
        if self.catching_up:
            self.catching_up = False
            self._limit_send_buffer()
        # A page that went away mid-write is ordinary; retrieving the error keeps asyncio
        # from logging it as a traceback ("Task exception was never retrieved").
        if not written.cancelled():
            written.exception()

    def on_message(self, message: str | bytes) -> None:
        # Pages never talk on this socket; anything they send is ignored.
        pass

    def on_close(self) -> None:
        if self.subscribed:
            self.broadcaster.unsubscribe(self)
