"""The /Workload dashboard: run the bundled embedding workload and judge it on its GPU.

Iteration times of recent runs share one time axis with GPU utilization, memory and PCIe
from the sampler history, so a user sees the GPU go busy or stay idle as step times
change. The table summarizes each run over its own timed part, on its own GPU, with a
verdict (``runs/verdict.py``): the first finding of the diagnosis of its GPU over its timed
part, naming the GPU and the samples it used, and under it what to try and the other findings.
"""

from __future__ import annotations

import html
import logging
import statistics
from collections.abc import Sequence
from typing import Any

from bokeh.layouts import column, row
from bokeh.models import (
    Button,
    ColumnDataSource,
    DataTable,
    Div,
    HTMLTemplateFormatter,
    InlineStyleSheet,
    Select,
    Spinner,
    TableColumn,
)
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from ..auth import VIEW_ONLY_REASON
from ..diagnosis import mean
from ..metrics import GpuFacts, Metrics, Sample
from ..runs.capabilities import devices_for
from ..runs.exchange import exchange_view, judge_run
from ..runs.launcher import PinnedGpu
from ..runs.verdict import gpu_row, samples_in, timed_window
from ..runs.watcher import Run
from ..stream.broadcaster import Feed
from ..workload.cli import MAX_ITERATIONS
from ..workload.config import PATHS, PRESETS, SHARDED_PATHS, estimated_memory_bytes
from .components import (
    GB,
    NOT_AVAILABLE,
    THEMED_TABLE_CSS,
    Panel,
    Series,
    Timeline,
    TimelineFeed,
    gpu_total,
    scaled,
    timeline_windows,
)
from .sources import DashboardSources

log = logging.getLogger(__name__)
# Event files whose run could not be summarized, each logged once (not once per refresh).
_UNSUMMARIZED: set[str] = set()

SUMMARY_COLUMNS = {
    "run": "run", "path": "path", "device": "device", "status": "status",
    "median_ms": "ms/iter", "samples_per_s": "samples/s",
    "gpu_util_pct": "GPU % judged", "pcie_gb_s": "PCIe GB/s",
    "peak_gpu_memory_gb": "peak GPU GB", "speedup": "vs native",
    "exchange": "shards: bytes expected vs measured",
    "verdict": "verdict (first finding; then what to try and the rest)",
}
# Every column fits a 1280-pixel-wide window, the verdict included (it wraps in its cell).
SUMMARY_WIDTHS = (175, 65, 55, 100, 60, 75, 85, 75, 85, 70, 130, 265)
# The exchange cell wraps like the verdict (a sharded run's figures and why measured is 0).
EXCHANGE_TEMPLATE = ('<div class="nvd-exchange" style="white-space: normal; line-height: 1.3">'
                     '<%= exchange_html %></div>')
# The verdict cell: the first finding, and under it what to try and the other findings, all
# wrapped (never cut off). The HTML copies are escaped here: run files are untrusted text.
VERDICT_TEMPLATE = ('<div class="nvd-verdict" style="white-space: normal; line-height: 1.3">'
                    '<%= verdict_html %><br><span style="opacity: 0.75"><%= verdict_more_html %>'
                    '</span></div>')
SUMMARY_EXTRA = ("verdict_more", "verdict_html", "verdict_more_html", "cause", "exchange_html")
TEMPLATES = {"verdict": VERDICT_TEMPLATE, "exchange": EXCHANGE_TEMPLATE}
MAX_PANEL_SHARDS = 8
# Rows are as tall as the longest verdict (or exchange cell) needs (a table's rows share one
# height): its lines at about 6.2 pixels a character of 13-pixel text, 16 pixels a line, and
# one line spare.
VERDICT_CHARS_PER_LINE = int(SUMMARY_WIDTHS[-1] / 6.2)
EXCHANGE_CHARS_PER_LINE = int(SUMMARY_WIDTHS[-2] / 6.2)
LINE_PX, MIN_ROW_PX, MAX_ROW_PX = 16, 48, 480
HEADER_PX, MAX_TABLE_PX = 30, 640


