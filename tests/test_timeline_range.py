"""A timeline page's range in its URL (``?start=&end=&label=``, issue 45), without a browser:
which span a URL asks for, which window shows it, where the time axis is set, and what a page
says when the range is malformed. The browser's view of it: test_timeline_range_browser.py."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from bokeh.document import Document
from bokeh.models import BoxAnnotation, Div

from jupyterlab_nvdashboard.apps.activity import ActivityDashboard, gpu_activity
from jupyterlab_nvdashboard.apps.components import (
    Panel,
    Series,
    Timeline,
    TimelineFeed,
    timeline_windows,
)
from jupyterlab_nvdashboard.apps.document import PAGE_ARGUMENTS, requested_span
from jupyterlab_nvdashboard.apps.shown_span import (
    ShownSpan,
    show_span,
    span_from_query,
    window_for,
)
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig

WINDOWS_S = timeline_windows(1800.0, 7 * 24 * 3600.0)  # 2, 10, 30 min; 6 h, 24 h, 7 d


def document_asking(**arguments: str) -> Document:
    """A document whose page was requested with these query arguments (as Bokeh hands them
    to a document: lists of bytes)."""
    doc = Document()
    request = SimpleNamespace(arguments={k: [v.encode()] for k, v in arguments.items()})
    context = SimpleNamespace(request=request)
    doc._session_context = lambda: context  # noqa: SLF001 - Bokeh keeps a weak reference
    return doc


def a_timeline() -> Timeline:
    feed = TimelineFeed((Panel("Utilization", "%", (
        Series("utilization0", "GPU 0", "#1f77b4", lambda sample: 1.0, gpu=0),), y_max=100),))
    return Timeline(feed, WINDOWS_S, 0.2)


def test_the_span_a_url_asks_for_in_either_form_of_time() -> None:
    span = span_from_query("2026-12-05T12:03:04.5Z", "1796472225", "cell  [12]\n")
    assert span == ShownSpan(1796472184.5, 1796472225.0, "cell [12]")
    assert span.text == "cell [12] 12:03:04–12:03:45 UTC"
    assert span_from_query("10", "20", None).text == "00:00:10–00:00:20 UTC"
    assert span_from_query(None, None, "cell [1]") is None


@pytest.mark.parametrize(("start", "end", "words"), [
    ("yesterday", "20", "start 'yesterday' is neither an ISO 8601 time nor Unix seconds"),
    ("2026-12-05T12:03:04", "20", "has no zone"),
    ("30", "20", "end is before start"),
    ("30", None, "start and end must be given together"),
    ("nan", "20", "finite"),
])
def test_a_malformed_range_is_ignored_with_one_line(start: str, end: str | None,
                                                     words: str) -> None:
    arguments = {"start": start} | ({"end": end} if end is not None else {})
    span, refusal = requested_span(document_asking(**arguments))
    assert span is None
    assert refusal.startswith("The time range in the address was ignored: ")
    assert words in refusal and "\n" not in refusal


def test_the_page_reads_the_range_and_is_given_it() -> None:
    span, refusal = requested_span(document_asking(start="100", end="160", label="cell [3]"))
    assert (span, refusal) == (ShownSpan(100.0, 160.0, "cell [3]"), "")
    # The server hands a document only the arguments it reads (no token): the span's too.
    assert {"theme", "start", "end", "label"} <= set(PAGE_ARGUMENTS)


def test_the_smallest_window_that_reaches_back_to_the_span_is_chosen() -> None:
    now = 10_000_000.0
    assert window_for(ShownSpan(now - 60, now - 30), WINDOWS_S, now) == 120.0
    assert window_for(ShownSpan(now - 119, now - 100), WINDOWS_S, now) == 600.0  # + margin
    assert window_for(ShownSpan(now - 900, now - 800), WINDOWS_S, now) == 1800.0
    assert window_for(ShownSpan(now - 3 * 3600, now - 3600), WINDOWS_S, now) == 6 * 3600.0
    assert window_for(ShownSpan(now - 30 * 86400, now - 29 * 86400), WINDOWS_S, now) \
        == 7 * 86400.0


def test_a_timeline_shows_the_span_shaded_and_stops_following() -> None:
    timeline = a_timeline()
    now = time.time()
    span = ShownSpan(now - 700, now - 641, "cell [12]")
    assert show_span(timeline.live, span, now) == ""
    live = timeline.live
    assert live.window_s == 1800.0 and timeline.picker.active == WINDOWS_S.index(1800.0)
    margin_ms = 1000 * max(2.0, 0.1 * 59)
    assert (timeline.x_range.start, timeline.x_range.end) == pytest.approx(
        (1000 * span.start_s - margin_ms, 1000 * span.end_s + margin_ms))
    assert live.follow is False
    shade = [m for m in timeline.plot.center if isinstance(m, BoxAnnotation)]
    assert [(m.left, m.right) for m in shade] == [(1000 * span.start_s, 1000 * span.end_s)]
    labels = [m for m in timeline.plot.above if m.name == "shown-span-label"]
    assert [list(m.major_label_overrides.values()) for m in labels] == [[span.text]]


def test_a_span_older_than_every_window_says_so() -> None:
    timeline = a_timeline()
    now = time.time()
    note = show_span(timeline.live, ShownSpan(now - 30 * 86400, now - 30 * 86400 + 10), now)
    assert "before the oldest samples kept" in note
    assert timeline.live.window_s == 7 * 86400.0


def test_gpu_activity_says_why_it_is_slow_over_the_window_the_span_chose() -> None:
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=1)), environ={})
    metrics.nvml.ensure_initialized()
    metrics.sampler.tick()
    dashboard = ActivityDashboard(DashboardSources(metrics), gpu_activity(metrics))
    assert dashboard.timeline is not None and dashboard.timeline.picker is not None
    assert [line.visible for line in dashboard.lines][:3] == [True, False, False]
    now = time.time()
    show_span(dashboard.timeline.live, ShownSpan(now - 900, now - 890), now)
    shown = [line.name for line in dashboard.lines if line.visible]
    assert shown == [f"diagnosis-{dashboard.timeline.live.window_s:g}"] == ["diagnosis-1800"]


def test_a_page_without_a_range_follows_the_newest_sample() -> None:
    timeline = a_timeline()
    assert timeline.live.follow is True
    assert not [m for m in timeline.plot.center if isinstance(m, (BoxAnnotation, Div))]
