"""Reusable dashboard components: per-GPU bars and shared-axis timelines.

Each comes in two halves. The *feed* (``BarsFeed``, ``TimelineFeed``) turns samples the
sampler already collected into rows; it is built once per route and shared by every page,
because the broadcaster encodes its rows once per tick for all of them. The *view*
(``BarsView``, ``Timeline``) is what one page draws those rows with: a ``source`` that only
the page's own script fills (``apps/live.py``), and a ``root`` to show. Bars are HTML set in
place (``in_place.py``); timelines are bands of one Bokeh figure.

Units: GPU and host memory in binary units as nvidia-smi shows them (1 GiB = 2^30 bytes,
1 MiB = 2^20 bytes); throughput in decimal units (1 GB/s = 10^9 bytes per second), as
NVIDIA quotes link speeds. Every axis label says which.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from bokeh.events import Reset
from bokeh.layouts import column, row
from bokeh.models import (
    AllIndices,
    CDSView,
    CheckboxButtonGroup,
    ColumnDataSource,
    CoordinateMapping,
    CustomJS,
    CustomJSHover,
    DatetimeAxis,
    DatetimeTicker,
    Div,
    FixedTicker,
    Grid,
    HoverTool,
    LayoutDOM,
    Line,
    LinearScale,
    MonthsTicker,
    MultiLine,
    Patches,
    RadioButtonGroup,
    Range1d,
    UnionRenderers,
    YearsTicker,
)
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from ..export.dcgm import mig_profile
from ..metrics import GpuFacts, GpuReading, Sample, parent_facts
from ..metrics.sampler import rows_total
from ..stream.broadcaster import TIME_KEY
from ..stream.downsample import bucket_seconds
from ..stream.frames import Rows
from .in_place import StreamedHtml
from .live import REPLACE_REDRAW_MS, TIMELINE_REDRAW_MS, BandsView, LiveView

GB = 1e9
MB = 1e6
GIB = float(2**30)
MIB = float(2**20)
NOT_AVAILABLE = "not available"


def gpu_color(index: int) -> str:
    return Category10_10[index % len(Category10_10)]


def gpu_label(facts: GpuFacts, short: bool = False, gpu: GpuFacts | None = None) -> str:
    """nvidia-smi's index, CUDA's position and the name; a MIG device under its GPU.

    ``short`` leaves the name out, for the rotated group labels of grouped bars; ``gpu`` is
    a MIG device's GPU, whose memory its profile name needs (``export.dcgm.mig_profile``).
    """
    cuda = "" if facts.cuda_index is None else f" (CUDA {facts.cuda_index})"
    prefix = "  ↳ " if facts.kind == "mig" else ""
    if short:
        return f"{prefix}{facts.label}{cuda}"
    name = facts.name
    if facts.kind == "mig":  # just the MIG profile, e.g. "3g.40gb", under its GPU's row
        name = mig_profile(facts, gpu) or facts.name
    return f"{prefix}{facts.label}{cuda}: {name}"


def number_or_nan(value: float | None) -> float:
    """Bokeh draws NaN as a gap, which is how 'not available' looks on a timeline."""
    return math.nan if value is None else float(value)


def duration_text(seconds: float) -> str:
    """``7 s``, ``2 min 05 s``, ``1 h 02 min``."""
    whole = max(0, int(round(seconds)))
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def format_memory(value: float | None) -> str:
    """Memory as nvidia-smi counts it: GiB with one decimal, MiB below 1 GiB."""
    if value is None:
        return NOT_AVAILABLE
    if abs(value) < GIB:
        return f"{value / MIB:.0f} MiB"
    return f"{value / GIB:.1f} GiB"


def reading_time(epoch_s: float) -> str:
    """``14:03:27``: the time of day a reading was taken, as the status bar prints it."""
    return time.strftime("%H:%M:%S", time.localtime(epoch_s))


def format_gb_per_s(value: float | None) -> str:
    return NOT_AVAILABLE if value is None else f"{value / GB:.2f} GB/s"


def format_pct(value: float | None) -> str:
    return NOT_AVAILABLE if value is None else f"{value:.0f}%"


def legend_text(value: float | None, unit: str) -> str:
    """A value as a timeline's legend prints it (``live_client.js``'s ``formatValue``):
    ``42%``, ``7.25 GB/s``, ``n/a``."""
    if value is None or not math.isfinite(value):
        return "n/a"
    digits = 0 if unit == "%" or abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:.{digits}f}{'' if unit == '%' else ' '}{unit}".strip()


# A bar's colour says only good, warn or bad: the GPU's own colour is its swatch and its
# lines' (issue 44: a red bar read as an alarm because its GPU's colour was red).
LEVEL_COLORS = {"good": "#76b900", "warn": "#e8a100", "bad": "#d62728"}
# Where a bar turns from good to warn and from warn to bad, in percent of its full scale.
# Utilization, SM activity and link rates are work, never an alarm. Memory: a job near the
# end of its memory fails to allocate (our choice: warn from 80%, bad from 95%). Power: at
# its limit the driver caps the clocks (health's "power cap"): warn from 90%, bad at 100%.
WORK_LEVELS = (math.inf, math.inf)
MEMORY_LEVELS = (80.0, 95.0)
POWER_LEVELS = (90.0, 100.0)


def bar_level(percent: float | None, levels: tuple[float, float]) -> str:
    """``good``, ``warn`` or ``bad``: the key of a bar's colour in ``LEVEL_COLORS``."""
    warn, bad = levels
    if percent is None or percent < warn:
        return "good"
    return "warn" if percent < bad else "bad"


