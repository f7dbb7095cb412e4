"""The /GPU-Health dashboard: one row per GPU with what a user checks when a job is slow.

Clocks against their maxima, P-state and the clocks-event (throttle) reasons in words;
temperature against the slowdown and shutdown thresholds; power against its limit; fan;
ECC counts; remapped rows; XID events. A reading past its threshold is marked and the
reason written under it (``metrics.health.assess``). XID events stay listed: every health
reading carries all the events seen since the server started.

The clock events say what the GPU does now, and under them, marked, what the diagnosis says
of the last 2 minutes: the very ``throttled`` finding ``/diagnosis.json`` serves, from the
server's one ``DeviceDiagnoses``, so the table and the diagnosis can never disagree (a GPU
that cools between its hot spells reads "software thermal slowdown" now, and "hardware
thermal slowdown 61%" over the window, in both places).

The rows come from ``Sample.extra[HEALTH_FAMILY]`` through the broadcast stream like the
bars (``HealthFeed``, mode "replace"); a bar chart of how close each GPU runs to the limits
where higher is worse (temperature against its slowdown threshold, power against its limit)
sits above the table. The table is drawn in the browser from the same rows, by a small
script on the source, so nothing goes back to the server; a table whose text did not change
is not drawn again.

Above them, the same readings over time (``health_timeline``): temperature with the
slowdown threshold, power with the limit, SM clock with its maximum (dashed, in the GPU's
colour) and the clocks-event reasons as rows ("power cap (SW)", "HW slowdown: thermal,
power brake", ...), so a throttle five minutes ago shows when it happened and why. They
stream as a second feed of the same route (``<route>/timeline/stream``,
``HealthFeed.timeline``): an "append" family per window beside the table's "replace" one,
each encoded once per tick for every page. A sample without a health reading is a gap,
never 0.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from bokeh.layouts import column
from bokeh.models import ColumnDataSource, CustomJS, Div

from ..diagnosis import Diagnosis, Finding
from ..diagnosis.live import DEFAULT_WINDOW_S
from ..export.dcgm import mig_profile
from ..metrics import GpuFacts, Metrics, Sample
from ..metrics.families import HEALTH_FAMILY, HealthReading, device_reading
from ..metrics.health import (
    CLOCK_EVENT_GROUPS,
    assess,
    clock_event_groups,
    clock_event_words,
    xid_words,
)
from ..stream.broadcaster import Feed
from ..stream.frames import Rows
from .components import (
    NOT_AVAILABLE,
    Panel,
    Series,
    Timeline,
    TimelineFeed,
    gpu_color,
    gpu_label,
    row_offset,
    window_label,
)
from .in_place import FULL_WIDTH_CSS, IN_PLACE_JS
from .live import LiveView
from .sources import DashboardSources

# Table columns: key -> heading. ``<key>_mark`` holds the reason a cell is marked, or "".
HEALTH_COLUMNS = {
    "gpu": "GPU",
    "clocks": "Clocks (now / max)",
    "reasons": "Clock events",
    "temperature": "Temperature",
    "power": "Power",
    "fan": "Fan",
    "ecc": "ECC errors",
    "rows": "Remapped rows",
    "xid": "XID events",
}
# Temperature, power and clocks drift over seconds, and the table is read, not watched: the
# table and the timelines go out (and so repaint) every 5 s, which keeps an open Health tab
# at about 2% of a core in software rendering (benchmarks/dashboard_overhead.py). A
# throttle of one tick still shows: every sample travels, five seconds of them a frame.
HEALTH_REFRESH_S = 5.0
# assess() group -> the column its mark goes on.
MARK_COLUMNS = {"clocks": "reasons", "temperature": "temperature", "power": "power",
                "ecc": "ecc", "rows": "rows", "xid": "xid"}
# Bars: column -> (legend, colour). Only readings where higher is worse: the SM clock
# (higher is better) is on the timeline against its maximum instead.
LIMIT_BARS = {
    "temperature_pct": ("temperature, % of its slowdown threshold", "#d62728"),
    "power_pct": ("power, % of its power limit", "#ff7f0e"),
}
LIMIT_AXIS_LABEL = "% of each GPU's own limit (100 = at the limit)"
LIMIT_SCALE = (0, 20, 40, 60, 80, 100, 120)  # the bars' scale: a bar past 120 stops there
# Said above the chart, where it wraps: what 100 means for each bar.
LIMIT_TITLE = ("<b>Near a limit</b> (higher is worse; 100 = at the limit): temperature "
               "against its slowdown threshold, where the clocks drop; power against its "
               "power limit, where the power cap holds the clocks down.")
WAITING = "waiting for the first health reading"


def _pct(value: float | None, limit: float | None) -> float:
    return math.nan if value is None or not limit else 100.0 * value / limit


def _number(value: float | None, unit: str, digits: int = 0) -> str:
    return NOT_AVAILABLE if value is None else f"{value:.{digits}f} {unit}"


def _clocks(reading: HealthReading) -> str:
    sm = f"SM {_number(reading.sm_clock_mhz, 'MHz')} / {_number(reading.sm_clock_max_mhz, 'MHz')}"
    memory = (f"memory {_number(reading.memory_clock_mhz, 'MHz')} / "
              f"{_number(reading.memory_clock_max_mhz, 'MHz')}")
    pstate = "P-state " + (NOT_AVAILABLE if reading.pstate is None else f"P{reading.pstate}")
    return "\n".join((sm, memory, pstate))


def _reasons(reading: HealthReading) -> str:
    if reading.clock_event_reasons is None:
        return NOT_AVAILABLE
    return "now: " + ("\n".join(clock_event_words(reading.clock_event_reasons))
                      or "none: full speed")


# The diagnosis' window the clock-events mark quotes: /diagnosis.json's default.
THROTTLE_WINDOW = f"over the last {window_label(DEFAULT_WINDOW_S)} (as /diagnosis.json)"


def throttle_mark(finding: Finding) -> str:
    """The diagnosis' ``throttled`` finding, word for word, as the clock events' mark."""
    return f"{THROTTLE_WINDOW}: {finding.summary()}"


def _temperature(reading: HealthReading) -> str:
    limits = (f"slowdown {_number(reading.temperature_slowdown_c, '°C')}, "
              f"shutdown {_number(reading.temperature_shutdown_c, '°C')}")
    return f"{_number(reading.temperature_c, '°C')}\n{limits}"


def _power(reading: HealthReading, why: str = "") -> str:
    if reading.power_w is None and reading.power_limit_w is None:
        return f"power: {why or NOT_AVAILABLE}"
    if reading.power_limit_w is None:
        return f"{_number(reading.power_w, 'W')} (no limit reported)"
    return f"{_number(reading.power_w, 'W')} of {_number(reading.power_limit_w, 'W')}"


def _ecc_pair(corrected: int | None, uncorrected: int | None) -> str:
    return (f"{NOT_AVAILABLE if corrected is None else corrected} corrected, "
            f"{NOT_AVAILABLE if uncorrected is None else uncorrected} uncorrected")


def _ecc(reading: HealthReading) -> str:
    if reading.ecc_volatile_corrected is None and reading.ecc_aggregate_corrected is None:
        return NOT_AVAILABLE
    since_load = _ecc_pair(reading.ecc_volatile_corrected, reading.ecc_volatile_uncorrected)
    lifetime = _ecc_pair(reading.ecc_aggregate_corrected, reading.ecc_aggregate_uncorrected)
    return f"since driver load: {since_load}\nlifetime: {lifetime}"


def _rows(reading: HealthReading) -> str:
    if reading.remapped_rows_pending is None:
        return NOT_AVAILABLE
    if reading.remapped_rows_failed:
        return "remapping failed"
    return "remap pending" if reading.remapped_rows_pending else "none pending"


def _xids(reading: HealthReading) -> str:
    if not reading.xid_events:
        return "none"
    return "\n".join(f"{time.strftime('%H:%M:%S', time.localtime(event.time_s))} "
                     f"{xid_words(event)}" for event in reading.xid_events)


LOST = ("GPU lost: it stopped answering (fallen off the bus, reset or removed); it is "
        "retried, and the other GPUs carry on")
CANNOT_READ = "cannot be read while the GPU is lost"


def lost_cells(reading: HealthReading | None) -> dict[str, str]:
    """A lost GPU's cells: said once, where the clocks would be, and no "none" anywhere."""
    cells = {**dict.fromkeys(HEALTH_COLUMNS, CANNOT_READ),
             **{f"{key}_mark": "" for key in HEALTH_COLUMNS}}
    cells["clocks"] = "GPU lost"
    cells["clocks_mark"] = LOST
    events = reading.xid_events if reading is not None else ()
    cells["xid"] = _xids(reading) if events else "none recorded before it was lost"
    if events:
        cells["xid_mark"] = f"the newest: {xid_words(events[-1])}"
    return cells


