"""The nvdashboard Bokeh server.

Run it standalone::

    python -m jupyterlab_nvdashboard.server [PORT] [--address A] [--interval S] [--simulate N]
        [--no-token]

and open the URL it prints: it carries this launch's random access token
(``http://127.0.0.1:8000/?token=...``); every page, JSON endpoint and websocket asks for it
(``auth.py``). ``--no-token`` serves view-only dashboards to anyone who can reach the port.

It serves one route per dashboard (from ``apps/registry.py``) with its live-data socket
``<route>/stream`` (``stream/broadcaster.py``), ``/index.json`` (the dashboards this machine
can fill), ``/info.json`` (NVML state and devices), ``/history.csv?seconds=N`` (the history
as CSV; past the in-memory history, the store's buckets) and ``/`` (the GPU overview and a
link to every dashboard, which is also jupyter-server-proxy's readiness check). With no page
open the sampler slows down; a server started by jupyter-server-proxy without a store exits
after ``--exit-after-idle`` seconds (with one it keeps sampling at the idle interval, so the
stored history has no hole). Either way it exits once the Jupyter server that started it is
gone (``--jupyter-process``, ``jupyter_watch.py``).
The history store (``store/``) keeps 5-second and 1-minute buckets across restarts.
BokehJS is served by this server itself, with page-relative URLs, so pages render with no
internet and behind a path prefix. Bad input is reported as one line with exit code 2.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # A bad flag, setting or address is answered before Bokeh is imported, which takes
    # seconds on a busy machine; main() checks the same settings again. So is a Jupyter
    # server already gone, and its watch starts here: it covers the whole start-up.
    from jupyterlab_nvdashboard.preflight import exit_if_jupyter_gone, exit_on_bad_settings

    exit_if_jupyter_gone(exit_on_bad_settings(sys.argv[1:]))

import csv
import errno
import html
import io
import json
import logging
import math
import os
import secrets
import signal
import socket
import stat
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from bokeh.application import Application
from bokeh.server.server import Server
from bokeh.settings import settings as bokeh_settings
from bokeh.util import logconfig as bokeh_logconfig
from tornado.ioloop import IOLoop, PeriodicCallback
from tornado.iostream import StreamClosedError
from tornado.web import HTTPError

from . import __version__, bokeh_patches, http_edge, preflight
from .apps.cells import (
    CellRefused,
    cell_report,
    gpu_kernel_runs_a_cell,
    pass_after,
    reaches_store,
    refuse_future,
    running_span,
)
from .apps.cluster import (
    CLUSTER_PATH,
    ClusterFeeds,
    ClusterGpusView,
    cluster_title,
    cluster_windows,
)
from .apps.document import (
    THEMES,
    build_document,
    gpus_being_read,
    no_gpu_notice,
)
from .apps.live_cells import LiveCells
from .apps.overview import root_page
from .apps.processes import glance, processes_json
from .apps.registry import ROUTES, RouteFeeds, available_routes
from .apps.sources import DashboardSources
from .auth import VIEW_ONLY_REASON, Access, BokehAuth, GuardedHandler
from .composition import create_metrics
from .config import Config, ConfigError, ignored_variables_warning
from .export.collector import (
    DcgmCollector,
    HealthValue,
    MetricsHandler,
    Scrape,
    import_prometheus_client,
)
from .export.local import LocalScrape
from .export.usage import usage_series
from .instants import parse_instant, parse_span
from .jupyter_sessions import JupyterSessions, find_parent_server
from .jupyter_watch import watch_jupyter
from .long_reads import RETRY_AFTER_S, Busy, LongReads
from .metrics import GpuReading, HostReading, Metrics, Sample, past_span
from .metrics.demand import AT_WORK, CELL_RUNNING, HOLDING
from .page_handler import PageHandler
from .runs.service import WorkloadService
from .store import HistoryStore
from .store.buckets import before_upgrade_column, before_upgrade_readings, is_gap
from .stream.broadcaster import Broadcaster, StreamSocket
from .stream.changes import ChangeFeed, ChangeSocket

log = logging.getLogger("nvdashboard")

# Samples of the in-memory history per piece of /history.csv (30 minutes of 8 GPUs at
# 200 ms is 9,000 samples and 13 MB of CSV).
PIECE_SAMPLES = 720

# What stops the standalone server cleanly: Ctrl-C, and what service managers send.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class LiveSessions:
    """Counts the Bokeh sessions alive now (open tabs, and pages not yet discarded)."""

    def __init__(self) -> None:
        self.server: Server | None = None
        self.paths: tuple[str, ...] = ()  # the application routes, set with ``server``

    def __call__(self) -> int:
        return 0 if self.server is None else len(self.server.get_sessions())

    def routes(self) -> set[str]:
        """The routes with a live session (a page hidden, its stream closed, counts too)."""
        server = self.server
        return set() if server is None else \
            {path for path in self.paths if server.get_sessions(path)}


class ViewerWatch:
    """Tells the sampler who watches, and ends a server idle for too long.

    Viewers are open stream sockets, of every broadcaster (/Cluster-GPUs has one of its
    own), and live Bokeh sessions. The sampler reads what their routes show at the pace
    they draw it (``metrics/demand.py``), from the moment a page subscribes; it slows down
    at the next check after a page left.
    """

    CHECK_MS = 1000

    def __init__(self, metrics: Metrics, broadcasters: Sequence[Broadcaster],
                 live_sessions: LiveSessions, exit_after_s: float,
                 cell_running: Callable[[], bool] = lambda: False,
                 workload: WorkloadService | None = None) -> None:
        self.metrics, self.sampler = metrics, metrics.sampler
        # Whether a kernel that holds GPU memory runs a cell now (apps/cells.py): its
        # verdict is read at its own pace, whatever pages are open.
        self.cell_running = cell_running
        self.workload = workload  # its runs are followed faster while a page is open
        self.broadcasters, self.live_sessions = tuple(broadcasters), live_sessions
        self.exit_after_s = exit_after_s
        self.idle_since: float | None = None
        # JupyterLab's status bar and sidebar read the glance while JupyterLab is visible
        # (its /glance/stream socket ticks, or a request of /glance.json): somebody is
        # watching, so the server must not exit (the sampler may still run slowly).
        self.last_glance: float | None = None
        self.io_loop: IOLoop | None = None
        for broadcaster in self.broadcasters:
            broadcaster.on_viewers_changed = self.viewers_changed

    @property
    def viewers(self) -> int:
        return sum(b.subscribers for b in self.broadcasters) + self.live_sessions()

    def consumers(self) -> set[str]:
        """What is watched now: the routes of the open pages, ``HOLDING`` while one is open
        and a process holds a GPU, ``AT_WORK`` while a GPU is at work, page or not, and
        ``CELL_RUNNING`` while a kernel with GPU memory runs a cell (``metrics/demand.py``
        says what each reads)."""
        routes = self.live_sessions.routes()
        for broadcaster in self.broadcasters:
            routes |= broadcaster.watched_routes()
        holders = self.holders()
        if routes and holders:
            routes.add(HOLDING)
        if holders or self.busy():
            routes.add(AT_WORK)
        if self.cell_running():
            routes.add(CELL_RUNNING)
        return routes

    def holders(self) -> bool:
        """Whether the newest process pass found a process on a GPU."""
        processes = self.metrics.processes
        return processes is not None and bool(processes.latest)

    def busy(self) -> bool:
        """Whether the newest sample shows a GPU busy: work that no process list shows (a
        driver that lists none, or no process reader)."""
        latest = self.metrics.history.latest()
        return latest is not None and any(reading.utilization_pct
                                          for reading in latest.gpus)

    def glance_read(self) -> None:
        """Somebody read the glance now (a request, or a tick of an open glance socket)."""
        self.last_glance = time.monotonic()

    def viewers_changed(self, subscribers: int) -> None:
        if subscribers:
            self.idle_since = None
        self.sampler.set_consumers(self.consumers())
        if self.workload is not None:
            self.workload.set_watched(not self.sampler.idle)

    def start(self) -> None:
        self.io_loop = IOLoop.current()
        PeriodicCallback(self.check, self.CHECK_MS).start()

    def check(self) -> None:
        self.sampler.set_consumers(self.consumers())
        if self.workload is not None:
            self.workload.set_watched(not self.sampler.idle)
        if self.viewers:
            self.idle_since = None
            return
        now = time.monotonic()
        if self.idle_since is None:
            self.idle_since = now
        quiet_since = max(self.idle_since, self.last_glance or self.idle_since)
        if self.exit_after_s and now - quiet_since >= self.exit_after_s and self.io_loop:
            log.info("no page open for %.0f s: exiting (jupyter-server-proxy starts the "
                     "server again when a dashboard is opened)", self.exit_after_s)
            self.io_loop.stop()


def server_info(metrics: Metrics, live_sessions: LiveSessions | None = None,
                broadcaster: Broadcaster | None = None,
                store: HistoryStore | None = None) -> dict[str, Any]:
    """The ``/info.json`` body."""
    latest = metrics.history.latest()
    lost = {reading.index for reading in latest.gpus if reading.lost} if latest else set()
    unavailable = metrics.nvml.unavailable()
    info = {
        "version": __version__,
        "nvml_state": metrics.nvml.state.value,
        "nvml_message": metrics.nvml.message,
        # Driver, NVML library and nvidia-ml-py binding versions, where known.
        "nvml_versions": metrics.nvml.versions,
        "simulated": metrics.simulated,
        "simulated_profile": metrics.simulator.profile.name if metrics.simulator else None,
        "gpu_count": sum(facts.kind == "gpu" for facts in metrics.facts),
        "devices": [{**facts._asdict(), "lost": facts.index in lost,
                     "unavailable": unavailable.get(facts.index, {})}
                    for facts in metrics.facts],
        # True until the first GPU read is done: start-up never waits on NVML.
        "reading_gpus": gpus_being_read(metrics),
        "interval_s": metrics.interval_s,
        "history_s": metrics.history_s,
        "live_sessions": 0 if live_sessions is None else live_sessions(),
        "sampler_idle": metrics.sampler.idle,
        # The history store: where, whether this server writes or reads it, how big it is.
        "store": store.info() if store is not None else None,
    }
    if broadcaster is not None:
        stats = broadcaster.stats
        info["stream"] = {"subscribers": broadcaster.subscribers, "encodes": stats.encodes,
                          "catch_ups": stats.catch_ups, "frames_sent": stats.frames_sent,
                          "publishes": stats.publishes,
                          "dropped_slow": stats.dropped_slow,
                          "max_pending_frames": stats.max_pending_frames}
    if metrics.simulator is not None:
        # Total simulated NVML calls so far: benchmarks divide it by time.
        info["nvml_calls"] = metrics.simulator.total_calls
    return info


class _JsonHandler(GuardedHandler):
    def initialize(self, access: Access, sources: DashboardSources,
                   live_sessions: LiveSessions, broadcaster: Broadcaster,
                   watch: ViewerWatch | None = None, **_: object) -> None:
        super().initialize(access)
        self.sources, self.metrics = sources, sources.metrics
        self.live_sessions, self.broadcaster = live_sessions, broadcaster
        self.watch = watch

    def body(self) -> dict[str, Any]:
        raise NotImplementedError

    def get(self) -> None:
        self.write_json(self.body())

    def write_json(self, body: dict[str, Any]) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(body))


class IndexHandler(_JsonHandler):
    def body(self) -> dict[str, Any]:
        return available_routes(self.sources)


class InfoHandler(_JsonHandler):
    def body(self) -> dict[str, Any]:
        return server_info(self.metrics, self.live_sessions, self.broadcaster,
                           self.sources.store)


class ProcessesHandler(_JsonHandler):
    """``/processes.json``: the /GPU-Processes table as data."""

    def body(self) -> dict[str, Any]:
        return processes_json(self.sources)


class GlanceHandler(_JsonHandler):
    """``/glance.json``: GPU utilization and memory now, and the user's GPU kernels."""

    def body(self) -> dict[str, Any]:
        if self.watch is not None:
            self.watch.glance_read()
        return glance(self.sources)


