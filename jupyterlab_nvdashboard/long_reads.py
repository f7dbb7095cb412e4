"""Where long reads of the history run, and how many at once (``server.py`` composes it).

A long read is one that may go back past the in-memory history into the store: a page's
catch-up on a long window, ``/history.csv`` over a month. None runs on the event loop:
they run on ``LongReads.executor``, a few threads of their own, so they neither stall the
pages nor take the threads ``/diagnosis.json`` uses. ``/history.csv`` also takes a
``slot()`` for the whole of its answer: ``RUNNING`` stream at once, ``WAITING`` more queue
for a slot, and a request past those is told to come back (``Busy``: 429).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

# Two: the reads are mostly Python (one core at a time under the GIL), and a third would
# only lengthen each of them; two let a short read pass a month-long one.
RUNNING = 2
# A user who clicks "download" a few times, or a few users at once, wait their turn.
WAITING = 8
RETRY_AFTER_S = 10  # what a request past the bound is told


class Busy(Exception):
    """Every slot is taken and the queue for them is full."""


class LongReads:
    """The threads long reads run on, and the bound on the answers that stream them."""

    def __init__(self, running: int = RUNNING, waiting: int = WAITING) -> None:
        self.running, self.waiting = running, waiting
        self.executor = ThreadPoolExecutor(max_workers=running,
                                           thread_name_prefix="nvdashboard-long-read")
        self._slots = asyncio.Semaphore(running)
        self._admitted = 0  # holding a slot or queued for one

    @property
    def admitted(self) -> int:
        """Answers holding a slot or queued for one."""
        return self._admitted

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the ``running`` slots, after waiting for it in a queue of at most
        ``waiting``; raises ``Busy`` at once when that queue is full. On the event loop."""
        if self._admitted >= self.running + self.waiting:
            raise Busy(f"{self.running} long reads run and {self.waiting} wait; "
                       f"try again in {RETRY_AFTER_S} s")
        self._admitted += 1
        try:
            async with self._slots:
                yield
        finally:
            self._admitted -= 1