def health_cells(reading: HealthReading | None, lost: bool = False,
                 unavailable: dict[str, str] | None = None,
                 throttled: Finding | None = None) -> dict[str, str]:
    """One GPU's table cells (without the GPU column) and the reason each is marked;
    ``throttled``: the diagnosis' throttled finding on this GPU over its window, if any."""
    if lost:
        return lost_cells(reading)
    if reading is None:
        return {**dict.fromkeys(HEALTH_COLUMNS, WAITING),
                **{f"{key}_mark": "" for key in HEALTH_COLUMNS}}
    why = (unavailable or {}).get("power", "")
    cells = {"clocks": _clocks(reading), "reasons": _reasons(reading),
             "temperature": _temperature(reading), "power": _power(reading, why),
             "fan": _number(reading.fan_pct, "%") if reading.fan_pct is not None
             else "no fan reported", "ecc": _ecc(reading), "rows": _rows(reading),
             "xid": _xids(reading)}
    marks = {f"{key}_mark": "" for key in HEALTH_COLUMNS}
    for group, reason in assess(reading).items():
        marks[f"{MARK_COLUMNS[group]}_mark"] = reason
    if throttled is not None:  # the window's judgment, which the moment's must not contradict
        marks["reasons_mark"] = throttle_mark(throttled)
    return {**cells, **marks}