HISTORY_CSV_FIELDS = [name for name in GpuReading._fields if name != "index"]


def history_csv_header(gpu_indices: list[int], before_upgrade: Sequence[int] = ()) -> str:
    """``/history.csv``'s first line: every column's unit is the end of its name. The
    columns of a GPU the store knows only by its row before an upgrade
    (``before_upgrade``) follow today's GPUs', named apart (``before_upgrade_column``)."""
    header = ["time_unix_s", "gpu_age_s"]
    header += [f"gpu{index}_{name}" for index in gpu_indices for name in HISTORY_CSV_FIELDS]
    header += [f"{before_upgrade_column(row)}_{name}" for row in before_upgrade
               for name in HISTORY_CSV_FIELDS]
    header += [f"host_{name}" for name in HostReading._fields]
    header += ["resolution_s"]
    return ",".join(header) + "\n"


def history_csv_rows(samples: Sequence[Sample], gpu_indices: list[int],
                     interval_s: float = 0.0, store_resolution_s: float = 0.0,
                     before_upgrade: Sequence[int] = ()) -> str:
    """One row per sample; empty = not available. ``before_upgrade`` as in
    ``history_csv_header``.

    ``resolution_s``, the last column, is the span a row stands for: the sampling interval
    for a sample of the in-memory history, the bucket width for a row from the store (the
    means of its bucket, at the bucket's middle)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")

    def cell(value: object) -> object:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return ""
        return int(value) if isinstance(value, bool) else value

    for sample in samples:
        stored = sample.seq < 0
        if stored and is_gap(sample):
            continue  # a gap marker: the time the server was not running has no row
        readings = {reading.index: reading for reading in sample.gpus}
        before = {reading.index: reading for reading in before_upgrade_readings(sample)}
        row: list[object] = [f"{sample.time_s:.3f}", cell(sample.gpu_age_s)]
        for devices, indices in ((readings, gpu_indices), (before, before_upgrade)):
            for index in indices:
                reading = devices.get(index)
                row += [cell(getattr(reading, name)) if reading else ""
                        for name in HISTORY_CSV_FIELDS]
        row += [cell(value) for value in sample.host]
        row.append(f"{store_resolution_s if stored else interval_s:g}")
        writer.writerow(row)
    return out.getvalue()


class DiagnosisHandler(_JsonHandler):
    """``/diagnosis.json?seconds=N``: each GPU's and MIG instance's diagnosis over the last N
    seconds (default: 120, what /GPU-Activity shows first), findings first to last."""

    async def get(self) -> None:
        text = self.get_argument("seconds", "120")
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        longest = max(self.metrics.history_s, self.sources.store.longest_s
                      if self.sources.store is not None else 0.0)
        if not 1 <= seconds <= longest:  # also refuses NaN
            raise HTTPError(400, reason=f"seconds must be a number from 1 to {longest:g}")
        # A 30-minute window of 8 GPUs costs over 100 ms of CPU (a stored week more): off
        # the event loop.
        self.write_json(await IOLoop.current().run_in_executor(
            None, self.sources.diagnoses.as_json, seconds))


class CellHandler(_JsonHandler):
    """``/cell.json?kernel=<id>&start=<t>&end=<t>``: what a notebook cell (a span of a
    kernel) did on the GPU (``apps/cells.py``); without ``end``, a running cell's span so
    far (``"running": true``; the Lab's live footers read it from the glance instead,
    ``apps/live_cells.py``). A span older than the in-memory history is a
    long read (``long_reads.py``), bounded as ``/history.csv``'s are."""

    def initialize(self, access: Access, sources: DashboardSources,  # type: ignore[override]
                   live_sessions: LiveSessions, broadcaster: Broadcaster,
                   long_reads: LongReads, **rest: object) -> None:
        super().initialize(access, sources, live_sessions, broadcaster, **rest)
        self.long_reads = long_reads

    async def get(self) -> None:
        # Without an end: the cell's span so far, while it runs (``running_span``).
        end_text = self.get_argument("end", None)
        kernel = self.get_argument("kernel", "")
        try:
            if end_text is None:
                start_s = parse_instant(self.get_argument("start", ""), "start")
                end_s, running = running_span(self.sources, kernel, start_s)
            else:
                (start_s, end_s), running = parse_span(self.get_argument("start", ""),
                                                       end_text), False
        except ValueError as error:
            raise HTTPError(400, reason=one_line(str(error))) from None
        # A cell that just ended waits for the process pass that closes it (here, on the
        # loop); then the report reads the store's file and asks Jupyter for its kernels:
        # off the event loop.
        try:
            refuse_future(end_s)  # at once: nothing waits for a span still to come
            if not running:
                await pass_after(self.sources, end_s)
            if reaches_store(self.sources, start_s):
                # A long read, bounded as /history.csv's are: 429 past the queue.
                async with self.long_reads.slot():
                    body = await IOLoop.current().run_in_executor(
                        self.long_reads.executor, cell_report, self.sources, kernel,
                        start_s, end_s, running)
            else:
                body = await IOLoop.current().run_in_executor(
                    None, cell_report, self.sources, kernel, start_s, end_s, running)
        except CellRefused as refusal:
            raise HTTPError(refusal.status, reason=one_line(refusal.reason)) from None
        except Busy as busy:
            # Answered here, not by HTTPError, whose page would drop the Retry-After.
            self.set_status(429, reason="too many long reads at once")
            self.set_header("Retry-After", str(RETRY_AFTER_S))
            self.finish(f"{busy}\n")
            return
        self.write_json(body)