@dataclass(frozen=True)
class BarMetric:
    """One bar per GPU: its value, its full scale on that GPU, how to print it, and where
    its colour turns to warn and bad (``bar_level``)."""

    label: str
    read: Callable[[GpuReading], float | None]
    full_scale: Callable[[GpuFacts], float | None]
    describe: Callable[[GpuReading, GpuFacts], str]
    levels: tuple[float, float] = WORK_LEVELS


@dataclass(frozen=True)
class Bar:
    """One bar as ``BarsFeed`` decided it; the page only shows it."""

    key: str  # one per GPU and metric: the page's morph keeps that row's elements
    gpu: str  # the device's label (``gpu_label``)
    swatch: str  # the GPU's own colour, on its swatch only
    metric: str  # what the bar shows, e.g. "utilization" or "TX"
    share: float | None  # % of the device's own full scale; None: no fill (never a 0)
    level: str  # ``bar_level``'s good, warn or bad: the fill's colour
    text: str  # the value in words, as ``BarMetric.describe`` says it, or "GPU lost"
    lost: bool
    mig: bool


# The bar pages look like the overview's bars (issue 44): the GPU's colour only on its
# swatch, the fill's only good, warn or bad (``LEVEL_COLORS``), and the value in words
# beside the bar in the page's own colour, so it reads alike at any fill in either theme.
# The rows share one grid (``subgrid``): every bar starts and ends where the others do.
BARS_STYLE = """<style>
.nvb { font: 13px/1.3 system-ui, sans-serif; color: inherit; padding: 0 1em 0 .5em; }
.nvb .axis, .nvb .stamp { font-size: 12px; opacity: .85; margin: .2em 0 .6em; }
.nvb .stamp { margin-top: .4em; }
.nvb .rows { display: grid; gap: 5px 10px; align-items: center;
             grid-template-columns: max-content minmax(8em, 1fr) minmax(6em, max-content); }
.nvb .rows.nested { grid-template-columns: max-content max-content minmax(8em, 1fr)
                                           minmax(6em, max-content); }
.nvb .row { display: grid; grid-column: 1 / -1; grid-template-columns: subgrid;
            align-items: center; border-radius: 3px; }
.nvb .row:focus-visible { outline: 2px solid #3b82f6; outline-offset: 2px; }
.nvb .row.lost { background: rgba(214,39,40,.14); }
.nvb .gpu, .nvb .metric, .nvb .value { white-space: nowrap; }
.nvb .mig .gpu { padding-left: 1.4em; }
.nvb .swatch { display: inline-block; width: .7em; height: .7em; border-radius: 2px;
               margin-right: 5px; }
.nvb .metric { font-size: 12px; opacity: .85; }
.nvb .track { height: 14px; background: rgba(128,128,128,.22); border-radius: 2px; }
.nvb .na .track { background: repeating-linear-gradient(45deg, rgba(128,128,128,.25) 0 3px,
                                                        transparent 3px 7px); }
.nvb .track i { display: block; height: 100%; border-radius: 2px; }
""" + "".join(f".nvb .track i.{level} {{ background: {color}; }}\n"
              for level, color in LEVEL_COLORS.items()) + """
.nvb .value { font-weight: 600; font-variant-numeric: tabular-nums; }
.nvb .scale { position: relative; height: 1.3em; font-size: 11px;
              border-top: 1px solid rgba(128,128,128,.6); }
.nvb .scale span { position: absolute; transform: translateX(-50%); opacity: .8; }
</style>"""
BAR_SCALE_TICKS = (0, 25, 50, 75, 100)  # % of each device's own full scale