def verdict_row_height(rows: Sequence[dict[str, Any]]) -> int:
    """Pixels a row needs to show the longest verdict and its second line whole."""
    def lines(text: str, per_line: int = VERDICT_CHARS_PER_LINE) -> int:
        return -(-len(text) // per_line) if text else 0
    needed = max((max(lines(r["verdict"]) + lines(r["verdict_more"]),
                      lines(str(r.get("exchange") or ""), EXCHANGE_CHARS_PER_LINE))
                  for r in rows), default=1)
    return max(MIN_ROW_PX, min(MAX_ROW_PX, 8 + LINE_PX * (needed + 1)))
WORKLOAD_WINDOW_S = 600.0  # long enough to compare a few runs side by side
REFRESH_MS = 1000  # how often the run panel and table look for new events
STALE_AFTER_S = 60.0
WARN_MEMORY_BYTES = 1e9  # a preset needing this much says so before it starts
NO_RUNS_YET = ("No runs yet. Choose a path, a preset and a device, then press Start: each "
               "timed iteration appears here as a point, beside the GPU it ran on.")


def mean_utilization(sample: Sample) -> float | None:
    known = [r.utilization_pct for r in sample.gpus if r.utilization_pct is not None]
    return sum(known) / len(known) if known else None


def _pcie_total(sample: Sample) -> float | None:
    parts = [v for r in sample.gpus for v in (r.pcie_tx_bytes_per_s, r.pcie_rx_bytes_per_s)
             if v is not None]
    return sum(parts) if parts else None


def _pcie_of(row: int) -> Any:
    def read(sample: Sample) -> float | None:
        parts = [v for r in sample.gpus if r.index == row
                 for v in (r.pcie_tx_bytes_per_s, r.pcie_rx_bytes_per_s) if v is not None]
        return sum(parts) if parts else None
    return read



def _status(run: Run, now_s: float) -> str:
    if run.end:
        if run.end.get("error"):
            state = "failed"
        else:
            state = "interrupted" if run.end.get("interrupted") else "done"
    else:
        last = run.iterations[-1]["time"] if run.iterations else run.started_s or 0.0
        # A process killed without its end event would otherwise look alive forever.
        state = "running" if now_s - last < STALE_AFTER_S else "stopped without a summary"
    if run.bad_lines:
        state += f" · {run.bad_lines} bad line{'s' if run.bad_lines != 1 else ''}"
    return state


def summarize(run: Run, samples: Sequence[Sample], facts: Sequence[GpuFacts], simulated: bool,
              native_median_ms: float | None, now_s: float) -> dict[str, Any]:
    """One table row: the run's own numbers and the verdict on its GPU over its timed part."""
    judged = judge_run(run, samples, facts, simulated)
    view = exchange_view(run, samples, facts)
    exchange = "" if view is None else view.text()
    window, row = timed_window(run), gpu_row(run, facts)
    pcie = None  # the device's traffic: a CPU run's would be someone else's
    if window is not None and row is not None and run.device == "gpu":
        pcie = mean([_pcie_of(row)(s) for s in samples_in(samples, window)])
    end = run.end or {}
    median = end.get("median_ms")
    if median is None and run.iterations:
        median = statistics.median(event["ms"] for event in run.iterations)
    batch = run.batch
    samples_per_s = end.get("samples_per_s") or (batch / median * 1000 if batch and median
                                                  else None)
    # The run's own allocator peak; the device's memory would count everyone else's too.
    peak = end.get("peak_device_memory_bytes")
    speedup = (native_median_ms / median) if native_median_ms and median else None
    verdict = judged.text
    more = judged.second_line()
    if end.get("error"):
        verdict, more = f"failed: {end['error']}", judged.text
    return {
        "run": run.run_id, "path": run.path, "device": run.device,
        "status": _status(run, now_s),
        "median_ms": _round(median, 2), "samples_per_s": _round(samples_per_s, 0),
        "gpu_util_pct": _round(judged.level_pct, 0), "pcie_gb_s": _round(pcie and pcie / GB, 2),
        "peak_gpu_memory_gb": NOT_AVAILABLE if peak is None else round(peak / GB, 2),
        "speedup": "" if speedup is None else f"{speedup:.1f}x",
        "exchange": exchange, "exchange_html": html.escape(exchange),
        "verdict": verdict,
        "verdict_more": more,
        "verdict_html": html.escape(verdict), "verdict_more_html": html.escape(more),
        "cause": judged.cause,
    }


def panel_iterations(value: Any) -> int | None:
    """The iteration count a client sent (a Spinner value: NaN, Infinity, a string, ...)
    as a whole number in range, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    # Compared first, so NaN, infinities and a 400-digit integer are all just out of range.
    if not 1 <= value <= MAX_ITERATIONS or value != int(value):
        return None
    return int(value)


def panel_shards(value: Any) -> int | None:
    """The shard count a client sent, as a whole number from 1 to MAX_PANEL_SHARDS."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 1 <= value <= MAX_PANEL_SHARDS or value != int(value):
        return None
    return int(value)


def summary_row(run: Run, runs: Sequence[Run], samples: Sequence[Sample],
                facts: Sequence[GpuFacts], simulated: bool, now_s: float) -> dict[str, Any]:
    """``summarize``, or a row that says the run could not be judged: one run the parser let
    through must never make the whole table (and every page's refresh) fail."""
    try:
        return summarize(run, samples, facts, simulated, native_baseline(runs, run), now_s)
    except Exception as error:  # noqa: BLE001 - logged as one line, the table carries on
        if run.source not in _UNSUMMARIZED and len(_UNSUMMARIZED) < 1000:
            _UNSUMMARIZED.add(run.source)
            log.warning("run %s (%s): cannot summarize: %s: %s", run.run_id[:100],
                        run.source, type(error).__name__, str(error)[:200])
        row: dict[str, Any] = dict.fromkeys(SUMMARY_COLUMNS)
        row.update(run=run.run_id, path=run.path, device=run.device,
                   status="cannot summarize", verdict=f"{type(error).__name__}")
        return row


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def native_baseline(runs: Sequence[Run], run: Run) -> float | None:
    """Median ms of the newest finished native run with the same preset, device and batch."""
    for other in reversed(runs):
        if (other.path == "native" and other.end and other.preset == run.preset
                and other.device == run.device and other.batch == run.batch):
            return other.end.get("median_ms")
    return None


def memory_note(preset: str) -> str:
    """'densedemo needs about 1.0 GB of memory' for a preset of a gigabyte or more; else ''."""
    needed = estimated_memory_bytes(PRESETS[preset])
    if needed < WARN_MEMORY_BYTES:
        return ""
    return (f"preset {preset} needs about {needed / GB:.1f} GB of memory (on the GPU for a "
            "GPU run) before it starts")


class WorkloadDashboard:
    """Run panel, live iteration-time and GPU timeline, and a per-run summary table."""

    refresh_ms = REFRESH_MS

    def __init__(self, sources: DashboardSources, feed: TimelineFeed) -> None:
        assert sources.workload is not None, "the server starts a WorkloadService"
        metrics = sources.metrics
        self.metrics, self.service = metrics, sources.workload
        self.run_control = sources.run_control
        # Simulated GPUs cannot run anything: only real ones are offered to GPU runs.
        self.real_gpus = bool(metrics.facts) and not metrics.simulated
        # The GPU timeline streams like every other; the run panel and table are this
        # page's own and refresh from the server.
        self.timeline = Timeline(feed, timeline_windows(metrics.history_s), metrics.interval_s,
                                 default_window_s=WORKLOAD_WINDOW_S) if feed.panels else None
        self.live = self.timeline.live if self.timeline else None
        self.iterations = ColumnDataSource({"time": [], "ms": [], "run": [], "color": []})
        self.summary = ColumnDataSource({key: [] for key in (*SUMMARY_COLUMNS, *SUMMARY_EXTRA)})
        self._sent: dict[str, int] = {}
        self._seen_version = -1

        shared_x = {"x_range": self.timeline.x_range} if self.timeline else {}
        # Put in the page at the first iteration only: an empty plot is a blank box to a
        # user, and BokehJS warns that it "could not set initial ranges" (even for a hidden
        # one). Until then, the placeholder says what to do.
        self.steps = steps = figure(
            title="Iteration time of recent runs", x_axis_type="datetime", **shared_x,
            y_axis_label="ms per iteration", height=220, sizing_mode="stretch_width",
            toolbar_location=None, tools="")
        steps.scatter("time", "ms", color="color", legend_field="run", size=5,
                      source=self.iterations)
        steps.legend.location = "top_left"
        steps.legend.label_text_font_size = "10px"
        self.empty = Div(text=f"<p>{html.escape(NO_RUNS_YET)}</p>", name="workload-empty",
                         sizing_mode="stretch_width", height=60)

        self.path = Select(title="path", value="plugin", options=list(PATHS), width=130)
        self.preset = Select(title="preset", value="ci", options=list(PRESETS), width=130)
        self.count = Spinner(title="iterations", low=1, high=MAX_ITERATIONS, step=10,
                             value=200, width=110)
        self.device = Select(title="device", value="cpu", options=["cpu"], width=90)
        # The embedding table over N shards (numpy and cupy-plugin): N GPUs where the
        # machine has them, else N processes (CPU) or N shards emulated on one GPU.
        self.shards = Spinner(title="shards", low=1, high=MAX_PANEL_SHARDS, step=1, value=1,
                              width=80)
        gpus = [(str(f.index), f"{f.label}: {f.name}") for f in metrics.facts]
        # The GPU a run is pinned to (a GPU run) or judged against (a CPU run).
        self.gpu = Select(title="GPU", value=gpus[0][0] if gpus else "", options=gpus,
                          width=220, visible=bool(gpus))
        start, stop = Button(label="Start", button_type="success", width=80), \
            Button(label="Stop", button_type="danger", width=80)
        start.on_click(self._start)
        stop.on_click(self._stop)
        self.start_button, self.stop_button = start, stop
        self.status = Div(text="", sizing_mode="stretch_width", name="workload-status")
        self.hint = Div(text="", sizing_mode="stretch_width", name="workload-hint")
        self.path.on_change("value", lambda _attr, _old, _new: self._offer_devices())
        self.preset.on_change("value", lambda _attr, _old, _new: self._show_hints())
        self._offer_devices()
        if not self.run_control:
            start.disabled = stop.disabled = True
            self._say(VIEW_ONLY_REASON)
        self.table = table = DataTable(
                          source=self.summary, height=300, sizing_mode="stretch_width",
                          index_position=None, autosize_mode="none", reorderable=False,
                          row_height=MIN_ROW_PX,
                          stylesheets=[InlineStyleSheet(css=THEMED_TABLE_CSS)],
                          columns=[TableColumn(field=key, title=title, width=width, **(
                              {"formatter": HTMLTemplateFormatter(template=TEMPLATES[key])}
                              if key in TEMPLATES else {}))
                                   for (key, title), width in zip(SUMMARY_COLUMNS.items(),
                                                                  SUMMARY_WIDTHS, strict=True)])
        self.root = column(row(self.path, self.preset, self.count, self.device, self.shards,
                               self.gpu, start, stop),
                           self.status, self.hint, self.empty,
                           *([self.timeline.root] if self.timeline else []), table,
                           sizing_mode="stretch_width")

    def _say(self, text: str) -> None:
        self.status.text = f"<span>{html.escape(text)}</span>"

    def _offer_devices(self) -> None:
        offered = devices_for(self.path.value, self.real_gpus).offered
        self.device.options = list(offered) or ["none"]
        if self.device.value not in offered:
            self.device.value = offered[0] if offered else "none"
        self._show_hints()

    def _show_hints(self) -> None:
        """Why a device is missing and what to install, how much memory the preset needs,
        and why runs cannot start at all (an unusable runs directory)."""
        lines = [devices_for(self.path.value, self.real_gpus).hint,
                 memory_note(self.preset.value)]
        reason = self.service.disabled_reason
        if reason:
            lines.insert(0, f"run panel disabled: {reason}")
        self.start_button.disabled = bool(reason) or not self.run_control
        self.hint.text = "".join(f"<div>{html.escape(line)}</div>" for line in lines if line)

    def _pinned_gpu(self) -> PinnedGpu | None:
        for facts in self.metrics.facts:
            if str(facts.index) == self.gpu.value:
                return PinnedGpu(facts.index, facts.uuid)
        return None

    def _pinned_gpus(self, shards: int) -> list[PinnedGpu]:
        """The picked GPU and the next ones after it, one per shard where there are enough
        (else the picked GPU alone: N shards emulated on it)."""
        first = self._pinned_gpu()
        if first is None:
            return []
        whole = [f for f in self.metrics.facts if f.kind != "mig"]
        after = [PinnedGpu(f.index, f.uuid) for f in whole if f.index >= first.index]
        return after[:shards] if len(after) >= shards else [first]

    def _start(self) -> None:
        # A disabled button can still be clicked by a crafted message: refuse here too.
        if not self.run_control:
            self._say(f"not started: {VIEW_ONLY_REASON}")
            return
        devices = devices_for(self.path.value, self.real_gpus)
        if self.device.value not in devices.offered:
            self._say(f"not started: {devices.hint or 'no device this path can use here'}")
            return
        iterations = panel_iterations(self.count.value)
        if iterations is None:
            self._say(f"not started: iterations must be a whole number from 1 to "
                      f"{MAX_ITERATIONS}")
            return
        params: dict[str, Any] = {"path": self.path.value, "preset": self.preset.value,
                                  "iterations": iterations, "device": self.device.value}
        shards = panel_shards(self.shards.value)
        if shards is None:
            self._say(f"not started: shards must be a whole number from 1 to "
                      f"{MAX_PANEL_SHARDS}")
            return
        pinned: PinnedGpu | list[PinnedGpu] | None = self._pinned_gpu()
        if shards > 1:
            if self.path.value not in SHARDED_PATHS:
                self._say(f"not started: shards run on the {' and '.join(SHARDED_PATHS)} "
                          "paths")
                return
            params["shards"] = shards
            if self.device.value == "gpu":
                pinned = self._pinned_gpus(shards)
        try:
            self._say(self.service.launch(params, pinned))
        except (ValueError, OSError) as error:
            self._say(f"not started: {error}")
        self._show_hints()

    def _stop(self) -> None:
        if not self.run_control:
            self._say(f"not stopped: {VIEW_ONLY_REASON}")
            return
        self._say(self.service.launcher.stop())

    def refresh(self) -> None:
        version = self.service.watcher.version
        running = self.service.launcher.running
        # Recompute the table when runs changed, and on every refresh while one runs.
        if version == self._seen_version and not running:
            return
        self._seen_version = version
        runs = self.service.watcher.runs()
        self._stream_iterations(runs)
        self._refresh_summary(runs)
        error = self.service.launcher.last_error
        if error and not running:
            self._say(f"the last run failed: {error}")

    def _stream_iterations(self, runs: list[Run]) -> None:
        new: dict[str, list] = {"time": [], "ms": [], "run": [], "color": []}
        for position, run in enumerate(runs):
            sent = self._sent.get(run.source, 0)
            if sent > len(run.iterations):
                sent = 0  # its file was replaced or truncated: the run started over
            for event in run.iterations[sent:]:
                new["time"].append(event["time"] * 1000)
                new["ms"].append(event["ms"])
                new["run"].append(run.label)
                new["color"].append(Category10_10[position % len(Category10_10)])
            self._sent[run.source] = len(run.iterations)
        if new["time"]:
            self.iterations.stream(new, rollover=20_000)
            if self.empty in self.root.children:
                self.root.children = [self.steps if child is self.empty else child
                                      for child in self.root.children]

    def _refresh_summary(self, runs: list[Run]) -> None:
        latest = self.metrics.history.latest()
        now = latest.time_s if latest else 0.0
        # One pass over the history for all runs; each run then takes its own slice.
        oldest = min((run.started_s or now for run in runs), default=now)
        history = self.metrics.history.window(now - oldest + 1)
        facts = self.metrics.facts
        rows = [summary_row(run, runs, history, facts, self.metrics.simulated, now)
                for run in runs]
        data = {key: ["n/a" if row[key] is None else row[key] for row in rows]
                for key in (*SUMMARY_COLUMNS, *SUMMARY_EXTRA)}
        if dict(self.summary.data) != data:
            self.summary.data = data
            height = verdict_row_height(rows)
            if self.table.row_height != height:
                self.table.row_height = height
                self.table.height = min(MAX_TABLE_PX, HEADER_PX + height * max(1, len(rows)))
            # BokehJS redraws a table when its row indices change, not when values change in
            # place (a run going from "running" to "done"); any change to the table model
            # makes it redraw, so bump a revision tag.
            self.table.tags = [self.table.tags[0] + 1 if self.table.tags else 1]


def _gpu_panels(metrics: Metrics) -> list[Panel]:
    if not metrics.facts:
        return []
    return [
        Panel("GPU utilization (mean of GPUs)", "Utilization (%)",
              [Series("gpu_util", "all GPUs", "#2ca02c", mean_utilization)], y_max=100,
              unit="%"),
        Panel("GPU memory used", "Memory (GB)", [Series(
            "gpu_memory", "all GPUs", "#9467bd",
            scaled(gpu_total(lambda r: r.memory_used_bytes), GB))], unit="GB"),
        Panel("PCIe throughput", "Throughput (GB/s)",
              [Series("pcie", "TX+RX, all GPUs", "#1f77b4", scaled(_pcie_total, GB))],
              unit="GB/s"),
    ]


def workload_feed(metrics: Metrics) -> TimelineFeed:
    return TimelineFeed(tuple(_gpu_panels(metrics)))


def workload_dashboard(sources: DashboardSources, feed: Feed | None) -> WorkloadDashboard:
    assert isinstance(feed, TimelineFeed), "the workload's feed is its GPU timeline"
    return WorkloadDashboard(sources, feed)
