"""The bar pages (/GPU-Utilization, /GPU-Memory, /PCIe-Throughput, /NVLink-Throughput) are
HTML rows, not a Bokeh plot: each row shows what ``BarsFeed`` decided (its share of the
device's scale, its level, its words), a lost GPU and a reading that is not available
included, and the page's stream carries the same rows."""

from __future__ import annotations

import asyncio
import html

import pytest
from bokeh.document import Document
from bokeh.models import Div, Plot

from jupyterlab_nvdashboard.apps.components import LEVEL_COLORS, NOT_AVAILABLE, BarsFeed
from jupyterlab_nvdashboard.apps.components import reading_time as time_of_day
from jupyterlab_nvdashboard.apps.document import build_document
from jupyterlab_nvdashboard.apps.registry import ROUTES, RouteFeeds
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from tests.support.bar_rows import bar_rows
from tests.support.servers import in_process_server
from tests.support.stream_client import live_frames
from tests.support.waiting import until


def _bar_pages(profile: str, gpus: int, lost: int | None = None):  # noqa: ANN202
    """Each bar route's feed, the bars it decides for the newest sample, and the HTML of
    the page's document built from the same history."""
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=gpus,
                                                                profile=profile)), environ={})
    metrics.nvml.ensure_initialized()
    metrics.sampler.tick()
    if lost is not None:
        metrics.simulator.lose_gpu(lost)
    metrics.sampler.tick()
    sources = DashboardSources(metrics)
    feeds = RouteFeeds(metrics, sources)
    pages = []
    for route in ROUTES:
        feed = feeds(route.path)
        if not isinstance(feed, BarsFeed) or not route.available(sources):
            continue
        doc = Document()
        build_document(doc, sources, route.title, route.needs_gpu, route.shows_gpu,
                       lambda route=route, feed=feed: route.make_view(sources, feed))
        models = list(doc.roots[0].select({"type": Div}))
        shown = next(div for div in models if div.name == "bars")
        pages.append((route.path, feed, feed.bars(metrics.history.window(60)), doc, shown))
    return metrics, pages


@pytest.mark.parametrize(("profile", "gpus", "lost"), [("mixed", 4, 1), ("a100-mig", 2, None)])
def test_bar_pages_are_html_rows_of_what_the_feed_decided(profile: str, gpus: int,
                                                          lost: int | None) -> None:
    metrics, pages = _bar_pages(profile, gpus, lost)
    routes = {path for path, *_ in pages}
    assert {"/GPU-Utilization", "/GPU-Memory", "/PCIe-Throughput"} <= routes
    assert ("/NVLink-Throughput" in routes) == metrics.has_nvlink
    read_at = time_of_day(metrics.history.latest().time_s)
    not_available = 0
    for path, feed, bars, doc, shown in pages:
        # No canvas to repaint: no Bokeh plot anywhere in the page's document.
        assert not [model for root in doc.roots for model in root.select({"type": Plot})], path
        rows, canvases = bar_rows(shown.text)
        assert canvases == 0
        assert len(rows) == len(metrics.facts) * len(feed.metrics) == len(bars), path
        assert html.escape(feed.x_label) in shown.text and f"Reading of {read_at}" in shown.text
        for row, bar in zip(rows, bars, strict=True):
            assert row["key"] == bar.key
            assert row["value"] == bar.text, (path, row)
            # Hover and screen readers: the device, the value and when it was read.
            assert row["title"] == row["label"]
            assert bar.gpu in row["label"] and bar.text in row["label"] \
                and f"reading of {read_at}" in row["label"], row
            assert row["tabindex"] == "0" and row["role"] == "img"
            assert (row["gpu"] == bar.gpu) == (not feed.nested or bar.key.endswith(
                f"-{feed.metrics[0].label}")), row
            if feed.nested:
                assert row["metric"] == bar.metric
            if bar.share is None:  # not available: no fill at all, never a 0
                assert row["fill"] is None and "na" in row["classes"], row
            else:
                assert row["fill"] == {"level": bar.level,
                                       "width_pct": round(bar.share, 1)}, row
                assert bar.level in LEVEL_COLORS
        if lost is not None:
            lost_rows = [row for row in rows if row["key"].startswith(f"{lost}-")]
            assert lost_rows and all(row["value"] == "GPU lost" and "lost" in row["classes"]
                                     and row["fill"] is None for row in lost_rows), lost_rows
        not_available += sum(1 for row in rows if row["value"].startswith(NOT_AVAILABLE))
    if profile == "a100-mig":  # NVML reports no utilization or PCIe rate for a MIG device
        utilization = next(bars for path, _, bars, *_ in pages if path == "/GPU-Utilization")
        mig = [bar for bar, facts in zip(utilization, metrics.facts, strict=True)
               if facts.kind == "mig"]
        assert mig and all(bar.share is None and bar.text == NOT_AVAILABLE for bar in mig)
        assert not_available >= len(mig)


def test_bar_frames_carry_the_rows_once_per_repaint() -> None:
    """The stream sends a bar page its rows as the HTML the page sets in place, no more
    often than the page repaints them (a frame between two repaints is decoded for
    nothing), and each frame is the newest reading."""
    with in_process_server(gpus=4) as server:
        history = server.metrics.history
        until(lambda: history.latest() is not None, "a first sample")
        received = asyncio.run(live_frames(server.url, "/GPU-Utilization", wanted=4,
                                           timeout_s=60))
        frames = received.frames[1:]  # after the catch-up
        assert len(frames) == 4
        for frame in frames:
            rows, _ = bar_rows(frame.rows.text["html"][0])
            assert [row["key"] for row in rows] == [
                f"{facts.index}-utilization" for facts in server.metrics.facts]
        # The readings of consecutive frames lie about a repaint apart, not a tick (0.1 s
        # here): half of it is the bound, whatever the machine's load does to the ticks.
        taken = {sample.seq: sample.time_s for sample in history.window(60)}
        steps = [taken[b.header["seq"]] - taken[a.header["seq"]]
                 for a, b in zip(frames, frames[1:], strict=False)]
        assert min(steps) >= BarsFeed.refresh_s / 2, steps
        # Each frame shows the newest reading there was when it was sent: no older one.
        for frame in frames:
            rows, _ = bar_rows(frame.rows.text["html"][0])
            assert all(row["label"].endswith(
                f"reading of {time_of_day(taken[frame.header['seq']])}") for row in rows)