def throttled_findings(diagnoses: Sequence[Diagnosis]) -> dict[int, Finding]:
    """Device row -> its ``throttled`` finding, where the diagnosis has one."""
    return {diagnosis.row: finding for diagnosis in diagnoses
            for finding in diagnosis.findings if finding.cause == "throttled"}


@dataclass(frozen=True)
class HealthFeed:
    """One row per physical GPU from the newest sample's health readings."""

    facts: tuple[GpuFacts, ...]
    # Row -> {metric: why it is not available} (the NVML reader's), for cells with no value.
    unavailable: Callable[[], dict[int, dict[str, str]]] = dict
    # The same readings over time, streamed beside the table (``TIMELINE_STREAM``).
    timeline: TimelineFeed = TimelineFeed(())
    # Every device's diagnosis over /diagnosis.json's default window (the server's
    # ``DeviceDiagnoses.current``): the clock events quote its throttled finding.
    diagnoses: Callable[[], Sequence[Diagnosis]] = tuple
    mode = "replace"
    refresh_s = HEALTH_REFRESH_S  # a table people read, with its history above it

    @property
    def gpus(self) -> list[GpuFacts]:
        return [fact for fact in self.facts if fact.kind == "gpu"]

    @property
    def labels(self) -> list[str]:
        return [gpu_label(fact, short=True) for fact in self.gpus]

    def mig_note(self, fact: GpuFacts) -> str:
        """Under a GPU in MIG mode: its MIG devices, whose health is the whole GPU's."""
        children = [mig_profile(child, fact) or child.name for child in self.facts
                    if child.kind == "mig" and child.parent == fact.index]
        if not fact.mig_enabled and not children:
            return ""
        devices = ", ".join(children) if children else "no MIG device created"
        return f" · MIG enabled: {devices} (these readings are the whole GPU's)"

    def rows(self, samples: Sequence[Sample]) -> Rows:
        family = samples[-1].extra.get(HEALTH_FAMILY) if samples else None
        readings = family if isinstance(family, dict) else {}
        lost = {r.index for r in samples[-1].gpus if r.lost} if samples else set()
        unavailable = self.unavailable()
        throttled = throttled_findings(self.diagnoses()) if samples else {}
        text: dict[str, list[str]] = {key: [] for key in HEALTH_COLUMNS}
        text.update({f"{key}_mark": [] for key in HEALTH_COLUMNS})
        numeric: dict[str, list[float]] = {key: [] for key in LIMIT_BARS}
        for fact, label in zip(self.gpus, self.labels, strict=True):
            reading = readings.get(fact.index)
            cells = health_cells(reading if isinstance(reading, HealthReading) else None,
                                 fact.index in lost, unavailable.get(fact.index, {}),
                                 throttled.get(fact.index))
            cells["gpu"] = gpu_label(fact) + self.mig_note(fact)
            for key, value in cells.items():
                text[key].append(value)
            text.setdefault("y", []).append(label)
            health = reading if isinstance(reading, HealthReading) else None
            numeric["temperature_pct"].append(
                _pct(health and health.temperature_c, health and health.temperature_slowdown_c))
            numeric["power_pct"].append(_pct(health and health.power_w,
                                             health and health.power_limit_w))
        return Rows({key: np.array(values, dtype=float) for key, values in numeric.items()},
                    text)


