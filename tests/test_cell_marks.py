"""The cell marks of a timeline (issue 45, apps/cell_marks.py), without a browser: each cell
of the Jupyter server's kernels is a mark at its start, labelled with its execution count,
whose hover names its notebook and times; a page asks for the cells while it shows them.
In a real lab and Chromium: test_cell_marks_lab.py."""

from __future__ import annotations

import time

from jupyterlab_nvdashboard.apps.cell_marks import CellMarks, cell_marks
from jupyterlab_nvdashboard.jupyter_sessions import (
    PAGE_REFRESH_S,
    PAGE_WANTS_S,
    JupyterServer,
    JupyterSessions,
    parse_sessions,
)
from jupyterlab_nvdashboard.kernel_executions import CellSpan
from tests.test_timeline_range import a_timeline

T0 = 1796472184.0  # 2026-12-05 12:03:04 UTC


def a_jupyter() -> JupyterSessions:
    """The dashboard's view of a Jupyter server, as its last refresh left it."""
    jupyter = JupyterSessions(JupyterServer("http://127.0.0.1:1/", "/", "t"),
                              wanted=lambda: False)
    jupyter.sessions = parse_sessions([{"path": "work/a.ipynb", "kernel": {"id": "k1"}}])
    jupyter.cells = {"k1": (CellSpan(11, T0 - 100, T0 - 90), CellSpan(12, T0, T0 + 41.4)),
                     "k2": (CellSpan(None, T0 + 50, None),)}
    return jupyter


def test_each_cell_is_a_mark_at_its_start_with_its_count_and_its_notebook() -> None:
    timeline, jupyter = a_timeline(), a_jupyter()
    marks = CellMarks(jupyter, timeline.plot)
    marks.refresh()
    assert dict(marks.source.data) == {
        "x": [1000 * (T0 - 100), 1000 * T0, 1000 * (T0 + 50)],
        "count": ["[11]", "[12]", "[ ]"],
        "notebook": ["work/a.ipynb", "work/a.ipynb", "kernel k2 (no notebook)"],
        "text": ["cell [11] of work/a.ipynb: 12:01:24–12:01:34 UTC (10 s)",
                 "cell [12] of work/a.ipynb: 12:03:04–12:03:45 UTC (41 s)",
                 "cell [ ] of kernel k2 (no notebook): running since 12:03:54 UTC"]}
    # Each count over its mark, above the time axis.
    assert marks.ticker.ticks == marks.source.data["x"]
    assert marks.axis in timeline.plot.above
    assert marks.axis.major_label_overrides == {1000 * (T0 - 100): "[11]", 1000 * T0: "[12]",
                                                1000 * (T0 + 50): "[ ]"}
    hovers = [tool for tool in timeline.plot.tools if tool.name == "cell-marks-hover"]
    assert len(hovers) == 1 and hovers[0].tooltips == "@text"


def test_marks_follow_the_cells_read_and_an_unchanged_refresh_writes_nothing() -> None:
    timeline, jupyter = a_timeline(), a_jupyter()
    marks = CellMarks(jupyter, timeline.plot)
    marks.refresh()
    written = marks.source.data
    marks.refresh()
    assert marks.source.data is written  # nothing new: nothing sent to the page
    jupyter.cells = {"k1": jupyter.cells["k1"] + (CellSpan(13, T0 + 60, T0 + 61),)}
    marks.refresh()
    assert marks.source.data["count"] == ["[11]", "[12]", "[13]"]


def test_a_page_that_marks_cells_keeps_them_read_while_no_kernel_holds_a_gpu() -> None:
    jupyter = a_jupyter()  # no kernel holds a GPU: nothing asks for the sessions
    assert not jupyter.wants_refresh()
    CellMarks(jupyter, a_timeline().plot).refresh()
    assert jupyter.wants_refresh()
    # Once the page stops asking (closed), the refreshes stop.
    assert not jupyter.wants_refresh(now=time.monotonic() + PAGE_WANTS_S + 1)


def test_a_page_alone_reads_the_cells_every_2_s_and_jupyters_sessions_only_to_name_cells(
) -> None:
    """Benchmarks found an open timeline cost the Jupyter server two requests a second with
    no kernel at all: its session list and the cells, read for the marks each second."""
    asked: list[str] = []
    executions: dict[str, object] = {"kernels": {}, "cells": {}}

    def sessions(_: JupyterServer) -> object:
        asked.append("api/sessions")
        return [{"path": "work/a.ipynb", "kernel": {"id": "k1"}}]

    def cells(_: JupyterServer) -> object:
        asked.append("executions")
        return executions

    holds_gpu = {"now": False}
    jupyter = JupyterSessions(JupyterServer("http://127.0.0.1:1/", "/", "t"),
                              wanted=lambda: holds_gpu["now"], fetch=sessions,
                              fetch_executions=cells)
    CellMarks(jupyter, a_timeline().plot).refresh()  # a page shows the marks
    assert jupyter.wants_refresh()
    jupyter.refresh(for_marks_only=True)
    assert asked == ["executions"] and jupyter.cells == {}  # no cell: nothing to name
    # Due again a repaint later, not at the thread's next wake-up.
    now = time.monotonic()
    assert not jupyter.wants_refresh(now=now + jupyter.refresh_s)
    assert jupyter.wants_refresh(now=now + PAGE_REFRESH_S)
    executions["cells"] = {"k1": [{"count": 1, "start_s": T0, "end_s": T0 + 2}]}
    jupyter.refresh(for_marks_only=True)
    assert asked[1:] == ["executions", "api/sessions"]  # a cell: its notebook is named
    assert [m.notebook for m in cell_marks(jupyter)] == ["work/a.ipynb"]
    # A kernel that holds a GPU is judged each second, on the sessions' word.
    holds_gpu["now"] = True
    assert jupyter.wants_refresh(now=time.monotonic())
    executions["cells"] = {}
    jupyter.refresh()
    # The sessions first, then the executions: a cell that ended between the two reads is
    # seen ended in the executions (its idle time then counts from its end).
    assert asked[3:] == ["api/sessions", "executions"]
