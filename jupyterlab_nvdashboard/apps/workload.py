"""The /Workload dashboard: run the bundled embedding workload and judge it on its GPU.

From the top, everything a first-time user needs fits a 1280x800 window: the run panel (the
path offered first is one that runs here; one that cannot says what it needs, and Start
says why it is off), the newest run's progress (starting, warm-up k of W, timed n of N with
ms per iteration, ETA and elapsed time; then finished, stopped or failed and why), and the
verdict on it, wrapped, never cut. Under them the table of runs, newest first, summarizes
each over its own timed part, on its own GPU, with a verdict (``runs/verdict.py``): the
first finding of the diagnosis of its GPU, naming the GPU and the samples (GPU readings) it
used, and under it what to try and the other findings. Clicking a row shows that run's
verdict and GPU above.

The iteration times of each preset get a chart of their own (presets differ in size, so
their milliseconds never share an axis); the charts share one time axis with the GPU
timeline, which shows the GPU the shown run is judged on (every GPU, one colour each,
before any run). Words keep one meaning: a *sample* is a GPU reading, an *example* is one
row of a training batch (examples/s), an *iteration* is one training step.
"""

from __future__ import annotations

import html
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bokeh.layouts import column, row
from bokeh.models import (
    Button,
    ColumnDataSource,
    CustomJS,
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
from ..runs.capabilities import default_path, devices_for, path_label
from ..runs.exchange import exchange_view, judge_run
from ..runs.launcher import PinnedGpu
from ..runs.verdict import (
    gpu_row,
    iterations_judged,
    judged_duration_s,
    judged_duration_why,
    run_pace_s,
    samples_in,
    timed_window,
)
from ..runs.watcher import MAX_ITERATIONS_KEPT, Run
from ..stream.broadcaster import Feed
from ..workload.cli import MAX_ITERATIONS
from ..workload.config import PATHS, PRESETS, SHARDED_PATHS, estimated_memory_bytes
from .components import (
    GB,
    GIB,
    NOT_AVAILABLE,
    THEMED_TABLE_CSS,
    Panel,
    Series,
    Timeline,
    TimelineFeed,
    duration_text,
    gpu_color,
    gpu_value,
    scaled,
)
from .sources import DashboardSources

log = logging.getLogger(__name__)
# Event files whose run could not be summarized, each logged once (not once per refresh).
_UNSUMMARIZED: set[str] = set()

SUMMARY_COLUMNS = {
    "run": "run", "preset": "preset", "path": "path", "device": "device",
    "status": "status", "iterations": "iterations", "median_ms": "ms/iteration",
    "examples_per_s": "examples/s", "gpu_util_pct": "GPU % judged",
    "pcie_gb_s": "PCIe GB/s", "peak_gpu_memory_gib": "peak GPU GiB",
    "speedup": "vs native",
    "verdict": "verdict; what to try; other findings",
}
# Each column's share of the table's width: the table fits the page (its columns shrink
# together, so the verdict is never cut at the right edge, e.g. in a JupyterLab tab beside
# the sidebar), and every cell wraps.
SUMMARY_WIDTHS = {
    "run": 150, "preset": 75, "path": 80, "device": 55, "status": 80, "iterations": 95,
    "median_ms": 85, "examples_per_s": 75, "gpu_util_pct": 90, "pcie_gb_s": 75,
    "peak_gpu_memory_gib": 90, "speedup": 65, "verdict": 230,
}
# The verdict cell: the first finding, and under it what to try, the other findings and a
# sharded run's exchange, all wrapped (never cut off). The HTML copies are escaped here:
# run files are untrusted text.
VERDICT_TEMPLATE = ('<div class="nvd-verdict" style="white-space: normal; line-height: 1.3">'
                    '<%= verdict_html %><br><span style="opacity: 0.75"><%= verdict_more_html %>'
                    '</span></div>')
# The columns that are a GPU's own figures, and what they say for a CPU run.
GPU_COLUMNS = ("gpu_util_pct", "pcie_gb_s", "peak_gpu_memory_gib")
CPU_RUN_CELL = "CPU run"
SUMMARY_EXTRA = ("verdict_more", "verdict_html", "verdict_more_html", "cause", "exchange",
                 "exchange_html")
TEMPLATES = {"verdict": VERDICT_TEMPLATE}
# Plain cells wrap too: a long status ("stopped without a summary · 3 bad lines") is never
# cut off with an ellipsis; so do the headings, which the narrowest table gives two lines.
WRAPPED_CELLS_CSS = """
.slick-cell { white-space: normal !important; overflow-wrap: anywhere; line-height: 1.3;
              padding-top: 3px; }
.slick-header-columns, .slick-header-column { height: 36px !important; }
.slick-header-column { white-space: normal !important; line-height: 1.2; }
.slick-column-name { white-space: normal; overflow-wrap: anywhere; }
"""
MAX_PANEL_SHARDS = 8
# Rows are as tall as the longest cell needs (a table's rows share one height): its lines
# at about 6.2 pixels a character of 13-pixel text, 16 pixels a line, and one line spare,
# with the columns as narrow as they get in the narrowest table wrapped whole: a
# JupyterLab tab at 1280x800 with the left sidebar open.
CHAR_PX = 6.2
NARROWEST_TABLE_PX = 900
COLUMN_SCALE = min(1.0, NARROWEST_TABLE_PX / sum(SUMMARY_WIDTHS.values()))
VERDICT_CHARS_PER_LINE = int(SUMMARY_WIDTHS["verdict"] * COLUMN_SCALE / CHAR_PX)
LINE_PX, MIN_ROW_PX, MAX_ROW_PX = 16, 48, 480
HEADER_PX, MAX_TABLE_PX = 42, 640  # a heading wraps to two lines in a narrow table


def _lines(text: str, per_line: int) -> int:
    return -(-len(text) // per_line) if text else 0


def verdict_row_height(rows: Sequence[dict[str, Any]]) -> int:
    """Pixels a row needs to show its longest cell whole: the verdict and its second line
    (a sharded run's exchange there too), or a long status."""
    def needed(r: dict[str, Any]) -> int:
        verdict = _lines(str(r.get("verdict") or ""), VERDICT_CHARS_PER_LINE) + \
            _lines(str(r.get("verdict_more") or ""), VERDICT_CHARS_PER_LINE) + \
            _lines(_exchange_line(str(r.get("exchange") or "")), VERDICT_CHARS_PER_LINE)
        status = _lines(str(r.get("status") or ""),
                        int((SUMMARY_WIDTHS["status"] * COLUMN_SCALE - 10) / CHAR_PX))
        return max(verdict, status)
    lines = max((needed(r) for r in rows), default=1)
    return max(MIN_ROW_PX, min(MAX_ROW_PX, 8 + LINE_PX * (lines + 1)))


def _exchange_line(exchange: str) -> str:
    return f"exchange: {exchange}" if exchange else ""


WORKLOAD_WINDOW_S = 600.0  # long enough to compare a few runs side by side
REFRESH_MS = 1000  # how often the progress, the run panel and table look for new events
STALE_AFTER_S = 60.0
WARN_MEMORY_BYTES = 1e9  # a preset needing this much says so before it starts
# The timed iterations the panel offers first, per preset: enough for a verdict. A CPU run's
# verdict needs 3 s of timed part (3 readings of the process lists, one a second: whether it
# used a GPU; runs/verdict.py judged_duration_s); 200 steps of ci timed 0.2 s and were
# never judged (issue 44). The default run (plugin, ci, cpu) on the shared 2-core machine
# on 2026-12-05 timed 1.1 to 3.7 ms an iteration, wall time (median step 0.8 to 1.3 ms;
# four runs, quiet to loaded), so 10,000 time 11 to 37 s. Other presets step in tens of
# milliseconds or more.
PANEL_ITERATIONS = {"ci": 10_000}
PANEL_ITERATIONS_OTHERWISE = 200
RECENT_STEPS = 50  # the iterations the progress's ms per iteration is the median of
NO_RUNS_YET = ("No runs yet. Choose a path, a preset and a device, then press Start: each "
               "timed iteration appears here as a point, beside the GPU it ran on.")
GLOSSARY = ("<b>iteration</b>: one training step (warm-up iterations are untimed) · "
            "<b>examples/s</b>: training examples (rows of a batch) per second · "
            "<b>samples</b> (in a verdict): GPU readings, one per sampler tick · "
            "<b>GPU % judged</b>: SM activity, the run's own SM utilization, or utilization, "
            "best signal first, of its GPU over its timed part · click a row to show that "
            "run's verdict and GPU above")
STATE_COLORS = {"starting": "#1f77b4", "warm-up": "#1f77b4", "running": "#1f77b4",
                "finished": "#2ca02c", "stopped": "#ff7f0e", "failed": "#d62728",
                "stalled": "#d62728", "none": "#7f7f7f"}


def _pcie_of(row: int) -> Any:
    def read(sample: Sample) -> float | None:
        parts = [v for r in sample.gpus if r.index == row
                 for v in (r.pcie_tx_bytes_per_s, r.pcie_rx_bytes_per_s) if v is not None]
        return sum(parts) if parts else None
    return read


def last_event_s(run: Run) -> float:
    """When the run last said anything (its newest event we know the time of)."""
    times = [run.started_s or 0.0, run.warmup_end_s or 0.0]
    if run.last_iteration is not None:
        times.append(run.last_iteration["time"])
    if run.end is not None:
        times.append(run.end.get("time") or 0.0)
    return max(times)


def _status(run: Run, now_s: float) -> str:
    if run.end:
        if run.end.get("error"):
            state = "failed"
        else:
            state = "interrupted" if run.end.get("interrupted") else "done"
    else:
        # A process killed without its end event would otherwise look alive forever.
        state = ("running" if now_s - last_event_s(run) < STALE_AFTER_S
                 else "stopped without a summary")
    if run.bad_lines:
        state += f" · {run.bad_lines} bad line{'s' if run.bad_lines != 1 else ''}"
    return state


def _of(done: int, asked: int | None) -> str:
    return f"{done:,} of {asked:,}" if asked is not None else f"{done:,} of ?"


@dataclass(frozen=True)
class Progress:
    """Where a run is, in words: ``state`` (one of ``STATE_COLORS``), what runs, how far."""

    state: str
    headline: str  # "numpy on preset ci (cpu) · run 20261201-143458-d1bf0197"
    line: str  # "timed iteration 1,200 of 3,000 · 1.9 ms/iteration · ETA 4 s · elapsed 6 s"
    fraction: float | None = None  # of the timed iterations done (None: not yet timing)
    eta_s: float | None = None

    def html(self) -> str:
        color = STATE_COLORS.get(self.state, "#7f7f7f")
        bar = ""
        if self.fraction is not None:
            pct = max(0.0, min(100.0, 100.0 * self.fraction))
            bar = ("<div style='height:6px;margin-top:4px;max-width:640px;"
                   "background:rgba(128,128,128,0.25)'><div style='height:100%;"
                   f"width:{pct:.1f}%;background:{color}'></div></div>")
        word = {"none": "No run yet", "stalled": "No news"}.get(self.state,
                                                                 self.state.capitalize())
        head = f" · {html.escape(self.headline)}" if self.headline else ""
        return (f"<div class='nvd-progress' style='white-space:normal;line-height:1.4;"
                f"font-size:14px;padding:3px 8px;border-left:4px solid {color};"
                f"background:rgba(128,128,128,0.08)'><b style='color:{color}'>{word}</b>"
                f"{head}<br><span class='nvd-progress-line'>{html.escape(self.line)}</span>"
                f"{bar}</div>")


def _median_recent_ms(run: Run) -> float | None:
    recent = [event["ms"] for event in run.iterations[-RECENT_STEPS:]]
    if run.last_iteration is not None and len(run.iterations) >= MAX_ITERATIONS_KEPT:
        recent = [run.last_iteration["ms"]]  # past the kept ones: the newest we know
    return statistics.median(recent) if recent else None


def run_progress(run: Run, now_s: float, alive: bool | None = None) -> Progress:
    """The progress of ``run`` at ``now_s`` (epoch seconds). ``alive``: whether its process
    is known to be running (True: never called stalled), or None where nobody knows."""
    device = run.device if run.device != "?" else "device unknown"
    shards = (run.shards or {}).get("count")
    over = f", {shards} shards" if isinstance(shards, int) and shards > 1 else ""
    headline = f"{run.path} on preset {run.preset} ({device}{over}) · run {run.run_id}"
    asked, warmup = run.iterations_asked, run.warmup_asked
    end = run.end
    elapsed = now_s - run.started_s if run.started_s else None
    timed = run.timed_done
    if end is not None:
        done = end.get("iterations")
        done = timed if done is None else done
        took = (end.get("time") or now_s) - (run.started_s or now_s)
        median = end.get("median_ms")
        median_text = f" · median {median:.2f} ms/iteration" if median is not None else ""
        fraction = done / asked if asked else None
        if end.get("error"):
            return Progress("failed", headline,
                            f"failed: {end['error']} · after {_of(done, asked)} timed "
                            f"iterations · ran {duration_text(took)}", fraction)
        if end.get("interrupted"):
            return Progress("stopped", headline,
                            f"stopped after {_of(done, asked)} timed iterations"
                            f"{median_text} · ran {duration_text(took)}", fraction)
        timed_s = (end.get("time") or now_s) - run.warmup_end_s if run.warmup_end_s else None
        span = f"in {duration_text(took)}"
        if timed_s is not None and duration_text(timed_s) != duration_text(took):
            span = f"in {duration_text(timed_s)} ({duration_text(took)} with start-up and warm-up)"
        return Progress("finished", headline,
                        f"finished {_of(done, asked)} timed iterations {span}{median_text}",
                        fraction)
    since = now_s - last_event_s(run)
    if alive is not True and since >= STALE_AFTER_S:
        return Progress("stalled", headline,
                        f"no event for {duration_text(since)}: the run stopped without a "
                        f"summary, or is stuck · {_of(timed, asked)} timed iterations done",
                        timed / asked if asked else None)
    elapsed_text = f" · elapsed {duration_text(elapsed)}" if elapsed is not None else ""
    if run.warmup_end_s is None:
        if run.warmup_done == 0:
            then = f", then {warmup} untimed warm-up iterations" if warmup else ""
            return Progress("starting", headline,
                            f"starting: loading the {run.path} path and building the "
                            f"table{then} · {_of(0, asked)} timed iterations{elapsed_text}")
        return Progress("warm-up", headline,
                        f"warm-up: {_of(run.warmup_done, warmup)} untimed iterations done · "
                        f"then {asked if asked is not None else '?'} timed"
                        f"{elapsed_text}", 0.0)
    last = run.last_iteration
    if last is None or timed == 0:
        return Progress("running", headline,
                        f"timed iteration {_of(0, asked)} · ETA after the first timed "
                        f"iterations{elapsed_text}", 0.0)
    per_iteration_s = max(0.0, last["time"] - run.warmup_end_s) / timed
    eta = None
    if asked is not None:
        eta = max(0.0, (asked - timed) * per_iteration_s - max(0.0, now_s - last["time"]))
    median = _median_recent_ms(run)
    parts = [f"timed iteration {_of(timed, asked)}"]
    if median is not None:
        parts.append(f"{median:.2f} ms/iteration (median of the last {RECENT_STEPS})")
    parts.append(f"ETA {duration_text(eta)}" if eta is not None else "ETA unknown")
    line = " · ".join(parts) + elapsed_text
    if timed > MAX_ITERATIONS_KEPT:
        line += (f" · the chart and verdict use its first {MAX_ITERATIONS_KEPT:,} "
                 "iterations")
    return Progress("running", headline, line, timed / asked if asked else None, eta)


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
    # The event field keeps its old name, samples_per_s: training examples per second.
    examples_per_s = end.get("samples_per_s") or (batch / median * 1000 if batch and median
                                                   else None)
    # The run's own allocator peak; the device's memory would count everyone else's too.
    peak = end.get("peak_device_memory_bytes")
    speedup = (native_median_ms / median) if native_median_ms and median else None
    compared = f"{speedup:.1f}x" if speedup is not None else \
        "" if run.path == "native" else "no native run"
    verdict = judged.text
    more = judged.second_line()
    if end.get("error"):
        verdict, more = f"failed: {end['error']}", judged.text
    done = end.get("iterations")
    done = run.timed_done if done is None else done
    more_html = html.escape(more)
    if exchange:
        more_html += f"<br>{html.escape(_exchange_line(exchange))}"
    gpus: tuple[int, ...] = view.gpu_rows if view is not None and view.gpu_rows else ()
    if not gpus and judged.gpu_row is not None:
        gpus = (judged.gpu_row,)
    return {
        "run": run.run_id, "preset": run.preset, "path": run.path, "device": run.device,
        "status": _status(run, now_s), "iterations": _of(done, run.iterations_asked),
        "median_ms": _round(median, 2), "examples_per_s": _round(examples_per_s, 0),
        "gpu_util_pct": _round(judged.level_pct, 0), "pcie_gb_s": _round(pcie and pcie / GB, 2),
        "peak_gpu_memory_gib": NOT_AVAILABLE if peak is None else round(peak / GIB, 2),
        "speedup": compared,
        # A CPU run has no GPU figures of its own: said once per cell, not "n/a".
        **(dict.fromkeys(GPU_COLUMNS, CPU_RUN_CELL) if run.device == "cpu" else {}),
        "exchange": exchange, "exchange_html": html.escape(exchange),
        "verdict": verdict,
        "verdict_more": more,
        "verdict_html": html.escape(verdict), "verdict_more_html": more_html,
        "cause": judged.cause, "source": run.source, "gpu_rows": gpus,
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
        row: dict[str, Any] = dict.fromkeys((*SUMMARY_COLUMNS, *SUMMARY_EXTRA))
        row.update(run=run.run_id, preset=run.preset, path=run.path, device=run.device,
                   status="cannot summarize", verdict=f"{type(error).__name__}",
                   verdict_html=html.escape(type(error).__name__), verdict_more="",
                   verdict_more_html="", exchange="", source=run.source, gpu_rows=())
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


def panel_iterations_for(preset: str) -> int:
    """The timed iterations the panel offers for ``preset``."""
    return PANEL_ITERATIONS.get(preset, PANEL_ITERATIONS_OTHERWISE)


def judged_run_note(interval_s: float, runs: Sequence[Run], path: str, preset: str,
                    device: str, iterations: int | None) -> str:
    """Before Start: how long a run must time to be judged, and, from the newest finished
    run like this one, how long the iterations asked for would time."""
    needed = judged_duration_s(interval_s, device)
    text = (f"A verdict needs a timed part of {needed:g} s or more "
            f"({judged_duration_why(interval_s, device)}; start-up and warm-up are not judged)")
    like = next((run for run in reversed(runs) if run.end and not run.end.get("error")
                 and (run.path, run.preset, run.device) == (path, preset, device)), None)
    pace = run_pace_s(like) if like is not None else None
    if pace is None or iterations is None:
        return text + "."
    timed = pace * iterations
    verdict = "enough" if timed >= needed else \
        f"too short: ask for {iterations_judged(pace, interval_s, device):,} or more"
    return (f"{text}: at the pace of the last {path} {preset} {device} run "
            f"({pace * 1000:.2f} ms an iteration), {iterations:,} iterations time about "
            f"{duration_text(timed) if timed >= 1 else f'{timed:.1f} s'}: {verdict}.")


def memory_note(preset: str) -> str:
    """'densedemo needs about 1.0 GB of memory' for a preset of a gigabyte or more; else ''."""
    needed = estimated_memory_bytes(PRESETS[preset])
    if needed < WARN_MEMORY_BYTES:
        return ""
    return (f"preset {preset} needs about {needed / GB:.1f} GB of memory (on the GPU for a "
            "GPU run) before it starts")


# The time axis follows the shown run: its timed part and a tenth of it on each side (half a
# second at least), so a 1-second run's points are spread across the chart, not a stripe on
# a 10-minute axis. As a reader's zoom does, it stops the axis following the newest sample;
# the reset tool or a window button follows it again. The page's script may not be running
# yet when the first span comes: then it is waited for.
FOCUS_RUN_JS = """
const [start, end] = cb_obj.tags;
if (!(end >= start)) return;
const pad = Math.max((end - start) * 0.1, 500);
const focus = () => {
  const live = window.nvdashboardLive;
  if (!live) { setTimeout(focus, 200); return; }
  live.following = false;
  x_range.setv({start: start - pad, end: end + pad});
};
focus();
"""


class WorkloadDashboard:
    """Run panel, progress and verdict of the shown run, a per-run summary table, and the
    iteration times per preset beside the shown run's GPU timeline."""

    refresh_ms = REFRESH_MS

    def __init__(self, sources: DashboardSources, feed: TimelineFeed,
                 clock: Callable[[], float] = time.time) -> None:
        assert sources.workload is not None, "the server starts a WorkloadService"
        metrics = sources.metrics
        self.metrics, self.service = metrics, sources.workload
        # The history, and before it the store: a finished run is judged after a restart.
        self.history_since = sources.history_since
        self.stored_version = lambda: sources.stored_version
        self._seen_stored = -1
        self.run_control = sources.run_control
        self.clock = clock  # epoch seconds, as the run events say time
        # Simulated GPUs cannot run anything: only real ones are offered to GPU runs.
        self.real_gpus = bool(metrics.facts) and not metrics.simulated
        # The GPU timeline streams like every other; the run panel and table are this
        # page's own and refresh from the server.
        names = {f.index: f.label for f in metrics.facts}
        self.timeline = Timeline(feed, sources.timeline_windows_s, metrics.interval_s,
                                 default_window_s=WORKLOAD_WINDOW_S, gpu_names=names) \
            if feed.panels else None
        self.live = self.timeline.live if self.timeline else None
        self.summary = ColumnDataSource({key: [] for key in (*SUMMARY_COLUMNS, *SUMMARY_EXTRA)})
        # One source and one chart per preset: presets differ in size, so their
        # milliseconds per iteration never share an axis.
        self.iterations: dict[str, ColumnDataSource] = {}
        self.step_charts: dict[str, Any] = {}
        self._sent: dict[str, int] = {}
        self._colors: dict[str, str] = {}
        self._seen_version = -1
        self._rows: list[dict[str, Any]] = []  # the table's rows, newest first
        self._selected: str | None = None  # the event file of the run clicked in the table
        self._newest_source: str | None = None
        self._shown_gpus: tuple[int, ...] | None = None
        # The run a "Start: started ..." or "Stop: stopping ..." line is about: the line goes
        # once that run has ended (the progress says how), never to be read as news.
        self._confirmed_pid: int | None = None

        # Put in the page at the first iteration only: an empty plot is a blank box to a
        # user, and BokehJS warns that it "could not set initial ranges" (even for a hidden
        # one). Until then, the placeholder says what to do.
        self.empty = Div(text=f"<p>{html.escape(NO_RUNS_YET)}</p>", name="workload-empty",
                         sizing_mode="stretch_width", height=40)
        self.steps = column(self.empty, sizing_mode="stretch_width", name="workload-steps")

        paths = list(PATHS)
        self.path = Select(title="path", value=default_path(paths, self.real_gpus),
                           options=[(p, path_label(p, self.real_gpus)) for p in paths],
                           width=260, name="workload-path")  # "... (needs a real GPU)"
        self.preset = Select(title="preset", value="ci", options=list(PRESETS), width=110)
        self.count = Spinner(title=f"timed iterations (max {MAX_ITERATIONS:,})", low=1,
                             high=MAX_ITERATIONS, step=10, value=panel_iterations_for("ci"),
                             width=170, name="workload-iterations")
        self.device = Select(title="device", value="cpu", options=["cpu"], width=80)
        # The embedding table over N shards (numpy and cupy-plugin): N GPUs where the
        # machine has them, else N processes (CPU) or N shards emulated on one GPU.
        self.shards = Spinner(title="shards", low=1, high=MAX_PANEL_SHARDS, step=1, value=1,
                              width=70)
        gpus = [(str(f.index), f"{f.label}: {f.name}") for f in metrics.facts]
        # The GPU a run is pinned to (a GPU run) or judged against (a CPU run).
        self.gpu = Select(title="GPU", value=gpus[0][0] if gpus else "", options=gpus,
                          width=230, visible=bool(gpus))
        start, stop = Button(label="Start", button_type="success", width=80), \
            Button(label="Stop", button_type="danger", width=80)
        start.on_click(self._start)
        stop.on_click(self._stop)
        self.start_button, self.stop_button = start, stop
        # What the last press of Start or Stop did (the progress below says what runs now).
        self.status = Div(text="", sizing_mode="stretch_width", name="workload-status",
                          visible=False)
        self.hint = Div(text="", sizing_mode="stretch_width", name="workload-hint")
        self.progress = Div(text="", sizing_mode="stretch_width", name="workload-progress")
        self.verdict = Div(text="", sizing_mode="stretch_width", name="workload-verdict")
        self.gpu_heading = Div(text="", sizing_mode="stretch_width", name="workload-gpus")
        # The shown run's timed part, [first, last] in ms, which the time axis follows.
        self.run_span = Div(text="", visible=False, name="workload-run-span")
        if self.timeline is not None:
            self.run_span.js_on_change("tags", CustomJS(
                args={"x_range": self.timeline.x_range}, code=FOCUS_RUN_JS))
        self._runs: dict[str, Run] = {}  # the table's runs by event file
        # The span the axis should show, and whether the page is in the browser yet: a value
        # set before the first refresh reaches the browser as the page's first state, which
        # fires no change callback, so the span is set from the second refresh on.
        self._focus: list[float] | None = None
        self._page_sent = False
        self.path.on_change("value", lambda _attr, _old, _new: self._offer_devices())
        self.preset.on_change("value", lambda _attr, _old, new: self._preset_chosen(new))
        for widget in (self.count, self.device):
            widget.on_change("value", lambda _attr, _old, _new: self._show_hints())
        self._offer_devices()
        if not self.run_control:
            start.disabled = stop.disabled = True
            self._say(VIEW_ONLY_REASON)
        self.table = table = DataTable(
            source=self.summary, height=HEADER_PX + MIN_ROW_PX, sizing_mode="stretch_width",
            # force_fit: the columns shrink together to the table's width (BokehJS 3.8's
            # fit_columns stops the page's updates with "row is not defined").
            index_position=None, autosize_mode="force_fit", reorderable=False,
            row_height=MIN_ROW_PX, name="workload-table",
            stylesheets=[InlineStyleSheet(css=THEMED_TABLE_CSS + WRAPPED_CELLS_CSS)],
            columns=[TableColumn(field=key, title=title, width=SUMMARY_WIDTHS[key], **(
                {"formatter": HTMLTemplateFormatter(template=TEMPLATES[key])}
                if key in TEMPLATES else {})) for key, title in SUMMARY_COLUMNS.items()])
        self.summary.selected.on_change("indices", lambda _attr, _old, new: self._select(new))
        glossary = Div(text=f"<div style='font-size:12px;opacity:0.8'>{GLOSSARY}</div>",
                       sizing_mode="stretch_width", name="workload-glossary")
        self.root = column(row(self.path, self.preset, self.count, self.device, self.shards,
                               self.gpu, start, stop),
                           self.hint, self.progress, self.status, self.verdict, table,
                           glossary, self.steps, self.gpu_heading, self.run_span,
                           *([self.timeline.root] if self.timeline else []),
                           sizing_mode="stretch_width")

    def _say(self, text: str) -> None:
        self.status.text = f"<span>{html.escape(text)}</span>"
        self.status.visible = True

    def _offer_devices(self) -> None:
        offered = devices_for(self.path.value, self.real_gpus).offered
        self.device.options = list(offered) or ["none"]
        if self.device.value not in offered:
            self.device.value = offered[0] if offered else "none"
        self._show_hints()

    def _preset_chosen(self, preset: str) -> None:
        self.count.value = panel_iterations_for(preset)
        self._show_hints()

    def _show_hints(self) -> None:
        """Why a device is missing and what to install, how much memory the preset needs,
        how long a run must time to be judged, and why Start is off (a path that cannot run
        here, an unusable runs directory)."""
        devices = devices_for(self.path.value, self.real_gpus)
        lines = [devices.hint, memory_note(self.preset.value), judged_run_note(
            self.metrics.interval_s, self.service.watcher.runs(), self.path.value,
            self.preset.value, self.device.value, panel_iterations(self.count.value))]
        reason = self.service.disabled_reason
        if reason:
            lines.insert(0, f"run panel disabled: {reason}")
        elif not devices.offered:
            lines[0] = f"Start is off: {devices.hint or 'this path cannot run here'}"
        self.start_button.disabled = bool(reason) or not self.run_control \
            or not devices.offered
        self.hint.text = "".join(f"<div>{html.escape(line)}</div>" for line in lines if line)
        self.hint.visible = any(lines)  # an empty Div still takes a line of the page

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
            self._say(f"{time.strftime('%H:%M:%S')} Start: "
                      f"{self.service.launch(params, pinned)}")
            self._confirmed_pid = self.service.launcher.pid
        except (ValueError, OSError) as error:
            self._say(f"not started: {error}")
        self._show_hints()
        self._refresh_progress(self.service.watcher.newest())

    def _stop(self) -> None:
        if not self.run_control:
            self._say(f"not stopped: {VIEW_ONLY_REASON}")
            return
        self._say(f"{time.strftime('%H:%M:%S')} Stop: {self.service.launcher.stop()}")
        self._confirmed_pid = self.service.launcher.pid

    def refresh(self) -> None:
        try:
            self._refresh()
        finally:
            self._point_axis()

    def _point_axis(self) -> None:
        if self._page_sent and self._focus is not None \
                and list(self.run_span.tags) != self._focus:
            self.run_span.tags = self._focus
        self._page_sent = True

    def _refresh(self) -> None:
        # The progress every time: its ETA and elapsed time move on, and a run that went
        # silent is called so, with no new event.
        newest = self.service.watcher.newest()
        self._refresh_progress(newest)
        version = self.service.watcher.version
        running = self.service.launcher.running
        # Recompute the table when runs changed, when the store's part of their history was
        # read anew (off the event loop, so after the refresh that asked for it), and on
        # every refresh while one runs.
        stored = self.stored_version()
        if version == self._seen_version and stored == self._seen_stored and not running:
            return
        self._seen_version, self._seen_stored = version, stored
        runs = self.service.watcher.runs()
        self._runs = {run.source: run for run in runs}
        self._stream_iterations(runs)
        self._refresh_summary(runs)
        self._show_hints()  # the note on a judged run's length takes the newest run's pace

    def _refresh_progress(self, newest: Run | None) -> None:
        launcher = self.service.launcher
        running, pid = launcher.running, launcher.pid
        now = self.clock()
        if running and (newest is None or newest.pid != pid):
            progress = Progress("starting", f"the run's process (pid {pid})",
                                "starting: waiting for the run's first event (Python and "
                                "the workload's libraries are loading)")
        elif not running and launcher.last_error and (newest is None or newest.pid != pid):
            # It exited before it could write its own events (a missing framework, ...).
            progress = Progress("failed", f"the run's process (pid {pid}) exited before its "
                                "first event", f"failed: {launcher.last_error}")
        elif newest is None:
            progress = Progress("none", "", "Press Start: the run's progress (warm-up, timed "
                                "iterations n of N, ETA) shows here, and its verdict below.")
        else:
            alive = True if running and newest.pid == pid else None
            progress = run_progress(newest, now, alive)
        text = progress.html()
        if self.progress.text != text:
            self.progress.text = text
        if self._confirmed_pid is not None and newest is not None \
                and newest.pid == self._confirmed_pid and newest.end is not None:
            self._confirmed_pid = None
            self.status.visible = False

    def _color(self, run: Run) -> str:
        if run.source not in self._colors:
            self._colors[run.source] = Category10_10[len(self._colors) % len(Category10_10)]
        return self._colors[run.source]

    def _steps_chart(self, preset: str, run: Run, rows: dict[str, list]) -> None:
        """``preset``'s chart, put on the page with its first points (an empty plot makes
        BokehJS warn that it "could not set initial ranges")."""
        # As many points as streaming keeps (its rollover), however many runs are there.
        source = ColumnDataSource({key: values[-MAX_ITERATIONS_KEPT:]
                                   for key, values in rows.items()})
        shared_x = {"x_range": self.timeline.x_range} if self.timeline else {}
        batch = f", batch {run.batch:,}" if isinstance(run.batch, int) else ""
        title = (f"Iteration time, preset {preset}{batch} (its own ms axis)"
                 if preset in PRESETS else
                 f"Iteration time, preset {preset!r} (unknown or not said by the run)")
        chart = figure(title=title, x_axis_type="datetime", **shared_x,
                       y_axis_label="ms per iteration", height=200,
                       sizing_mode="stretch_width", toolbar_location=None, tools="",
                       name=f"workload-steps-{len(self.iterations)}")
        chart.scatter("time", "ms", color="color", legend_field="run", size=5, source=source)
        chart.legend.location = "top_left"
        chart.legend.label_text_font_size = "10px"
        self.iterations[preset], self.step_charts[preset] = source, chart
        children = [child for child in self.steps.children if child is not self.empty]
        self.steps.children = [*children, chart]

    def _stream_iterations(self, runs: list[Run]) -> None:
        new: dict[str, dict[str, list]] = {}
        first_run: dict[str, Run] = {}
        for run in runs:
            sent = self._sent.get(run.source, 0)
            if sent > len(run.iterations):
                sent = 0  # its file was replaced or truncated: the run started over
            events = run.iterations[sent:]
            self._sent[run.source] = len(run.iterations)
            if not events:
                continue
            first_run.setdefault(run.preset, run)
            rows = new.setdefault(run.preset, {"time": [], "ms": [], "run": [], "color": []})
            color = self._color(run)
            for event in events:
                rows["time"].append(event["time"] * 1000)
                rows["ms"].append(event["ms"])
                rows["run"].append(run.label)
                rows["color"].append(color)
        for preset, rows in new.items():
            if preset in self.iterations:
                self.iterations[preset].stream(rows, rollover=MAX_ITERATIONS_KEPT)
            else:
                self._steps_chart(preset, first_run[preset], rows)

    def _refresh_summary(self, runs: list[Run]) -> None:
        latest = self.metrics.history.latest()
        now = latest.time_s if latest else self.clock()
        # One pass over the history for all runs; each run then takes its own slice.
        oldest = min((run.started_s or now for run in runs), default=now)
        history = self.history_since(oldest - 1, now)
        facts = self.metrics.facts
        # Newest first: the run just started is the table's top row.
        rows = [summary_row(run, runs, history, facts, self.metrics.simulated, now)
                for run in reversed(runs)]
        self._rows = rows
        newest = rows[0]["source"] if rows else None
        if newest != self._newest_source:
            self._newest_source = newest
            self._selected = None  # a new run: show it, whatever was clicked before
        data = {key: ["n/a" if row[key] is None else row[key] for row in rows]
                for key in (*SUMMARY_COLUMNS, *SUMMARY_EXTRA)}
        self.table.visible = bool(rows)  # no rows: no empty grid, the charts say what to do
        if dict(self.summary.data) != data:
            self.summary.data = data
            height = verdict_row_height(rows)
            if self.table.row_height != height:
                self.table.row_height = height
            self.table.height = min(MAX_TABLE_PX, HEADER_PX + height * max(1, len(rows)) + 2)
            # BokehJS redraws a table when its row indices change, not when values change in
            # place (a run going from "running" to "done"); any change to the table model
            # makes it redraw, so bump a revision tag.
            self.table.tags = [self.table.tags[0] + 1 if self.table.tags else 1]
        sources = [row["source"] for row in rows]
        wanted = [sources.index(self._selected)] if self._selected in sources else []
        if list(self.summary.selected.indices) != wanted:
            self.summary.selected.indices = wanted
        self._show_run()

    def _select(self, indices: Sequence[int]) -> None:
        """A row clicked in the table: its verdict and GPU are shown above and below."""
        chosen = [i for i in indices if 0 <= i < len(self._rows)]
        selected = self._rows[chosen[0]]["source"] if chosen else None
        if selected != self._selected:
            self._selected = selected
            self._show_run()

    def _show_run(self) -> None:
        """The verdict on the shown run (the one clicked, else the newest), and its GPU on
        the GPU charts."""
        shown = next((r for r in self._rows if r["source"] == self._selected), None)
        which = "selected in the table"
        if shown is None:
            shown, which = (self._rows[0] if self._rows else None), "the newest"
        if shown is None:
            text = ("<div class='nvd-run-verdict' style='white-space:normal'><b>Verdict</b>: "
                    "none yet. A run is judged on its own GPU over its timed iterations, "
                    "from the end of warm-up.</div>")
        else:
            running = str(shown["status"]).startswith("running")
            so_far = " so far" if running else ""
            more = shown["verdict_more_html"]
            text = (f"<div class='nvd-run-verdict' style='white-space:normal;line-height:1.35;"
                    f"font-size:13px'><b>Verdict{so_far}</b> on run "
                    f"{html.escape(str(shown['run']))} ({html.escape(str(shown['path']))}, "
                    f"preset {html.escape(str(shown['preset']))}; {which}): "
                    f"<b>{shown['verdict_html']}</b>"
                    + (f"<br><span style='opacity:0.8'>{more}</span>" if more else "")
                    + "</div>")
        if self.verdict.text != text:
            self.verdict.text = text
        self._show_gpus(shown)
        self._follow_run(self._runs.get(shown["source"]) if shown else None)

    def _follow_run(self, run: Run | None) -> None:
        """Point the time axis at ``run``'s timed part (FOCUS_RUN_JS), as it grows."""
        span = timed_window(run) if run is not None else None
        if span is not None:
            self._focus = [span[0] * 1000, span[1] * 1000]

    def _show_gpus(self, shown: dict[str, Any] | None) -> None:
        """The GPU charts show the shown run's GPU(s), named in their heading; before any
        run (or for a run that names no GPU), every GPU, one colour each."""
        if self.timeline is None:
            return
        names = {f.index: f"{f.label}: {f.name}" for f in self.metrics.facts}
        gpus = tuple(r for r in (shown or {}).get("gpu_rows") or () if r in names)
        prefix = "SIMULATED " if self.metrics.simulated else ""
        if shown is None:
            text = ("GPU charts: every GPU, one colour each. Once a run starts they show the "
                    "GPU it is judged on.")
        elif not gpus:
            text = (f"GPU charts: every GPU, one colour each: run {shown['run']} does not say "
                    "which GPU it used.")
        else:
            listed = ", ".join(prefix + names[r] for r in gpus)
            one = len(gpus) == 1
            text = (f"GPU charts: {listed}, the GPU{'' if one else 's'} run {shown['run']} is "
                    "judged on" + (" (the buttons show the others)"
                                   if self.timeline.gpu_filter is not None else ""))
        html_text = f"<div style='font-size:13px;margin-top:0.5em'><b>{html.escape(text)}</b></div>"
        if self.gpu_heading.text != html_text:
            self.gpu_heading.text = html_text
        gpu_filter, rows = self.timeline.gpu_filter, list(self.timeline.live.filter_gpus)
        if gpu_filter is None or gpus == self._shown_gpus:
            return
        self._shown_gpus = gpus  # only when it changes: a reader's own clicks stay
        wanted = [rows.index(r) for r in gpus if r in rows] or list(range(len(rows)))
        gpu_filter.active = wanted


def _gpu_panels(metrics: Metrics) -> list[Panel]:
    """Each GPU's own line, in its own colour (the page shows the judged GPU's): never a
    mean over GPUs, which would hide the one the run is on among the idle ones."""
    facts = metrics.facts
    if not facts:
        return []

    def each(prefix: str, read: Callable[[Any], float | None], unit: float,
             only_whole: bool = False) -> list[Series]:
        return [Series(f"{prefix}{f.index}", f.label, gpu_color(f.index),
                       scaled(gpu_value(f.index, read), unit), gpu=f.index)
                for f in facts if not (only_whole and f.kind == "mig")]

    def pcie(reading: Any) -> float | None:
        parts = [v for v in (reading.pcie_tx_bytes_per_s, reading.pcie_rx_bytes_per_s)
                 if v is not None]
        return sum(parts) if parts else None

    return [
        Panel("GPU utilization", "Utilization (%)",
              each("gpu_util", lambda r: r.utilization_pct, 1.0), y_max=100, unit="%"),
        Panel("GPU memory used", "Memory (GiB)",
              each("gpu_memory", lambda r: r.memory_used_bytes, GIB), unit="GiB"),
        Panel("PCIe throughput (TX+RX)", "Throughput (GB/s)",
              each("pcie", pcie, GB, only_whole=True), unit="GB/s"),
    ]


def workload_feed(metrics: Metrics) -> TimelineFeed:
    return TimelineFeed(tuple(_gpu_panels(metrics)))


def workload_dashboard(sources: DashboardSources, feed: Feed | None) -> WorkloadDashboard:
    assert isinstance(feed, TimelineFeed), "the workload's feed is its GPU timeline"
    return WorkloadDashboard(sources, feed)