def health_value(index: int, field: str) -> Callable[[Sample], float | None]:
    """One health reading of device row ``index`` (None when not read or not available)."""

    def value(sample: Sample) -> float | None:
        reading = device_reading(sample.extra, HEALTH_FAMILY, index, HealthReading)
        return None if reading is None else getattr(reading, field)

    return value


def clock_event_row(index: int, group: str, level: float) -> Callable[[Sample], float | None]:
    """``level`` while GPU ``index``'s clocks-event mask is in ``group``, else None."""

    def value(sample: Sample) -> float | None:
        reading = device_reading(sample.extra, HEALTH_FAMILY, index, HealthReading)
        mask = None if reading is None else reading.clock_event_reasons
        return level if group in clock_event_groups(mask) else None

    return value


# Timeline panels: (title, axis label, unit, reading, its reference, the reference's name).
HEALTH_PANELS = (
    ("Temperature (dashed: slowdown threshold)", "°C", "°C", "temperature_c",
     "temperature_slowdown_c", "slowdown"),
    ("Power (dashed: power limit)", "W", "W", "power_w", "power_limit_w", "limit"),
    ("SM clock (dashed: its maximum)", "MHz", "MHz", "sm_clock_mhz", "sm_clock_max_mhz",
     "max"),
)
REASON_ROWS = tuple(name for name, _ in CLOCK_EVENT_GROUPS)
TIMELINE_STREAM = "timeline"  # <route>/timeline/stream (registry.py)


def health_timeline(facts: Sequence[GpuFacts]) -> TimelineFeed:
    """Per physical GPU, in its own colour: temperature, power and SM clock, each with its
    limit dashed, and a panel of rows saying which clocks-event reasons were on."""
    gpus = [fact for fact in facts if fact.kind == "gpu"]
    panels = []
    for title, y_label, unit, field, reference, name in HEALTH_PANELS:
        series = []
        for fact in gpus:
            series.append(Series(f"{field}{fact.index}", fact.label, gpu_color(fact.index),
                                 health_value(fact.index, field), gpu=fact.index))
            series.append(Series(f"{reference}{fact.index}", f"{fact.label} {name}",
                                 gpu_color(fact.index), health_value(fact.index, reference),
                                 gpu=fact.index, dash="dashed", in_legend=False))
        panels.append(Panel(title, y_label, series, unit=unit))
    reasons = [
        Series(f"reasons{fact.index}_{row}", fact.label, gpu_color(fact.index),
               clock_event_row(fact.index, group,
                               row + row_offset(position, len(gpus))),
               gpu=fact.index, in_legend=row == 0)
        for position, fact in enumerate(gpus) for row, group in enumerate(REASON_ROWS)]
    panels.append(Panel("Clock-event reasons: what held the clocks, and when",
                        "", reasons, y_labels=REASON_ROWS))
    return TimelineFeed(tuple(panels), refresh_s=HEALTH_REFRESH_S)


