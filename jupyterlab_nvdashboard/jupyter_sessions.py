"""Which notebook or console each Jupyter kernel serves, from the Jupyter server this
dashboard runs under.

Started by jupyter-server-proxy, the dashboard's parent process is the Jupyter server. That
server wrote ``jpserver-<pid>.json`` into Jupyter's runtime directory with its URL and its
own token; ``GET <url>api/sessions`` with that token lists every session: kernel id, path,
type, and each kernel's execution state and last activity. ``JupyterSessions`` refreshes
that list on a thread of its own, about once a second and only while some GPU process
belongs to a kernel, so a renamed notebook shows its new name within one refresh and the
event loop never waits for Jupyter. Without a Jupyter parent (a standalone server) it finds
nothing and does nothing. When the Jupyter server runs this package's server extension, each
refresh also reads ``GET <url>nvdashboard-idle/executions``: when each kernel last ran a
cell, which the idle clock counts from (``kernel_executions.py``); Jupyter's own
``last_activity`` moves for other messages too; and each kernel's last cells, which the
timelines mark (``cells``). A timeline page showing the marks asks for refreshes
(``wanted_by_page``) while no kernel holds a GPU too: then every ``PAGE_REFRESH_S``, and the
session list, which names the cells' notebooks, only while there are cells. The copy has an
age: ``current()`` gives nothing once a refresh failed or none succeeded for ``STALE_S``, so a
kernel is never judged idle on old news.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .instants import jupyter_time
from .kernel_executions import CellSpan

log = logging.getLogger(__name__)
REFRESH_S = 1.0
TIMEOUT_S = 3.0
# The oldest copy a kernel may be judged by: two refreshes missed, and one slow answer.
STALE_S = 2 * REFRESH_S + TIMEOUT_S
# A page that marks cells asks about once a second; the refreshes it asked for stop this long
# after its last ask (the page closed).
PAGE_WANTS_S = 5.0
# While only a page's marks want them, the cells are read this often (a timeline repaints
# every 2 s), and Jupyter's session list only when there are cells to name: each request
# costs the Jupyter server about a millisecond, and two a second were most of what an open
# timeline cost it (benchmarks/README.md).
PAGE_REFRESH_S = 2.0


@dataclass(frozen=True)
class JupyterServer:
    """Where the parent Jupyter server answers, from its runtime file."""

    url: str  # http://127.0.0.1:8888/user/alice/
    base_url: str  # /user/alice/
    token: str

    def lab_url(self, path: str) -> str:
        """The path (same origin) that opens ``path`` in JupyterLab."""
        return f"{self.base_url}lab/tree/{quote(path)}"


@dataclass(frozen=True)
class Session:
    path: str
    kind: str  # "notebook", "console", "file"
    name: str
    # The kernel as Jupyter last said: "idle", "busy", "starting", ... (None: not said), and
    # when it last sent anything (unix time; None: not said or not readable).
    execution_state: str | None = None
    last_activity_s: float | None = None
    # When it last ran a cell, where the server extension's execution clock says
    # (``executions_known``; None: no cell since it was watched).
    last_execution_s: float | None = None
    executions_known: bool = False

    @property
    def last_cell_s(self) -> float | None:
        """When the kernel last ran a cell: the execution clock's word where it is served,
        else Jupyter's ``last_activity``, which a cell run moves too."""
        return self.last_execution_s if self.executions_known else self.last_activity_s


def runtime_dir(environ: Mapping[str, str]) -> Path | None:
    if environ.get("JUPYTER_RUNTIME_DIR"):
        return Path(environ["JUPYTER_RUNTIME_DIR"])
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:
        return None
    return Path(jupyter_runtime_dir())