def one_line(text: str) -> str:
    """A reason for the status line: what the request sent comes back quoted, and the
    status line carries Latin-1 only, so anything else is escaped."""
    return text.encode("ascii", "backslashreplace").decode("ascii")


class HistoryCsvHandler(GuardedHandler):
    """``/history.csv?seconds=N``: the last N seconds of samples (default: all the in-memory
    history); before the history's oldest sample, the store's finest buckets that reach that
    far back (the header ``X-Store-Resolution-S`` and each row's ``resolution_s`` say).

    A month of 8 GPUs is 63 MB of CSV: it is read, formatted and sent a piece at a time
    (``PIECE_SAMPLES`` samples, or the store's ``PIECE_ROWS`` buckets), each piece built on
    the long-read threads and sent before the next is read, so an answer holds one piece
    whatever its length, and a slow client slows only its own answer. At most
    ``long_reads.RUNNING`` answers stream at once; past those a few wait, then 429."""

    def initialize(self, access: Access, sources: DashboardSources, long_reads: LongReads,
                   **_: object) -> None:
        super().initialize(access)
        self.metrics, self.store = sources.metrics, sources.store
        self.long_reads = long_reads
        self.gone = False  # the client closed: read nothing more for it

    def on_connection_close(self) -> None:
        self.gone = True

    async def get(self) -> None:
        text = self.get_argument("seconds", str(self.metrics.history_s))
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        if not 0 < seconds <= 366 * 24 * 3600:  # also refuses NaN
            raise HTTPError(400, reason="seconds must be a positive number")
        try:
            async with self.long_reads.slot():
                await self._stream(seconds)
        except Busy as busy:
            self.set_status(429, reason="too many long reads at once")
            self.set_header("Retry-After", str(RETRY_AFTER_S))
            self.finish(f"{busy}\n")
        except StreamClosedError:
            pass  # the client went away: nothing more to send

    async def _stream(self, seconds: float) -> None:
        indices = [facts.index for facts in self.metrics.facts]
        recent = self.metrics.history.window(seconds)
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.set_header("Content-Disposition", 'attachment; filename="nvdashboard-history.csv"')
        self.set_header("Cache-Control", "no-store")
        run = partial(IOLoop.current().run_in_executor, self.long_reads.executor)
        resolution = 0.0  # of the rows from the store; 0: none (sent before the first row)
        store, span = self.store, past_span(recent, seconds, 0.0)
        before_upgrade: tuple[int, ...] = ()
        if store is None or span is None:
            self.write(history_csv_header(indices))
        else:
            start, first = span
            # The store's finest tier that still holds the window's start: 5 s, or 1 min.
            pieces = store.past_in_pieces(start, first, 0.0, rows="mean")
            # The first piece waits for the store to open: only then does it know the GPUs
            # it kept from before an upgrade, which have columns of their own.
            piece = await run(next, pieces, None)
            before_upgrade = store.rows_before_upgrade
            self.write(history_csv_header(indices, before_upgrade))
            while not self.gone and piece is not None:
                older = [sample for sample in piece.samples if sample.time_s < first]
                if older:
                    if not resolution:
                        resolution = piece.resolution_s
                        self.set_header("X-Store-Resolution-S", f"{resolution:g}")
                    self.write(await run(history_csv_rows, older, indices,
                                         self.metrics.interval_s, resolution, before_upgrade))
                    await self.flush()  # waits for the client: one piece in memory at a time
                if not self.gone:
                    piece = await run(next, pieces, None)
        if not resolution:
            self.set_header("X-Store-Resolution-S", "0")
        for at in range(0, len(recent), PIECE_SAMPLES):
            if self.gone:
                return
            self.write(await run(history_csv_rows, recent[at:at + PIECE_SAMPLES], indices,
                                 self.metrics.interval_s, resolution, before_upgrade))
            await self.flush()


