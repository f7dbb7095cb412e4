"""When each of this Jupyter server's kernels last ran a cell, from the kernel's own IOPub.

The idle clock counts "no cell run" from the last execution (issue 44, section 3, item 3).
Jupyter's ``last_activity`` of a kernel is not that: it moves for any IOPub message its
kernel manager tracks, whatever asked for it (a widget frontend's ``comm_msg`` when a page
reconnects, a ``comm_close`` answering a ``comm_open``), so a page that reconnects restarted
the idle episode minutes after the last cell. This watcher subscribes to each kernel's IOPub
on Jupyter's own event loop, as Jupyter's kernel manager does for ``last_activity``, and
records the time of every message of a cell: an ``execute_request`` the kernel echoes as an
``execute_input``, its outputs, and the ``idle`` status that ends it. A silent
``execute_request`` (an extension asking the kernel something) is echoed by no kernel and
runs no cell, so neither it nor a reconnect's ``kernel_info_request`` restarts the clock.

It also keeps each kernel's last cells as spans of the kernel's own clock (issue 45): a cell
starts at the header date of its ``execute_input`` (with the execution count of its
content) and ends at the header date of the ``status: idle`` whose parent is the same
``execute_request``. JupyterLab's ``recordTiming`` ends a cell at ``execute_reply``, but
that goes on the shell channel to the client that asked; the ``idle`` that follows it is on
IOPub, which every watcher sees. A message it cannot read records nothing and raises nothing.

``ExecutionClock.last_execution(kernel_id)`` is read by the cull in this process; the last
executions and the cells are served by the Jupyter server extension at ``GET
<base_url>nvdashboard-idle/executions`` for the dashboard server (``jupyter_sessions.py``):
its idle judgment, and the cells it marks on the timelines.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .instants import parse_instant

EXECUTE_REQUEST = "execute_request"
# The IOPub messages that start and end a cell; only these have their content read.
EXECUTE_INPUT = "execute_input"
STATUS = "status"
CELLS_KEPT = 20  # per kernel: the newest cells, which the timelines mark
# How often the kernels are listed to watch new ones and let go of ended ones (s). Where
# Jupyter tells of a kernel's start (its kernel_actions event, ``watch_starts``), the kernel
# is watched at once, before any client can send it a cell; else within this of its start,
# and a cell run sooner is missed (its ``last_activity``, which such a run moves, stands in;
# its running cell has no live footer).
SYNC_S = 1.0
# Jupyter's event of a kernel's start, restart or shutdown (jupyter_server 2.x).
KERNEL_ACTIONS = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"


@dataclass(frozen=True)
class CellSpan:
    """One cell a kernel ran, on the kernel's clock (unix seconds); ``end_s`` None while it
    runs (or when its kernel never said it ended)."""

    count: int | None  # the execution count, None where the kernel gave none
    start_s: float
    end_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "start_s": self.start_s, "end_s": self.end_s}

    @classmethod
    def from_json(cls, item: Any) -> CellSpan | None:
        """A span from the executions route's JSON; None where it is not one."""
        if not isinstance(item, dict):
            return None
        count, start, end = item.get("count"), item.get("start_s"), item.get("end_s")
        if not (count is None or _is_int(count)) or not _is_seconds(start) \
                or not (end is None or _is_seconds(end)):
            return None
        return cls(count, float(start), None if end is None else float(end))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def header_time(header: Mapping[str, Any]) -> float | None:
    """A message header's date, as the wire carries it, as unix seconds; None where it is
    not an ISO 8601 time with its zone (a kernel's zone is not known here)."""
    date = header.get("date")
    if not isinstance(date, str):
        return None
    try:
        return parse_instant(date, "date")
    except ValueError:
        return None


class CellSpans:
    """Each kernel's last ``CELLS_KEPT`` cells, from its IOPub messages."""

    def __init__(self) -> None:
        self._cells: dict[str, deque[tuple[str, CellSpan]]] = {}  # with the request's id

    def record(self, kernel_id: str, header: Any, parent: Any, content: Any) -> None:
        """One IOPub message: an ``execute_input`` starts a cell, an ``idle`` status whose
        parent is that cell's ``execute_request`` ends it. Anything else, or anything
        malformed, changes nothing."""
        if not all(isinstance(part, Mapping) for part in (header, parent, content)):
            return
        request = parent.get("msg_id")
        if parent.get("msg_type") != EXECUTE_REQUEST or not isinstance(request, str):
            return
        moment = header_time(header)
        if moment is None:
            return
        kind = header.get("msg_type")
        if kind == EXECUTE_INPUT:
            count = content.get("execution_count")
            cells = self._cells.setdefault(kernel_id, deque(maxlen=CELLS_KEPT))
            cells.append((request, CellSpan(count if _is_int(count) else None, moment)))
        elif kind == STATUS and content.get("execution_state") == "idle":
            cells = self._cells.get(kernel_id, deque())
            for position, (asked, cell) in enumerate(cells):
                if asked == request and cell.end_s is None and moment >= cell.start_s:
                    cells[position] = (asked, CellSpan(cell.count, cell.start_s, moment))
                    return

    def cells(self, kernel_id: str) -> list[CellSpan]:
        return [cell for _, cell in self._cells.get(kernel_id, ())]

    def as_json(self) -> dict[str, list[dict[str, Any]]]:
        """kernel id -> its last cells, oldest first, as the executions route serves them."""
        return {kernel_id: [cell.to_json() for _, cell in cells]
                for kernel_id, cells in self._cells.items() if cells}

    def forget(self, kernel_id: str) -> None:
        self._cells.pop(kernel_id, None)