def bars_html(bars: Sequence[Bar], caption: str, read_at: str, nested: bool) -> str:
    """The bar page's rows as HTML. Each row can take the keyboard's focus; its hover and
    what a screen reader says name the device, the value and when it was read."""
    esc = html.escape
    rows = []
    previous = None
    for bar in bars:
        said = f"{bar.gpu} {bar.metric}: {bar.text}, reading of {read_at}"
        kind = "".join((" lost" if bar.lost else "", " mig" if bar.mig else "",
                        " na" if bar.share is None else ""))
        # On a page of several metrics a device's name heads its first row only.
        named, previous = not nested or bar.gpu != previous, bar.gpu
        gpu = (f"<span class='swatch' style='background:{bar.swatch}'></span>{esc(bar.gpu)}"
               if named else "")
        fill = "" if bar.share is None else \
            f"<i class='{bar.level}' style='width:{bar.share:.1f}%'></i>"
        rows.append(f"<div class='row{kind}' data-key='{esc(bar.key)}' tabindex='0' "
                    f"role='img' aria-label='{esc(said)}' title='{esc(said)}'>"
                    f"<span class='gpu'>{gpu}</span>"
                    + (f"<span class='metric'>{esc(bar.metric)}</span>" if nested else "")
                    + f"<span class='track'>{fill}</span>"
                    f"<span class='value'>{esc(bar.text)}</span></div>")
    ticks = "".join(f"<span style='left:{tick}%'>{tick}%</span>" for tick in BAR_SCALE_TICKS)
    blanks = "<span></span>" * (2 if nested else 1)
    rows.append(f"<div class='row' aria-hidden='true'>{blanks}<span class='scale'>{ticks}"
                "</span><span></span></div>")
    stamp = f"Reading of {esc(read_at)}." if read_at else "Waiting for a reading."
    return (f"{BARS_STYLE}<div class='nvb'><div class='axis'>{esc(caption)}</div>"
            f"<div class='rows{' nested' if nested else ''}'>{''.join(rows)}</div>"
            f"<div class='stamp'>{stamp}</div></div>")


@dataclass(frozen=True)
class BarsFeed:
    """Per-GPU bars from the newest sample, each scaled to its own GPU's maximum, sent as
    the page's HTML (``bars_html``), which the page sets in place."""

    facts: tuple[GpuFacts, ...]
    metrics: tuple[BarMetric, ...]
    x_label: str
    mode = "replace"
    # The page repaints at most once per REPLACE_REDRAW_MS: the frames between two repaints
    # (five a second at the 0.2 s tick) were decoded for nothing. A little under it, so the
    # tick a second after the last frame is not skipped: a repaint a second, as before.
    refresh_s = 0.9 * REPLACE_REDRAW_MS / 1000

    @property
    def nested(self) -> bool:
        """Several metrics per device (TX and RX): each row names its metric."""
        return len(self.metrics) > 1

    def bars(self, samples: Sequence[Sample]) -> list[Bar]:
        readings = {reading.index: reading for reading in samples[-1].gpus} if samples else {}
        bars = []
        for facts in self.facts:
            reading = readings.get(facts.index, GpuReading.unavailable(facts.index, lost=False))
            for metric in self.metrics:
                value, scale = metric.read(reading), metric.full_scale(facts)
                share = None if value is None or not scale else \
                    max(0.0, min(100.0, 100 * value / scale))
                bars.append(Bar(
                    f"{facts.index}-{metric.label}",
                    gpu_label(facts, gpu=parent_facts(self.facts, facts)).strip(),
                    gpu_color(facts.index), metric.label, share,
                    bar_level(share, metric.levels),
                    "GPU lost" if reading.lost else metric.describe(reading, facts),
                    reading.lost, facts.kind == "mig"))
        return bars

    def html(self, samples: Sequence[Sample]) -> str:
        # Which reading this is: views on screen together update at their own pace, so each
        # says when its reading was taken (the status bar's tooltip does too).
        read_at = reading_time(samples[-1].time_s) if samples else ""
        return bars_html(self.bars(samples), self.x_label, read_at, self.nested)

    def rows(self, samples: Sequence[Sample]) -> Rows:
        return Rows({}, {"html": [self.html(samples)]})


class BarsView:
    """The bar page: the rows of the newest reading, then each frame's set in place (only
    the widths, classes and words that changed are touched; no canvas to repaint)."""

    def __init__(self, feed: BarsFeed, samples: Sequence[Sample]) -> None:
        self.feed = feed
        rows = StreamedHtml(feed.html(samples), name="bars")
        self.root = rows.div
        self.live = LiveView(rows.source)


@dataclass(frozen=True)
class Series:
    """One line on a timeline panel."""

    key: str
    label: str
    color: str
    read: Callable[[Sample], float | None]
    gpu: int | None = None  # the device row it belongs to: the page's GPU filter hides it
    dash: str = "solid"  # e.g. "dashed" for RX beside TX in the same GPU colour
    visible: bool = True  # shown at first (a click on its legend entry toggles it)
    in_legend: bool = True  # False: one entry of its GPU stands for it (a panel of rows)


