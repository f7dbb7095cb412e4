"""/Cluster-GPUs: every GPU of a Dask cluster in one view.

A utilization heat map (GPU by time, grouped by host), memory bars on the same rows, and
per-node totals. It streams on the broadcast path like every dashboard: the cluster
reader's history (``cluster/view.py``) gets one tick a second, ``ClusterFeed`` turns new
ticks into rows (one per GPU per tick), the broadcaster encodes them once for every page,
and each page streams them into one source. The heat map is a single ``rect`` glyph and the
bars a single ``hbar``, whatever the number of GPUs; the bars and totals are computed in
the page from the newest column's rows, so nothing else goes over the wire.

The window picker offers the timelines' windows that the reader's history fills (2, 10 and
30 minutes). A window longer than ``MAX_COLUMNS`` ticks is cut into columns of several
seconds of the monotonic clock (``ClusterFeed.bucket_seconds``), each a GPU's mean
utilization over its column, so a 30-minute catch-up of 512 GPUs is as small as a
4-minute one.

Stale and lost GPUs have colours of their own (grey, red); a GPU whose utilization is not
available is left blank. A GPU its worker reads from the simulated driver says SIMULATED
on its row, in its host's totals and, when every GPU shown is simulated, in the title.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from bokeh.layouts import column, row
from bokeh.models import (
    ColorBar,
    ColumnDataSource,
    CustomJS,
    CustomJSHover,
    DatetimeAxis,
    Div,
    FixedTicker,
    HoverTool,
    LayoutDOM,
    LinearColorMapper,
    RadioButtonGroup,
    Range1d,
)
from bokeh.palettes import Viridis256
from bokeh.plotting import figure

from ..cluster.view import (
    CLUSTER_HISTORY_S,
    LOST,
    POLL_INTERVAL_S,
    STALE,
    ClusterView,
    tick_of,
)
from ..export.dcgm import FIELDS
from ..metrics import Sample
from ..stream.broadcaster import TIME_KEY
from ..stream.downsample import bucket_starts
from ..stream.frames import Rows
from .components import timeline_windows, window_label
from .live import LiveView

CLUSTER_PATH = "/Cluster-GPUs"
CLUSTER_TITLE = "Cluster GPUs"
# Heat-map columns at most, whatever the window: 2 minutes of ticks are 120, so only the
# longer windows (10 and 30 minutes) are cut into columns of several seconds.
MAX_COLUMNS = 240
SIMULATED = "SIMULATED"
STALE_HEAT, LOST_HEAT = -1.0, 1000.0  # below and above the colour scale's 0..100
STALE_COLOR, LOST_COLOR = "#9e9e9e", "#d62728"
GIB = 2**30
MIB = 2**20
_UTIL = next(i for i, f in enumerate(FIELDS) if f.name == "DCGM_FI_DEV_GPU_UTIL")
_USED = next(i for i, f in enumerate(FIELDS) if f.name == "DCGM_FI_DEV_FB_USED")
_FREE = next(i for i, f in enumerate(FIELDS) if f.name == "DCGM_FI_DEV_FB_FREE")
_RESERVED = next(i for i, f in enumerate(FIELDS) if f.name == "DCGM_FI_DEV_FB_RESERVED")


_COLUMNS = ("heat", "mem_pct", "mem_used_gib", "mem_total_gib")


def cluster_windows(view: ClusterView) -> tuple[float, ...]:
    """The windows /Cluster-GPUs offers: the timelines' ones that the reader's history fills."""
    return timeline_windows(view.history_s)


@dataclass(frozen=True)
class ClusterFeed:
    """Rows for one layout of the cluster: ``rows[i]`` is the GPU drawn on row ``i``."""

    layout: tuple[tuple[str, str], ...]  # (host, UUID key) per row
    labels: tuple[str, ...]  # "host · GPU 3" per row
    simulated: tuple[bool, ...]  # per row: read from the simulated driver
    # Ticks whose rows the feed keeps (the reader's whole history): a catch-up (a new page,
    # a reconnect) of any window is then a concatenation, not 1800 x 512 rows rebuilt in
    # Python.
    cached_ticks: int = int(CLUSTER_HISTORY_S / POLL_INTERVAL_S) + 8
    _blocks: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    mode = "append"

    @staticmethod
    def bucket_seconds(window_s: float, interval_s: float) -> float:
        """The width of a column over ``window_s``: 0 (one tick each) up to ``MAX_COLUMNS``
        ticks, else the window cut into ``MAX_COLUMNS``."""
        return 0.0 if window_s / interval_s <= MAX_COLUMNS else window_s / MAX_COLUMNS

    def column_seconds(self, window_s: float, interval_s: float) -> float:
        return self.bucket_seconds(window_s, interval_s) or interval_s

    @property
    def all_simulated(self) -> bool:
        return bool(self.simulated) and all(self.simulated)

    def _block(self, sample: Sample) -> np.ndarray:
        """One tick's columns (``_COLUMNS`` x GPUs), built once per tick."""
        block = self._blocks.get(sample.seq)
        if block is not None:
            return block
        position = {key: i for i, key in enumerate(self.layout)}
        block = np.full((len(_COLUMNS), len(self.layout)), math.nan)
        tick = tick_of(sample)
        for gpu in tick.gpus if tick else ():
            i = position.get(gpu.key)
            if i is None:
                continue
            values = gpu.gpu.values
            util, used = values[_UTIL], values[_USED]
            total = None if used is None or values[_FREE] is None else \
                used + values[_FREE] + (values[_RESERVED] or 0.0)
            heat = STALE_HEAT if gpu.state == STALE else LOST_HEAT if gpu.state == LOST \
                else util
            block[0, i] = math.nan if heat is None else heat
            if gpu.state != LOST and used is not None and total:
                block[1:, i] = (100 * used / total, used * MIB / GIB, total * MIB / GIB)
        self._blocks[sample.seq] = block
        while len(self._blocks) > self.cached_ticks:
            del self._blocks[min(self._blocks)]
        return block

    def rows(self, samples: Sequence[Sample]) -> Rows:
        n = len(self.layout)
        blocks = [self._block(sample) for sample in samples]
        stacked = np.concatenate(blocks, axis=1) if blocks else np.empty((len(_COLUMNS), 0))
        times = np.repeat(np.fromiter((s.time_s * 1000 for s in samples), float, len(samples)), n)
        rows = np.tile(np.arange(n, dtype=float), len(samples))
        return Rows({TIME_KEY: times, "row": rows,
                     **{name: stacked[j] for j, name in enumerate(_COLUMNS)}})

    def downsample(self, rows: Rows, bucket_s: float, clocks_s: np.ndarray) -> Rows:
        """One column per bucket (at its middle): each GPU's mean utilization over the
        bucket, drawn stale or lost when it was so at the bucket's end, and its memory at
        the end. ``rows``: whole ticks of this layout, oldest first; ``clocks_s``: each
        tick's monotonic stamp."""
        n, numeric = len(self.layout), rows.numeric
        ticks = len(numeric[TIME_KEY]) // n if n else 0
        if not ticks:
            return Rows({name: np.empty(0) for name in numeric})
        starts, start_ms = bucket_starts(clocks_s, numeric[TIME_KEY][::n], bucket_s)
        ends = np.r_[starts[1:], ticks] - 1
        heat = numeric["heat"].reshape(ticks, n)
        read = (heat >= 0) & (heat <= 100)  # a utilization reading: not NaN, stale or lost
        total = np.add.reduceat(np.where(read, heat, 0.0), starts, axis=0)
        count = np.add.reduceat(read.astype(float), starts, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total / count  # NaN where the bucket holds no reading
        last = heat[ends]
        held = (last == STALE_HEAT) | (last == LOST_HEAT)
        columns = {TIME_KEY: np.repeat(start_ms + bucket_s * 500, n),
                   "row": np.tile(np.arange(n, dtype=float), len(starts)),
                   "heat": np.where(held, last, mean).ravel()}
        for name in _COLUMNS[1:]:
            columns[name] = numeric[name].reshape(ticks, n)[ends].ravel()
        return Rows(columns)


def feed_for_tick(view: ClusterView) -> ClusterFeed:
    tick = view.latest()
    gpus = tick.gpus if tick else ()
    labels = tuple(f"{gpu.gpu.hostname} · GPU {gpu.gpu.identity.gpu}" + (
        f" · MIG {gpu.gpu.identity.gpu_instance_id}"
        if gpu.gpu.identity.gpu_instance_id is not None else "") for gpu in gpus)
    return ClusterFeed(tuple(gpu.key for gpu in gpus), labels,
                       tuple(gpu.simulated for gpu in gpus), view.history.capacity + 8)


def cluster_title(feed: ClusterFeed) -> str:
    """The page's title: SIMULATED when every GPU shown is (each row says so anyway)."""
    if feed.all_simulated:
        return f"{CLUSTER_TITLE} ({SIMULATED})"
    if any(feed.simulated):
        return f"{CLUSTER_TITLE} (some {SIMULATED})"
    return CLUSTER_TITLE


class ClusterFeeds:
    """The route's one feed per layout, shared by the broadcaster and every page."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self._feed: ClusterFeed | None = None

    def __call__(self, path: str) -> ClusterFeed | None:
        if path != CLUSTER_PATH:
            return None
        tick = self.view.latest()
        layout = tick.layout if tick else ()
        if self._feed is None or self._feed.layout != layout:
            self._feed = feed_for_tick(self.view)
        return self._feed


# The page computes the bars and per-node totals from the newest tick's rows.
_DERIVE_JS = """
const d = source.data, n = spec.rows;
const len = d.time ? d.time.length : 0;
if (!n || len < n) return;
const start = len - n;
const bars = {row: [], pct: [], color: [], text: []};
const nodes = new Map();
for (let j = 0; j < n; j++) {
  const k = start + j, heat = d.heat[k], pct = d.mem_pct[k];
  const state = heat === spec.stale ? "stale" : heat === spec.lost ? "lost" : "ok";
  bars.row.push(d.row[k]);
  // A stale or lost GPU's bar spans the row in its state's colour, as in the heat map.
  bars.pct.push(state !== "ok" ? 100 : Number.isNaN(pct) ? 0 : pct);
  bars.color.push(state === "stale" ? spec.stale_color : state === "lost" ? spec.lost_color
                  : "#1f77b4");
  bars.text.push(state !== "ok" ? state : Number.isNaN(pct) ? "n/a"
                 : `${d.mem_used_gib[k].toFixed(0)} of ${d.mem_total_gib[k].toFixed(0)} GiB`);
  const host = spec.hosts[j];
  const node = nodes.get(host) || {gpus: 0, ok: 0, stale: 0, lost: 0, util: 0, utilN: 0,
                                   used: 0, total: 0, simulated: 0};
  node.gpus++; node[state]++;
  if (spec.simulated[j]) node.simulated++;
  if (state === "ok" && !Number.isNaN(heat)) { node.util += heat; node.utilN++; }
  if (!Number.isNaN(pct)) { node.used += d.mem_used_gib[k]; node.total += d.mem_total_gib[k]; }
  nodes.set(host, node);
}
bar_source.data = bars;
let cells = "";
for (const [host, node] of nodes) {
  const util = node.utilN ? `${(node.util / node.utilN).toFixed(0)}%` : "n/a";
  const memory = node.total ? `, ${node.used.toFixed(0)} of ${node.total.toFixed(0)} GiB` : "";
  const flags = (node.lost ? ` <b style="color:${spec.lost_color}">${node.lost} lost</b>` : "") +
                (node.stale ? ` <b style="color:${spec.stale_color}">${node.stale} stale</b>` : "");
  const simulated = node.simulated === node.gpus ? " <b>SIMULATED</b>"
    : node.simulated ? ` <b>${node.simulated} SIMULATED</b>` : "";
  const safe = host.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
  const busy = node.ok ? `, ${util} busy${memory}` : "";
  cells += `<span style="display:inline-block;margin:0 1.5em 0.3em 0"><b>${safe}</b>` +
    `${simulated}: ${node.gpus} GPUs${busy}${flags}</span>`;
}
totals.text = `<div style="font-size:12px;margin:0.3em 0.5em">${cells}</div>`;
"""


# The hover names the GPU of a cell and says stale or lost in words, not as -1 or 1000 %.
_ROW_LABEL_JS = "return labels[value] === undefined ? '' : labels[value];"
_HEAT_JS = ("return value === stale ? 'stale' : value === lost ? 'lost' : "
            "Number.isNaN(value) ? 'n/a' : `${value.toFixed(0)}%`;")
# A column is one tick, or a bucket of ticks over the long windows: as wide as it covers.
_COLUMN_WIDTH_JS = "cells.glyph.width = widths[picker.active];"


class ClusterGpusView:
    """One page of /Cluster-GPUs, drawn for one layout of the cluster."""

    def __init__(self, feed: ClusterFeed, interval_s: float,
                 windows_s: Sequence[float] = (120.0,),
                 window_s: float | None = None) -> None:
        self.feed = feed
        self.windows_s = tuple(windows_s)
        window_s = window_s if window_s in self.windows_s else self.windows_s[0]
        n = max(1, len(feed.layout))
        self.source = ColumnDataSource({TIME_KEY: [], "row": [], "heat": [], "mem_pct": [],
                                        "mem_used_gib": [], "mem_total_gib": []},
                                       syncable=False)
        bar_source = ColumnDataSource({"row": [], "pct": [], "color": [], "text": []},
                                      syncable=False)
        row_px = 22 if n <= 32 else max(3, 1100 // n)
        height = max(240, row_px * n + 70)
        # Row 0 at the top; the bars share the rows.
        y_range = Range1d(n - 0.5, -0.5, syncable=False)
        self.x_range = Range1d(0, 1, syncable=False)
        mapper = LinearColorMapper(palette=Viridis256, low=0, high=100, low_color=STALE_COLOR,
                                   high_color=LOST_COLOR, nan_color="rgba(0,0,0,0)")
        heat = figure(x_axis_type=None, x_range=self.x_range, y_range=y_range, height=height,
                      sizing_mode="stretch_width", toolbar_location=None, tools="",
                      syncable=False, title="GPU utilization (%), by host")
        heat.add_layout(DatetimeAxis(), "below")
        widths = [feed.column_seconds(w, interval_s) * 1000 for w in self.windows_s]
        self.cells = heat.rect(x=TIME_KEY, y="row",
                               width=widths[self.windows_s.index(window_s)], height=0.9,
                               source=self.source, line_color=None,
                               fill_color={"field": "heat", "transform": mapper})
        self.row_labels = [label + (f" ({SIMULATED})" if simulated else "") for label, simulated
                           in zip(feed.labels, feed.simulated, strict=True)]
        heat.add_tools(HoverTool(
            renderers=[self.cells], tooltips=[("GPU", "@row{label}"),
                                              ("utilization", "@heat{heat}")],
            formatters={"@row": CustomJSHover(args={"labels": self.row_labels},
                                              code=_ROW_LABEL_JS),
                        "@heat": CustomJSHover(args={"stale": STALE_HEAT, "lost": LOST_HEAT},
                                               code=_HEAT_JS)}))
        heat.add_layout(ColorBar(color_mapper=mapper, width=8, title="%"), "right")
        self._label_rows(heat, feed, self.row_labels, n)
        heat.ygrid.grid_line_color = None
        bars = figure(x_range=Range1d(0, 100), y_range=y_range, height=height, width=260,
                      toolbar_location=None, tools="", syncable=False,
                      title="Memory used (% of each GPU)")
        bars.hbar(y="row", right="pct", height=0.8, color="color", source=bar_source,
                  fill_alpha=0.85)
        bars.yaxis.visible = False
        bars.ygrid.grid_line_color = None
        bars.add_tools(HoverTool(tooltips=[("memory", "@text")]))
        totals = Div(text="", sizing_mode="stretch_width", syncable=False)
        legend = Div(text=(f"<div style='font-size:12px;margin:0 0.5em'>Heat map: one row per "
                           f"GPU, one column per second (over 10 minutes and more, each "
                           f"column is the mean of its seconds). <b style='color:"
                           f"{STALE_COLOR}'>grey</b>: stale (no heartbeat for 3 intervals); "
                           f"<b style='color:{LOST_COLOR}'>red</b>: lost (its worker left)."
                           f"</div>"),
                     sizing_mode="stretch_width")
        hosts = [host for host, _ in feed.layout]
        derive = CustomJS(args={"source": self.source, "bar_source": bar_source,
                                "totals": totals,
                                "spec": {"rows": len(feed.layout), "hosts": hosts,
                                         "simulated": list(feed.simulated),
                                         "stale": STALE_HEAT, "lost": LOST_HEAT,
                                         "stale_color": STALE_COLOR,
                                         "lost_color": LOST_COLOR}},
                          code=_DERIVE_JS)
        self.source.js_on_change("streaming", derive)
        self.source.js_on_change("data", derive)
        if not feed.layout:
            totals.text = ("<p style='margin:0.5em'>No GPU reported yet: start the workers "
                           "with the nvdashboard plugin (see docs/dask.md).</p>")
        self.picker: RadioButtonGroup | None = None
        controls: list[LayoutDOM] = [legend]
        if len(self.windows_s) > 1:
            self.picker = RadioButtonGroup(
                labels=[window_label(w) for w in self.windows_s],
                active=self.windows_s.index(window_s), syncable=False)
            self.picker.js_on_change("active", CustomJS(
                args={"cells": self.cells, "picker": self.picker, "widths": widths},
                code=_COLUMN_WIDTH_JS))
            controls.insert(0, self.picker)
        self.root = column(totals, row(*controls, sizing_mode="stretch_width"),
                           row(heat, bars, sizing_mode="stretch_width"),
                           sizing_mode="stretch_width")
        rows_per_tick = max(1, len(feed.layout))
        self.live = LiveView(self.source, x_range=self.x_range, picker=self.picker,
                             windows_s=self.windows_s, window_s=window_s,
                             rollover={f"{w:g}": (math.ceil(w / feed.column_seconds(
                                 w, interval_s)) + 2) * rows_per_tick
                                 for w in self.windows_s})

    @staticmethod
    def _label_rows(plot: figure, feed: ClusterFeed, labels: Sequence[str], n: int) -> None:
        """Each GPU's host and nvidia-smi index; with many GPUs, each host's first row."""
        if n <= 64:
            ticks = list(range(len(labels)))
            overrides = dict(enumerate(labels))
        else:
            ticks, overrides, previous = [], {}, None
            for i, (host, _) in enumerate(feed.layout):
                if host != previous:
                    ticks.append(i)
                    overrides[i] = host + (f" ({SIMULATED})" if feed.simulated[i] else "")
                previous = host
        plot.yaxis.ticker = FixedTicker(ticks=ticks)
        plot.yaxis.major_label_overrides = overrides
        plot.yaxis.major_label_text_font_size = "10px" if n <= 64 else "9px"
