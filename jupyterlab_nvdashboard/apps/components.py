"""Reusable dashboard components: per-GPU bars and shared-axis timelines.

Each component has a ``source`` (ColumnDataSource), a ``root`` (the Bokeh model to show)
and ``update(samples)``, which only reads samples the sampler already collected.

Units: bytes use decimal SI prefixes everywhere (1 GB = 10^9 bytes, 1 MB = 10^6 bytes),
and every axis label says which.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bokeh.layouts import column
from bokeh.models import (
    ColumnDataSource,
    DataRange1d,
    FactorRange,
    HoverTool,
    LabelSet,
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


def gpu_label(facts: GpuFacts) -> str:
    return f"GPU {facts.index}: {facts.name}"


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
        self._factors = [(gpu_label(f), m.label) if nested else gpu_label(f)
                         for f in self.facts for m in self.metrics]
        self.source = ColumnDataSource({"y": [], "percent": [], "text": [], "color": []})
        plot = figure(
            # Reversed so GPU 0 is drawn at the top.
            y_range=FactorRange(*reversed(self._factors)), x_range=Range1d(0, 100),
            x_axis_label=x_label, sizing_mode="stretch_both", toolbar_location=None,
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
    dash: str = "solid"


@dataclass(frozen=True)
class Panel:
    title: str
    y_label: str
    series: Sequence[Series]
    y_max: float | None = None  # fixed top (e.g. 100 for percentages); None follows the data


class Timeline:
    """Stacked line charts that share one x-range following the newest sample."""

    def __init__(self, panels: Sequence[Panel], window_s: float, interval_s: float) -> None:
        self.series = [series for panel in panels for series in panel.series]
        self.window_s = window_s
        self.source = ColumnDataSource({"time": [], **{s.key: [] for s in self.series}})
        self.rollover = int(window_s / interval_s) + 1
        x_range = DataRange1d(follow="end", follow_interval=window_s * 1000, range_padding=0)
        self.x_range = x_range  # other figures may share it
        figures = []
        for panel in panels:
            y_range = Range1d(0, panel.y_max) if panel.y_max else DataRange1d(start=0)
            plot = figure(title=panel.title, x_axis_type="datetime", x_range=x_range,
                          y_range=y_range, y_axis_label=panel.y_label, height=180,
                          sizing_mode="stretch_width", toolbar_location=None)
            for series in panel.series:
                plot.line("time", series.key, source=self.source, color=series.color,
                          line_dash=series.dash, line_width=2, legend_label=series.label)
            plot.legend.location = "top_left"
            plot.legend.label_text_font_size = "10px"
            plot.legend.background_fill_alpha = 0.6
            figures.append(plot)
        self.root = column(*figures, sizing_mode="stretch_width")

    def update(self, samples: Sequence[Sample]) -> None:
        if not samples:
            return
        data = {"time": [sample.time_s * 1000 for sample in samples]}
        for series in self.series:
            data[series.key] = [number_or_nan(series.read(sample)) for sample in samples]
        self.source.stream(data, rollover=self.rollover)


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
