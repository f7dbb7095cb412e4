"""Reusable dashboard components: per-GPU bars and shared-axis timelines.

Each component has a ``source`` (ColumnDataSource), a ``root`` (the Bokeh model to show)
and ``update(samples)``, which only reads samples the sampler already collected.

Units: bytes use decimal SI prefixes everywhere (1 GB = 10^9 bytes, 1 MB = 10^6 bytes),
and every axis label says which.
"""

from __future__ import annotations

import html
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bokeh.layouts import column
from bokeh.models import (
    CDSView,
    ColumnDataSource,
    DatetimeAxis,
    DatetimeTicker,
    Div,
    FactorRange,
    Grid,
    HoverTool,
    LabelSet,
    LayoutDOM,
    Line,
    Range1d,
)
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from ..metrics import GpuFacts, GpuReading, Sample

GB = 1e9
MB = 1e6
NOT_AVAILABLE = "not available"


def gpu_color(index: int) -> str:
    return Category10_10[index % len(Category10_10)]


def gpu_label(facts: GpuFacts, short: bool = False) -> str:
    """nvidia-smi's index, CUDA's position and the name; a MIG device under its GPU.

    ``short`` leaves the name out, for the rotated group labels of grouped bars.
    """
    cuda = "" if facts.cuda_index is None else f" (CUDA {facts.cuda_index})"
    prefix = "  ↳ " if facts.kind == "mig" else ""
    if short:
        return f"{prefix}{facts.label}{cuda}"
    name = facts.name
    if facts.kind == "mig":  # just the MIG profile, e.g. "3g.40gb", under its GPU's row
        name = facts.name.rpartition(" MIG ")[2] or facts.name
    return f"{prefix}{facts.label}{cuda}: {name}"


def number_or_nan(value: float | None) -> float:
    """Bokeh draws NaN as a gap, which is how 'not available' looks on a timeline."""
    return math.nan if value is None else float(value)


def format_gb(value: float | None) -> str:
    return NOT_AVAILABLE if value is None else f"{value / GB:.1f} GB"


def format_gb_per_s(value: float | None) -> str:
    return NOT_AVAILABLE if value is None else f"{value / GB:.2f} GB/s"


def format_pct(value: float | None) -> str:
    return NOT_AVAILABLE if value is None else f"{value:.0f}%"


def set_data_if_changed(source: ColumnDataSource, data: dict[str, list]) -> None:
    """The one place bar components write: skip the websocket message when nothing changed."""
    if dict(source.data) != data:
        source.data = data


@dataclass(frozen=True)
class BarMetric:
    """One bar per GPU: its value, its full scale on that GPU, and how to print it."""

    label: str
    read: Callable[[GpuReading], float | None]
    full_scale: Callable[[GpuFacts], float | None]
    describe: Callable[[GpuReading, GpuFacts], str]


