"""The stored part of a span that starts before the in-memory history, for a page that reads
it from its periodic callback (``/Workload``'s run table judges a run that finished before a
restart from the store's buckets).

The store is never read on an event loop (``store/service.py`` refuses it): called there,
the read goes to a thread of its own and the part read last is answered meanwhile;
``version`` changes when a read lands, so the page knows to draw again. Called off a loop
(a test, a thread), it reads at once. What the store holds of the past does not change, so a
span is read again once a minute at most, however often pages refresh.
"""

from __future__ import annotations

import logging
import threading

from ..event_loop import on_event_loop
from ..metrics import PastSource, Sample, prepend_past

log = logging.getLogger("nvdashboard")

SpanKey = tuple[int, int]  # (the span's start, the minute the in-memory history starts in)


class StoredSpan:
    def __init__(self, store: PastSource) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._held: tuple[SpanKey, list[Sample]] = ((0, 0), [])
        self._reading: SpanKey | None = None  # the span a thread reads now
        self.version = 0  # changes when a read lands

    def before(self, start_s: float, now_s: float, first_s: float) -> list[Sample]:
        """The store's 5-second means (1-minute past their retention) from ``start_s`` to
        ``first_s``, where the in-memory history starts; on an event loop, the ones read
        last until the new read lands."""
        key = (int(start_s), int(first_s // 60))
        with self._lock:
            held_key, reading = self._held[0], self._reading
            start_thread = key != held_key and reading != key and on_event_loop()
            if start_thread:
                self._reading = key
        if key != held_key and not on_event_loop():
            self._read(key, start_s, now_s, first_s)
        elif start_thread:
            threading.Thread(target=self._read, args=(key, start_s, now_s, first_s),
                             name="nvdashboard-stored-span", daemon=True).start()
        with self._lock:
            held = self._held[1]
        return [sample for sample in held if sample.time_s < first_s]

    def _read(self, key: SpanKey, start_s: float, now_s: float, first_s: float) -> None:
        try:
            older, _ = prepend_past([], now_s - start_s, self.store, 0.0, rows="mean",
                                    now_s=now_s, before_s=first_s)
        except Exception as error:  # noqa: BLE001 - a page's table must not stop refreshing
            log.warning("history store: reading a run's past failed: %s: %s",
                        type(error).__name__, error)
            older = []
        with self._lock:
            self._held = (key, older)
            self.version += 1
            if self._reading == key:
                self._reading = None