# Draws the limit bars and the table from the source's rows whenever the stream replaces
# them, as HTML set in place: a bar that moved is one width changed, and the same text is not
# drawn again. (The bars were a Bokeh figure: its canvas and two axes, painted again at each
# update, were an eighth of what the page cost a browser; benchmarks/README.md.)
RENDER_TABLE_JS = IN_PLACE_JS + """
const d = source.data;
const n = d.gpu ? d.gpu.length : 0;
const esc = (t) => String(t).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;",
  ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);
const scale = ticks[ticks.length - 1];
const position = (pct) => `${(100 * Math.min(Math.max(pct, 0), scale) / scale).toFixed(2)}%`;
let bars = "<div class='limits'>";
for (let i = 0; i < n; i++) {
  const said = limits.map(([key, , name]) => `${name}: ${
    Number.isFinite(d[key][i]) ? `${d[key][i].toFixed(0)}% of its limit` : "not available"}`);
  bars += `<div class='limit-gpu' data-key='g${i}'>${esc(d.y[i])}</div>` +
    `<div class='limit-track' data-key='t${i}' title='${esc(said.join("; "))}'>` +
    limits.map(([key, color]) => `<div class='limit-bar' style='width:${
      Number.isFinite(d[key][i]) ? position(d[key][i]) : "0%"};background:${color}'></div>`)
      .join("") + `<div class='limit-line' style='left:${position(100)}'></div></div>`;
}
bars += "<div></div><div class='limit-scale'>" + ticks.map((tick) =>
  `<span style='left:${position(tick)}'>${tick}</span>`).join("") +
  `</div><div></div><div class='limit-axis'>${esc(axis)}</div></div>`;
setDivHtml(bars_div, style + bars);
let html = style + "<table class='health'><thead><tr>" +
  columns.map(([, title]) => `<th>${esc(title)}</th>`).join("") + "</tr></thead><tbody>";
for (let i = 0; i < n; i++) {
  html += "<tr>" + columns.map(([key]) => {
    const mark = (d[key + "_mark"] || [])[i] || "";
    const text = esc(d[key][i]).replace(/\\n/g, "<br>");
    return mark ? `<td class="marked">${text}<div class="why">&#9888; ${esc(mark)}</div></td>`
                : `<td>${text}</td>`;
  }).join("") + "</tr>";
}
html += "</tbody></table>";
setDivHtml(div, html);
"""
TABLE_STYLE = """<style>
table.health { border-collapse: collapse; font-size: 12px; width: 100%; color: inherit; }
table.health th { text-align: left; padding: 4px 8px;
                  border-bottom: 2px solid rgba(128,128,128,.6); }
table.health td { vertical-align: top; padding: 4px 8px;
                  border-bottom: 1px solid rgba(128,128,128,.35); }
table.health td.marked { background: rgba(214,39,40,.16); border-left: 3px solid #d62728; }
table.health .why { font-weight: 600; margin-top: 2px; }
.limits { display: grid; grid-template-columns: max-content 1fr; gap: 6px 8px;
          font-size: 12px; margin: 0.4em 0 0.6em; padding: 0 2em 0 1em; width: 100%;
          box-sizing: border-box; align-items: center; }
.limit-track { position: relative; height: 26px; background: rgba(128,128,128,.1); }
.limit-bar { height: 12px; margin-top: 1px; }
.limit-line { position: absolute; top: 0; bottom: 0; border-left: 1px dashed #d62728; }
.limit-scale { position: relative; height: 1.2em; border-top: 1px solid rgba(128,128,128,.6); }
.limit-scale span { position: absolute; transform: translateX(-50%); opacity: .8; }
.limit-axis { font-style: italic; text-align: center; opacity: .8; }
</style>"""


