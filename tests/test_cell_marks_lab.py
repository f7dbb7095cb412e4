"""Cell marks under a real ``jupyter lab`` (issue 45 item 5): a notebook's kernel runs a cell,
and /GPU-Activity, opened through jupyter-server-proxy in Chromium at 1280x800, light and
dark, marks it on its timelines at the cell's start, labelled with its execution count, and
the mark's hover names its notebook. The kernel holds no GPU: the page asks for the cells
while it shows them."""

from __future__ import annotations

import pytest

from tests.support.browser import (
    PAGE_WAIT_MS,
    TIMELINE_VIEWS_JS,
    TOOLTIP_JS,
    chromium,
    screenshot,
    watch,
)
from tests.support.idle_lab import start_notebook, wait_glance
from tests.support.jupyter import jupyter_lab
from tests.support.waiting import until
from tests.test_kernel_cells_lab import run_and_watch, served_cells

pytestmark = [pytest.mark.lab, pytest.mark.browser]

# The page's cell marks and, for the one counted ``count``, where its line is drawn on
# screen, with the frame's top and bottom.
MARK_JS = "(count) => {" + TIMELINE_VIEWS_JS + """
  const source = Bokeh.documents[0].get_model_by_name('cell-marks');
  const i = source.data.count.indexOf(count);
  const box = plot.el.getBoundingClientRect();
  const frame = plot.frame.bbox;
  const axis = plot.model.above.find((m) => m.name === 'cell-marks-counts');
  const labels = axis.major_label_overrides instanceof Map
    ? Object.fromEntries(axis.major_label_overrides) : axis.major_label_overrides;
  return {counts: source.data.count, notebooks: source.data.notebook,
          x: i < 0 ? null : box.left + plot.frame.x_scale.compute(source.data.x[i]),
          label: i < 0 ? null : labels[String(source.data.x[i])],
          left: box.left + frame.left, right: box.left + frame.right,
          top: box.top + frame.top, bottom: box.top + frame.bottom};
}"""


def test_a_cell_run_in_a_notebook_is_marked_on_gpu_activity() -> None:
    with jupyter_lab(simulate=2) as lab, chromium() as browser:
        kernel_id, pid = start_notebook(lab, "marked.ipynb")
        # The proxy starts the dashboard server on its first request, and a timeline shows
        # what its history holds: started first, so the cell runs inside that history (on
        # a loaded machine the server could start seconds after the cell, and the page
        # rightly drew the mark left of its x range).
        wait_glance(lab, lambda d: bool(d.get("devices")), "the dashboard server reads GPUs")
        # The watcher subscribes to a new kernel within a second of its start: the cell is
        # run once it is subscribed (a cell it has seen is served).
        until(lambda: run_and_watch(pid, kernel_id, "pass")
              and served_cells(lab, kernel_id), "the new kernel's cells are served",
              seconds=120, every_s=0.5)
        started, _ = run_and_watch(pid, kernel_id, "import time; time.sleep(1)")
        count = f"[{started['content']['execution_count']}]"
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        for theme in ("light", "dark"):
            page.goto(f"{lab.url}nvdashboard/GPU-Activity?token={lab.token}&theme={theme}")
            page.wait_for_function("() => window.nvdashboardLive && nvdashboardLive.draws > 2",
                                   timeout=PAGE_WAIT_MS)
            page.wait_for_function(f"() => ({MARK_JS})({count!r}).x !== null",
                                   timeout=PAGE_WAIT_MS)
            mark = page.evaluate(f"({MARK_JS})", count)
            assert set(mark["notebooks"]) == {"marked.ipynb"}, mark
            assert mark["left"] < mark["x"] < mark["right"], mark  # in the window shown
            assert mark["label"] == count, mark
            # Hovering the mark names its notebook and the cell.
            page.mouse.move(mark["x"] + 1, min(mark["bottom"], 790) - 40)
            page.wait_for_function(f"() => ({TOOLTIP_JS})().includes('of marked.ipynb')",
                                   timeout=60_000)  # a loaded machine's hover draws late
            assert f"cell {count} of marked.ipynb: " in page.evaluate(TOOLTIP_JS)
            screenshot(page, f"cell-marks-gpu-activity-{theme}")
        watched.assert_clean()
