"""The /GPU-Activity dashboard: what the SMs, tensor pipes and DRAM did (GPM, Hopper and later).

One panel per GPU (and per MIG GPU instance) that has GPM: SM activity, SM occupancy,
tensor-pipe activity, DRAM bandwidth and FP64/FP32/FP16 activity, with NVML's "GPU
utilization" drawn beside them so the gap between "a kernel was resident" and "the SMs were
busy" shows. Below, GPM's own PCIe and NVLink rates. GPUs without GPM are named in a notice
that says why and which metric comes closest, and that metric (utilization) is drawn for
them instead. Everything streams from ``Sample.extra[GPM_FAMILY]`` like any timeline.

A cell's footer opens this page on the cell's span and GPUs (``shown_span.py``): only those
GPUs are shown, and the legends read the span (its means) until the page follows now again.
Above the window lines, those GPUs' diagnosis over the cell's span, headed with it ("Over
cell [12] 12:03:04–12:03:45 UTC"), and the window lines speak of those GPUs alone.

Above the charts, the diagnosis (``diagnosis/``) of every GPU and MIG instance over the
window the page shows: one line per group of devices with the same finding, each device's
own a click away. There is one block of lines per window the picker offers, refreshed
from the server's shared cache every few seconds, and the picker shows the block of its
window in the browser (the picker is not synced back to the server).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence

from bokeh.document import Document
from bokeh.layouts import column
from bokeh.models import ColumnDataSource, CustomJS, Div

from ..diagnosis import Diagnosis, Finding
from ..diagnosis.rules import DiagnosisWindow
from ..metrics import GpuFacts, Metrics, Sample
from ..metrics.families import GPM_FAMILY, GpmReading, device_reading
from ..metrics.gpm import CLOSEST_METRIC, NO_GPM_HARDWARE, gpm_unavailable_reason
from ..stream.broadcaster import Feed
from .cells import span_samples
from .components import (
    GB,
    UNCAPPED_HEIGHT,
    Panel,
    Series,
    Timeline,
    TimelineFeed,
    gpu_color,
    gpu_label,
    gpu_value,
    scaled,
    window_label,
)
from .in_place import IN_PLACE_JS
from .shown_span import ShownSpan, legend_on_span, off_the_loop, read_once, with_kin
from .sources import DashboardSources

# GpmReading field -> (legend label, colour); utilization is grey, for comparison.
ACTIVITY_SERIES = {
    "sm_activity_pct": ("SM activity", "#d62728"),
    "sm_occupancy_pct": ("SM occupancy", "#ff7f0e"),
    "tensor_activity_pct": ("tensor pipes", "#9467bd"),
    "dram_bandwidth_pct": ("DRAM bandwidth", "#1f77b4"),
    "fp64_activity_pct": ("FP64", "#8c564b"),
    "fp32_activity_pct": ("FP32", "#2ca02c"),
    "fp16_activity_pct": ("FP16", "#e377c2"),
}
UTILIZATION_COLOR = "#7f7f7f"


def gpm_value(index: int, field: str) -> Callable[[Sample], float | None]:
    """One GPM metric of device row ``index`` from a sample (None when not available)."""

    def value(sample: Sample) -> float | None:
        reading = device_reading(sample.extra, GPM_FAMILY, index, GpmReading)
        return None if reading is None else getattr(reading, field)

    return value


# Product lines that have no GPM at all, whatever the driver or binding (NVIDIA's GPM
# documentation: Hopper and later data-centre GPUs only).
NO_GPM_PRODUCTS = ("GeForce", "TITAN", "Quadro", "RTX A", "RTX ")


def gpm_reason_in_words(fact: GpuFacts, parent: GpuFacts | None, reason: str,
                        driver: str | None) -> str:
    """The reason a user can act on. When NVML could not even be asked (an old driver, or a
    binding without the call), a GeForce or workstation card still has no GPM: no newer
    nvidia-ml-py would change that, so the page says what the hardware lacks."""
    physical = parent or fact
    if physical.gpm_supported is not None:
        return reason
    if any(product in physical.name for product in NO_GPM_PRODUCTS):
        return f"{NO_GPM_HARDWARE}; {physical.name} has none"
    if driver and driver.split(".")[0].isdigit() and int(driver.split(".")[0]) < 520:
        return f"{NO_GPM_HARDWARE}; this driver is {driver}"
    return reason


def without_gpm(metrics: Metrics) -> list[tuple[GpuFacts, str]]:
    """The device rows that cannot report GPM, each with the reason in words."""
    facts = metrics.facts
    unavailable = metrics.nvml.unavailable()
    driver = metrics.nvml.versions.get("driver")
    rows = []
    for fact in facts:
        parent = facts[fact.parent] if fact.parent is not None else None
        reason = gpm_unavailable_reason(fact, parent, unavailable.get(fact.index, {}))
        if reason is not None:
            rows.append((fact, gpm_reason_in_words(fact, parent, reason, driver)))
    return rows


def _activity_panel(fact: GpuFacts) -> Panel:
    series = [Series(f"gpm{fact.index}_{field}", label, color, gpm_value(fact.index, field),
                     gpu=fact.index) for field, (label, color) in ACTIVITY_SERIES.items()]
    if fact.kind == "gpu" and not fact.mig_enabled:  # NVML has no utilization under MIG
        series.append(Series(f"gpm{fact.index}_utilization", "utilization (NVML)",
                             UTILIZATION_COLOR, gpu_value(fact.index,
                                                          lambda r: r.utilization_pct),
                             gpu=fact.index))
    return Panel(f"{gpu_label(fact)}: activity (GPM)", "Activity (%)", series, y_max=100,
                 unit="%")


def _link_panel(facts: list[GpuFacts], kind: str) -> Panel:
    series = []
    for fact in facts:
        for direction in ("tx", "rx"):
            series.append(Series(
                f"gpm{fact.index}_{kind}_{direction}", f"{fact.label} {direction.upper()}",
                gpu_color(fact.index),
                scaled(gpm_value(fact.index, f"{kind}_{direction}_bytes_per_s"), GB),
                gpu=fact.index, dash="solid" if direction == "tx" else "dashed"))
    name = "PCIe" if kind == "pcie" else "NVLink"
    return Panel(f"{name} throughput, as GPM counts it (TX solid, RX dashed)",
                 "Throughput (GB/s)", series,
                 unit="GB/s")


def gpu_activity(metrics: Metrics) -> TimelineFeed:
    lacking = {fact.index for fact, _ in without_gpm(metrics)}
    with_gpm = [fact for fact in metrics.facts if fact.index not in lacking]
    panels = [_activity_panel(fact) for fact in with_gpm]
    whole = [fact for fact in with_gpm if fact.kind == "gpu"]
    if whole:
        panels.append(_link_panel(whole, "pcie"))
    if any(fact.nvlink_link_ids for fact in whole):
        panels.append(_link_panel([f for f in whole if f.nvlink_link_ids], "nvlink"))
    closest = [fact for fact in metrics.facts if fact.index in lacking and fact.kind == "gpu"
               and not fact.mig_enabled]
    if closest:
        panels.append(Panel(
            "GPUs without GPM: GPU utilization, the closest metric (not SM activity)",
            "Utilization (%)",
            [Series(f"closest{fact.index}", fact.label, gpu_color(fact.index),
                    gpu_value(fact.index, lambda r: r.utilization_pct), gpu=fact.index)
             for fact in closest],
            y_max=100, unit="%"))
    return TimelineFeed(tuple(panels))


def cannot_report_notice(rows: list[tuple[GpuFacts, str]]) -> str:
    """HTML: each GPU that cannot report GPM, why, and the closest metric."""
    items = "".join(
        f"<li><b>{html.escape(gpu_label(fact))}</b> cannot report SM activity, occupancy, "
        f"tensor, DRAM or FP activity: {html.escape(reason)}.</li>" for fact, reason in rows)
    return (f"<div class='nvdashboard-gpm-notice' style='margin:0.3em 1em;font-size:13px'>"
            f"<ul style='margin:0.2em 0;padding-left:1.2em'>{items}</ul>"
            f"<div>{html.escape(CLOSEST_METRIC)}.</div></div>")


# The lines judge two minutes or more: five seconds is soon enough for them. A new text
# reaches the page as data, and is set in place (apps/in_place.py): a new Div text would
# make BokehJS lay out the page again, about as costly as a repaint of every chart.
DIAGNOSIS_REFRESH_MS = 5000
SET_LINES_JS = IN_PLACE_JS + """
source.data.html.forEach((text, i) => setDivHtml(lines[i], text));
"""


def device_range(labels: Sequence[str]) -> str:
    """``SIMULATED GPU 0–3`` for devices of one name numbered in a row, ``GPU 0, 2`` for
    others of one name, else the labels themselves."""
    parts = [re.fullmatch(r"(.*?)(\d+)", label) for label in labels]
    matched = [part for part in parts if part is not None]
    if len(labels) < 2 or len(matched) < len(parts) or \
            len({part.group(1) for part in matched}) > 1:
        return ", ".join(labels)
    prefix, numbers = matched[0].group(1), [int(part.group(2)) for part in matched]
    if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"{prefix}{numbers[0]}–{numbers[-1]}"
    return prefix + ", ".join(map(str, numbers))


def figure_range(findings: Sequence[Finding]) -> str:
    """The first figure every finding knows, from its least to its greatest value:
    ``time in gaps 12–17%`` (``time in gaps 12%`` where they agree)."""
    if any(finding.words for finding in findings):
        return ""  # said in words: no figure stands for it
    for figure in findings[0].figures:
        same = [next((f for f in finding.figures
                      if f.name == figure.name and f.value is not None), None)
                for finding in findings]
        known = [f for f in same if f is not None]
        if len(known) < len(same):
            continue
        low = min(known, key=lambda f: f.value or 0.0).value_text()
        high = max(known, key=lambda f: f.value or 0.0).value_text()
        if low == high:
            return low
        low_number = low[len(figure.name) + 1:].removesuffix(figure.unit).rstrip()
        return f"{figure.name} {low_number}–{high[len(figure.name) + 1:]}"
    return ""


def grouped(diagnoses: Sequence[Diagnosis]) -> list[list[Diagnosis]]:
    """The devices whose first finding is the same cause with the same advice, together, in
    the order their first device comes."""
    groups: dict[tuple[str, str], list[Diagnosis]] = {}
    for diagnosis in diagnoses:
        groups.setdefault((diagnosis.cause, diagnosis.first.advice), []).append(diagnosis)
    return list(groups.values())


def diagnosis_lines(diagnoses: list[Diagnosis], window_label_text: str,
                    over: str | None = None) -> str:
    """HTML: one line per group of devices with the same finding (four GPUs starved the same
    way said four times pushed the charts 330 px down), its cause and the range of its first
    figure; a click opens each device's whole finding and what to try. Wrapped, never cut.
    Headed "Over the last <window>", or ``over`` what (a cell's span)."""
    items = []
    for group in grouped(diagnoses):
        first = group[0].first
        figures = figure_range([diagnosis.first for diagnosis in group])
        brief = first.cause_words + (f", {figures}" if figures else "")
        advice = f"<div><i>Try: {html.escape(first.advice)}.</i></div>" if first.advice \
            else ""
        details = "".join(f"<div><b>{html.escape(diagnosis.label)}</b> "
                          f"{html.escape(diagnosis.first.summary())}</div>"
                          for diagnosis in group)
        # Keyed by what groups it: a group the reader opened stays open as its figures
        # change (in_place.js).
        key = html.escape(f"{first.cause} {first.advice}")
        items.append(f"<li data-key='{key}' "
                     f"data-cause='{html.escape(first.cause)}'><details><summary><b>"
                     f"{html.escape(device_range([d.label for d in group]))}</b>: "
                     f"{html.escape(brief)}</summary><div style='padding-left:1.2em'>"
                     f"{details}{advice}</div></details></li>")
    return (f"<div class='nvdashboard-diagnosis' style='margin:0.3em 1em;font-size:13px;"
            f"white-space:normal;overflow-wrap:anywhere'><b>Why is it slow? Over "
            f"{html.escape(over or 'the last ' + window_label_text)}:</b><ul style='margin:0.2em 0;"
            f"padding-left:0.2em;list-style:none'>{''.join(items)}</ul></div>")


class ActivityDashboard:
    """The diagnosis lines and the notice (when some GPU lacks GPM) above the timelines."""

    refresh_ms = DIAGNOSIS_REFRESH_MS

    def __init__(self, sources: DashboardSources, feed: TimelineFeed) -> None:
        self.sources = sources
        metrics = sources.metrics
        self.diagnoses = sources.diagnoses
        lacking = without_gpm(metrics)
        children = []
        self.windows_s = sources.timeline_windows_s
        self.lines = [Div(text="", sizing_mode="stretch_width", name=f"diagnosis-{w:g}",
                          visible=position == 0, syncable=False)
                      for position, w in enumerate(self.windows_s)]
        # What a cell's footer opens: its GPUs' diagnosis over its span (``show_cell``).
        self.cell_line = Div(text="", sizing_mode="stretch_width", name="diagnosis-cell",
                             visible=False)
        self.rows: tuple[int, ...] | None = None  # the GPUs shown alone; None: every GPU
        children += [self.cell_line, *self.lines]
        self.line_texts = ColumnDataSource({"html": [""] * len(self.lines)})
        self.line_texts.js_on_change("data", CustomJS(
            args={"source": self.line_texts, "lines": self.lines}, code=SET_LINES_JS))
        if lacking:
            self.notice: Div | None = Div(text=cannot_report_notice(lacking),
                                          sizing_mode="stretch_width",
                                          name="gpm-notice")
            children.append(self.notice)
        else:
            self.notice = None
        self.timeline = Timeline(feed, sources.timeline_windows_s,
                                 metrics.interval_s,
                                 gpu_names={f.index: f.label for f in metrics.facts}) \
            if feed.panels else None
        if self.timeline is not None:
            children.append(self.timeline.root)
            picker = self.timeline.picker
            if picker is not None:  # the lines follow the window the charts show
                picker.js_on_change("active", CustomJS(args={"lines": self.lines}, code=(
                    "lines.forEach((line, i) => { line.visible = i === cb_obj.active; });")))
                # ... and the window the page opened on (a span in its URL chooses it).
                picker.on_change("active", lambda _attr, _old, active: self._show_line(active))
                self._show_line(picker.active)
        self.live = self.timeline.live if self.timeline else None
        # In tags: the texts' source is in the document (and reaches the page) with the root.
        self.root = column(*children, sizing_mode="stretch_width", tags=[self.line_texts],
                           styles=UNCAPPED_HEIGHT)

    def show_cell(self, doc: Document, span: ShownSpan | None,
                  rows: tuple[int, ...] | None) -> None:
        """What a cell's footer opens (``document.ShowsCell``): the cell's GPUs alone (and
        their MIG kin), and legends that read the cell's span."""
        if self.timeline is None:
            return
        facts = self.sources.metrics.facts
        if rows is not None:
            self.rows = with_kin(rows, facts)
            self.timeline.show_gpus(self.rows)
            self.refresh()  # the window lines speak of the GPUs shown alone
        if span is not None:
            # One read of the span (its store buckets too) for its legends and diagnosis.
            samples = read_once(lambda start_s, end_s: span_samples(self.sources, start_s,
                                                                    end_s)[1], span)
            legend_on_span(doc, self.timeline, span, samples)
            off_the_loop(doc, lambda: self.span_lines(span, samples()), self._show_cell_line,
                         lambda: "", "a span's samples for its diagnosis")

    def span_lines(self, span: ShownSpan, samples: list[Sample]) -> str:
        """The diagnosis of the GPUs shown over ``span`` (``samples``, those within it): what
        the cell's footer names, over the cell (from memory, or the store's means before
        it), said as such."""
        metrics = self.sources.metrics
        window = DiagnosisWindow(samples, metrics.facts, simulated=metrics.simulated)
        rows = self.rows if self.rows is not None else [f.index for f in metrics.facts]
        found = [window.diagnose(row) for row in rows] if len(samples) > 1 else []
        return diagnosis_lines([d for d in found if d.findings], "", over=span.text)

    def _show_cell_line(self, text: str) -> None:
        self.cell_line.text = text
        self.cell_line.visible = bool(text)

    def _show_line(self, active: int) -> None:
        for position, line in enumerate(self.lines):
            line.visible = position == active

    def refresh(self) -> None:
        """The lines of every window, from the cache every page and /diagnosis.json share."""
        rows = self.rows
        texts = [diagnosis_lines([d for d in self.diagnoses.current(window_s)
                                  if rows is None or d.row in rows], window_label(window_s))
                 for window_s in self.windows_s]
        if texts == self.line_texts.data["html"]:
            return
        if self.line_texts.document is None:  # not on a page yet: the Divs carry the text
            for line, text in zip(self.lines, texts, strict=True):
                line.text = text
        self.line_texts.data = {"html": texts}


def activity_dashboard(sources: DashboardSources, feed: Feed | None) -> ActivityDashboard:
    assert isinstance(feed, TimelineFeed), "GPU-Activity streams a timeline"
    return ActivityDashboard(sources, feed)
