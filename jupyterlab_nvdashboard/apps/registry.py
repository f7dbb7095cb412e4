"""The single list of dashboards. Bokeh routes, ``/index.json``, ``/`` and the stream
sockets all come from it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..metrics import Metrics
from ..stream.broadcaster import Feed
from . import activity, gpu, health, machine, overview, processes, workload
from .components import BarsFeed, BarsView, Timeline, TimelineFeed
from .document import Component
from .sources import DashboardSources


def standard_view(sources: DashboardSources, feed: Feed | None) -> Component:
    """Bars for a ``BarsFeed``, stacked timelines for a ``TimelineFeed``."""
    metrics = sources.metrics
    if isinstance(feed, BarsFeed):
        latest = metrics.history.latest()
        return BarsView(feed, [latest] if latest is not None else [])
    assert isinstance(feed, TimelineFeed), "a standard view draws a feed"
    return Timeline(feed, sources.timeline_windows_s, metrics.interval_s,
                    gpu_names={facts.index: facts.label for facts in metrics.facts})


@dataclass(frozen=True)
class Route:
    path: str
    title: str
    # What the page streams (built once per set of devices, shared by all its pages).
    # Given the Metrics (or the sources: feed_from_sources), and the rows from before an
    # upgrade where draws_rows_before_upgrade.
    make_feed: Callable[..., Feed]
    make_view: Callable[[DashboardSources, Feed | None], Component] = standard_view
    needs_gpu: bool = True  # without a GPU the page shows the "no GPU" notice instead
    shows_gpu: bool = True  # draws GPU readings, so simulate mode labels it SIMULATED
    # Whether this machine can fill the dashboard; routes that cannot are left out of the index.
    available: Callable[[DashboardSources], bool] = lambda sources: bool(sources.metrics.facts)
    feed_from_sources: bool = False  # make_feed needs the sources (Jupyter sessions, runs)
    # Further streams of the page, each at <path>/<name>/stream: name -> its feed, taken
    # from the route's own feed (so both are built, and rebuilt, together).
    substreams: tuple[tuple[str, Callable[[Feed], Feed]], ...] = ()
    # Draws the GPUs the store knows only by their row before an upgrade: make_feed is
    # given their rows too (``DashboardSources.rows_before_upgrade``), and the feed is made
    # anew (its pages reload) when they change, as when the GPUs change.
    draws_rows_before_upgrade: bool = False

    @property
    def stream_keys(self) -> list[str]:
        """The broadcaster's keys of this route's streams: the path, then path/name."""
        return [self.path] + [f"{self.path}/{name}" for name, _ in self.substreams]


def _has_nvlink(sources: DashboardSources) -> bool:
    return sources.metrics.has_nvlink


def _overview_feed(sources: DashboardSources) -> overview.OverviewFeed:
    return overview.OverviewFeed(sources, available_routes(sources))


def _overview_view(sources: DashboardSources, feed: Feed | None) -> Component:
    assert isinstance(feed, overview.OverviewFeed), "the overview streams its own table"
    return overview.OverviewView(sources, feed)


ROUTES: tuple[Route, ...] = (
    Route(overview.OVERVIEW_PATH, overview.OVERVIEW_TITLE, _overview_feed, _overview_view,
          feed_from_sources=True),
    Route("/GPU-Utilization", "GPU Utilization", gpu.gpu_utilization),
    Route("/GPU-Memory", "GPU Memory", gpu.gpu_memory),
    Route("/GPU-Resources", "GPU Resources", gpu.gpu_resources,
          draws_rows_before_upgrade=True),
    Route("/PCIe-Throughput", "PCIe Throughput", gpu.pcie_throughput),
    Route("/NVLink-Throughput", "NVLink Throughput", gpu.nvlink_throughput,
          available=_has_nvlink),
    Route("/NVLink-Timeline", "NVLink Timeline", gpu.nvlink_timeline, available=_has_nvlink,
          draws_rows_before_upgrade=True),
    Route("/GPU-Activity", "GPU Activity", activity.gpu_activity,
          activity.activity_dashboard),
    Route("/GPU-Health", "GPU Health", health.health_feed, health.health_dashboard,
          feed_from_sources=True,
          substreams=((health.TIMELINE_STREAM, health.health_timeline_feed),)),
    Route("/Machine-Resources", "Machine Resources", machine.machine_resources,
          needs_gpu=False, shows_gpu=False, available=lambda sources: True),
    Route("/GPU-Processes", "GPU Processes", processes.process_feed, processes.process_view,
          feed_from_sources=True),
    Route("/Workload", "Embedding Workload", workload.workload_feed, workload.workload_dashboard,
          needs_gpu=False, available=lambda sources: sources.workload is not None),
)
ROUTES_BY_PATH = {route.path: route for route in ROUTES}


def available_routes(sources: DashboardSources) -> dict[str, str]:
    """The ``/index.json`` body: route -> title, for the dashboards this machine can fill."""
    routes = {route.path: route.title for route in ROUTES if route.available(sources)}
    if sources.cluster is not None:  # cluster mode: its page has a stream of its own
        from .cluster import CLUSTER_PATH, CLUSTER_TITLE

        routes[CLUSTER_PATH] = CLUSTER_TITLE
    return routes


class RouteFeeds:
    """Each route's feed, built once per set of devices and shared by every page and the
    broadcaster, so a page's columns always match the frames it is sent."""

    def __init__(self, metrics: Metrics, sources: DashboardSources | None = None) -> None:
        self.metrics = metrics
        self.sources = sources
        self._built: dict[str, tuple[tuple[object, ...], Feed]] = {}

    def __call__(self, path: str) -> Feed | None:
        route = ROUTES_BY_PATH.get(path)
        if route is None:  # a route's further stream, e.g. /GPU-Health/timeline
            parent, _, name = path.rpartition("/")
            substreams = dict(ROUTES_BY_PATH[parent].substreams) \
                if parent in ROUTES_BY_PATH else {}
            feed = self(parent) if name in substreams else None
            return None if feed is None else substreams[name](feed)
        facts = tuple(self.metrics.facts)
        if route.needs_gpu and not facts:
            return None
        before_upgrade = (self.sources.rows_before_upgrade
                          if route.draws_rows_before_upgrade and self.sources is not None
                          else ())
        layout = (*facts, before_upgrade)
        built = self._built.get(path)
        if built is not None and built[0] == layout:
            return built[1]
        if route.feed_from_sources:
            if self.sources is None:
                return None
            feed = route.make_feed(self.sources)
        elif route.draws_rows_before_upgrade:
            feed = route.make_feed(self.metrics, before_upgrade)
        else:
            feed = route.make_feed(self.metrics)
        self._built[path] = (layout, feed)
        return feed