@dataclass(frozen=True)
class Panel:
    title: str
    y_label: str
    series: Sequence[Series]
    y_max: float | None = None  # fixed top (e.g. 100 for percentages); None follows the data
    unit: str = ""  # printed after values in the legend and the hover, e.g. "GB/s"
    # A panel of named rows, bottom to top, instead of a value axis: a series' value is the
    # row it is on (plus an offset that keeps GPUs apart), NaN where it is on none. Its
    # legend lists each GPU once, and its hover names the rows each GPU is on.
    y_labels: Sequence[str] = ()


@dataclass(frozen=True)
class TimelineFeed:
    """Stacked line panels over time: one row per sample, ``time`` in epoch milliseconds."""

    panels: tuple[Panel, ...]
    # Frames at most this often (stream/broadcaster), all new rows in one. A timeline
    # repaints at most once per TIMELINE_REDRAW_MS, so one frame per repaint, not one per
    # 0.2 s tick: the four frames between two repaints cost the page and the server their
    # handling and were drawn no sooner. A little under it, so the tick two seconds after
    # the last frame is not skipped.
    refresh_s: float = 0.9 * TIMELINE_REDRAW_MS / 1000
    mode = "append"

    @property
    def series(self) -> list[Series]:
        return [series for panel in self.panels for series in panel.series]

    @property
    def gpu_rows(self) -> list[int]:
        return sorted({series.gpu for series in self.series if series.gpu is not None})

    def rows(self, samples: Sequence[Sample]) -> Rows:
        columns = {TIME_KEY: np.fromiter((s.time_s * 1000 for s in samples), float,
                                         len(samples))}
        for series in self.series:
            columns[series.key] = np.fromiter(
                (number_or_nan(series.read(sample)) for sample in samples), float, len(samples))
        # 1 where the GPU was lost: its legend says "lost" rather than "n/a".
        lost = [{r.index for r in sample.gpus if r.lost} for sample in samples]
        for index in self.gpu_rows:
            columns[lost_key(index)] = np.fromiter((float(index in gone) for gone in lost),
                                                   float, len(samples))
        return Rows(columns)


def lost_key(index: int) -> str:
    """The column that is 1 while GPU ``index`` is lost (``LiveView.lost_columns``)."""
    return f"gpu_lost_{index}"


BAND_HEIGHT = 100  # the lines of a band of values, in pixels
ROW_HEIGHT = 18  # a band of rows: per named row
BAND_GAP = 8  # below each band's lines, before the next band's heading
HEADING_HEIGHT = 22  # one line of heading; the page's script measures the real height
TOOLS = "xpan,xwheel_zoom,reset"  # x only: every band shares the time range
# BokehJS caps every layout that is not the page's root at its parent's height
# (``max-height: 100%``), and a page's root is the window's height: a timeline taller than
# what the window leaves it (notices above it, headings that wrap) was squeezed, its lines
# drawn up to 70 px away from their headings. A timeline, and what holds it, takes the
# height its content asks for; the page scrolls.
UNCAPPED_HEIGHT = {"max-height": "none"}
# Timelines show 2 minutes by default; a picker offers the longer ones the history holds.
TIMELINE_WINDOWS_S = (120.0, 600.0, 1800.0)
# ... and, with a history store (store/), these, drawn from it before the history's start.
STORED_WINDOWS_S = (6 * 3600.0, 24 * 3600.0, 7 * 24 * 3600.0)


def timeline_windows(history_s: float, stored_s: float = 0.0) -> tuple[float, ...]:
    """The windows a timeline offers: those the history can fill (at least one), then the
    long ones the store keeps (``stored_s``: its longest retention; 0 without a store)."""
    memory = tuple(w for w in TIMELINE_WINDOWS_S if w <= history_s) or (history_s,)
    return memory + tuple(w for w in STORED_WINDOWS_S if memory[-1] < w <= stored_s)


def window_label(seconds: float) -> str:
    if seconds >= 2 * 24 * 3600:
        return f"{seconds / 86400:g} d"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


HIDDEN_STYLE = "opacity:.4;text-decoration:line-through"
SCALE_FRACTIONS = (1.0, 0.5, 0.0)  # where a band of values is labelled, bottom 0 to top 1


def band_lines_height(panel: Panel) -> int:
    return max(BAND_HEIGHT, ROW_HEIGHT * len(panel.y_labels))


def scale_width(panels: Sequence[Panel]) -> int:
    """The left margin that holds every band's scale: its numbers, or its rows' names."""
    longest = max((len(label) for panel in panels for label in panel.y_labels), default=0)
    return max(48, 7 * longest + 14)