class PerGpuBars:
    """Horizontal bars, each scaled to its own GPU's maximum (not GPU 0's)."""

    def __init__(self, facts: Sequence[GpuFacts], metrics: Sequence[BarMetric], x_label: str,
                 height: int | None = None) -> None:
        self.facts, self.metrics = list(facts), list(metrics)
        self.window_s = 0.0  # bars show only the newest sample
        nested = len(metrics) > 1
        self._factors = [(gpu_label(f, short=True), m.label) if nested else gpu_label(f)
                         for f in self.facts for m in self.metrics]
        self.source = ColumnDataSource({"y": [], "percent": [], "text": [], "color": []})
        plot = figure(
            # Reversed so GPU 0 is drawn at the top.
            y_range=FactorRange(*reversed(self._factors)), x_range=Range1d(0, 100),
            x_axis_label=x_label, sizing_mode="stretch_both", toolbar_location=None, tools="",
            height=height or max(160, 60 + 40 * len(self._factors)),
        )
        plot.hbar(y="y", right="percent", height=0.8, color="color", source=self.source)
        plot.add_layout(LabelSet(x="percent", y="y", text="text", source=self.source,
                                 x_offset=4, y_offset=-6, text_font_size="11px"))
        plot.add_tools(HoverTool(tooltips=[("GPU", "@y"), ("value", "@text")]))
        plot.ygrid.grid_line_color = None
        self.root = plot

    def update(self, samples: Sequence[Sample]) -> None:
        if not samples:
            return
        readings = {reading.index: reading for reading in samples[-1].gpus}
        data: dict[str, list] = {"y": list(self._factors), "percent": [], "text": [], "color": []}
        for facts in self.facts:
            reading = readings.get(facts.index, GpuReading.unavailable(facts.index, lost=False))
            for metric in self.metrics:
                value, scale = metric.read(reading), metric.full_scale(facts)
                percent = 0.0 if value is None or not scale else min(100.0, 100 * value / scale)
                text = "GPU lost" if reading.lost else metric.describe(reading, facts)
                data["percent"].append(percent)
                data["text"].append(text)
                data["color"].append(gpu_color(facts.index))
        set_data_if_changed(self.source, data)


@dataclass(frozen=True)
class Series:
    """One line on a timeline panel."""

    key: str
    label: str
    color: str
    read: Callable[[Sample], float | None]


@dataclass(frozen=True)
class Panel:
    title: str
    y_label: str
    series: Sequence[Series]
    y_max: float | None = None  # fixed top (e.g. 100 for percentages); None follows the data


def nice_ceiling(value: float) -> float:
    """A round axis top a bit above ``value`` (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^n)."""
    if not value > 0 or math.isinf(value):
        return 1.0
    scale = 10 ** math.floor(math.log10(value * 1.05))
    for step in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if step * scale >= value * 1.05:
            return step * scale
    return 10 * scale


class WindowMax:
    """The largest value seen in the last ``window_ms``, in O(1) per value (monotonic deque)."""

    def __init__(self, window_ms: float) -> None:
        self.window_ms = window_ms
        self._peaks: deque[tuple[float, float]] = deque()

    def add(self, time_ms: float, value: float) -> None:
        if math.isnan(value):
            return
        while self._peaks and self._peaks[-1][1] <= value:
            self._peaks.pop()
        self._peaks.append((time_ms, value))

    def value(self, now_ms: float) -> float:
        while self._peaks and self._peaks[0][0] < now_ms - self.window_ms:
            self._peaks.popleft()
        return self._peaks[0][1] if self._peaks else 0.0


PANEL_HEIGHT = 150
TIME_AXIS_HEIGHT = 30


def panel_heading(panel: Panel) -> Div:
    """The panel's title and legend as HTML above its canvas.

    Bokeh redraws an in-canvas legend on every update: with a legend in each of four
    panels, that was a third of the browser's CPU for /GPU-Resources
    (benchmarks/README.md). This text is laid out once.
    """
    items = "".join(
        f"<span style='margin-right:1em;white-space:nowrap'><span style='display:inline-block;"
        f"width:1.4em;vertical-align:middle;border-top:2px solid {series.color}'></span> "
        f"{html.escape(series.label)}</span>"
        for series in panel.series
    )
    return Div(text=f"<div style='font-size:12px;margin:0.4em 0 0 3.5em'>"
                    f"<b style='margin-right:1.2em'>{html.escape(panel.title)}</b>{items}</div>",
               sizing_mode="stretch_width")


X_HEADROOM = 0.05  # share of the shown span left empty on the right, ahead of the data
MIN_HEADROOM_MS = 2000.0


