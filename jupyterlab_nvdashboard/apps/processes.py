"""/GPU-Processes: who is using the GPUs. One table across devices, sorted by memory, the
current user's own processes first; plus the small ``/glance.json`` the JupyterLab status
bar and sidebar poll.

Everything here reads what the sampler already stored (``Sample.extra``: the process
readings and their owners) and the Jupyter sessions map that ``jupyter_sessions.py``
refreshes on its own thread; nothing here touches hardware, ``/proc`` or the network.
A row's notebook is a link to the notebook in JupyterLab: inside JupyterLab the page asks
the extension to open it (postMessage); elsewhere the link opens JupyterLab.
"""

from __future__ import annotations

import html
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from bokeh.layouts import column
from bokeh.models import (
    ColumnDataSource,
    CustomJS,
    DataTable,
    Div,
    HTMLTemplateFormatter,
    InlineStyleSheet,
    TableColumn,
)

from ..diagnosis.free import FREE_WINDOW_S, FreeJudgment, by_device, judge_free
from ..diagnosis.idle import NO_WORK, WORK
from ..metrics import OWNER_FAMILY, PROCESS_FAMILY, ProcessOwner, ProcessReading, Sample
from ..metrics.identity import OTHER, PAIRED, SAME, SHARED, UNKNOWN, UNLISTED
from ..stream.frames import Rows
from .components import (
    GIB,
    NOT_AVAILABLE,
    THEMED_TABLE_CSS,
    duration_text,
    format_memory,
    format_pct,
    gpu_label,
)
from .document import gpus_being_read
from .kernel_findings import told_to_the_user
from .live import LiveView
from .usage import NotebookUsage, idle_json

if TYPE_CHECKING:
    from ..jupyter_sessions import JupyterSessions
    from ..metrics import History
    from .sources import DashboardSources

# How far back to look for the newest process reading: a few idle-rate passes.
LOOKBACK_S = 10.0
OPEN_NOTEBOOK_MESSAGE = "nvdashboard:open-notebook"
# A server anyone on the network may watch (--no-token) does not show command lines, which
# can carry secrets; notebook paths, users and PIDs it shows.
HIDDEN_COMMAND = "command hidden: this server is view-only (--no-token)"
STATUS_TEXT = {
    "ended": "process ended, or /proc hides it from this server (hidepid)",
    "no_access": "no access to this process's /proc entry (hidepid)",
}
ANOTHER_CONTAINER = "another container's process"
# A notebook that held GPU memory since the server started and holds none now: its kernel
# was shut down, or let go of the GPU (Jupyter keeps a session whose kernel was shut down,
# so the two cannot be told apart from the sessions).
ENDED = "ended"
ENDED_WORDS = "GPU use ended"
NO_PROCESSES_TEXT = ("<b>No process holds a GPU context on these GPUs.</b> Memory the GPUs "
                     "show in use is held by the driver, or by processes this server cannot "
                     "list (another container, or a MIG device's peers).")
_TEXT_COLUMNS = ("gpu", "pid", "user", "what", "memory", "sm", "memory_activity", "held",
                 "notebook_held", "notebook_working")


def current_user() -> str | None:
    """The user this server runs as (the Jupyter user, behind jupyter-server-proxy)."""
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return None


def newest_family(history: History, family: str) -> Any:
    """The newest reading of ``family`` in the last ``LOOKBACK_S``, or None."""
    for sample in reversed(history.window(LOOKBACK_S)):
        if family in sample.extra:
            return sample.extra[family]
    return None


@dataclass(frozen=True)
class ProcessRow:
    """One table row, in the units people read."""

    device: int
    gpu: str
    pid: int | None  # in this server's PID namespace where known, else the driver's
    kind: str
    user: str | None
    mine: bool
    what: str  # notebook path, workload run, command line, or why it is unknown
    notebook: str | None  # the notebook or console path, when the process is a kernel's
    lab_url: str | None  # opens that notebook in JupyterLab
    kernel_id: str | None
    memory_bytes: float | None
    memory_fraction: float | None  # of that device's total
    sm_pct: float | None
    memory_pct: float | None
    held_s: float | None
    # How this row was tied to a process here (metrics/identity.py), as a code and in words.
    identity: str = SAME
    identity_text: str = ""
    driver_pid: int | None = None  # the PID NVML names it by
    group_memory_bytes: float | None = None  # a "shared" group's memory together
    # The row's notebook since the server started, over all its kernels (issue 28 item 6):
    # GPU memory held x seconds, and the share of that time its GPU was working.
    notebook_byte_seconds: float | None = None
    notebook_working_share: float | None = None

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