def limit_legend() -> str:
    """The bars' legend as HTML above the chart: BokehJS would draw a legend inside the
    canvas again at every update (benchmarks/README.md)."""
    return "".join(
        f"<span style='margin-right:1.5em;white-space:nowrap'><span style='display:inline-block;"
        f"width:0.9em;height:0.9em;background:{color};vertical-align:middle'></span> "
        f"{html.escape(label)}</span>" for label, color in LIMIT_BARS.values())


class HealthDashboard:
    """The timelines, then the limit bars above the per-GPU table (one streamed source)."""

    def __init__(self, sources: DashboardSources, feed: HealthFeed) -> None:
        metrics = sources.metrics
        self.source = ColumnDataSource(
            {"y": [], **{key: [] for key in LIMIT_BARS},
             **{key: [] for key in HEALTH_COLUMNS},
             **{f"{key}_mark": [] for key in HEALTH_COLUMNS}}, syncable=False)
        # The bars: HTML that the table's script draws (RENDER_TABLE_JS), as wide as the page.
        self.limit_bars = Div(text="", sizing_mode="stretch_width", syncable=False,
                              name="limit-bars", stylesheets=[FULL_WIDTH_CSS])
        explanation = Div(text=(
            "<div style='font-size:12px;margin:0.3em 1em'>A marked cell is past its threshold; "
            "the reason is written under it. XID events stay listed until the server "
            "restarts.</div>"), sizing_mode="stretch_width")
        self.table = Div(text=f"<p>{WAITING}</p>", sizing_mode="stretch_width",
                         syncable=False, name="health-table")
        self.source.js_on_change("data", CustomJS(
            args={"source": self.source, "div": self.table, "style": TABLE_STYLE,
                  "columns": [[key, title] for key, title in HEALTH_COLUMNS.items()],
                  "bars_div": self.limit_bars, "ticks": list(LIMIT_SCALE),
                  "axis": LIMIT_AXIS_LABEL,
                  # Each bar's key, colour and what its hover calls it ("temperature").
                  "limits": [[key, color, label.split(",")[0]]
                             for key, (label, color) in LIMIT_BARS.items()]},
            code=RENDER_TABLE_JS))
        self.timeline = Timeline(feed.timeline, sources.timeline_windows_s,
                                 metrics.interval_s,
                                 gpu_names={fact.index: fact.label for fact in metrics.facts})
        limit_title = Div(text=f"<div style='font-size:12px;margin:0.6em 1em 0'>"
                          f"{LIMIT_TITLE}<div>{limit_legend()}</div></div>",
                          sizing_mode="stretch_width", name="limit-title")
        self.root = column(self.timeline.root, limit_title, self.limit_bars, explanation,
                           self.table, sizing_mode="stretch_width")
        self.live = LiveView(self.source)
        self.timeline.live.stream = TIMELINE_STREAM
        self.also_live = (self.timeline.live,)


def gpu_health(metrics: Metrics,
               diagnoses: Callable[[], Sequence[Diagnosis]] = tuple) -> HealthFeed:
    facts = tuple(metrics.facts)
    return HealthFeed(facts, metrics.nvml.unavailable, health_timeline(facts), diagnoses)


def health_feed(sources: DashboardSources) -> HealthFeed:
    """The route's feed: the table quotes the server's one diagnosis of each GPU."""
    return gpu_health(sources.metrics, sources.diagnoses.current)


def health_timeline_feed(feed: Feed) -> Feed:
    """The route's second stream: the timelines of its ``HealthFeed``."""
    assert isinstance(feed, HealthFeed), "GPU-Health streams a HealthFeed"
    return feed.timeline


def health_dashboard(sources: DashboardSources, feed: Feed | None) -> HealthDashboard:
    assert isinstance(feed, HealthFeed), "GPU-Health streams a HealthFeed"
    return HealthDashboard(sources, feed)