def find_parent_server(environ: Mapping[str, str] | None = None,
                       parent_pid: int | None = None) -> JupyterServer | None:
    """The Jupyter server that started this process, if its runtime file says so."""
    environ = os.environ if environ is None else environ
    folder = runtime_dir(environ)
    pid = os.getppid() if parent_pid is None else parent_pid
    if folder is None:
        return None
    try:
        info = json.loads((folder / f"jpserver-{pid}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not info.get("url") or info.get("sock"):
        return None  # a server on a unix socket is not reached here
    url = str(info["url"])
    return JupyterServer(url if url.endswith("/") else url + "/",
                         str(info.get("base_url") or "/"), str(info.get("token") or ""))


def _fetch_sessions(server: JupyterServer) -> Any:
    request = urllib.request.Request(server.url + "api/sessions",
                                     headers={"Authorization": f"token {server.token}"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310
        return json.loads(response.read())


def _fetch_executions(server: JupyterServer) -> Any:
    request = urllib.request.Request(server.url + "nvdashboard-idle/executions",
                                     headers={"Authorization": f"token {server.token}"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310
        return json.loads(response.read())


def parse_executions(body: Any) -> dict[str, float] | None:
    """kernel id -> last cell run (unix time) from the executions route; None if malformed."""
    kernels = body.get("kernels") if isinstance(body, dict) else None
    if not isinstance(kernels, dict):
        return None
    return {k: float(v) for k, v in kernels.items()
            if isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)}


def parse_cells(body: Any) -> dict[str, tuple[CellSpan, ...]]:
    """kernel id -> its last cells, oldest first, from the executions route (an older
    extension serves none); malformed entries are skipped."""
    kernels = body.get("cells") if isinstance(body, dict) else None
    if not isinstance(kernels, dict):
        return {}
    parsed = {kernel_id: tuple(cell for cell in map(CellSpan.from_json, items)
                               if cell is not None)
              for kernel_id, items in kernels.items()
              if isinstance(kernel_id, str) and isinstance(items, list)}
    return {kernel_id: cells for kernel_id, cells in parsed.items() if cells}


def parse_sessions(body: Any, executions: dict[str, float] | None = None
                   ) -> dict[str, Session]:
    """kernel id -> session, from the sessions API's body and the executions route's (None:
    not served); malformed entries are skipped."""
    sessions: dict[str, Session] = {}
    for item in body if isinstance(body, list) else []:
        kernel = item.get("kernel") if isinstance(item, dict) else None
        if not isinstance(kernel, dict) or not isinstance(kernel.get("id"), str):
            continue
        path = str(item.get("path") or "")
        state = kernel.get("execution_state")
        sessions[kernel["id"]] = Session(path, str(item.get("type") or "notebook"),
                                         str(item.get("name") or os.path.basename(path)),
                                         state if isinstance(state, str) else None,
                                         jupyter_time(kernel.get("last_activity")),
                                         (executions or {}).get(kernel["id"]),
                                         executions is not None)
    return sessions


class JupyterSessions:
    """The newest kernel -> session map, refreshed off the event loop."""

    def __init__(self, server: JupyterServer | None,
                 wanted: Callable[[], bool] = lambda: True, refresh_s: float = REFRESH_S,
                 fetch: Callable[[JupyterServer], Any] = _fetch_sessions,
                 fetch_executions: Callable[[JupyterServer], Any] = _fetch_executions
                 ) -> None:
        self.server = server
        self._wanted, self.refresh_s, self._fetch = wanted, refresh_s, fetch
        self._fetch_executions = fetch_executions
        self._executions_served = True  # until a 404 says this Jupyter has no such route
        self.sessions: dict[str, Session] = {}  # replaced whole: readers need no lock
        # kernel id -> its last cells (the executions route's), replaced whole as well.
        self.cells: dict[str, tuple[CellSpan, ...]] = {}
        self._page_asked_at = -math.inf  # monotonic time of a page's last wanted_by_page
        self.refreshes = 0
        self._refreshed_at: float | None = None  # monotonic time of the last good refresh
        self._attempted_at = -math.inf  # monotonic time of the last refresh, good or not
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def refresh(self, for_marks_only: bool = False) -> None:
        """Fetch the sessions once (blocking: call from this object's thread or a test).
        ``for_marks_only``: only a page's cell marks want them, so the session list, which
        names the cells' notebooks, is not read while there is no cell."""
        if self.server is None:
            return
        self._attempted_at = time.monotonic()
        try:
            if for_marks_only:  # the sessions only name the cells' notebooks
                executions = self._executions()
                cells = parse_cells(executions)
                body = self._fetch(self.server) if cells else None
            else:
                # The sessions first, then the executions: a kernel that Jupyter says is
                # idle has its last cell's end in executions read after (one IOPub message
                # moves both). Read the other way round, a cell that ended between the two
                # reads was judged from its start, its idle time counted from then.
                body = self._fetch(self.server)
                executions = self._executions()
                cells = parse_cells(executions)
            if body is not None:
                self.sessions = parse_sessions(body, parse_executions(executions)
                                               if executions is not None else None)
                self._refreshed_at = time.monotonic()
            self.cells = cells
            self._failing = False
        except (OSError, ValueError) as error:
            if not self._failing:  # once per outage, not once a second
                log.warning("cannot read the Jupyter server's sessions: %s", error)
            self._failing = True
        self.refreshes += 1

    def _executions(self) -> Any:
        """The executions route's body; None where it is not served (asked once) or does
        not answer now (then Jupyter's last_activity stands in)."""
        if self.server is None or not self._executions_served:
            return None
        try:
            return self._fetch_executions(self.server)
        except urllib.error.HTTPError as error:
            self._executions_served = error.code != 404
            return None
        except (OSError, ValueError):
            return None

    def current(self, stale_s: float = STALE_S) -> dict[str, Session]:
        """The sessions to judge kernels by: none while the copy of the server's list is
        stale (the last refresh failed, or none succeeded for ``stale_s``). Without a
        server nothing is refreshed, and the sessions given stand."""
        if self.server is None:
            return self.sessions
        if self._failing or self._refreshed_at is None \
                or time.monotonic() - self._refreshed_at > stale_s:
            return {}
        return self.sessions

    def wanted_by_page(self) -> None:
        """A page shows what the refreshes bring (the cells' marks): keep refreshing for
        ``PAGE_WANTS_S``, whether or not a kernel holds a GPU."""
        self._page_asked_at = time.monotonic()

    def wants_refresh(self, now: float | None = None) -> bool:
        """Whether the refresh thread reads Jupyter now: while some kernel holds a GPU, each
        ``refresh_s``; while a page asked in the last ``PAGE_WANTS_S``, each
        ``PAGE_REFRESH_S`` (``now``: monotonic time)."""
        now = time.monotonic() if now is None else now
        if self._wanted():
            return True
        # Half a wake-up early counts as due: the thread wakes each refresh_s, give or take.
        return now - self._page_asked_at < PAGE_WANTS_S and \
            now - self._attempted_at >= PAGE_REFRESH_S - self.refresh_s / 2

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            if self.wants_refresh():
                self.refresh(for_marks_only=not self._wanted())

    def start(self) -> None:
        if self.server is not None and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="nvdashboard-jupyter",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._thread = None
