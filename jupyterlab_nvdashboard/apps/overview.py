"""The GPU overview (``/`` and ``/GPU-Overview``): one dense row per GPU and MIG device.

What a user of a shared machine asks first: which GPU is free, and who is on GPU 3? Each row
has the name and indices, utilization and SM activity, memory used of total (GiB, as
nvidia-smi counts them), temperature, power of its limit, the SM clock with the reasons it
is held down in words, whether the device is lost or cannot report a reading (and why), how
many processes hold it and whose (user, notebook), whether it has been held but unused for
the threshold (``usage.py``, issue 28), a link to each dashboard for that GPU, and the
device's diagnosis line (``diagnosis/``). The free devices are marked, by the one rule of
``diagnosis/free.py``, and a box above the table shows only those.

The table is built here once per refresh, from what the sampler already stored, as one HTML
string (``overview_html``); the stream sends it to every page (``OverviewFeed``, mode
"replace") at most once a second and only when it changed, and the page sets it in place.
``/`` (``server.py``) writes the same HTML into a small page of its own that follows the
same stream, so it answers at once and costs no Bokeh session.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..diagnosis import Diagnosis
from ..diagnosis.free import FREE_RULE, FreeJudgment
from ..metrics import GpuFacts, GpuReading, Sample
from ..metrics.families import GPM_FAMILY, HEALTH_FAMILY, GpmReading, HealthReading
from ..metrics.health import clock_event_words
from ..metrics.identity import OTHER, SAME, UNKNOWN
from ..metrics.nvml import MIG_PHYSICAL
from ..stream.frames import Rows
from .activity import without_gpm
from .components import (
    LEVEL_COLORS,
    MEMORY_LEVELS,
    NOT_AVAILABLE,
    POWER_LEVELS,
    WORK_LEVELS,
    bar_level,
    format_memory,
    gpu_color,
    reading_time,
)
from .in_place import IN_PLACE_JS, StreamedHtml
from .live import STREAM_CLIENT_JS, LiveView
from .processes import (
    ANOTHER_CONTAINER,
    ProcessRow,
    free_devices,
    held_devices,
    newest_family,
    process_rows,
)
from .sources import DashboardSources
from .usage import minutes_text

OVERVIEW_PATH = "/GPU-Overview"
OVERVIEW_TITLE = "GPU Overview"
REFRESH_S = 1.0  # the table changes at most once a second on screen
NO_PROCESSES = "No process holds a GPU context on these GPUs"
MIG_UTILIZATION = "NVML reports no utilization for a MIG device (GPM on Hopper and later does)"
LOST = "GPU lost: it stopped answering (fallen off the bus, reset or removed)"
# Dashboards that show one GPU among others: (route, short name) for the links in a row.
GPU_LINKS = (("/GPU-Utilization", "util"), ("/GPU-Memory", "mem"),
             ("/GPU-Resources", "timeline"), ("/GPU-Activity", "activity"),
             ("/GPU-Health", "health"), ("/GPU-Processes", "processes"))
# Short words for the throttle badge (nvml.h clocks-event bits that hold clocks down).
THROTTLE_BADGES = {0x4: "power cap", 0x8: "HW slowdown", 0x20: "thermal (SW)",
                   0x40: "thermal (HW)", 0x80: "power brake"}

STYLE = """<style>
.nvo { font: 13px/1.3 system-ui, sans-serif; color: inherit; }
.nvo table { border-collapse: collapse; width: 100%; table-layout: fixed; }
.nvo th { text-align: left; font-weight: 600; padding: 3px 6px; font-size: 12px;
          border-bottom: 2px solid rgba(128,128,128,.6); vertical-align: bottom; }
.nvo td { padding: 3px 6px; vertical-align: top; overflow: hidden; text-overflow: ellipsis; }
.nvo tr.main td { border-top: 1px solid rgba(128,128,128,.35); }
.nvo tr.diag td { padding-top: 0; font-size: 12px; opacity: .85; white-space: normal; }
.nvo details.dx summary { cursor: pointer; white-space: nowrap; overflow: hidden;
                          text-overflow: ellipsis; }
