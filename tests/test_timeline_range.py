"""A timeline page's range in its URL (``?start=&end=&label=``, issue 45), without a browser:
which span a URL asks for, which window shows it, where the time axis is set, and what a page
says when the range is malformed; and the view a cell's footer opens (``&gpus=``, issue 53):
the cell's GPUs alone, legends that read the span. The browser's view of it:
test_timeline_range_browser.py."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace

import pytest
from bokeh.document import Document
from bokeh.models import BoxAnnotation, Div

from jupyterlab_nvdashboard.apps.activity import (
    ActivityDashboard,
    activity_dashboard,
    gpu_activity,
)
from jupyterlab_nvdashboard.apps.components import (
    Panel,
    Series,
    Timeline,
    TimelineFeed,
    timeline_windows,
)
from jupyterlab_nvdashboard.apps.document import (
    PAGE_ARGUMENTS,
    build_document,
    requested_gpus,
    requested_span,
)
from jupyterlab_nvdashboard.apps.gpu import gpu_resources
from jupyterlab_nvdashboard.apps.registry import standard_view
from jupyterlab_nvdashboard.apps.shown_span import (
    ShownSpan,
    gpus_from_query,
    show_span,
    span_from_query,
    window_for,
    with_kin,
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


# --- The view a cell's footer opens (issue 53, item 3): the cell's GPUs, legends that read
# the span. The browser's view of it: test_timeline_range_browser.py.

def four_gpus(profile: str = "mixed") -> tuple[DashboardSources, list]:
    """Sources over four simulated GPUs of ``profile`` (mixed: GPUs 0 and 2 report GPM, 1
    and 3 do not), with one sample read."""
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=4, profile=profile)),
                             environ={})
    metrics.nvml.ensure_initialized()
    metrics.sampler.tick()
    return DashboardSources(metrics), list(metrics.facts)


def test_the_gpus_a_url_names_are_parsed_in_one_place_with_one_line_refusals() -> None:
    _, facts = four_gpus()
    uuids = [fact.uuid for fact in facts]
    assert gpus_from_query(None, facts) is None
    assert gpus_from_query(f" {uuids[2]},{uuids[1]},{uuids[2]}, ", facts) == (1, 2)
    assert "gpus" in PAGE_ARGUMENTS  # the server hands it to the page
    for text, words in [
        ("", "gpus names no GPU"),
        (" , ", "gpus names no GPU"),
        ("1,2", "'1' is not a GPU UUID (GPU-… or MIG-…)"),
        ("GPU-0<script>", "is not a GPU UUID"),
        ("GPU-ffff0000-0000-4000-8000-000000000009", "is not a GPU of this server"),
        (f"{uuids[0]},GPU-nope", "'GPU-nope' is not a GPU of this server"),
        ("GPU-" + "a" * 5000, "gpus is longer than 4000 characters"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)):
            gpus_from_query(text, facts)
        rows, refusal = requested_gpus(document_asking(gpus=text), SimpleNamespace(facts=facts))
        assert rows is None and refusal.startswith("The GPUs in the address were ignored: ")
        assert words in refusal and "\n" not in refusal and len(refusal) < 200
    assert requested_gpus(document_asking(), SimpleNamespace(facts=facts)) == (None, "")


def test_a_mig_device_brings_its_gpu_and_a_gpu_its_mig_devices() -> None:
    _, facts = four_gpus("a100-mig")
    mig = next(fact for fact in facts if fact.kind == "mig")
    siblings = {f.index for f in facts if f.parent == mig.parent}
    assert with_kin((mig.index,), facts) == (mig.parent, mig.index)
    assert set(with_kin((mig.parent,), facts)) == {mig.parent} | siblings
    # Parsed by its own UUID, as /cell.json names it.
    assert gpus_from_query(mig.uuid, facts) == (mig.index,)


def playing(sources: DashboardSources, now: float, span: tuple[float, float]) -> None:
    """A minute of samples every 0.5 s: inside ``span`` GPU r at 10 * (r + 1)% utilization,
    outside it (now too) at 95%: a legend that reads now says 95%."""
    history = sources.metrics.history
    template = history.latest()
    for step in range(120, -1, -1):
        time_s = now - 0.5 * step
        inside = span[0] <= time_s <= span[1]
        gpus = tuple(reading._replace(utilization_pct=10.0 * (reading.index + 1) if inside
                                      else 95.0) for reading in template.gpus)
        history.append(time_s, gpus, template.host, extra=template.extra)


def activity_page(sources: DashboardSources, **arguments: str
                  ) -> tuple[Document, ActivityDashboard]:
    """/GPU-Activity's document as the server builds it for a URL of these arguments."""
    doc = document_asking(**arguments)
    built = []

    def make() -> ActivityDashboard:
        built.append(activity_dashboard(sources, gpu_activity(sources.metrics)))
        return built[0]

    build_document(doc, sources, "GPU Activity", needs_gpu=True, shows_gpu=True,
                   make_component=make)
    return doc, built[0]


def shown_series(timeline: Timeline) -> set[str]:
    """The series keys the page draws at first: those of the GPUs its filter has on."""
    live = timeline.live
    shown_rows = {live.filter_gpus[i] for i in timeline.gpu_filter.active}
    return {key for key, gpu in live.series_gpu.items() if gpu is None or gpu in shown_rows}