# Interpreters whose first argument is the program that was run. A narrow column cut the
# script's name off after the interpreter's long path (issue 44), so the script goes first.
INTERPRETERS = re.compile(r"(python|pypy|ipython)[\d.]*|node|ruby|perl|Rscript|julia|bash|sh")
# An interpreter's options that take the next argument as their value.
OPTIONS_WITH_VALUE = {"-X", "-W", "-Q", "--check-hash-based-pycs"}


def script_first(command: str) -> str:
    """A command line as ``train.py --lr 3 · /opt/conda/bin/python /home/a/train.py``: the
    program an interpreter runs and its arguments first, then the interpreter's path (and
    the script's, where it had one); ``-m module`` counts as the program. Any other command,
    and an interpreter running ``-c`` code or a console, is left as it is."""
    words = command.split()
    if not words or not INTERPRETERS.fullmatch(os.path.basename(words[0])):
        return command
    position = 1
    while position < len(words) and words[position].startswith("-"):
        option = words[position]
        if option == "-m" and position + 1 < len(words):
            program, path = words[position + 1], words[:position + 1]
            return " ".join([program, *words[position + 2:], "·", *path])
        if option in ("-c", "-"):
            return command
        position += 2 if option in OPTIONS_WITH_VALUE else 1
    if position >= len(words):
        return command
    script = words[position]
    name = os.path.basename(script) or script
    path = words[:position + 1] if name != script else words[:position]
    return " ".join([name, *words[position + 1:], "·", *path])


def _workload_runs(sources: DashboardSources) -> dict[int, str]:
    """PID -> "run <path> <id>" for the workload runs still going."""
    workload = sources.workload
    if workload is None:
        return {}
    runs = {}
    for run in workload.watcher.runs():
        pid = run.start.get("pid")
        if isinstance(pid, int) and not run.finished:
            runs[pid] = f"workload run {run.path} · {run.run_id}"
    return runs


def identity_text(reading: ProcessReading, gpu: str) -> str:
    """How sure the pairing of ``reading`` with a process here is, in words."""
    identity, group = reading.identity, reading.group
    if identity == SAME:
        return "the driver names this process by its PID here"
    if identity == PAIRED:
        return (f"paired by elimination: the only process here holding {gpu}'s device node, "
                f"and the driver's only other entry on it (PID {reading.pid})")
    if identity == SHARED and group is not None:
        together = format_memory(group.memory_bytes)
        ours = len(group.holders)
        if ours == group.entries:
            return (f"{ours} processes of this container on {gpu}, holding {together} "
                    "together (the driver's PIDs cannot say which holds what)")
        return (f"{ours} of the {group.entries} processes on {gpu} "
                f"{'is' if ours == 1 else 'are'} this container's; together they hold "
                f"{together} (the driver's PIDs cannot say which is which)")
    if identity == UNLISTED and group is not None:
        return (f"{group.entries} process{'es' if group.entries != 1 else ''} of other "
                f"containers on {gpu}: the driver lists only this container's, and its "
                "per-process samples show more")
    if identity == OTHER:
        return f"{ANOTHER_CONTAINER}: no process here holds {gpu}'s device node"
    if identity == UNKNOWN:
        return ("the driver's PID; from inside this PID namespace, with no GPU device node "
                "to look at, it cannot be tied to a process here")
    return identity


