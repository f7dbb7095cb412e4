"""Whether the calling thread runs an event loop: the one test behind "no store read on an
event loop" (``store/service.py`` refuses such a read; pages and diagnoses move theirs to a
thread of their own). Tornado's IOLoop, and so every Bokeh callback and every handler, runs
on an asyncio loop."""

from __future__ import annotations

import asyncio


def on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