class ClusterJsonHandler(_JsonHandler):
    """``/cluster.json``: the Dask cluster's GPUs as the dashboard sees them (cluster mode)."""

    def body(self) -> dict[str, Any]:
        cluster = self.sources.cluster
        if cluster is None:
            raise HTTPError(404, reason="not in cluster mode: start with --dask-scheduler")
        return cluster.summary()


class RootHandler(GuardedHandler):
    """The GPU overview and a link to every dashboard; it must answer fast (proxy readiness).

    Without the token it answers 403 at once, which is still an answer for readiness.
    """

    def initialize(self, access: Access, sources: DashboardSources, **_: object) -> None:
        super().initialize(access)
        self.sources, self.metrics = sources, sources.metrics

    def get(self) -> None:
        routes = available_routes(self.sources)
        notice = ""
        if not self.metrics.facts:
            notice = html.escape(no_gpu_notice(self.metrics))
        elif self.metrics.simulated:
            notice = "<strong>SIMULATED GPUs:</strong> no real hardware is being read."
        theme = self.get_argument("theme", "light")
        theme = theme if theme in THEMES else "light"
        colors = (THEMES[theme]["page_background"], THEMES[theme]["page_foreground"])
        self.write(root_page(self.sources, routes, theme, colors, notice))


def server_health(metrics: Metrics, watch: ViewerWatch,
                  broadcaster: Broadcaster) -> list[HealthValue]:
    """The server's own health for ``/metrics``: sampler, NVML, viewers, encodes."""
    sampler, stats = metrics.sampler, broadcaster.stats
    latest = metrics.history.latest()
    health = [
        HealthValue("nvdashboard_samples", "counter", "Samples the sampler has taken.",
                    sampler.ticks),
        HealthValue("nvdashboard_late_ticks", "counter",
                    "Sampler ticks skipped because a tick ran late.", sampler.late_ticks),
        HealthValue("nvdashboard_gpu_reads", "counter", "NVML passes over every GPU.",
                    sampler.gpu_reads),
        HealthValue("nvdashboard_late_gpu_reads", "counter",
                    "GPU reads skipped because NVML answered late.", sampler.late_gpu_reads),
        HealthValue("nvdashboard_nvml_state", "gauge", "1 for NVML's current state.", 1.0,
                    {"state": metrics.nvml.state.value}),
        HealthValue("nvdashboard_viewers", "gauge", "Open dashboard pages.", watch.viewers),
        HealthValue("nvdashboard_stream_encodes", "counter", "Live frames encoded.",
                    sum(stats.encodes.values())),
        HealthValue("nvdashboard_stream_encode_seconds", "counter",
                    "Seconds spent encoding live frames.", stats.encode_seconds),
        HealthValue("nvdashboard_sampler_idle", "gauge",
                    "1 while nobody watches and the sampler runs slow.", float(sampler.idle)),
    ]
    if latest is not None and latest.gpu_age_s is not None:
        health.append(HealthValue("nvdashboard_gpu_reading_age_seconds", "gauge",
                                  "Age of the newest GPU readings.", latest.gpu_age_s))
    return health