def process_rows(sources: DashboardSources, now: float | None = None) -> list[ProcessRow]:
    """The table: every process reading, attributed, own processes first, then by memory.
    A ``shared`` group's entries are shown as this namespace's processes that hold the GPU
    (they are known; which entry each is, is not), plus one row for the rest."""
    metrics = sources.metrics
    readings: tuple[ProcessReading, ...] = newest_family(metrics.history, PROCESS_FAMILY) or ()
    owners: dict[int, ProcessOwner] = newest_family(metrics.history, OWNER_FAMILY) or {}
    jupyter: JupyterSessions | None = sources.jupyter
    sessions = jupyter.sessions if jupyter is not None else {}
    facts = {f.index: f for f in metrics.facts}
    user = current_user()
    runs = _workload_runs(sources)
    notebooks = sources.usage.notebook_usage()
    now = time.time() if now is None else now
    rows = []
    groups_done: set[tuple[int, Any]] = set()

    def local_row(reading: ProcessReading, pid: int | None, gpu: str, words: str,
                  memory: float | None, group_memory: float | None = None) -> ProcessRow:
        device = facts.get(reading.device)
        owner = owners.get(pid) if pid is not None else None
        notebook = lab_url = None
        kernel_id = owner.kernel_id if owner else None
        if pid is None:
            what = words
        elif owner is None:
            what = "looking up…"
        elif owner.status != "ok":
            what = STATUS_TEXT.get(owner.status, owner.status)
        else:
            session = sessions.get(kernel_id) if kernel_id else None
            run = next((runs[p] for p in owner.lineage if p in runs), None)
            if session is not None:
                notebook = session.path
                lab_url = jupyter.server.lab_url(session.path) \
                    if jupyter is not None and jupyter.server else None
                what = session.path + ("" if owner.kernel_pid == owner.pid else
                                       f" (child of kernel {owner.kernel_pid})")
            elif run is not None:
                what = run
            elif not sources.run_control:
                what = HIDDEN_COMMAND
            elif kernel_id:
                what = f"Jupyter kernel {kernel_id[:8]}: {script_first(owner.command or '')}"
            else:
                what = script_first(owner.command or "") or "?"
        total = device.memory_total_bytes if device else None
        usage = notebooks.get(notebook) if notebook is not None else None
        return ProcessRow(
            reading.device, gpu, pid, reading.kind, owner.user if owner else None,
            bool(user and owner and owner.user == user), what, notebook, lab_url, kernel_id,
            memory, memory / total if memory is not None and total else None,
            reading.sm_pct, reading.memory_pct,
            None if reading.seen_since_s is None else max(0.0, now - reading.seen_since_s),
            reading.identity, words,
            None if reading.identity == SHARED else reading.pid or None, group_memory,
            usage.byte_seconds if usage else None, usage.working_share if usage else None)

    for reading in readings:
        device = facts.get(reading.device)
        gpu = gpu_label(device, short=True) if device else f"row {reading.device}"
        words = identity_text(reading, gpu)
        group = reading.group
        if reading.identity == SHARED and group is not None:
            if (reading.device, group) in groups_done:
                continue
            groups_done.add((reading.device, group))
            for holder in group.holders:
                rows.append(local_row(reading, holder, gpu, words, None, group.memory_bytes))
            if group.entries > len(group.holders):
                others = group.entries - len(group.holders)
                who = ANOTHER_CONTAINER if others == 1 else \
                    f"{others} processes of other containers"
                rows.append(local_row(
                    reading._replace(identity=OTHER), None, gpu,
                    f"{who}: {others} of the {group.entries} processes on {gpu}, holding "
                    f"{format_memory(group.memory_bytes)} together with this container's "
                    "(the driver's PIDs cannot say which is which)", None, group.memory_bytes))
            continue
        if reading.identity in (SAME, PAIRED):
            rows.append(local_row(reading, reading.local_pid, gpu, words,
                                  reading.used_memory_bytes))
        else:
            rows.append(local_row(reading, None, gpu, words, reading.used_memory_bytes))
    rows.sort(key=lambda row: (not row.mine, -(row.memory_bytes or -1.0), row.device,
                               row.pid or 0))
    return rows


def held_devices(sources: DashboardSources, rows: Sequence[ProcessRow]
                 ) -> dict[int, list[ProcessRow]]:
    """Each device row's processes: its own, and a GPU's MIG devices' too."""
    parents = {f.index: f.parent for f in sources.metrics.facts}
    held: dict[int, list[ProcessRow]] = {}
    for row in rows:
        held.setdefault(row.device, []).append(row)
        parent = parents.get(row.device)
        if parent is not None and parent != row.device:
            held.setdefault(parent, []).append(row)
    return held