def panel_heading(panel: Panel, span_words: str = "") -> str:
    """The band's title and legend as HTML over its top.

    Bokeh redraws an in-canvas legend on every update: with a legend in each of four
    panels, that was a third of the browser's CPU for /GPU-Resources
    (benchmarks/README.md). This text is laid out once; the page's script writes each
    series' current value into its entry's ``<b>`` about once a second. Only the entries
    take the pointer: the rest lets drags and the hover through to the chart under it.
    ``span_words`` ("mean over cell [12]:") say that the values read a span
    (``Timeline.read_span``); the page's script hides them once it follows now again.
    """
    value = "" if panel.y_labels else " <b></b>"  # a row number means nothing to a reader
    # Each entry is a toggle button a keyboard reaches (Tab) and presses (Enter, Space):
    # pressed while its line is shown.
    items = "".join(
        f"<span data-series='{series.key}' role='button' tabindex='0' "
        f"aria-pressed='{'true' if series.visible else 'false'}' "
        f"style='margin-right:1em;white-space:nowrap;"
        f"cursor:pointer;pointer-events:auto;{'' if series.visible else HIDDEN_STYLE}' "
        f"title='click to hide or show"
        f"{' this GPU on every chart' if series.gpu is not None else ''}'>"
        f"<span style='display:inline-block;width:1.4em;vertical-align:middle;"
        f"border-top:2px {series.dash} {series.color}'></span> "
        f"{html.escape(series.label)}{value}</span>"
        for series in panel.series if series.in_legend
    )
    unit = (f"<span style='opacity:.7;margin-right:1.2em'>{html.escape(panel.y_label)}</span>"
            if panel.y_label else "")
    # In the heading's own colour (no opacity): its contrast is the page's text's.
    note = (f"<i data-span-note style='margin-right:.8em'>{html.escape(span_words)}</i>"
            if span_words and value else "")
    return (f"<div style='font-size:12px;padding:8px 0 2px'>"
            f"<b style='margin-right:.6em'>{html.escape(panel.title)}</b>{unit}{note}{items}"
            "</div>")


def band_scale(panel: Panel, width: int) -> str:
    """The names of a band's rows at their heights, or empty slots for its values at
    ``SCALE_FRACTIONS``, which the page's script fills from the band's range."""
    def label(bottom: float, text: str, attributes: str = "") -> str:
        return (f"<span {attributes}style='position:absolute;left:0;width:{width - 6}px;"
                f"text-align:right;font-size:11px;opacity:.8;white-space:nowrap;"
                f"bottom:calc({100 * bottom:.2f}% - 7px)'>{html.escape(text)}</span>")

    rows = len(panel.y_labels)
    if rows:
        return "".join(label((row + 0.5) / rows, name, "data-row-label ")
                       for row, name in enumerate(panel.y_labels))
    return "".join(label(fraction, "", f"data-scale='{fraction:g}' ")
                   for fraction in SCALE_FRACTIONS)


def bands_html(panels: Sequence[Panel], width: int, span_words: str = "") -> str:
    """Every band's heading over its lines' place, stacked as the bands are in the canvas:
    the page's script reads where each band's lines ended up (``data-band-lines``) and
    draws them there, so a heading that wraps on a narrow page pushes its band down."""
    # A block of its own (flow-root), so that the last band's gap is inside its height.
    return "<div data-bands style='display:flow-root'>" + "".join(
        f"<div data-band='{position}'><div style='margin-left:{width}px'>"
        f"{panel_heading(panel, span_words)}</div>"
        f"<div data-band-lines style='position:relative;height:{band_lines_height(panel)}px;"
        f"margin-bottom:{BAND_GAP}px'>{band_scale(panel, width)}</div></div>"
        for position, panel in enumerate(panels)) + "</div>"


def band_hover(panel: Panel) -> dict[str, object]:
    """What the hover says over a band: each series' value, or, for a band of rows, the
    rows each GPU is on (its series are a GPU's rows, bottom to top)."""
    if not panel.y_labels:
        return {"values": [[series.key, series.label, panel.unit] for series in panel.series]}
    by_gpu: dict[int | None, list[Series]] = {}
    for series in panel.series:
        by_gpu.setdefault(series.gpu, []).append(series)
    return {"rows": [[members[0].label,
                      [[series.key, name] for series, name in zip(members, panel.y_labels,
                                                                    strict=False)]]
                     for members in by_gpu.values()]}


def row_offset(position: int, count: int) -> float:
    """Where the ``position``-th of ``count`` GPUs draws inside a row of a panel of rows."""
    return 0.0 if count < 2 else 0.6 * (position / (count - 1) - 0.5)


# The hover's text, one line per series, from the page's script (live_client.js:
# hoverText), which knows which band the pointer is over.
HOVER_JS = """
const live = Object.values(window.nvdashboardStreams || {}).find((s) => s.source === source);
return live ? live.hoverText(special_vars) : "";
"""
HOVER_HTML = f"<div style='white-space:pre;font-size:12px'>@{{{TIME_KEY}}}{{band}}</div>"


