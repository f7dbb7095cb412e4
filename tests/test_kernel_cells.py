"""Each kernel's last cells, from its IOPub messages as jupyter_client's own ``Session`` signs
and serializes them (issue 45, kernel_executions.py): a cell starts at its
``execute_input``'s header date with its execution count and ends at the header date of the
``status: idle`` with the same parent; a kernel that never says idle leaves its cell open;
malformed or foreign messages record nothing and raise nothing. The dashboard server's side
reads the executions route's JSON (jupyter_sessions.py). A real kernel: test_kernel_cells_lab.py.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest
from jupyter_client.session import Session

from jupyterlab_nvdashboard.jupyter_sessions import parse_cells
from jupyterlab_nvdashboard.kernel_executions import CELLS_KEPT, CellSpan, ExecutionClock

KEY = b"a-kernel-key"
T0 = datetime(2026, 12, 5, 12, 3, 4, 250000, tzinfo=timezone.utc)


def a_clock() -> ExecutionClock:
    return ExecutionClock(kernel_manager=None, log=logging.getLogger("test.cells"),
                          clock=lambda: 0.0)


class Kernel:
    """What a kernel publishes on IOPub for a request, signed with its key."""

    def __init__(self, key: bytes = KEY) -> None:
        self.session = Session(key=key)

    def request(self, msg_type: str = "execute_request") -> dict:
        return self.session.msg(msg_type, {"code": "1 + 1"})

    def wire(self, msg_type: str, content: dict, parent: dict | None,
             at: object) -> list[bytes]:
        message = self.session.msg(msg_type, content, parent=parent)
        message["header"]["date"] = at
        return self.session.serialize(message)

    def cell(self, request: dict, count: int, start: datetime, end: datetime | None
             ) -> list[list[bytes]]:
        messages = [
            self.wire("status", {"execution_state": "busy"}, request, start),
            self.wire("execute_input", {"code": "1 + 1", "execution_count": count}, request,
                      start),
            self.wire("stream", {"name": "stdout", "text": "x" * 10_000}, request,
                      start + timedelta(seconds=1)),
        ]
        if end is not None:
            messages.append(self.wire("status", {"execution_state": "idle"}, request, end))
        return messages


def feed(clock: ExecutionClock, kernel: Kernel, messages: list[list[bytes]],
         kernel_id: str = "k1") -> None:
    receiver = Session(key=KEY)  # the watcher's own session with the kernel's key
    for message in messages:
        clock.receive(kernel_id, receiver, message)


def test_a_cell_is_its_input_to_its_idle_on_the_kernels_clock() -> None:
    clock, kernel = a_clock(), Kernel()
    request = kernel.request()
    feed(clock, kernel, kernel.cell(request, 3, T0, T0 + timedelta(seconds=41.5)))
    assert clock.cells.cells("k1") == [CellSpan(3, T0.timestamp(), T0.timestamp() + 41.5)]
    assert clock.cells.as_json() == {"k1": [{"count": 3, "start_s": T0.timestamp(),
                                             "end_s": T0.timestamp() + 41.5}]}
    assert clock.last_execution("k1") == 0.0  # the idle clock still counts it


def test_a_cell_runs_until_its_own_idle_and_a_kernel_that_never_says_idle_leaves_it_open(
) -> None:
    clock, kernel = a_clock(), Kernel()
    first, second = kernel.request(), kernel.request()
    feed(clock, kernel, kernel.cell(first, 1, T0, None))
    assert clock.cells.cells("k1") == [CellSpan(1, T0.timestamp(), None)]
    # An idle that answers another request (a kernel_info, or another cell) ends nothing.
    info = kernel.request("kernel_info_request")
    feed(clock, kernel, [
        kernel.wire("status", {"execution_state": "idle"}, info, T0 + timedelta(seconds=2)),
        kernel.wire("status", {"execution_state": "idle"}, second, T0 + timedelta(seconds=3)),
    ])
    assert clock.cells.cells("k1") == [CellSpan(1, T0.timestamp(), None)]
    later = T0 + timedelta(seconds=10)
    feed(clock, kernel, kernel.cell(second, 2, later, later + timedelta(seconds=1)))
    assert clock.cells.cells("k1") == [
        CellSpan(1, T0.timestamp(), None),
        CellSpan(2, later.timestamp(), later.timestamp() + 1)]


def test_only_the_last_cells_are_kept_per_kernel() -> None:
    clock, kernel = a_clock(), Kernel()
    for count in range(1, CELLS_KEPT + 6):
        start = T0 + timedelta(seconds=count)
        feed(clock, kernel, kernel.cell(kernel.request(), count, start,
                                        start + timedelta(seconds=0.5)))
    feed(clock, kernel, kernel.cell(kernel.request(), 1, T0, T0), kernel_id="k2")
    assert [cell.count for cell in clock.cells.cells("k1")] == list(range(6, CELLS_KEPT + 6))
    assert [cell.count for cell in clock.cells.cells("k2")] == [1]


# jupyter_client warns that it reads a date without a zone as local time; it is refused here.
@pytest.mark.filterwarnings("ignore:Interpreting naive datetime:DeprecationWarning")
@pytest.mark.parametrize("date", [
    "yesterday",
    "2026-12-05T12:03:04",  # no zone: the kernel's zone is not known here
    12.5,
    "9" * 200,
])
def test_a_malformed_header_date_records_nothing(date: object) -> None:
    clock, kernel = a_clock(), Kernel()
    request = kernel.request()
    feed(clock, kernel, [kernel.wire("execute_input", {"execution_count": 1}, request, date)])
    assert clock.cells.cells("k1") == [] and clock.cells.as_json() == {}


def test_malformed_messages_record_nothing_and_raise_nothing() -> None:
    clock, kernel = a_clock(), Kernel()
    request = kernel.request()
    good = kernel.wire("execute_input", {"execution_count": 1}, request, T0)
    no_parent = kernel.wire("execute_input", {"execution_count": 1}, None, T0)
    other_key = Kernel(b"another-key").wire("execute_input", {"execution_count": 1},
                                             request, T0)
    not_json = [good[0], good[1], b"hmac-less", b"{not json", *good[4:]]
    content_not_a_dict = [*good[:-1], b"[1, 2]"]
    feed(clock, kernel, [[], [b"<IDS|MSG>"], [b"garbage"] * 7, no_parent, other_key,
                         not_json, content_not_a_dict])
    assert clock.cells.cells("k1") == []
    # No date (jupyter_client's Session always stamps one; another kernel's may not).
    clock.cells.record("k1", {"msg_type": "execute_input"},
                       {"msg_type": "execute_request", "msg_id": "r0"}, {"execution_count": 1})
    # The parent names no request id.
    clock.cells.record("k1", {"msg_type": "execute_input", "date": "2026-12-05T12:00:00Z"},
                       {"msg_type": "execute_request"}, {"execution_count": 1})
    clock.cells.record("k1", None, None, None)
    assert clock.cells.cells("k1") == []
    # A count that is no number leaves the count unknown, not the cell.
    clock.cells.record("k1", {"msg_type": "execute_input", "date": "2026-12-05T12:00:00Z"},
                       {"msg_type": "execute_request", "msg_id": "r1"},
                       {"execution_count": "3"})
    assert clock.cells.cells("k1") == [CellSpan(None, 1796472000.0, None)]
    # An idle stamped before its cell's start ends nothing.
    clock.cells.record("k1", {"msg_type": "status", "date": "2026-12-05T11:00:00Z"},
                       {"msg_type": "execute_request", "msg_id": "r1"},
                       {"execution_state": "idle"})
    assert clock.cells.cells("k1") == [CellSpan(None, 1796472000.0, None)]


def test_the_dashboard_reads_the_cells_the_route_serves_and_skips_what_is_malformed(
) -> None:
    clock, kernel = a_clock(), Kernel()
    feed(clock, kernel, kernel.cell(kernel.request(), 7, T0, T0 + timedelta(seconds=2)))
    body = {"kernels": {"k1": 0.0}, "cells": clock.cells.as_json()}
    assert parse_cells(body) == {"k1": (CellSpan(7, T0.timestamp(), T0.timestamp() + 2),)}
    body["cells"]["k2"] = [{"count": True, "start_s": 1.0, "end_s": None},
                           {"count": 1, "start_s": "1", "end_s": None},
                           {"count": 1, "start_s": float("nan"), "end_s": None},
                           {"count": None, "start_s": 5, "end_s": None}, "x"]
    body["cells"]["k3"] = "not a list"
    assert parse_cells(body)["k2"] == (CellSpan(None, 5.0, None),)
    assert "k3" not in parse_cells(body)
    # An older extension serves no cells.
    assert parse_cells({"kernels": {"k1": 0.0}}) == {} and parse_cells(None) == {}


def test_a_new_kernel_is_watched_as_jupyter_says_it_started() -> None:
    """Issue 55: Jupyter's kernel_actions event of a start (or restart) makes the clock watch
    the kernel at once, not at its next sync a second later: a notebook's first cell, run as
    soon as its kernel answers, has its running span, and so its live footer. A failed start
    or another action watches nothing new."""
    import asyncio
    from types import SimpleNamespace

    from jupyter_events import EventLogger
    from jupyter_server.services.kernels.kernelmanager import DEFAULT_EVENTS_SCHEMA_PATH
    from traitlets.config import Config

    from jupyterlab_nvdashboard.kernel_executions import KERNEL_ACTIONS

    watched: list[str] = []

    class Kernels:  # Jupyter's kernel manager, as the clock reads it
        def __init__(self) -> None:
            self.ids: list[str] = []

        def list_kernel_ids(self) -> list[str]:
            return list(self.ids)

        def get_kernel(self, kernel_id: str) -> object:
            def connect_iopub() -> object:
                watched.append(kernel_id)
                return SimpleNamespace(on_recv=lambda _: None, close=lambda: None)

            return SimpleNamespace(session=SimpleNamespace(config=Config(), key=KEY),
                                   connect_iopub=connect_iopub)

    kernels = Kernels()
    clock = ExecutionClock(kernel_manager=kernels, log=logging.getLogger("test.cells"))
    events = EventLogger()
    events.register_event_schema(DEFAULT_EVENTS_SCHEMA_PATH / "kernel_actions" / "v1.yaml")
    clock.watch_starts(events)

    async def say(action: str, status: str) -> None:
        events.emit(schema_id=KERNEL_ACTIONS, data={
            "kernel_id": kernels.ids[-1], "kernel_name": "python3", "action": action,
            "status": status, "msg": "as Jupyter says it"})
        await events.gather_listeners()

    kernels.ids.append("k1")
    asyncio.run(say("start", "error"))
    asyncio.run(say("interrupt", "success"))
    assert watched == []
    asyncio.run(say("start", "success"))
    assert watched == ["k1"]
    kernels.ids.append("k2")
    asyncio.run(say("restart", "success"))
    assert watched == ["k1", "k2"]