def this_host(config: Config) -> str:
    """The hostname label of this server's own GPUs (a simulated host's name if set)."""
    return config.simulation.host or socket.gethostname()


def make_metrics_collector(config: Config, sources: DashboardSources, watch: ViewerWatch,
                           broadcaster: Broadcaster) -> DcgmCollector | None:
    """The /metrics collector: this machine's GPUs, and every node's in cluster mode."""
    if not config.metrics_enabled:
        return None
    metrics = sources.metrics
    hostname, usage = this_host(config), sources.usage

    def health() -> list[HealthValue]:
        now = time.time()
        return server_health(metrics, watch, broadcaster) + usage_series(
            usage.snapshot()[2], usage.holder_usage(now) if config.metrics_per_user else [],
            metrics.facts, hostname, now, config.metrics_per_user)

    local = LocalScrape(metrics, hostname, health, sources.diagnoses.current)
    cluster = sources.cluster

    def snapshot() -> Scrape:
        scrape = local()
        if cluster is not None:
            scrape.gpus = cluster.exported(scrape.gpus)
        return scrape

    return DcgmCollector(snapshot, config.metrics_hostname_label, config.metrics_names)


def make_applications(sources: DashboardSources, feeds: RouteFeeds) -> dict[str, Application]:
    def view_maker(route: Any) -> Any:
        return lambda: route.make_view(sources, feeds(route.path))

    return {
        route.path: Application(PageHandler(partial(
            build_document, sources=sources, title=route.title,
            needs_gpu=route.needs_gpu, shows_gpu=route.shows_gpu,
            make_component=view_maker(route),
        )))
        for route in ROUTES
    }


