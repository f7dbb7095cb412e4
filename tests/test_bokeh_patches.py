"""The corrections in ``bokeh_patches``, on their own (the server tests cover them in use)."""

from __future__ import annotations

import asyncio
import logging
import sys

import bokeh.document.document as bokeh_document

from jupyterlab_nvdashboard import bokeh_patches
from jupyterlab_nvdashboard.bokeh_patches import DeferredCollector, OneLineLibraryLogs


def test_document_destroys_share_one_deferred_collection(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(bokeh_patches, "COLLECT_DELAY_S", 0.05)
    collector = DeferredCollector()

    async def burst() -> tuple[int, bool]:
        for _ in range(50):
            collector.collect()
        during = collector.collections
        await asyncio.sleep(0.3)
        return during, collector.pending

    assert asyncio.run(burst()) == (0, False)
    assert collector.collections == 1
    collector.collect()  # off the event loop: at once, as Bokeh expects
    assert collector.collections == 2
    assert collector.get_threshold() == __import__("gc").get_threshold()


def test_a_loop_stopped_before_its_collection_does_not_block_the_next(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(bokeh_patches, "COLLECT_DELAY_S", 0.05)
    collector = DeferredCollector()

    async def schedule_and_leave() -> None:
        collector.collect()

    asyncio.run(schedule_and_leave())  # this loop closes before the collection runs
    assert collector.pending and collector.collections == 0

    async def burst_on_a_new_loop() -> None:
        collector.collect()
        await asyncio.sleep(0.3)

    asyncio.run(burst_on_a_new_loop())
    assert collector.collections == 1 and not collector.pending


def test_apply_puts_the_collector_where_bokeh_destroys_documents() -> None:
    bokeh_patches.apply()
    assert isinstance(bokeh_document.gc, DeferredCollector)


def _record(name: str, message: str, error: Exception | None = None) -> logging.LogRecord:
    exc_info = (type(error), error, error.__traceback__) if error else None
    return logging.LogRecord(name, logging.ERROR, __file__, 1, message, None, exc_info)


def test_bokeh_log_records_become_one_short_line() -> None:
    one_line = OneLineLibraryLogs()
    try:
        raise KeyError("events")
    except KeyError as error:
        record = _record("bokeh.server.protocol_handler",
                         "error handling message\n message: " + "x" * 5000, error)
    assert one_line.filter(record)
    text = logging.Formatter().format(record)
    assert "\n" not in text and "Traceback" not in text
    assert len(text) < 2 * bokeh_patches.LOG_LINE_LIMIT
    assert text.startswith("error handling message message: xxx")
    assert "(5032 characters)" in text and "[KeyError: 'events']" in text


def test_routine_closed_tab_warning_is_dropped_and_other_loggers_are_untouched() -> None:
    one_line = OneLineLibraryLogs()
    assert not one_line.filter(_record("bokeh.server.views.ws",
                                       "Failed sending message as connection was closed"))
    ours = _record("nvdashboard", "two\nlines", ValueError("kept"))
    assert one_line.filter(ours)
    assert ours.msg == "two\nlines" and ours.exc_info is not None
    assert sys.exc_info() == (None, None, None)


def test_a_websocket_without_bokehs_subprotocol_is_one_log_line(caplog) -> None:  # noqa: ANN001
    from types import SimpleNamespace

    from bokeh.server.views.ws import WSHandler

    bokeh_patches.apply()
    closed: list[int] = []
    handler = WSHandler.__new__(WSHandler)
    handler._token = None
    handler._current_user = "user"  # what Bokeh's @authenticated asks for
    handler.ws_connection = SimpleNamespace(selected_subprotocol=None,
                                            close=lambda *args: closed.append(1))
    with caplog.at_level(logging.INFO):
        handler.open()  # Bokeh alone raises ProtocolError, which tornado logs with a traceback
    refused = [r for r in caplog.records if "websocket refused" in r.getMessage()]
    assert len(refused) == 1 and "\n" not in refused[0].getMessage()
    assert "Subprotocol header is not 'bokeh'" in refused[0].getMessage()
    assert closed, "the socket is closed"
