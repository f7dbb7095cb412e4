"""When each of this Jupyter server's kernels last ran a cell, from the kernel's own IOPub.

The idle clock counts "no cell run" from the last execution (issue 44, section 3, item 3).
Jupyter's ``last_activity`` of a kernel is not that: it moves for any IOPub message its
kernel manager tracks, whatever asked for it (a widget frontend's ``comm_msg`` when a page
reconnects, a ``comm_close`` answering a ``comm_open``), so a page that reconnects restarted
the idle episode minutes after the last cell. This watcher subscribes to each kernel's IOPub
on Jupyter's own event loop, as Jupyter's kernel manager does for ``last_activity``, and
records the time of every message that answers an ``execute_request``: the cell's input,
its output, and the ``idle`` status that ends it.

``ExecutionClock.last_execution(kernel_id)`` is read by the cull in this process, and served
by the Jupyter server extension at ``GET <base_url>nvdashboard-idle/executions`` for the
dashboard server's idle judgment (``jupyter_sessions.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

EXECUTE_REQUEST = "execute_request"
# How often the kernels are listed to watch new ones and let go of ended ones (s): a kernel
# is watched within this of its start; a cell run sooner is missed, and then its
# ``last_activity`` (which such a run moves) stands in.
SYNC_S = 1.0


class ExecutionClock:
    """The time each kernel of ``kernel_manager`` (Jupyter's) last ran a cell."""

    def __init__(self, kernel_manager: Any, log: logging.Logger,
                 clock: Callable[[], float] = time.time) -> None:
        self._kernels = kernel_manager
        self._log = log
        self._clock = clock
        self._streams: dict[str, Any] = {}
        self._last: dict[str, float] = {}
        self._unwatchable: set[str] = set()  # told once in the log, tried again each sync
        self._periodic: Any = None

    def last_execution(self, kernel_id: str) -> float | None:
        """When the kernel last answered an ``execute_request`` (unix time); None: not
        since it was watched."""
        return self._last.get(kernel_id)

    def executions(self) -> dict[str, float]:
        """kernel id -> last execution, for every kernel that ran a cell while watched."""
        return dict(self._last)

    def on_message(self, kernel_id: str, parent_msg_type: str | None) -> None:
        """One IOPub message of the kernel, by the type of the request it answers."""
        if parent_msg_type == EXECUTE_REQUEST:
            self._last[kernel_id] = self._clock()

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

    def _watch(self, kernel_id: str) -> Any:
        from jupyter_client.session import Session

        kernel = self._kernels.get_kernel(kernel_id)
        session = Session(config=kernel.session.config, key=kernel.session.key)
        stream = kernel.connect_iopub()

        def received(msg_list: list[bytes]) -> None:
            try:
                _, fed = session.feed_identities(msg_list)
                message = session.deserialize(fed, content=False)
            except Exception:  # noqa: BLE001 - a message it cannot read tells nothing
                return
            parent = message.get("parent_header") or {}
            self.on_message(kernel_id, parent.get("msg_type"))

        stream.on_recv(received)
        return stream

    def _close(self, kernel_id: str) -> None:
        stream = self._streams.pop(kernel_id)
        self._last.pop(kernel_id, None)
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