def cluster_route(sources: DashboardSources) -> tuple[Broadcaster, Application]:
    """/Cluster-GPUs: its own broadcaster over the cluster reader's history, and its page."""
    cluster = sources.cluster
    assert cluster is not None
    feeds = ClusterFeeds(cluster)
    windows = cluster_windows(cluster)
    broadcaster = Broadcaster(cluster.history, cluster.interval_s, feeds, windows)

    def page(doc: Any) -> None:
        feed = feeds(CLUSTER_PATH)
        assert feed is not None
        # The workers say whether they read simulated GPUs, not this server's own reader.
        build_document(doc, sources, cluster_title(feed), needs_gpu=False, shows_gpu=False,
                       make_component=lambda: ClusterGpusView(feed, cluster.interval_s,
                                                              windows))

    return broadcaster, Application(PageHandler(page))


def make_server(config: Config, sources: DashboardSources,
                io_loop: IOLoop | None = None) -> Server:
    """Bind the Bokeh server (raises OSError if the port is taken).

    Every extra route's handler receives ``access`` (an ``auth.Access``) in its kwargs,
    with ``sources`` and ``live_sessions``; a handler checks it in ``prepare`` (see
    ``auth.GuardedHandler``) before it answers or upgrades to a websocket.
    """
    bokeh_patches.apply()
    # Bokeh checks a document's models each time a page is opened, a fifth of the CPU an
    # open costs (benchmarks/page_open_cost.py). Ours are built by code, the same every
    # time: the suite checks every route's document under every profile instead
    # (tests/test_profiles.py).
    bokeh_settings.perform_document_validation.set_value(False)
    access = Access.for_config(config)
    listen: dict[str, Any] = (
        {"unix_socket": config.unix_socket} if config.unix_socket
        else {"port": config.port, "address": config.address}
    )
    live_sessions = LiveSessions()
    metrics = sources.metrics
    feeds = RouteFeeds(metrics, sources)
    long_reads = LongReads()
    broadcaster = Broadcaster(metrics.history, metrics.interval_s, feeds,
                              sources.timeline_windows_s, past=sources.store,
                              executor=long_reads.executor)
    streams = [(rf"{key}/stream", StreamSocket,
                {"route": key, "broadcaster": broadcaster, "allows": access.allows})
               for route in ROUTES for key in route.stream_keys]
    applications = make_applications(sources, feeds)
    cluster_broadcaster = None
    if sources.cluster is not None:
        cluster_broadcaster, cluster_app = cluster_route(sources)
        applications[CLUSTER_PATH] = cluster_app
        streams.append((rf"{CLUSTER_PATH}/stream", StreamSocket,
                        {"route": CLUSTER_PATH, "broadcaster": cluster_broadcaster,
                         "allows": access.allows}))
    watch = ViewerWatch(metrics, [b for b in (broadcaster, cluster_broadcaster) if b],
                        live_sessions, config.idle_exit_s,
                        cell_running=lambda: gpu_kernel_runs_a_cell(sources),
                        workload=sources.workload)
    extra = {"access": access, "sources": sources, "live_sessions": live_sessions,
             "broadcaster": broadcaster, "long_reads": long_reads,
             "metrics_collector": make_metrics_collector(config, sources, watch, broadcaster),
             "metrics_allow": config.metrics_allow}
    server = Server(
        applications,
        io_loop=io_loop,
        allow_websocket_origin=config.websocket_origins,
        extra_patterns=[
            (r"/", RootHandler, extra),
            (r"/index\.json", IndexHandler, extra),
            (r"/info\.json", InfoHandler, extra),
            (r"/processes\.json", ProcessesHandler, extra),
            (r"/glance\.json", GlanceHandler, {**extra, "watch": watch}),
            (r"/glance/stream", ChangeSocket,
             {"feed": ChangeFeed(lambda: glance(sources)), "allows": access.allows,
              "on_watched": watch.glance_read}),
            (r"/diagnosis\.json", DiagnosisHandler, extra),
            (r"/cell\.json", CellHandler, extra),
            (r"/history\.csv", HistoryCsvHandler, extra),
            (r"/metrics", MetricsHandler, extra),
            (r"/cluster\.json", ClusterJsonHandler, extra),
            *streams,
        ],
        use_index=False,
        auth_provider=BokehAuth(access),
        # Made at each launch and never stored: a session id (and the websocket token that
        # carries it) is only accepted if this very process issued it on an allowed page.
        secret_key=secrets.token_urlsafe(32).encode(),
        sign_sessions=True,
        generate_session_ids=True,
        # Bokeh copies request headers and cookies into each session's token, which sits
        # in the page: behind Jupyter that was Jupyter's HttpOnly login cookie and _xsrf.
        # No document reads them, so none goes in (arguments: PageHandler).
        include_headers=[],
        include_cookies=[],
        unused_session_lifetime_milliseconds=config.unused_session_lifetime_ms,
        check_unused_sessions_milliseconds=config.check_unused_sessions_ms,
        # A header timeout, a cap on connections, and the headers every response carries.
        http_server_kwargs=http_edge.server_kwargs(),
        transforms=[http_edge.EveryResponseHeaders],
        **listen,
    )
    live_sessions.server = server
    live_sessions.paths = tuple(applications)
    broadcaster.attach(server.io_loop)
    if cluster_broadcaster is not None:
        cluster_broadcaster.attach(server.io_loop)
    server.broadcaster = broadcaster  # type: ignore[attr-defined]  # for tests and benchmarks
    server.long_reads = long_reads  # type: ignore[attr-defined]  # for tests
    server.io_loop.add_callback(watch.start)
    return server