def free_devices(sources: DashboardSources, rows: Sequence[ProcessRow]
                 ) -> dict[int, FreeJudgment]:
    """Each device's free judgment (``diagnosis/free.py``), from the history and ``rows``
    (``process_rows``): what the overview marks and ``/glance.json`` carries."""
    metrics = sources.metrics
    readings = by_device(metrics.history.window(FREE_WINDOW_S))
    held = held_devices(sources, rows)
    return {facts.index: judge_free(readings.get(facts.index, ()), facts,
                                    len(held.get(facts.index, ())))
            for facts in metrics.facts}


def gib_hours_text(byte_seconds: float | None) -> str:
    """GPU memory x time as ``3.25 GiB·h`` ("" for none)."""
    return "" if byte_seconds is None else f"{byte_seconds / 3600 / GIB:.2f} GiB·h"


def _notebook_link(text: str, notebook: str | None, lab_url: str | None) -> str:
    """``text`` (escaped) as a link that opens ``notebook`` in JupyterLab, where known."""
    escaped = html.escape(text)
    if notebook and lab_url:
        return (f'<a href="{html.escape(lab_url)}" target="_top" '
                f'data-notebook="{html.escape(notebook)}">{escaped}</a>')
    return escaped


def _what_html(row: ProcessRow) -> str:
    if row.notebook and row.lab_url:
        return _notebook_link(row.what, row.notebook, row.lab_url)
    text = html.escape(row.what)
    return f'<span title="{text}">{text}</span>'  # all of it on hover, where it is cut


def ended_notebooks(sources: DashboardSources, rows: Sequence[ProcessRow]
                    ) -> list[NotebookUsage]:
    """The notebooks with GPU usage since the server started that no row of ``rows``
    shows (their kernels were shut down, or let go of the GPU), most usage first: their
    GiB·h and "GPU working" stay on the page, marked ended, as ``/processes.json``
    keeps them under ``notebooks``."""
    shown = {row.notebook for row in rows if row.notebook}
    return sorted((usage for path, usage in sources.usage.notebook_usage().items()
                   if path not in shown), key=lambda usage: -usage.byte_seconds)


def _ended_text(usage: NotebookUsage, sources: DashboardSources) -> dict[str, str]:
    """An ended notebook's row: no GPU, process or memory now, and its usage since the
    server started. Its sessions came from this user's Jupyter server: the user's own."""
    jupyter = sources.jupyter
    lab_url = jupyter.server.lab_url(usage.path) \
        if jupyter is not None and jupyter.server else None
    user = current_user()
    return {"gpu": "", "pid": "", "user": html.escape(user or "?") + " (you)",
            "what": _notebook_link(usage.path, usage.path, lab_url)
            + f' <span class="nvd-ended">· {ENDED_WORDS}</span>',
            "memory": "", "sm": "", "memory_activity": "", "held": ENDED,
            "notebook_held": gib_hours_text(usage.byte_seconds),
            "notebook_working": format_pct(None if usage.working_share is None
                                           else 100 * usage.working_share)}


def _identity_html(row: ProcessRow) -> str:
    """The pairing's words after the name (all of them on hover), unless the driver's PID
    is this process's or the words are the row's name already."""
    if row.identity == SAME or row.pid is None:
        return ""
    words = html.escape(row.identity_text)
    return f' <span class="nvd-identity" title="{words}">· {words}</span>'


def _memory_html(row: ProcessRow) -> str:
    width = 0.0 if row.memory_fraction is None else min(100.0, 100 * row.memory_fraction)
    text = format_memory(row.memory_bytes)
    if row.memory_bytes is None and row.group_memory_bytes is not None:
        text = f"{format_memory(row.group_memory_bytes)} shared"  # a "shared" group's, together
    return (f'<div class="nvd-bar"><div style="width:{width:.1f}%"></div>'
            f'<span>{html.escape(text)}</span></div>')