class SharedModels:
    """What a timeline's sources and renderers can share, since BokehJS keeps no state in
    them: the selection policy of every source, the filter of every renderer's view (the
    views themselves hold their indices, one each), and the scale of every band's mapping
    (BokehJS clones it before it sets its ranges). A page's document is mostly its models,
    each about 5 kB of the server's memory per viewer (issue 47, item 5)."""

    def __init__(self) -> None:
        self.selection_policy = UnionRenderers(syncable=False)
        self.every_row = AllIndices(syncable=False)
        self.scale = LinearScale(syncable=False)

    def source(self, data: dict[str, list[Any]]) -> ColumnDataSource:
        return ColumnDataSource(data, selection_policy=self.selection_policy, syncable=False)

    def view(self) -> CDSView:
        return CDSView(filter=self.every_row, syncable=False)


class Timeline:
    """Line charts stacked as bands of one figure, under one time axis that follows the
    newest sample.

    Each panel is a band: its own value range mapped into a slice of the one canvas
    (Bokeh's sub-coordinates), with its heading and scale as HTML laid over the canvas. A
    repaint of a page is mostly BokehJS painting each figure and measuring its axes: one
    figure instead of one per panel took /GPU-Activity's cost in a browser to 0.68 of what it
    was, and /GPU-Health's to 0.88 (benchmarks/README.md).

    The tools a reader needs on a shared machine: a click on a legend entry hides that line
    (a GPU's entry hides that GPU on every chart of the page, through the GPU filter above
    the charts, and a band that shows only that GPU folds away); drag pans and the wheel
    zooms time, and the reset tool follows the newest sample again; the hover names every
    value of the band under the pointer.

    Nothing here changes after the page is built: the page's script streams rows into
    ``source``, moves the ranges and places the bands itself. The ranges are ``Range1d``
    and, like the plot and the source, marked unsyncable, so nothing the browser changes
    goes back to the server: not the ranges (a ``DataRange1d`` recomputed in the browser
    used to send a PATCH-DOC five times a second per range), not the plot's size.
    """

    def __init__(self, feed: TimelineFeed, windows_s: Sequence[float],
                 interval_s: float, default_window_s: float | None = None,
                 gpu_names: dict[int, str] | None = None) -> None:
        gpu_names = gpu_names or {}
        self.feed = feed
        self.windows_s = tuple(windows_s)
        window_s = default_window_s if default_window_s in self.windows_s else self.windows_s[0]
        shared = SharedModels()
        self.source = shared.source({TIME_KEY: [], **{s.key: [] for s in feed.series},
                                     **{lost_key(index): [] for index in feed.gpu_rows}})
        self.x_range = Range1d(0, 1, syncable=False)
        width = scale_width(feed.panels)
        # Where the bands start, in pixels from the canvas's bottom, until the page's script
        # measures the headings: the canvas's y-range is its height in pixels.
        extents = [HEADING_HEIGHT + band_lines_height(panel) + BAND_GAP
                   for panel in feed.panels]
        height = sum(extents)
        frame_range = Range1d(0, height, syncable=False)
        # Bokeh's default time ticker also carries five month and year tickers (a model each
        # in every page's document): no window here reaches them (the store keeps 30 days).
        time_ticker = DatetimeTicker(tickers=[
            ticker for ticker in DatetimeTicker().tickers
            if not isinstance(ticker, MonthsTicker | YearsTicker)])
        plot = figure(x_axis_type=None, y_axis_type=None, x_range=self.x_range,
                      y_range=frame_range, title=None, frame_height=height,
                      min_border_left=width, min_border_bottom=0,
                      sizing_mode="stretch_width", toolbar_location="right",
                      tools=TOOLS, active_drag="xpan", active_scroll="xwheel_zoom",
                      styles=UNCAPPED_HEIGHT, syncable=False)
        plot.toolbar.autohide = True
        plot.toolbar.logo = None
        plot.add_layout(Grid(dimension=0, ticker=time_ticker))
        # Each band's scale lines, which the page's script places with the bands.
        grid_ticker = FixedTicker(ticks=[], syncable=False)
        plot.add_layout(Grid(dimension=1, ticker=grid_ticker, syncable=False))
        # One time axis, above the bands, so it is on screen however tall the page.
        plot.add_layout(DatetimeAxis(ticker=time_ticker), "above")
        # The page's script follows the newest sample again after a reset.
        plot.js_on_event(Reset, CustomJS(code=FOLLOW_AGAIN_JS))
        # An unseen line along the bottom answers the hover at every time (a series' own
        # line has gaps where it is not available); the page's script says what the band
        # under the pointer shows at that time.
        hover_line = plot.add_glyph(self.source, Line(x=TIME_KEY, y=0, line_alpha=0),
                                    view=shared.view())
        # The hover is drawn at the pointer (line_policy "none"), in the band it speaks of:
        # snapped to the unseen line, it sat at the canvas's bottom, over another band.
        plot.add_tools(HoverTool(
            renderers=[hover_line], mode="vline", line_policy="none", tooltips=HOVER_HTML,
            formatters={f"@{{{TIME_KEY}}}": CustomJSHover(args={"source": self.source},
                                                          code=HOVER_JS)}))
        following: list[tuple[Range1d, list[str]]] = []
        scales: list[Range1d | None] = []
        targets: list[Range1d] = []
        lines: list[ColumnDataSource] = []
        areas: list[ColumnDataSource | None] = []
        panel_gpus: list[int | None] = []
        top = float(height)
        for panel, extent in zip(feed.panels, extents, strict=True):
            rows = len(panel.y_labels)
            y_range = Range1d(-0.5 if rows else 0, rows - 0.5 if rows else panel.y_max or 1,
                              syncable=False)
            if not panel.y_max and not rows:
                following.append((y_range, [s.key for s in panel.series]))
            scales.append(None if rows else y_range)
            target = Range1d(top - HEADING_HEIGHT - band_lines_height(panel),
                             top - HEADING_HEIGHT, syncable=False)
            top -= extent
            targets.append(target)
            # All the band's series are one MultiLine, a row per series, which the page's
            # script fills from the streamed columns at each repaint, leaving out what the
            # legend and the GPU filter hide. BokehJS updates every renderer of a source on
            # each stream (five glyph views each), whether it is shown or not: /GPU-Health's
            # 53 lines were most of what a repaint cost (benchmarks/README.md).
            keys = [series.key for series in panel.series]
            band_lines = shared.source({
                "xs": [[] for _ in keys], "ys": [[] for _ in keys], "key": keys,
                "color": [series.color for series in panel.series],
                "dash": [series.dash for series in panel.series],
                "visible": [series.visible for series in panel.series]})
            mapping = CoordinateMapping(x_source=self.x_range, x_target=self.x_range,
                                        y_source=y_range, y_target=target,
                                        x_scale=shared.scale, y_scale=shared.scale)
            # A long window's buckets: each series' min-max band under its mean line, a
            # polygon per series (empty while every sample is drawn). A band of rows has
            # none: a row is where a GPU is, not a value that ranges. A source of their own,
            # not columns of the lines': BokehJS updates every renderer of a source that
            # changed, and the areas change only in a long window (with them beside the
            # lines, a 2-minute /GPU-Resources cost Chromium 1.03-1.16 times as much).
            band_areas = None if rows else shared.source(
                {"xs": [[] for _ in keys], "ys": [[] for _ in keys],
                 "color": [series.color for series in panel.series]})
            if band_areas is not None:
                plot.add_glyph(band_areas, Patches(xs="xs", ys="ys", fill_color="color",
                                                   fill_alpha=0.18, line_color=None),
                               coordinates=mapping, view=shared.view())
            plot.add_glyph(band_lines, MultiLine(
                xs="xs", ys="ys", line_color="color", line_dash="dash",
                line_width=4 if rows else 2), coordinates=mapping, view=shared.view())
            lines.append(band_lines)
            areas.append(band_areas)
            gpus = {series.gpu for series in panel.series}
            panel_gpus.append(gpus.pop() if len(gpus) == 1 else None)
        # The headings and scales: HTML over the canvas, laid out once (a pointer passes
        # through it to the chart, except on a legend entry).
        self._scale_width = width
        bands = Div(text=bands_html(feed.panels, width), syncable=False, styles={
            "position": "absolute", "left": "0", "right": "0", "bottom": "0",
            "pointer-events": "none"})
        plot.elements = [bands]
        self.bands = bands
        self.plot = plot
        self.picker: RadioButtonGroup | None = None
        self.coverage: Div | None = None
        controls: list[LayoutDOM] = []
        if len(self.windows_s) > 1:
            self.picker = RadioButtonGroup(
                labels=[window_label(w) for w in self.windows_s],
                active=self.windows_s.index(window_s), syncable=False)
            controls.append(self.picker)
            # How much of the window shown is recorded, written by the page's script.
            self.coverage = Div(text="", name="window-coverage", syncable=False,
                                styles={"font-size": "12px", "opacity": "0.8",
                                        "align-self": "center"})
        # The GPU filter: every chart of the page follows it (a legend click toggles it too).
        gpu_rows = feed.gpu_rows
        self.gpu_filter: CheckboxButtonGroup | None = None
        if len(gpu_rows) > 1:
            self.gpu_filter = CheckboxButtonGroup(
                labels=[gpu_names.get(index, f"GPU {index}") for index in gpu_rows],
                active=list(range(len(gpu_rows))), syncable=False, name="gpu-filter")
            controls.append(self.gpu_filter)
        if self.coverage is not None:
            controls.append(self.coverage)
        children: list[LayoutDOM] = [plot]
        if controls:
            children.insert(0, row(*controls, sizing_mode="stretch_width"))
        self.root = column(*children, sizing_mode="stretch_width", styles=UNCAPPED_HEIGHT)
        self.live = LiveView(
            self.source, x_range=self.x_range, following=following, headings=[bands],
            picker=self.picker, windows_s=self.windows_s, window_s=window_s,
            units={series.key: panel.unit for panel in feed.panels for series in panel.series},
            rollover={f"{w:g}": rollover(w, interval_s) for w in self.windows_s},
            lines=lines, areas=areas, series_gpu={s.key: s.gpu for s in feed.series},
            lost_columns={s.key: lost_key(s.gpu) for s in feed.series if s.gpu is not None},
            gpu_filter=self.gpu_filter, filter_gpus=gpu_rows, coverage=self.coverage,
            bands=BandsView(plot=plot, frame_range=frame_range, grid_ticker=grid_ticker,
                            targets=targets, scales=scales,
                            hover=[band_hover(p) for p in feed.panels], gpus=panel_gpus))

    def show_gpus(self, rows: Collection[int]) -> None:
        """Open with only these device rows' lines shown: the GPU filter's other buttons
        off (a band of one of them folds away; the reader may turn them on again). Rows
        the filter does not offer are left out; where it offers none of them, or there is
        no filter (one GPU), every GPU stays shown."""
        if self.gpu_filter is None:
            return
        active = [position for position, row in enumerate(self.live.filter_gpus)
                  if row in rows]
        if active:
            self.gpu_filter.active = active

    def span_texts(self, samples: Sequence[Sample]) -> dict[str, str]:
        """Each legend value's text over ``samples``: the series' mean over those with a
        value, ``n/a`` where none has one. A band of rows has no values in its legend."""
        texts = {}
        for panel in self.feed.panels:
            if panel.y_labels:
                continue
            for series in panel.series:
                if not series.in_legend:
                    continue
                values = [value for value in map(series.read, samples)
                          if value is not None and math.isfinite(value)]
                texts[series.key] = legend_text(sum(values) / len(values) if values else None,
                                                panel.unit)
        return texts

    def read_span(self, words: str, texts: dict[str, str] | None) -> ColumnDataSource:
        """Have the legends read a span rather than the newest sample until the page
        follows now again: ``words`` before each band's values, and ``texts`` as the
        values (``span_texts``; None: not read yet, each says ``…`` until the source this
        returns is given them). The page's script writes them in place of the newest."""
        self.bands.text = bands_html(self.feed.panels, self._scale_width, words)
        keys = [series.key for panel in self.feed.panels if not panel.y_labels
                for series in panel.series if series.in_legend]
        if texts is None:
            texts = dict.fromkeys(keys, "…")
        # Synced: a thread's read lands in it after the page is shown (shown_span.py).
        legend = ColumnDataSource({"key": list(texts), "text": list(texts.values())},
                                  name="span-legend")
        self.live.span_legend = legend
        self.root.tags = [*self.root.tags, legend]  # in the document with the root
        return legend