def compose_sources(config: Config, metrics: Metrics) -> DashboardSources:
    """The metrics and, beside them, the workload service over the runs directory and the
    notebook names of the Jupyter server this one runs under (if any).

    A runs directory that cannot be used disables only the run panel (one line in the log
    and on the panel), when the service starts; the server and every other route carry on.
    With ``--dask-scheduler``, the cluster reader too; raises ImportError (one line) when
    cluster mode lacks ``distributed``.
    """
    # Nobody watching, the runs are followed at the sampler's resting pace.
    workload = WorkloadService(config.runs_dir, keep_runs=config.keep_runs,
                               resting_poll_s=config.idle_interval_s)
    owners = metrics.owners

    def kernels_hold_gpus() -> bool:
        return owners is not None and any(o.kernel_id for o in owners.latest.values())

    # The Jupyter server named at launch, not this process's parent now: that is init
    # once Jupyter is gone.
    jupyter = JupyterSessions(find_parent_server(parent_pid=config.jupyter_process.pid
                                                 if config.jupyter_process else None),
                              wanted=kernels_hold_gpus)
    cluster = None
    if config.dask_scheduler:
        from .cluster.view import ClusterView

        cluster = ClusterView.connect_to(config.dask_scheduler)
    sources = DashboardSources(metrics, workload, run_control=config.run_control,
                               jupyter=jupyter, cluster=cluster,
                               store=compose_store(config, metrics))
    sources.usage.unused_after_s = config.unused_after_s
    sources.live_cells = LiveCells(sources)
    return sources


def compose_store(config: Config, metrics: Metrics) -> HistoryStore | None:
    """The history store over the sampler's history (None with --no-store). It opens the
    file on its own thread when started: start-up never waits on the disk."""
    if config.store_path is None:
        return None
    def device_uuids() -> dict[int, str]:
        return {facts.index: facts.uuid for facts in metrics.facts}

    store = HistoryStore(config.store_path, config.store_retention_5s_s,
                         config.store_retention_1min_s,
                         # A missing 5-second bucket is a gap; a sampler slowed below one
                         # sample per bucket (a long idle interval) may leave some empty.
                         slack_s=max(5.0, 3 * config.idle_interval_s),
                         device_uuids=device_uuids)
    store.attach(metrics.history)
    return store