@dataclass
class ProcessTableFeed:
    """The rows of the table from the newest readings (replace mode). Encoded on the event
    loop each tick, so they are rebuilt only when what they show can have changed: a new
    process reading, owner map or sessions map, or the next whole second ("held for")."""

    sources: DashboardSources
    mode = "replace"
    refresh_s = 1.0  # "held for" changes once a second; nothing else faster
    _cache: tuple[tuple[int, ...], Rows] | None = None

    def rows(self, samples: Sequence[Sample]) -> Rows:  # noqa: ARG002 - reads the history
        metrics, jupyter = self.sources.metrics, self.sources.jupyter
        key = (id(newest_family(metrics.history, PROCESS_FAMILY)),
               id(newest_family(metrics.history, OWNER_FAMILY)),
               id(jupyter.sessions if jupyter is not None else None), int(time.time()))
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self._build())
        return self._cache[1]

    def _build(self) -> Rows:
        table = process_rows(self.sources)
        text: dict[str, list[Any]] = {name: [] for name in _TEXT_COLUMNS}
        for row in table:
            text["gpu"].append(row.gpu)
            text["pid"].append(("–" if row.pid is None else str(row.pid))
                               + ("" if row.kind == "compute" else f" ({row.kind})"))
            text["user"].append(html.escape(row.user or "?") + (" (you)" if row.mine else ""))
            text["what"].append(_what_html(row) + _identity_html(row))
            text["memory"].append(_memory_html(row))
            text["sm"].append(format_pct(row.sm_pct))
            text["memory_activity"].append(format_pct(row.memory_pct))
            text["held"].append(NOT_AVAILABLE if row.held_s is None
                                else duration_text(row.held_s))
            text["notebook_held"].append(gib_hours_text(row.notebook_byte_seconds))
            text["notebook_working"].append(
                "" if row.notebook_byte_seconds is None else
                format_pct(None if row.notebook_working_share is None
                           else 100 * row.notebook_working_share))
        ended = ended_notebooks(self.sources, table)
        for usage in ended:
            for name, value in _ended_text(usage, self.sources).items():
                text[name].append(value)
        memory = np.array([np.nan if r.memory_bytes is None else r.memory_bytes for r in table]
                          + [np.nan] * len(ended), dtype=float)
        return Rows({"memory_bytes": memory}, text)


def process_feed(sources: DashboardSources) -> ProcessTableFeed:
    return ProcessTableFeed(sources)


_TABLE_CSS = THEMED_TABLE_CSS + """
.nvd-bar { position: relative; height: 100%; min-width: 8em; }
.nvd-bar div { position: absolute; left: 0; top: 15%; bottom: 15%; background: #76b900;
               opacity: 0.5; }
.nvd-bar span { position: relative; padding-left: 4px; }
.nvd-identity { opacity: 0.75; font-size: 90%; }
.nvd-ended { font-style: italic; }
"""
# A notebook link inside JupyterLab: ask the extension to open the notebook in a tab. The
# table lives in a shadow root, so the click's composed path is searched for the link.
_OPEN_NOTEBOOK_JS = """
if (window.parent !== window && !window.nvdashboardOpensNotebooks) {
  window.nvdashboardOpensNotebooks = true;
  document.addEventListener("click", (event) => {
    const link = event.composedPath().find((el) => el instanceof Element && el.dataset &&
                                            el.dataset.notebook !== undefined);
    if (!link) return;
    event.preventDefault();
    window.parent.postMessage({type: MESSAGE, path: link.dataset.notebook},
                              window.location.origin);
  }, true);
}
""".replace("MESSAGE", repr(OPEN_NOTEBOOK_MESSAGE))


