"""A span of time a timeline page was asked to show: ``?start=&end=&label=`` in its URL.

A notebook cell's footer opens ``/GPU-Activity?start=...&end=...&label=cell [12]`` to show
what the GPUs did while that cell ran (issue 45). Every page with a time axis takes the same
arguments: the page opens on the smallest window that reaches back to the span, its time axis
set to the span with a margin on each side, not following the newest sample (as after a pan:
the reset tool or a window button follows it again), and the span shaded and labelled.

The times are parsed by ``instants.parse_span`` only, the one parser of the times a request
names. They are the kernel's clock, which is this server's machine's (or a container's on
it); the browser's clock plays no part: the window is chosen here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from bokeh.models import BoxAnnotation, FixedTicker, LinearAxis

from ..instants import parse_span
from .live import LiveView

# The query arguments of a span (the page reads them with ``document.query_argument``).
SPAN_ARGUMENTS = ("start", "end", "label")
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
