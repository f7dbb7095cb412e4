"""A span of time a timeline page was asked to show: ``?start=&end=&label=`` in its URL.

A notebook cell's footer opens ``/GPU-Activity?start=...&end=...&label=cell [12]`` to show
what the GPUs did while that cell ran (issue 45). Every page with a time axis takes the same
arguments: the page opens on the smallest window that reaches back to the span, its time axis
set to the span with a margin on each side, not following the newest sample (as after a pan:
the reset tool or a window button follows it again), and the span shaded and labelled.

The times are parsed by ``instants.parse_span`` only, the one parser of the times a request
names. They are the kernel's clock, which is this server's machine's (or a container's on
it); the browser's clock plays no part: the window is chosen here.

The footer also names the cell's GPUs, ``&gpus=GPU-…,MIG-…`` (issue 53, item 3), parsed here
only (``gpus_from_query``): ``/GPU-Activity`` then opens with those GPUs alone shown (the
GPU filter's other buttons off, so their lines are hidden and a band of one of them folds
away; the reader may turn them on again), and while the span is shown its legends read the
span: each series' mean over the span's samples, the words "mean over cell [12]:" before
them, instead of the newest sample (``legend_on_span``). The reset tool or a window button
follows now again: the legends then read the newest sample as on any page, and the GPU
filter keeps what it shows. Other timeline pages take the span alone.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from bokeh.document import Document
from bokeh.models import BoxAnnotation, FixedTicker, LinearAxis

from ..event_loop import on_event_loop
from ..instants import parse_span
from ..metrics import GpuFacts, Sample
from .live import LiveView

if TYPE_CHECKING:
    from .components import Timeline

log = logging.getLogger("nvdashboard")

# The query arguments of a span (the page reads them with ``document.query_argument``).
SPAN_ARGUMENTS = ("start", "end", "label")
# ... and of the GPUs a cell used: their UUIDs, separated by commas.
GPUS_ARGUMENT = "gpus"
# A UUID as NVML gives it: ``GPU-<uuid>``, ``MIG-<uuid>``, or an older driver's
# ``MIG-GPU-<uuid>/<gpu instance>/<compute instance>``.
GPU_UUID = re.compile(r"(?:GPU|MIG)-[0-9A-Za-z/-]{1,100}")
# A machine of 64 devices named one by one is under 3,000 characters: more is not a cell's.
MAX_GPUS_TEXT = 4000
# A label is one short line ("cell [12]"); a longer one is cut, not refused.
MAX_LABEL = 80
# Room on each side of the span, so its edges are not on the canvas's edges: a tenth of the
# span, and at least 2 s (ten 0.2 s samples), so a cell of a few milliseconds is still a
# visible stripe between samples.
MARGIN_SHARE = 0.1
MIN_MARGIN_S = 2.0
SHADE_COLOR = "#8f6cd6"  # reads on the light and the dark page, apart from the GPU colours


@dataclass(frozen=True)
class ShownSpan:
    """A span to show on a page's timelines, in epoch seconds, and its label's words."""

    start_s: float
    end_s: float
    label: str = ""

    @property
    def margin_s(self) -> float:
        return max(MIN_MARGIN_S, MARGIN_SHARE * (self.end_s - self.start_s))

    @property
    def text(self) -> str:
        """'cell [12] 12:03:04–12:03:45 UTC': the label, then the times as the axis shows
        them (UTC)."""
        times = f"{clock_text(self.start_s)}–{clock_text(self.end_s)} UTC"
        return f"{self.label} {times}" if self.label else times


def clock_text(epoch_s: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(epoch_s))


def span_from_query(start: str | None, end: str | None, label: str | None) -> ShownSpan | None:
    """The span a page's URL asks for; None when it asks for none. A one-line
    ``ValueError`` (from ``instants``) for a malformed or half-given span."""
    if start is None and end is None:
        return None
    if start is None or end is None:
        raise ValueError("start and end must be given together")
    start_s, end_s = parse_span(start, end)
    words = " ".join((label or "").split())  # one line, whatever the URL held
    return ShownSpan(start_s, end_s, words[:MAX_LABEL])


def window_for(span: ShownSpan, windows_s: Sequence[float], now_s: float) -> float:
    """The smallest of ``windows_s`` that reaches back to the span's left margin from
    ``now_s``; the longest when none does (the span is older than anything kept)."""
    reach_s = now_s - (span.start_s - span.margin_s)
    return min((w for w in windows_s if w >= reach_s), default=max(windows_s))


def show_span(view: LiveView, span: ShownSpan, now_s: float) -> str:
    """Set ``view``'s timeline on ``span`` and shade it; '' or one line saying what of it
    cannot be drawn (older than the longest window kept)."""
    assert view.x_range is not None, "only a view with a time axis shows a span"
    if view.windows_s:
        view.window_s = window_for(span, view.windows_s, now_s)
        if view.picker is not None:
            view.picker.active = list(view.windows_s).index(view.window_s)
    margin_ms = 1000 * span.margin_s
    view.x_range.start = 1000 * span.start_s - margin_ms
    view.x_range.end = 1000 * span.end_s + margin_ms
    view.follow = False
    plot = view.bands.plot
    if plot is not None:
        plot.add_layout(BoxAnnotation(
            left=1000 * span.start_s, right=1000 * span.end_s, fill_color=SHADE_COLOR,
            fill_alpha=0.16, line_color=SHADE_COLOR, line_alpha=0.7, line_width=1,
            level="underlay", name="shown-span", syncable=False))
        # Its words above the time axis, over the span's middle: an axis of one tick, since
        # the frame clips what is drawn in it and the bands' HTML headings would cover it.
        middle_ms = round(500 * (span.start_s + span.end_s))
        plot.add_layout(LinearAxis(
            ticker=FixedTicker(ticks=[middle_ms]), major_label_overrides={middle_ms: span.text},
            axis_line_color=None, major_tick_line_color=SHADE_COLOR, major_tick_out=4,
            major_tick_in=0, minor_tick_line_color=None, major_label_text_color=SHADE_COLOR,
            major_label_text_font_style="bold", major_label_text_font_size="12px",
            name="shown-span-label", syncable=False), "above")
    oldest_s = now_s - max(view.windows_s, default=0.0)
    if view.windows_s and span.start_s < oldest_s:
        return (f"{span.text} starts before the oldest samples kept: only what is kept of "
                "it is drawn")
    return ""


def gpus_from_query(text: str | None, facts: Sequence[GpuFacts]) -> tuple[int, ...] | None:
    """The device rows ``?gpus=`` names, in this server's order; None when it names none.

    UUIDs, not rows: a footer saved in a notebook is opened again after the server has
    restarted, when a row may be another device (``CUDA_VISIBLE_DEVICES``, a MIG layout
    changed). A one-line ``ValueError`` for a malformed list or a UUID none of this server's
    devices has: the page then shows every GPU and says why."""
    if text is None:
        return None
    if len(text) > MAX_GPUS_TEXT:
        raise ValueError(f"gpus is longer than {MAX_GPUS_TEXT} characters")
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError("gpus names no GPU")
    rows = {fact.uuid: fact.index for fact in facts if fact.uuid}
    wanted = []
    for name in names:
        shown = ascii(name[:48] + ("..." if len(name) > 48 else ""))
        if not GPU_UUID.fullmatch(name):
            raise ValueError(f"gpus: {shown} is not a GPU UUID (GPU-… or MIG-…)")
        if name not in rows:
            raise ValueError(f"gpus: {shown} is not a GPU of this server")
        wanted.append(rows[name])
    return tuple(sorted(set(wanted)))


def with_kin(rows: Collection[int], facts: Sequence[GpuFacts]) -> tuple[int, ...]:
    """``rows`` with the GPU of each MIG device among them and the MIG devices of each GPU
    among them: a cell on a MIG device moved its GPU's PCIe (a band of whole GPUs), and a
    cell on a MIG-enabled GPU worked in its instances (a band each)."""
    shown = set(rows)
    for fact in facts:
        if fact.index in rows and fact.parent is not None:
            shown.add(fact.parent)
        if fact.parent is not None and fact.parent in rows:
            shown.add(fact.index)
    return tuple(sorted(shown))


# What a legend says before its values while a span is shown, so no one reads them as now's.
SPAN_LEGEND_WORDS = "mean over {}:"
# Reads a span's samples off the event loop (the store's file, a long history): two at a
# time for every page, as a page opened on a span is one read, not a stream.
T = TypeVar("T")
_READER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="nvdashboard-span-legend")


def legend_words(span: ShownSpan) -> str:
    """``mean over cell [12]:``; ``mean over the span:`` for a span without a label."""
    return SPAN_LEGEND_WORDS.format(span.label or "the span")


def read_once(read: Callable[[float, float], list[Sample]], span: ShownSpan
              ) -> Callable[[], list[Sample]]:
    """The samples of ``span`` (those ``read`` returns within it), read once however many
    readers ask, from whichever thread asks first: the legends and the diagnosis of one
    span read its store buckets once."""
    lock = threading.Lock()
    read_samples: list[list[Sample]] = []

    def samples() -> list[Sample]:
        with lock:
            if not read_samples:
                read_samples.append([sample for sample in read(span.start_s, span.end_s)
                                     if span.start_s <= sample.time_s <= span.end_s])
            return read_samples[0]

    return samples


def off_the_loop(doc: Document, read: Callable[[], T], landed: Callable[[T], None],
                 failed: Callable[[], T], what: str) -> None:
    """``landed(read())``: on an event loop (a page being built by the Bokeh server),
    ``read`` runs on a thread (the store's file or a long history is no work for the loop)
    and ``landed`` on the document's next tick; elsewhere (a test) at once. A read that
    fails lands ``failed()``, with one log line naming ``what`` was read."""
    if not on_event_loop():
        landed(read())
        return

    def work() -> None:
        try:
            done = read()
        except Exception as error:  # noqa: BLE001 - the page stands; it says n/a
            log.warning("reading %s failed: %s: %s", what, type(error).__name__, error)
            done = failed()
        try:
            doc.add_next_tick_callback(lambda: landed(done))
        except Exception:  # noqa: BLE001 - the page was closed meanwhile
            log.debug("%s landed after its page closed", what)

    _READER.submit(work)


def legend_on_span(doc: Document, timeline: Timeline, span: ShownSpan,
                   samples: Callable[[], list[Sample]]) -> None:
    """Have ``timeline``'s legends read ``span`` (``Timeline.read_span``): each series' mean
    over the span's ``samples()`` (``read_once``), read ``off_the_loop``."""

    def texts() -> dict[str, str]:
        return timeline.span_texts(samples())

    legend = timeline.read_span(legend_words(span), None)

    def landed(read_texts: dict[str, str]) -> None:
        legend.data = {"key": list(read_texts), "text": list(read_texts.values())}

    off_the_loop(doc, texts, landed, lambda: dict.fromkeys(legend.data["key"], "n/a"),
                 "a span's samples for its legends")