class ExecutionClock:
    """The time each kernel of ``kernel_manager`` (Jupyter's) last ran a cell."""

    def __init__(self, kernel_manager: Any, log: logging.Logger,
                 clock: Callable[[], float] = time.time) -> None:
        self._kernels = kernel_manager
        self._log = log
        self._clock = clock
        self._streams: dict[str, Any] = {}
        self._last: dict[str, float] = {}
        # Per kernel, the requests it echoed as a cell's input and has not ended yet.
        self._cells_running: dict[str, set[str]] = {}
        self._unwatchable: set[str] = set()  # told once in the log, tried again each sync
        self._periodic: Any = None
        self.cells = CellSpans()

    def last_execution(self, kernel_id: str) -> float | None:
        """When the kernel last ran a cell (unix time): its input, an output or its end;
        None: not since it was watched."""
        return self._last.get(kernel_id)

    def executions(self) -> dict[str, float]:
        """kernel id -> last execution, for every kernel that ran a cell while watched."""
        return dict(self._last)

    def on_message(self, kernel_id: str, msg_type: str | None, parent: Mapping[str, Any]
                   ) -> None:
        """One IOPub message of the kernel (``parent``: the header of the request it
        answers). A cell is an ``execute_request`` that the kernel echoes as an
        ``execute_input``: its input, its outputs and the ``idle`` that ends it count as a
        cell run. A silent one (which an extension sends to ask the kernel something, and a
        kernel never echoes, jupyter_client's messaging spec), a ``kernel_info_request``
        (JupyterLab's on each reconnect) or anything else runs no cell, and never restarts
        the idle clock (issue 51)."""
        if parent.get("msg_type") != EXECUTE_REQUEST:
            return
        request = parent.get("msg_id")
        cells = self._cells_running.setdefault(kernel_id, set())
        if msg_type == EXECUTE_INPUT and isinstance(request, str):
            cells.add(request)
        if request not in cells:
            return
        self._last[kernel_id] = self._clock()
        if msg_type == STATUS:  # the cell's end (a status of its request is its idle)
            cells.discard(request)

    def receive(self, kernel_id: str, session: Any, msg_list: list[bytes]) -> None:
        """One IOPub message as the kernel's socket delivers it (``session``: a
        jupyter_client ``Session`` with the kernel's key). Only a cell's start and end have
        their content read: an output's may be megabytes."""
        try:
            _, fed = session.feed_identities(msg_list)
            message = session.deserialize(fed, content=False)
        except Exception:  # noqa: BLE001 - a message it cannot read tells nothing
            return
        parent = message.get("parent_header") or {}
        self.on_message(kernel_id, message.get("msg_type"),
                        parent if isinstance(parent, Mapping) else {})
        if message.get("msg_type") not in (EXECUTE_INPUT, STATUS):
            return
        try:
            # The header as sent: jupyter_client reads a date without a zone as this
            # machine's local time, and the kernel's zone is not known here.
            header = session.unpack(fed[1])
            content = session.unpack(message["content"])
        except Exception:  # noqa: BLE001 - as above
            return
        self.cells.record(kernel_id, header, parent, content)

    def sync(self) -> None:
        """Watch the kernels started since, let go of those that ended."""
        running = set(self._kernels.list_kernel_ids())
        for kernel_id in [k for k in self._streams if k not in running]:
            self._close(kernel_id)
        self._unwatchable &= running
        for kernel_id in running - set(self._streams):
            try:
                self._streams[kernel_id] = self._watch(kernel_id)
            except Exception as error:  # noqa: BLE001 - one line; the next sync tries again
                if kernel_id not in self._unwatchable:
                    self._log.warning("nvdashboard: cannot watch kernel %s for cell runs "
                                      "(%s: %s); its last activity in Jupyter stands in",
                                      kernel_id, type(error).__name__, error)
                self._unwatchable.add(kernel_id)
            else:
                self._unwatchable.discard(kernel_id)

    def watch_starts(self, event_logger: Any) -> None:
        """Sync as soon as Jupyter says a kernel started or restarted (``KERNEL_ACTIONS``),
        on Jupyter's loop, before the start's answer reaches a client: the first cell of a
        new kernel is seen, and with it the running cell's live footer (issue 55)."""
        async def heard(logger: Any, schema_id: str, data: dict[str, Any]) -> None:  # noqa: ARG001 - by keyword
            if data.get("status") == "success" and data.get("action") in ("start", "restart"):
                self.sync()

        event_logger.add_listener(schema_id=KERNEL_ACTIONS, listener=heard)

    def _watch(self, kernel_id: str) -> Any:
        from jupyter_client.session import Session

        kernel = self._kernels.get_kernel(kernel_id)
        session = Session(config=kernel.session.config, key=kernel.session.key)
        stream = kernel.connect_iopub()
        stream.on_recv(lambda msg_list: self.receive(kernel_id, session, msg_list))
        return stream

    def _close(self, kernel_id: str) -> None:
        stream = self._streams.pop(kernel_id)
        self._last.pop(kernel_id, None)
        self._cells_running.pop(kernel_id, None)
        self.cells.forget(kernel_id)
        try:
            stream.close()
        except Exception:  # noqa: BLE001, S110 - the kernel's sockets are already gone
            pass

    def start(self) -> None:
        """Sync now and every ``SYNC_S`` on Jupyter's event loop."""
        if self._periodic is not None:
            return
        from tornado.ioloop import PeriodicCallback

        self.sync()
        self._periodic = PeriodicCallback(self.sync, SYNC_S * 1000)
        self._periodic.start()

    def stop(self) -> None:
        if self._periodic is not None:
            self._periodic.stop()
            self._periodic = None
        for kernel_id in list(self._streams):
            self._close(kernel_id)