class Timeline:
    """Stacked line charts that share one x-range following the newest sample.

    The ranges are ``Range1d`` set by the server on each update, not ``DataRange1d``: a
    ``DataRange1d`` is computed in the browser, and every recomputation (five times a second
    per range) was sent back to the server as a PATCH-DOC, costing both sides.
    """

    def __init__(self, panels: Sequence[Panel], window_s: float, interval_s: float) -> None:
        self.series = [series for panel in panels for series in panel.series]
        self.window_s = window_s
        self.source = ColumnDataSource({"time": [], **{s.key: [] for s in self.series}})
        self.rollover = int(window_s / interval_s) + 1
        self.x_range = Range1d(0, 1)
        # Panels without a fixed top: (range, the series it spans, peak over the window).
        self._following: list[tuple[Range1d, list[str], WindowMax]] = []
        # The panels share one time ticker and one view, and each line is one model, not
        # three: /GPU-Resources went from 201 models to 97, and the document a new page
        # pulls from 27.6 kB to 13.8 kB.
        time_ticker, shared_view = DatetimeTicker(), CDSView()
        children: list[LayoutDOM] = []
        for position, panel in enumerate(panels):
            if panel.y_max:
                y_range = Range1d(0, panel.y_max)
            else:
                y_range = Range1d(0, 1)
                self._following.append((y_range, [s.key for s in panel.series],
                                        WindowMax(window_s * 1000)))
            # One time axis, under the last panel: the panels share it, and each axis
            # costs text measuring on every repaint.
            last = position == len(panels) - 1
            plot = figure(x_axis_type=None, x_range=self.x_range, y_range=y_range,
                          y_axis_label=panel.y_label, title=None,
                          height=PANEL_HEIGHT + (TIME_AXIS_HEIGHT if last else 0),
                          sizing_mode="stretch_width", toolbar_location=None, tools="")
            plot.add_layout(Grid(dimension=0, ticker=time_ticker))
            if last:
                plot.add_layout(DatetimeAxis(ticker=time_ticker), "below")
            for series in panel.series:
                # add_glyph leaves the selection and muted looks to BokehJS ("auto")
                # instead of adding two more Line models per series, as plot.line does.
                plot.add_glyph(self.source, Line(x="time", y=series.key, line_color=series.color,
                                                 line_width=2), view=shared_view)
            children += [panel_heading(panel), plot]
        self.root = column(*children, sizing_mode="stretch_width")

    def update(self, samples: Sequence[Sample]) -> None:
        if not samples:
            return
        data = {"time": [sample.time_s * 1000 for sample in samples]}
        for series in self.series:
            data[series.key] = [number_or_nan(series.read(sample)) for sample in samples]
        self.source.stream(data, rollover=self.rollover)
        newest_ms = data["time"][-1]
        if newest_ms > self.x_range.end or self.x_range.start == 0:
            # Step the axis forward with some headroom instead of on every sample: most
            # updates then send only the new points, not a range change as well.
            oldest_ms = self.source.data["time"][0]
            window_ms = self.window_s * 1000
            # Headroom scales with what is shown, so a young server's chart is not half empty.
            shown_ms = min(window_ms, newest_ms - oldest_ms)
            end = newest_ms + max(MIN_HEADROOM_MS, shown_ms * X_HEADROOM)
            self.x_range.update(start=max(oldest_ms, end - window_ms), end=end)
        for y_range, keys, peak in self._following:
            for position, time_ms in enumerate(data["time"]):
                peak.add(time_ms, max((data[key][position] for key in keys),
                                      key=lambda v: -math.inf if math.isnan(v) else v))
            top = nice_ceiling(peak.value(newest_ms))
            if y_range.end != top:  # changes rarely: one small message when it does
                y_range.end = top


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


def gpu_total(read: Callable[[GpuReading], float | None]) -> Callable[[Sample], float | None]:
    """Sum one metric over the GPUs that report it."""

    def total(sample: Sample) -> float | None:
        known = [v for v in (read(r) for r in sample.gpus) if v is not None]
        return sum(known) if known else None

    return total


def scaled(read: Callable[[Sample], float | None], unit: float) -> Callable[[Sample], float | None]:
    def value(sample: Sample) -> float | None:
        raw = read(sample)
        return None if raw is None else raw / unit

    return value
