"""The page's side of the broadcast path: a script that streams frames into a view.

``attach(doc, view)`` adds one ``CustomJS`` (``live_client.js``) that runs when the page's
document is ready. It opens ``<page>/stream`` (``stream/broadcaster.py``), decodes each
binary frame and streams its rows into the view's source with ``{sync: false}``, so nothing
goes back to the server; it moves the axes (unless the reader panned or zoomed, or the page
opened on a span its URL names, ``shown_span.py``: the reset tool follows again; a long
window reaches its newest sample through the frames' open rows, and says how much of it is
recorded), places a timeline's bands under their HTML headings (again after the reset
tool, which sets the canvas's y-range back) and fills in their scales, the legends' current
values (a span's, ``span_legend``, while the page shows the span a cell's footer opened it
on, ``shown_span.py``) and the hover, draws a long
window's buckets as their means inside their min-max bands, hides what the legend and the
GPU filter hide (a band of one GPU folds away with it), follows the window picker, repaints
at most once per ``redraw_interval_ms`` (all frames since the last repaint in one animation
frame), closes the socket while the page is hidden and catches up from ``since`` when it
is shown again.
A page with two views (``LiveView.stream``) runs the script once per view, each on its own
socket; ``window.nvdashboardLive`` is the one with a time axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bokeh.document import Document
from bokeh.events import DocumentReady
from bokeh.models import (
    CheckboxButtonGroup,
    ColumnDataSource,
    CustomJS,
    Div,
    FixedTicker,
    Plot,
    RadioButtonGroup,
    Range1d,
)

from .in_place import IN_PLACE_JS

# The data socket, open only while the page is shown; the overview at / uses it too.
STREAM_CLIENT_JS = (Path(__file__).with_name("stream_client.js")).read_text()

# in_place.js first: the client finds the legends' Divs with its viewOf.
CLIENT_JS = IN_PLACE_JS + STREAM_CLIENT_JS + \
    (Path(__file__).with_name("live_client.js")).read_text()

# A repaint of a page's canvases is most of what a visible page costs (BokehJS redraws every
# plot of the shared source, axes and text included, in software on many desktops): at the
# 0.2 s sampling interval a timeline page took 25-36% of a core. A timeline moves on every
# 2 s, as nvitop's default refresh does, and a 30-minute window once per pixel column (3 s);
# bars and tables, which change in place, once a second, as nvidia-smi dmon does.
# benchmarks/dashboard_overhead.py measures it (benchmarks/README.md).
TIMELINE_REDRAW_MS = 2000
REPLACE_REDRAW_MS = 1000
PIXEL_COLUMNS = 600  # a long window repaints once per 1/600 of its span


def redraw_interval_ms(window_s: float | None) -> int:
    """The least time between two repaints of a page showing ``window_s`` of history
    (None: a view whose rows replace the last ones, such as bars and tables)."""
    if window_s is None:
        return REPLACE_REDRAW_MS
    return max(TIMELINE_REDRAW_MS, round(window_s * 1000 / PIXEL_COLUMNS))


@dataclass
class BandsView:
    """A timeline's bands in its one figure (``components.Timeline``): the script places
    each band's lines where its HTML heading and scale left room, fills the scales, folds
    away a band whose one GPU is hidden, and says in the hover what the band shows. A view
    without bands (bars, tables) has none of it."""

    plot: Plot | None = None
    frame_range: Range1d | None = None  # the figure's y-range: its height in pixels
    grid_ticker: FixedTicker | None = None  # the bands' scale lines, placed with them
    targets: Sequence[Range1d] = ()  # where each band's lines go in it
    scales: Sequence[Range1d | None] = ()  # each band's value range; None: a band of rows
    hover: Sequence[dict[str, object]] = ()  # what the hover names over each band
    gpus: Sequence[int | None] = ()  # the one GPU a band shows, if it shows one


@dataclass
class LiveView:
    """What the page's script needs to know of one component."""

    source: ColumnDataSource
    x_range: Range1d | None = None  # None: the rows replace the picture (bars)
    following: Sequence[tuple[Range1d, list[str]]] = ()  # y-ranges that follow these series
    headings: Sequence[Div] = ()  # legend Divs: their entries get the current values
    picker: RadioButtonGroup | None = None
    windows_s: Sequence[float] = ()
    window_s: float | None = None
    units: dict[str, str] = field(default_factory=dict)
    rollover: dict[str, int] = field(default_factory=dict)  # rows kept, per window
    # Each panel's lines: one MultiLine source, a row per series (key, colour, dash, visible).
    lines: Sequence[ColumnDataSource] = ()
    # Each panel's min-max bands of a long window's buckets, a polygon per series in the
    # order of its lines (None: a panel of rows, which has none).
    areas: Sequence[ColumnDataSource | None] = ()
    series_gpu: dict[str, int | None] = field(default_factory=dict)  # series key -> GPU row
    gpu_filter: CheckboxButtonGroup | None = None  # its buttons are ``filter_gpus``, in order
    filter_gpus: Sequence[int] = ()
    bands: BandsView = field(default_factory=BandsView)
    # Says how much of the window shown is recorded ("25 min of 7 d recorded").
    coverage: Div | None = None
    lost_columns: dict[str, str] = field(default_factory=dict)  # series key -> its GPU's
    # Which of the page's streams: "" for ``<page>/stream``, NAME for ``<page>/NAME/stream``
    # (a page may stream more than one view: /GPU-Health's table and its timelines).
    stream: str = ""
    # Whether the time axis follows the newest sample from the start; False for a page
    # opened on a span (``shown_span``): as after a pan, the reset tool follows again.
    follow: bool = True
    # While the page shows a span and until it follows now again, the legends' values:
    # columns "key" and "text" (``Timeline.read_span``); None: the newest sample's.
    span_legend: ColumnDataSource | None = None


def attach(doc: Document, view: LiveView) -> None:
    """Stream ``view`` from this page's ``/stream`` socket once the page is ready."""
    spec = {
        "mode": "replace" if view.x_range is None else "append",
        "windows": list(view.windows_s),
        "window": view.window_s,
        "units": view.units,
        "rollover": view.rollover,
        "following_keys": [keys for _, keys in view.following],
        "series_gpu": view.series_gpu,
        "filter_gpus": list(view.filter_gpus),
        "band_gpus": list(view.bands.gpus),
        "band_hover": list(view.bands.hover),
        "redraw_ms": {f"{window:g}": redraw_interval_ms(window) for window in view.windows_s}
        | {"replace": redraw_interval_ms(None)},
        "lost_columns": view.lost_columns,
        "stream": view.stream,
        "follow": view.follow,
    }
    args = {
        "source": view.source, "x_range": view.x_range,
        "following": [y_range for y_range, _ in view.following],
        "headings": list(view.headings),
        "picker": view.picker, "spec": spec, "lines": list(view.lines),
        "areas": list(view.areas),
        "gpu_filter": view.gpu_filter,
        "plot": view.bands.plot, "frame_range": view.bands.frame_range,
        "grid_ticker": view.bands.grid_ticker, "band_targets": list(view.bands.targets),
        "band_scales": list(view.bands.scales), "coverage": view.coverage,
        "span_legend": view.span_legend,
    }
    doc.js_on_event(DocumentReady, CustomJS(args=args, code=CLIENT_JS))