def remove_own_socket(path: str, identity: tuple[int, int] | None) -> None:
    """At a clean stop, remove the socket file this server made (and only that one)."""
    if identity is None:
        return
    try:
        info = os.stat(path)
        if stat.S_ISSOCK(info.st_mode) and (info.st_dev, info.st_ino) == identity:
            os.unlink(path)
    except OSError:
        pass


def dashboards_url(config: Config) -> str:
    """What to open: the URL with this launch's token, as Jupyter prints it."""
    if config.unix_socket:
        return config.unix_socket
    host = config.address
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # what a browser on this machine can open
    elif ":" in host:
        host = f"[{host}]"
    url = f"http://{host}:{config.port}/"
    return f"{url}?token={config.token}" if config.token else url


def main(argv: Sequence[str] | None = None) -> int:
    # Bokeh's wrapper also removes Bokeh's own stderr handler, so its records get our format.
    bokeh_logconfig.basicConfig(level=logging.INFO, format="nvdashboard: %(message)s")
    for noisy in ("bokeh", "tornado.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    bokeh_patches.one_line_logs(logging.getLogger().handlers)
    try:
        config, simulator = preflight.check(sys.argv[1:] if argv is None else argv)
    except ConfigError as error:
        print(f"nvdashboard: error: {error}", file=sys.stderr)
        return 2
    if config.address in ("0.0.0.0", "::", ""):
        print("nvdashboard: warning: listening on all interfaces; anyone on the network "
              "can watch these dashboards", file=sys.stderr)
    if (ignored := ignored_variables_warning(config)) is not None:
        print(f"nvdashboard: warning: {ignored}", file=sys.stderr)
    why_not = preflight.jupyter_gone(config)  # it may have gone during Bokeh's import
    if why_not:
        log.info(why_not)
        return 0
    jupyter = watch_jupyter(config.jupyter_process) if config.jupyter_process else None

    metrics = create_metrics(config, simulator=simulator)
    try:
        if config.metrics_enabled:
            import_prometheus_client()
        sources = compose_sources(config, metrics)
    except ImportError as error:
        print(f"nvdashboard: error: {error}", file=sys.stderr)
        return 2
    try:
        server = make_server(config, sources)
    except (OSError, ValueError) as error:
        reason = ("address already in use" if getattr(error, "errno", None) == errno.EADDRINUSE
                  else getattr(error, "strerror", None) or str(error))
        print(f"nvdashboard: error: cannot listen on {preflight.where(config)}: {reason}",
              file=sys.stderr)
        return 2
    socket_identity = None
    if config.unix_socket:
        info = os.stat(config.unix_socket)
        socket_identity = (info.st_dev, info.st_ino)

    def metrics_started() -> None:
        if metrics.facts:
            kind = "simulated GPU(s)" if metrics.simulated else "GPU(s)"
            log.info("reading %d %s every %.0f ms", len(metrics.facts), kind,
                     config.interval_s * 1e3)
        else:
            log.info("%s Serving the machine dashboard only.", no_gpu_notice(metrics))

    server.start()
    # NVML starts on its own thread: the pages answer at once, whatever NVML does.
    sources.start_without_waiting(metrics_started)
    log.info("dashboards at %s (Ctrl-C stops)", dashboards_url(config))
    if not config.run_control:
        log.info("%s: anyone who can reach this port can watch; the run panel is disabled",
                 VIEW_ONLY_REASON)

    asyncio_loop = server.io_loop.asyncio_loop  # type: ignore[attr-defined]

    def stop() -> None:
        # A second Ctrl-C or SIGTERM while stopping ends the process at once.
        for stopping in STOP_SIGNALS:
            asyncio_loop.remove_signal_handler(stopping)
            signal.signal(stopping, signal.SIG_DFL)
        server.io_loop.stop()

    def stop_because_jupyter_is_gone() -> None:
        assert jupyter is not None
        log.info(jupyter.reason)
        stop()

    if jupyter is not None:
        # From the watch's thread; queued before the loop runs, it runs first thing. The
        # clean stop below then writes the store's last batch and lets go of its lock.
        jupyter.when_gone(lambda: server.io_loop.add_callback(stop_because_jupyter_is_gone))

    # The loop's own handlers, not Python's KeyboardInterrupt: that is raised wherever the
    # main thread happens to be, and where it lands in a callback that swallows exceptions (a
    # weakref's, a finalizer's) the server never stops. They also replace an inherited
    # disposition: started by a non-interactive shell's `cmd &` (many container entry points),
    # SIGINT arrives ignored and Ctrl-C would not stop.
    for stopping in STOP_SIGNALS:
        asyncio_loop.add_signal_handler(stopping, stop)
    try:
        server.io_loop.start()
    finally:
        server.stop()
        sources.stop()
        if config.unix_socket:
            remove_own_socket(config.unix_socket, socket_identity)
            if config.jupyter_proxy:
                preflight.remove_proxy_socket_folder(config.unix_socket)
        log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