.nvo tr.mig td.gpu { padding-left: 1.4em; }
.nvo .name { font-size: 12px; opacity: .8; white-space: nowrap; }
.nvo .bar { margin-top: 1px; }
.nvo .bar b { display: block; font-size: 11px; font-weight: 600; line-height: 14px;
              white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.nvo .bar span { display: block; height: 4px; background: rgba(128,128,128,.25);
                 border-radius: 2px; }
.nvo .bar i { display: block; height: 100%; border-radius: 2px; }
""" + "".join(f".nvo .bar i.{level} {{ background: {color}; }}\n"  # good, warn, bad
              for level, color in LEVEL_COLORS.items()) + """
.nvo .why { font-size: 11px; opacity: .8; white-space: normal; }
.nvo .badge { display: inline-block; padding: 0 5px; border-radius: 3px; font-size: 11px;
              font-weight: 600; color: #fff; background: #d62728; margin-right: 3px; }
.nvo .free { background: #76b900; color: #000; }
.nvo .filter { font-size: 12px; margin: 0 0 3px; display: flex; gap: 1.2em;
               align-items: center; }
.nvo .nogpm { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.nvo .filter label { cursor: pointer; white-space: nowrap; }
.nvo:has(input.free-only:checked) tr[data-row]:not([data-free]) { display: none; }
.nvo .unused { background: #b45309; }
.nvo .ok { background: rgba(128,128,128,.35); color: inherit; }
.nvo tr.lost td { background: rgba(214,39,40,.14); }
.nvo a { color: #3b82f6; text-decoration: none; margin-right: 6px; white-space: nowrap; }
.nvo td.links { font-size: 12px; line-height: 1.4; white-space: nowrap; }
.nvo .held { white-space: nowrap; }
.nvo .empty { margin: .4em 0; font-style: italic; }
</style>"""
# Widths that hold each cell's words on one line at 1280 px: the clock's column two
# badges side by side ("thermal (SW)" and "thermal (HW)" under a thermal slowdown).
COLUMNS = (("gpu", "GPU · its dashboards", "16%"),
           ("util", "Utilization · SM activity (bars: 0–100%)", "15%"),
           ("memory", "Memory used of total (bar: 0–total)", "16%"), ("temp", "Temp", "5%"),
           ("power", "Power of limit (bar: 0–limit)", "12%"),
           ("clock", "SM clock of max · held down by", "16%"),
           ("procs", "Processes · whose (notebook)", "20%"))
# The links under a row take the first two columns' width: on one line, not two.
LINK_COLUMNS = 2


@dataclass(frozen=True)
class DeviceRow:
    """What one overview row shows, before it is written as HTML (tests read it)."""

    facts: GpuFacts
    reading: GpuReading | None
    health: HealthReading | None
    gpm: GpmReading | None
    unavailable: dict[str, str]
    processes: tuple[ProcessRow, ...]
    diagnosis: Diagnosis | None
    free: FreeJudgment | None = None  # diagnosis/free.py's judgment
    no_gpm: str = ""  # why this device cannot report SM activity (GPM), or ""
    # Held but unused for the threshold (issue 28 item 4): {"unused_s", "why", ...} or None.
    unused: dict[str, Any] | None = None

    @property
    def lost(self) -> bool:
        return bool(self.reading and self.reading.lost)

    @property
    def is_free(self) -> bool:
        return self.free is not None and self.free.free

    def throttles(self) -> list[str]:
        mask = self.health.clock_event_reasons if self.health else None
        return [word for bit, word in THROTTLE_BADGES.items() if mask and mask & bit]


@dataclass
class Overview:
    """Every device's row, the free ones marked, and whether any process holds a GPU."""

    rows: list[DeviceRow] = field(default_factory=list)
    any_process: bool = False

    @property
    def free(self) -> list[DeviceRow]:
        return [row for row in self.rows if row.is_free]


def _by_row(family: Any) -> dict[int, Any]:
    return family if isinstance(family, dict) else {}


def build_overview(sources: DashboardSources) -> Overview:
    """The overview of the newest readings (reads the history only, never the hardware)."""
    metrics = sources.metrics
    latest = metrics.history.latest()
    readings = {reading.index: reading for reading in latest.gpus} if latest else {}
    health = _by_row(newest_family(metrics.history, HEALTH_FAMILY))
    gpm = _by_row(newest_family(metrics.history, GPM_FAMILY))
    unavailable = metrics.nvml.unavailable()
    processes = process_rows(sources)
    diagnoses = {diagnosis.row: diagnosis for diagnosis in sources.diagnoses.current()}
    no_gpm = {fact.index: reason for fact, reason in without_gpm(metrics)}
    unused = {device["index"]: device for device in sources.usage.unused_devices()}
    holders = held_devices(sources, processes)
    free = free_devices(sources, processes)
    rows = []
    for facts in metrics.facts:
        held = tuple(holders.get(facts.index, ()))
        reading = readings.get(facts.index)
        health_reading = health.get(facts.index)
        gpm_reading = gpm.get(facts.index)
        rows.append(DeviceRow(
            facts, reading,
            health_reading if isinstance(health_reading, HealthReading) else None,
            gpm_reading if isinstance(gpm_reading, GpmReading) else None,
            unavailable.get(facts.index, {}), held, diagnoses.get(facts.index),
            free=free.get(facts.index), no_gpm=no_gpm.get(facts.index, ""),
            unused=unused.get(facts.index)))
    return Overview(rows, bool(processes))


def _esc(text: object) -> str:
    return html.escape(str(text))


def _bar(value: float | None, levels: tuple[float, float], text: str) -> str:
    """The value in words on its own line, the bar under it: the words never sit on the
    fill, so they read alike at any fill and in either theme."""
    width = 0.0 if value is None else max(0.0, min(100.0, value))
    return (f"<div class='bar' title='{_esc(text)} (bar to 100%)'><b>{_esc(text)}</b>"
            f"<span><i class='{bar_level(value, levels)}' style='width:{width:.0f}%'></i>"
            "</span></div>")


def _missing(row: DeviceRow, metric: str) -> str:
    """Why a reading is not there, in words: lost, the driver's reason, or just n/a."""
    if row.lost:
        return "<span class='why'>lost</span>"
    reason = row.unavailable.get(metric)
    if reason == MIG_PHYSICAL and row.facts.parent is not None:
        reason = f"whole-GPU reading: see GPU {row.facts.nvml_index}"
    elif metric == "utilization" and row.facts.kind == "mig":
        reason = MIG_UTILIZATION
    return f"<span class='why'>{_esc(reason or NOT_AVAILABLE)}</span>"


def _gpu_cell(row: DeviceRow) -> str:
    facts = row.facts
    cuda = "" if facts.cuda_index is None else f" · CUDA {facts.cuda_index}"
    name = facts.name.rpartition(" MIG ")[2] if facts.kind == "mig" else facts.name
    badges = (f"<span class='badge free' title='{_esc(row.free.why)}'>free</span>"
              if row.free is not None and row.free.free else "")
    swatch = (f"<span style='display:inline-block;width:.7em;height:.7em;border-radius:2px;"
              f"background:{gpu_color(facts.index)};margin-right:4px'></span>")
    prefix = "↳ " if facts.kind == "mig" else ""
    return (f"{swatch}<b>{prefix}{_esc(facts.label)}</b>{_esc(cuda)} {badges}"
            f"<div class='name' title='{_esc(facts.name)} · {_esc(facts.uuid)}'>"
            f"{_esc(name)}</div>")


def _util_cell(row: DeviceRow) -> str:
    if row.lost:
        return f"<span class='why'>{_esc(LOST)}</span>"
    reading = row.reading
    util = reading.utilization_pct if reading else None
    sm = row.gpm.sm_activity_pct if row.gpm else None
    parts = []
    if util is not None:
        parts.append(_bar(util, WORK_LEVELS, f"util {util:.0f}%"))
    else:
        parts.append(f"util: {_missing(row, 'utilization')}")
    if sm is not None:
        parts.append(_bar(sm, WORK_LEVELS, f"SM {sm:.0f}%"))
    elif row.no_gpm and util is not None:
        parts.append(f"<div class='why nogpm' title='{_esc(row.no_gpm)}'>no SM activity "
                     "(no GPM)</div>")
    return "".join(parts)


def _memory_cell(row: DeviceRow) -> str:
    reading = row.reading
    used = reading.memory_used_bytes if reading else None
    total = (reading.memory_total_bytes if reading else None) or row.facts.memory_total_bytes
    if used is None:
        return _missing(row, "memory")
    percent = 100 * used / total if total else None
    text = f"{format_memory(used)} of {format_memory(total)}" if total \
        else format_memory(used)
    return _bar(percent, MEMORY_LEVELS, text)


def _temp_cell(row: DeviceRow) -> str:
    value = row.health.temperature_c if row.health and row.health.temperature_c is not None \
        else (row.reading.temperature_c if row.reading else None)
    if value is None:
        return _missing(row, "temperature")
    slowdown = row.health.temperature_slowdown_c if row.health else None
    hot = slowdown is not None and value >= slowdown
    return (f"<span class='badge'>{value:.0f} °C</span>" if hot else f"{value:.0f} °C")


def _power_cell(row: DeviceRow) -> str:
    power = row.reading.power_w if row.reading else None
    if power is None:
        return _missing(row, "power")
    limit = (row.health.power_limit_w if row.health else None) or row.facts.power_limit_w
    if not limit:
        return f"{power:.0f} W <span class='why'>(no limit reported)</span>"
    return _bar(100 * power / limit, POWER_LEVELS, f"{power:.0f} of {limit:.0f} W")


def _clock_cell(row: DeviceRow) -> str:
    if row.lost:
        return _missing(row, "clocks")
    health = row.health
    if health is None or health.sm_clock_mhz is None:
        if row.facts.kind == "mig":
            return "<span class='why'>see the parent GPU</span>"
        return "<span class='why'>waiting for a clock reading</span>" if health is None \
            else _missing(row, "clocks")
    top = f" / {health.sm_clock_max_mhz:.0f}" if health.sm_clock_max_mhz else ""
    badges = "".join(f"<span class='badge' title='{_esc(w)}'>{_esc(short)}</span>"
                     for short, w in zip(row.throttles(),
                                         clock_event_words(health.clock_event_reasons, True),
                                         strict=False))
    if not badges:
        badges = ("<span class='badge ok'>idle</span>" if health.clock_event_reasons == 1
                  else "<span class='badge ok'>full speed</span>"
                  if health.clock_event_reasons is not None else "")
    return f"{health.sm_clock_mhz:.0f}{top} MHz<div class='held'>{badges}</div>"


def _unused_badge(row: DeviceRow) -> str:
    """"held, unused 42 min" (or "unused 42 min" with no process), the grounds on hover.
    Whether it is held is the unused judgment's word, as in its grounds and the summary
    under the table: the row's process list can be a pass or more ahead of it (a pass
    waits for its processes' owners, ``apps/usage.py``)."""
    if row.unused is None:
        return ""
    held = "held, " if row.unused["processes"] else ""
    words = f"{held}unused {minutes_text(row.unused['unused_s'])}"
    return (f"<br><span class='badge unused' data-unused title='{_esc(row.unused['why'])}'>"
            f"{_esc(words)}</span>")


def _procs_cell(row: DeviceRow) -> str:
    if not row.processes:
        return "<span class='why'>none</span>" + _unused_badge(row)
    people: dict[str, list[str]] = {}
    for process in row.processes:
        who = (process.user or "?") + (" (you)" if process.mine else "")
        if process.pid is None or process.identity in (OTHER, UNKNOWN):
            who = ANOTHER_CONTAINER if process.identity == OTHER else "?"
        elif process.identity != SAME:  # paired or shared: say how sure
            who += f" ({process.identity})"
        if process.notebook:
            people.setdefault(who, []).append(process.notebook.rsplit("/", 1)[-1])
        else:
            people.setdefault(who, [])
    whose = "; ".join(f"<b>{_esc(user)}</b>" + (f" {_esc(', '.join(sorted(set(books))))}"
                                                 if books else "")
                      for user, books in people.items())
    count = len(row.processes)
    return f"{count} process{'es' if count != 1 else ''}: {whose}" + _unused_badge(row)


def _links_cell(row: DeviceRow, routes: dict[str, str], prefix: str) -> str:
    return " ".join(f"<a href='{_esc(prefix + path.lstrip('/'))}' title='{_esc(routes[path])}'>"
                   f"{_esc(short)}</a>" for path, short in GPU_LINKS if path in routes)


def _diagnosis_cell(row: DeviceRow) -> str:
    """The cause and one figure on one line; the whole finding and what to try a click
    away (the page keeps an opened one open across updates)."""
    if row.lost:
        brief = f"{row.facts.label}: {LOST}"
        details = f"{brief}. The other GPUs carry on; it is retried."
    elif row.diagnosis is not None:
        brief, details = row.diagnosis.brief(), row.diagnosis.line()
        advice = row.diagnosis.advice_line()
        if advice:
            details = f"{details}; {advice}"
    else:
        return ""
    return (f"<details class='dx'><summary>{_esc(brief)}</summary>{_esc(details)}"
            "</details>")


def overview_html(sources: DashboardSources, routes: dict[str, str],
                  link_prefix: str = "", overview: Overview | None = None) -> str:
    """The overview table as HTML. Its dashboard links are relative to the page (``/`` and
    ``/GPU-Overview`` sit side by side, behind a proxy prefix too), after ``link_prefix``."""
    overview = overview or build_overview(sources)
    if not overview.rows:
        return f"{STYLE}<div class='nvo'><p class='empty'>No GPU to show.</p></div>"
    head = "".join(f"<th style='width:{width}'>{_esc(title)}</th>"
                   for _, title, width in COLUMNS)
    body = []
    for row in overview.rows:
        kind = "mig" if row.facts.kind == "mig" else "gpu"
        lost = " lost" if row.lost else ""
        free = " data-free" if row.is_free else ""
        cells = (_gpu_cell(row), _util_cell(row), _memory_cell(row), _temp_cell(row),
                 _power_cell(row), _clock_cell(row), _procs_cell(row))
        # Rows are keyed, so the page's morph moves them rather than rewrites them.
        body.append(f"<tr class='main {kind}{lost}' data-key='gpu-{row.facts.index}' "
                    f"data-row='{row.facts.index}'{free}>"
                    + "".join(f"<td class='{key}'>{cell}</td>"
                              for (key, _, _), cell in zip(COLUMNS, cells, strict=True))
                    + "</tr>")
        links = _links_cell(row, routes, link_prefix)
        body.append(f"<tr class='diag {kind}{lost}' data-key='dx-{row.facts.index}' "
                    f"data-row='{row.facts.index}'{free}>"
                    f"<td class='links' colspan='{LINK_COLUMNS}'>{links}</td>"
                    f"<td colspan='{len(COLUMNS) - LINK_COLUMNS}'>{_diagnosis_cell(row)}"
                    "</td></tr>")
    empty = "" if overview.any_process else f"<p class='empty'>{_esc(NO_PROCESSES)}.</p>"
    unused = [row.unused["why"] for row in overview.rows if row.unused is not None]
    if unused:  # what an admin reclaims a server by, said in words under the table
        empty += (f"<p class='why unused-summary'><b>Unused for "
                  f"{minutes_text(sources.usage.unused_after_s)} or more:</b> "
                  f"{_esc('; '.join(unused))}.</p>")
    latest = sources.metrics.history.latest()
    stamp = reading_time(latest.time_s if latest else time.time())
    free_count = len(overview.free)
    # The box is the reader's: the morph keeps its checked state (a property, not markup).
    choose = (f"<div class='filter'><span data-free-count><b>{free_count} of "
              f"{len(overview.rows)}"
              f"</b> free</span><label title='{_esc(FREE_RULE)}'><input type='checkbox' "
              "class='free-only'> show only the free devices</label></div>")
    return (f"{STYLE}<div class='nvo'>{choose}<table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>{empty}"
            f"<div class='why' style='margin-top:4px'>Memory in GiB (2<sup>30</sup> bytes), "
            f"as nvidia-smi counts it. Reading of {stamp}. {_esc(FREE_RULE)}</div></div>")


@dataclass
class OverviewFeed:
    """The overview as one text row (replace mode), rebuilt at most once a second."""

    sources: DashboardSources
    routes: dict[str, str]
    mode = "replace"
    refresh_s = REFRESH_S  # the broadcaster sends a replace feed at most this often
    _cache: tuple[int, Rows] | None = None

    def rows(self, samples: Sequence[Sample]) -> Rows:  # noqa: ARG002 - reads the history
        second = int(time.time() / REFRESH_S)
        if self._cache is None or self._cache[0] != second:
            table = overview_html(self.sources, self.routes, link_prefix="")
            self._cache = (second, Rows({}, {"html": [table]}))
        return self._cache[1]


class OverviewView:
    """The page: the table, set in place whenever the stream replaces it."""

    def __init__(self, sources: DashboardSources, feed: OverviewFeed) -> None:
        table = StreamedHtml(overview_html(sources, feed.routes, link_prefix=""),
                             name="overview")
        self.root = table.div
        self.live = LiveView(table.source)


# The overview at ``/``: the same stream, without BokehJS. A frame is the header of
# ``stream/frames.py`` (the table is its one text cell). The socket is the dashboards' own
# (stream_client.js): closed while the page is hidden (a background browser tab, a background
# JupyterLab tab, a frame with no size) and opened again, from the whole picture, when shown.
ROOT_SCRIPT = """
(() => {
""" + IN_PLACE_JS + STREAM_CLIENT_JS + """
  const box = document.getElementById("overview");
  let shown = box.innerHTML;
  const loc = window.location;
  const theme = new URLSearchParams(loc.search).get("theme");
  const live = window.nvdashboardLive = {
    socket: null, hidden: false, parentHidden: false, retryMs: 500, connects: 0, frames: 0,
  };
  function url() {
    const params = new URLSearchParams({since: "-1"});
    const token = new URLSearchParams(loc.search).get("token");
    if (token) params.set("token", token);
    const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
    const base = loc.pathname.replace(/\\/+$/, "");
    return `${scheme}//${loc.host}${base}/GPU-Overview/stream?${params}`;
  }
  function onFrame(buffer) {
    const view = new DataView(buffer);
    const length = view.getUint32(4, true);
    const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 8, length)));
    const text = ((header.text || {}).html || [])[0];
    if (text !== undefined && text !== shown) {
      morphInto(box, text);
      shown = text;
    }
    live.frames++;
    live.retryMs = 500;
  }
  if (theme) document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("a[href]");
    if (link && !link.href.includes("?")) link.href += `?theme=${encodeURIComponent(theme)}`;
  }, true);
  openStream(live, url, onFrame);
})();
"""


def root_page(sources: DashboardSources, routes: dict[str, str], theme: str,
              colors: tuple[str, str], notice: str) -> str:
    """The whole ``/`` page: the overview (when there are GPUs), then every dashboard."""
    background, foreground = colors
    query = f"?theme={html.escape(theme)}" if theme != "light" else ""
    links = " · ".join(f'<a href="{_esc(path.lstrip("/"))}{query}">{_esc(title)}</a>'
                       for path, title in routes.items())
    table = ""
    script = ""
    if sources.metrics.facts:
        table = f"<div id='overview'>{overview_html(sources, routes)}</div>"
        script = f"<script>{ROOT_SCRIPT}</script>"
    notice_html = (f"<span style='font-size:13px;font-weight:normal;margin-left:1em'>{notice}"
                   "</span>") if notice else ""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>NVDashboard</title>"
        f"<style>html,body{{background:{background};color:{foreground};margin:0;"
        "font-family:system-ui,sans-serif}} body{padding:6px 10px}"
        "h1{font-size:18px;margin:2px 0 6px} nav{font-size:13px;margin:8px 0}"
        "nav a,#overview a{color:#3b82f6;text-decoration:none}</style></head>"
        f"<body><h1>NVDashboard: GPU overview{notice_html}</h1>{table}"
        f"<nav><b>Dashboards:</b> {links}</nav>{script}</body></html>")
