"""The last cells of this Jupyter's kernels as thin marks on a page's timelines (issue 45).

Under JupyterLab, every kernel of the Jupyter server this dashboard runs under is the
user's. Its server extension keeps each kernel's last cells on the kernel's clock
(``kernel_executions.py``) and ``jupyter_sessions.py`` reads them off the event loop; this
draws each cell as a thin line at its start across the bands, its execution count above
the time axis (``[12]``), and names its notebook, count and times in the hover. A mark's
hover answers a few pixels either side of the line. The page's document refreshes the
marks once a second from what was read; it never waits for Jupyter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bokeh.models import (
    ColumnDataSource,
    FixedTicker,
    HoverTool,
    LinearAxis,
    NoOverlap,
    Plot,
    Rect,
    Segment,
)

from ..jupyter_sessions import JupyterSessions, Session
from ..kernel_executions import CellSpan
from .components import duration_text
from .shown_span import clock_text

MARK_COLOR = "#d0459b"  # apart from the GPU colours and the shown span's, in both themes
REFRESH_MS = 1000
# The marks reach across every band: the canvas's y-range is its height in pixels (well
# under this), and the frame clips the rest.
TALL = 100_000
HOVER_PX = 9  # the width, centred on a mark, that answers the hover


@dataclass(frozen=True)
class CellMark:
    """A cell as the timelines mark it."""

    kernel_id: str
    notebook: str
    cell: CellSpan

    @property
    def count_text(self) -> str:
        return f"[{self.cell.count}]" if self.cell.count is not None else "[ ]"

    @property
    def hover_text(self) -> str:
        """'cell [12] of a.ipynb: 12:03:04–12:03:45 UTC (41 s)' (or 'running since')."""
        start = clock_text(self.cell.start_s)
        when = f"running since {start} UTC" if self.cell.end_s is None else \
            f"{start}–{clock_text(self.cell.end_s)} UTC " \
            f"({duration_text(self.cell.end_s - self.cell.start_s)})"
        return f"cell {self.count_text} of {self.notebook}: {when}"


def notebook_of(kernel_id: str, sessions: dict[str, Session]) -> str:
    session = sessions.get(kernel_id)
    return session.path or session.name if session is not None \
        else f"kernel {kernel_id[:8]} (no notebook)"


def cell_marks(jupyter: JupyterSessions) -> list[CellMark]:
    """Every cell the Jupyter server's kernels keep, by start."""
    sessions = jupyter.sessions
    marks = [CellMark(kernel_id, notebook_of(kernel_id, sessions), cell)
             for kernel_id, cells in jupyter.cells.items() for cell in cells]
    return sorted(marks, key=lambda mark: mark.cell.start_s)


def mark_columns(marks: Sequence[CellMark]) -> dict[str, list[object]]:
    # Whole milliseconds: each is also the key of its count's label on the counts' axis.
    return {"x": [round(1000 * mark.cell.start_s) for mark in marks],
            "count": [mark.count_text for mark in marks],
            "notebook": [mark.notebook for mark in marks],
            "text": [mark.hover_text for mark in marks]}


class CellMarks:
    """Marks of the Jupyter server's last cells on one timeline figure, refreshed by its
    page's document (``refresh``, every ``REFRESH_MS``)."""

    refresh_ms = REFRESH_MS

    def __init__(self, jupyter: JupyterSessions, plot: Plot) -> None:
        self.jupyter = jupyter
        self.source = ColumnDataSource(mark_columns([]), name="cell-marks")
        plot.add_glyph(self.source, Segment(
            x0="x", y0=0, x1="x", y1=TALL, line_color=MARK_COLOR, line_width=1.5,
            line_alpha=0.9))
        # An unseen band a few pixels wide over each line answers the hover.
        target = plot.add_glyph(self.source, Rect(
            x="x", y=0, width=HOVER_PX, width_units="screen", height=2 * TALL,
            fill_alpha=0, line_alpha=0))
        plot.add_tools(HoverTool(renderers=[target], tooltips="@text", mode="mouse",
                                 name="cell-marks-hover"))
        # The counts above the time axis, over their lines (an axis of their ticks: the frame
        # clips what is drawn in it, and the bands' headings would cover it); counts too
        # close to each other to read are left out. The page lays the axis out once, maybe
        # before the first cell: a blank axis label keeps room for the counts.
        self.ticker = FixedTicker(ticks=[])
        self.axis = LinearAxis(
            ticker=self.ticker, major_label_overrides={}, axis_line_color=None,
            axis_label="\u00a0", axis_label_text_font_size="11px", axis_label_standoff=0,
            major_tick_line_color=MARK_COLOR, major_tick_out=4, major_tick_in=0,
            minor_tick_line_color=None, major_label_text_color=MARK_COLOR,
            major_label_text_font_size="11px", major_label_policy=NoOverlap(),
            name="cell-marks-counts")
        plot.add_layout(self.axis, "above")

    def refresh(self) -> None:
        """The marks from the newest cells read; nothing is written when none changed."""
        self.jupyter.wanted_by_page()
        columns = mark_columns(cell_marks(self.jupyter))
        if columns == self.source.data:
            return
        self.source.data = columns
        self.ticker.ticks = list(columns["x"])
        self.axis.major_label_overrides = dict(zip(columns["x"], columns["count"],
                                                   strict=True))