class ProcessTable:
    """The page: a note on what can be attributed, and the table."""

    def __init__(self, sources: DashboardSources, feed: ProcessTableFeed) -> None:
        # Filled in the browser from the stream: nothing goes back to the server.
        self.source = ColumnDataSource({"memory_bytes": [], **{n: [] for n in _TEXT_COLUMNS}},
                                       syncable=False)
        html_cell = HTMLTemplateFormatter(template="<%= value %>")
        columns = [
            TableColumn(field="gpu", title="GPU", width=110),
            TableColumn(field="pid", title="PID", width=80),
            TableColumn(field="user", title="User", width=90, formatter=html_cell),
            TableColumn(field="what", title="Notebook or command", width=370,
                        formatter=html_cell),
            TableColumn(field="memory", title="GPU memory", width=150, formatter=html_cell),
            TableColumn(field="sm", title="SM %", width=60),
            TableColumn(field="memory_activity", title="Memory %", width=70),
            TableColumn(field="held", title="Held for", width=80),
            # The notebook's since the server started (all its kernels), not the process's.
            TableColumn(field="notebook_held", title="Notebook GiB·h", width=125),
            TableColumn(field="notebook_working", title="GPU working", width=90),
        ]
        sheets = [InlineStyleSheet(css=_TABLE_CSS)]
        # Columns keep their widths (no "force_fit"): squeezed to a narrow page, with the
        # sidebar open, they cut their headings and the command's script; the table
        # scrolls sideways instead.
        self.table = DataTable(source=self.source, columns=columns, index_position=None,
                               sortable=False, selectable=False, row_height=28,
                               autosize_mode="none", sizing_mode="stretch_both",
                               stylesheets=sheets)
        note = Div(text=html.escape(attribution_note(sources)),
                   styles={"padding": "0 0.5em", "font-size": "90%"})
        # Said in words when the table is empty, beside each GPU's memory in use (which
        # drivers, other containers and MIG peers can hold without a listed process).
        self.empty = Div(text="", visible=False, name="no-processes", syncable=False,
                         styles={"padding": "0.5em", "font-size": "110%"})
        self.root = column(note, self.empty, self.table, sizing_mode="stretch_both")
        self.live = LiveView(self.source)
        self.source.js_on_change("data", CustomJS(
            args={"source": self.source, "empty": self.empty, "text": NO_PROCESSES_TEXT},
            # An ended notebook's row has no PID ("" where a process without one has "–").
            code="const none = (source.data.pid || []).every((pid) => pid === '');"
                 "if (empty.visible !== none) { empty.text = text; empty.visible = none; }"))
        # Installed when the first rows arrive (a model has no document-ready event).
        self.source.js_on_change("data", CustomJS(code=_OPEN_NOTEBOOK_JS))


def attribution_note(sources: DashboardSources) -> str:
    owners = sources.metrics.owners
    parts = ["GPU memory is what the driver reports per process; SM % and Memory % are the "
             "process's share of the last second, where the driver samples them. Notebook "
             "GiB·h is the GPU memory its kernels have held since this server started, x "
             "hours; GPU working, the share of that time they did GPU work (where it could "
             "be told)."]
    if owners is not None and owners.host_namespace is False:
        parts.append("This server runs in a container (a PID namespace of its own): its own "
                     "processes are found by the GPU device nodes they hold, and paired with "
                     "the driver's entries; each row says how sure. Other containers' users "
                     "and commands stay invisible.")
    if sources.jupyter is None or sources.jupyter.server is None:
        parts.append("Notebook names need the Jupyter server this dashboard runs under.")
    return " ".join(parts)


def process_view(sources: DashboardSources, feed: Any) -> ProcessTable:
    assert isinstance(feed, ProcessTableFeed), "the process table draws its own feed"
    return ProcessTable(sources, feed)