def opened_on_cell_5() -> tuple[DashboardSources, Document, ActivityDashboard]:
    """/GPU-Activity as cell [5]'s footer opens it: four GPUs playing (``playing``), the
    cell's span 40 to 30 s ago, and its GPUs 1 and 2."""
    sources, facts = four_gpus()
    now = time.time()
    span = (now - 40.0, now - 30.0)
    playing(sources, now, span)
    doc, dashboard = activity_page(
        sources, start=f"{span[0]:.3f}", end=f"{span[1]:.3f}", label="cell [5]",
        gpus=f"{facts[1].uuid},{facts[2].uuid}")
    return sources, doc, dashboard


def test_the_view_a_footer_opens_shows_the_cells_gpus_and_legends_read_the_span() -> None:
    _, doc, dashboard = opened_on_cell_5()
    timeline = dashboard.timeline
    assert [n.text for n in doc.select({"name": "span-notice"})] == []
    # GPU 1 (no GPM: its utilization in the closest metric's band) and GPU 2 (its own band,
    # and its PCIe and NVLink lines), nothing of GPUs 0 and 3.
    shown = shown_series(timeline)
    assert "closest1" in shown and "gpm2_utilization" in shown and "gpm2_pcie_tx" in shown
    assert not {key for key in shown if key.startswith(("gpm0", "gpm3", "closest0",
                                                        "closest3"))}
    assert [timeline.live.filter_gpus[i] for i in timeline.gpu_filter.active] == [1, 2]
    # Legends: the span's means, said to be, not now's 95%.
    legend = dict(zip(timeline.live.span_legend.data["key"],
                      timeline.live.span_legend.data["text"], strict=True))
    assert (legend["closest1"], legend["gpm2_utilization"], legend["closest3"]) == \
        ("20%", "30%", "40%")
    assert legend["gpm0_utilization"] == "10%"
    assert timeline.bands.text.count("<i data-span-note") == len(timeline.feed.panels)
    assert "mean over cell [5]:" in timeline.bands.text
    assert timeline.live.follow is False


def test_without_a_span_or_gpus_the_view_is_as_before_and_bad_gpus_say_why() -> None:
    sources, facts = four_gpus()
    playing(sources, time.time(), (0.0, 0.0))
    _, plain = activity_page(sources)
    assert plain.timeline.live.span_legend is None
    assert "data-span-note" not in plain.timeline.bands.text
    assert plain.timeline.gpu_filter.active == [0, 1, 2, 3]
    # GPUs without a span: those alone shown, legends read now.
    _, cell = activity_page(sources, gpus=facts[3].uuid)
    assert cell.timeline.gpu_filter.active == [3] and cell.timeline.live.span_legend is None
    # A malformed list: every GPU, and one line says why.
    now = time.time()
    doc, bad = activity_page(sources, start=f"{now - 20:.3f}", end=f"{now - 10:.3f}",
                             gpus="GPU-none")
    assert bad.timeline.gpu_filter.active == [0, 1, 2, 3]
    assert [n.text for n in doc.select({"name": "span-notice"})] == [
        "<p class='nvdashboard-notice' style='margin:0;padding:0.2em 1em'>The GPUs in the "
        "address were ignored: gpus: &#x27;GPU-none&#x27; is not a GPU of this server.</p>"]
    assert bad.timeline.live.span_legend is not None  # the span still reads


def test_other_timeline_pages_take_the_span_alone() -> None:
    sources, facts = four_gpus()
    now = time.time()
    doc = document_asking(start=f"{now - 20:.3f}", end=f"{now - 10:.3f}", gpus=facts[1].uuid)
    timelines = []

    def make() -> Timeline:
        timelines.append(standard_view(sources, gpu_resources(sources.metrics)))
        return timelines[0]

    build_document(doc, sources, "GPU Resources", True, True, make)
    timeline = timelines[0]
    assert timeline.live.follow is False  # on the span, as before
    assert timeline.gpu_filter.active == [0, 1, 2, 3]
    assert timeline.live.span_legend is None and "data-span-note" not in timeline.bands.text


def test_the_view_a_footer_opens_says_why_the_cells_gpus_were_slow_over_the_cell() -> None:
    """Issue 53, item 3: the diagnosis above the charts speaks of the cell's GPUs over the
    cell's span (headed with it), and the window lines of those GPUs alone; without a cell,
    no cell line, and every GPU in the window lines."""
    sources, _, dashboard = opened_on_cell_5()
    line = dashboard.cell_line
    assert line.visible, line.text
    assert "Why is it slow? Over cell [5] " in line.text, line.text
    named = re.compile(r"<b>(?:SIMULATED )?(GPU \d)</b> ")
    labels = set(named.findall(line.text))
    assert labels and labels <= {"GPU 1", "GPU 2"}, line.text
    for text in dashboard.line_texts.data["html"] or [lines.text for lines in dashboard.lines]:
        assert set(named.findall(text)) <= {"GPU 1", "GPU 2"}, text
    _, every = activity_page(sources)
    assert not every.cell_line.visible and every.rows is None