# Run by a plot's reset tool: the page's script (live_client.js) follows the newest again.
FOLLOW_AGAIN_JS = "if (window.nvdashboardLive) setTimeout(window.nvdashboardLive.follow, 0);"


def rollover(window_s: float, interval_s: float) -> int:
    """Rows a page keeps for a window: every sample, or two per min/max bucket."""
    bucket_s = bucket_seconds(window_s, interval_s)
    return int(window_s / interval_s) + 2 if not bucket_s else 2 * int(window_s / bucket_s) + 4


def gpu_value(
    index: int, read: Callable[[GpuReading], float | None]
) -> Callable[[Sample], float | None]:
    """Read one metric of GPU ``index`` from a sample (None if that GPU is missing)."""

    def value(sample: Sample) -> float | None:
        for reading in sample.gpus:
            if reading.index == index:
                return read(reading)
        return None

    return value


def gpu_total(rows: Sequence[int], read: Callable[[GpuReading], float | None]
              ) -> Callable[[Sample], float | None]:
    """One metric summed over the device ``rows``: not available while any of them is
    (``rates.total``), so the line never dips when one GPU's reading is briefly unknown."""
    rows = tuple(rows)
    return lambda sample: rows_total(sample, rows, read)


def scaled(read: Callable[[Sample], float | None], unit: float) -> Callable[[Sample], float | None]:
    def value(sample: Sample) -> float | None:
        raw = read(sample)
        return None if raw is None else raw / unit

    return value


# Tables with transparent cells and inherited text colour: the page's light or dark theme
# shows through (Bokeh's own table stylesheet is white, with the theme's light text on it).
THEMED_TABLE_CSS = """
.slick-header-column, .slick-cell, .slick-row, .grid-canvas, .slick-viewport,
.slick-header, .slick-pane, .bk-data-table {
  background: transparent !important; color: inherit !important;
  border-color: rgba(128, 128, 128, 0.3) !important;
}
.slick-row.odd .slick-cell { background: rgba(128, 128, 128, 0.08) !important; }
.slick-cell a { color: #3b82f6; }
"""