def glance(sources: DashboardSources) -> dict[str, Any]:
    """``/glance.json``: each device's utilization and memory now, whether it is free and
    whether the current user's processes hold it, the current user's
    kernels that hold GPU memory (what the JupyterLab status bar and sidebar show), each
    with its ``idle`` judgment (``usage.py``) and its running cell so far (``cell``:
    ``/cell.json``'s answer, or null), and the devices unused for the threshold."""
    metrics = sources.metrics
    latest = metrics.history.latest()
    readings = {reading.index: reading for reading in latest.gpus} if latest else {}
    rows = process_rows(sources)
    free = free_devices(sources, rows)
    held = held_devices(sources, rows)
    devices = []
    for facts in metrics.facts:
        reading = readings.get(facts.index)
        devices.append({
            "index": facts.index, "label": facts.label, "kind": facts.kind,
            "utilization_pct": reading.utilization_pct if reading else None,
            "memory_used_bytes": reading.memory_used_bytes if reading else None,
            "memory_total_bytes": (reading.memory_total_bytes if reading else None)
            or facts.memory_total_bytes,
            # The server's judgment (diagnosis/free.py): the status bar counts it.
            "free": free[facts.index].free, "free_why": free[facts.index].why,
            # The current user's processes hold it: the status bar shows this one first.
            "mine": any(row.mine for row in held.get(facts.index, ())),
        })
    kernels: dict[str, dict[str, Any]] = {}
    kernel_rows: set[int] = set()
    user = current_user()
    for row in rows:
        if not row.mine or not row.kernel_id or row.notebook is None:
            continue
        kernel_rows.add(row.device)
        kernel = kernels.setdefault(row.kernel_id, {
            "kernel_id": row.kernel_id, "path": row.notebook, "memory_bytes": 0.0,
            "memory_known": True, "devices": [], "identity": []})
        if row.identity_text not in kernel["identity"]:
            kernel["identity"].append(row.identity_text)
        if row.group_memory_bytes is not None:  # its memory is known only with others'
            kernel["shared_memory_bytes"] = kernel.get("shared_memory_bytes", 0.0) \
                + row.group_memory_bytes
        if row.memory_bytes is None:
            kernel["memory_known"] = False
        else:
            kernel["memory_bytes"] += row.memory_bytes
        if row.gpu not in kernel["devices"]:
            kernel["devices"].append(row.gpu)
    for kernel in kernels.values():
        # The kernel's own GPU work in the newest pass, by its own signal (the rule a
        # cell's verdict reads): the toolbar shows it, never a shared GPU's load as its.
        own = sources.usage.own_activity(user or "", kernel["kernel_id"])
        if own is not None and own.kind in (WORK, NO_WORK):
            kernel["own_pct"], kernel["own_signal"] = own.pct, own.signal
        else:
            kernel["own_pct"], kernel["own_signal"] = None, ""
        kernel["idle"] = idle_json(
            sources.usage.judgment(user or "", kernel["kernel_id"]), kernel["path"],
            kernel["kernel_id"], kernel["memory_bytes"], kernel["devices"],
            kernel.get("shared_memory_bytes"))
    # Each kernel's running cell so far, as its finished footer will judge it (the last
    # judgment made on live_cells.py's thread: cheap here), for the Lab's live footers.
    running = sources.live_cells.so_far(kernels) if sources.live_cells is not None else {}
    for kernel in kernels.values():
        kernel["cell"] = running.get(kernel["kernel_id"])
    # Why the GPUs that hold the user's own kernels are slow (the shared cache: cheap),
    # each told as the GPU's or as the user's own (kernel_findings.py).
    idle_states = {k["kernel_id"]: k["idle"]["state"] for k in kernels.values()}
    diagnoses = [told_to_the_user(d, rows, idle_states)
                 for d in sources.diagnoses.current() if d.row in kernel_rows] \
        if kernel_rows else []
    return {"time": latest.time_s if latest else None, "devices": devices,
            "kernels": sorted(kernels.values(), key=lambda k: -k["memory_bytes"]),
            "diagnoses": diagnoses, "user": user,
            "unused_devices": sources.usage.unused_devices(),
            # No device yet may mean "still reading" (ask again soon) or "no GPU" (don't).
            "reading_gpus": gpus_being_read(metrics)}


def processes_json(sources: DashboardSources) -> dict[str, Any]:
    """``/processes.json``: the table's rows, as data."""
    jupyter, reader = sources.jupyter, sources.metrics.processes
    return {"user": current_user(), "rows": [row.as_json() for row in process_rows(sources)],
            "note": attribution_note(sources),
            # Each notebook's GPU usage since the server started, ended kernels included.
            "notebooks": [usage.as_json() for usage in sorted(
                sources.usage.notebook_usage().values(), key=lambda u: -u.byte_seconds)],
            # How many process passes and sessions refreshes have happened: a client can
            # wait for "the next refresh" by counting instead of timing.
            "process_passes": reader.passes if reader is not None else 0,
            "sessions_refreshes": jupyter.refreshes if jupyter is not None else 0}

