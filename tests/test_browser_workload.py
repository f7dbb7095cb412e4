"""/Workload as a first-time user sees it: Chromium at 1280x800, both themes.

A short numpy run started from the panel: while it runs, the progress (timed iteration n of
N, ETA) is on screen without scrolling; once it is done, the verdict is on screen too, whole,
and the table's preset column and every heading and cell are whole (wrapped, never cut).
A page opened afterwards draws only the judged GPU's lines. Screenshots go to
test-artifacts/ (workload-first-run-*)."""

from __future__ import annotations

import re

import pytest

from tests.support.browser import PAGE_WAIT_MS, chromium, next_frames, screenshot, watch
from tests.support.servers import cli_server, with_token
from tests.test_browser_diagnosis import BOXES_JS, VIEWPORT, assert_whole
from tests.test_browser_standalone import SUMMARY_COLUMN_JS

pytestmark = pytest.mark.browser
ITERATIONS = 4000  # 3 s of the ci preset on an idle 2-core machine: long enough to watch

MODEL_TEXT_JS = "(name) => Bokeh.documents[0].get_model_by_name(name).text"
# Every table heading and cell (inside Bokeh's shadow roots): its text and whether that
# text is wider or taller than the box that shows it. A heading's name must fit its column
# (the column's own box also holds SlickGrid's resize handle and sort indicator).
CELLS_JS = """() => {
  const found = [];
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    if (el.matches('.slick-header-column, .slick-cell')) found.push(el);
    if (el.shadowRoot) walk(el.shadowRoot); } };
  walk(document);
  return found.map(el => {
    const box = el.getBoundingClientRect(), header = el.matches('.slick-header-column');
    const name = header ? el.querySelector('.slick-column-name') : null;
    const inner = name ? name.getBoundingClientRect() : box;
    const clipped = name
      ? inner.right > box.right + 1 || inner.bottom > box.bottom + 1 || inner.left < box.left - 1
      : el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 1;
    return {text: el.textContent, header, left: box.left, right: box.right, top: box.top,
            bottom: box.bottom, clipped};
  });
}"""


def _on_screen(box: dict) -> bool:
    return 0 <= box["top"] and box["bottom"] <= VIEWPORT["height"] \
        and 0 <= box["left"] and box["right"] <= VIEWPORT["width"]


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_first_run_shows_progress_then_its_verdict_above_the_fold(theme: str) -> None:
    with cli_server(["--simulate", "2", "--simulate-profile", "h200", "--interval", "0.2"]
                    ) as (url, _), chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        watched = watch(page)
        page.goto(with_token(url + f"/Workload?theme={theme}"))
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0",
                               timeout=PAGE_WAIT_MS)
        assert "No run yet" in page.evaluate(MODEL_TEXT_JS, "workload-progress")
        selects = page.locator("select")
        selects.nth(0).select_option("numpy")
        selects.nth(1).select_option("ci")
        spinner = page.locator("input").first
        spinner.fill(str(ITERATIONS))
        spinner.press("Enter")
        page.wait_for_timeout(300)
        page.get_by_role("button", name="Start").click()

        # While it runs: n of N and an ETA, on screen without scrolling.
        page.wait_for_function(
            f"""() => /timed iteration [0-9,]+ of {ITERATIONS:,} .*ETA [0-9]/.test(
                  ({MODEL_TEXT_JS})('workload-progress'))""", timeout=60_000)
        # Drawn: waited for, since a loaded machine draws late. The box is checked as the
        # wait found it: the run is seconds long and may finish before anything read later
        # (loaded run Y read "Finished" two frames after the wait had matched).
        drawn = page.wait_for_function(f"""() => ({BOXES_JS})('.nvd-progress').find(box =>
            /timed iteration [0-9,]+ of {ITERATIONS:,} .*ETA [0-9]/.test(box.text))""",
                                       timeout=PAGE_WAIT_MS).json_value()
        assert re.search(rf"timed iteration [\d,]+ of {ITERATIONS:,} .*ETA \d", drawn["text"])
        assert_whole([drawn], "progress")
        assert _on_screen(drawn), drawn
        screenshot(page, f"workload-first-run-progress-{theme}")
        # ... and once its layout has settled, whatever it says by then.
        next_frames(page)
        [progress] = page.evaluate(BOXES_JS, ".nvd-progress")
        assert_whole([progress], "progress")
        assert _on_screen(progress), progress

        page.wait_for_function(
            f"() => ({MODEL_TEXT_JS})('workload-progress').includes('Finished')",
            timeout=180_000)
        # The table and the verdict refresh once a second: waited for until both show the
        # finished run as drawn, since a loaded machine refreshes late.
        page.wait_for_function(f"""() =>
            ({BOXES_JS})('.nvd-progress').some(box => box.text.includes(
                'finished {ITERATIONS:,} of {ITERATIONS:,} timed iterations'))
            && ({BOXES_JS})('.nvd-run-verdict').some(box => box.text.includes('on run ')
                                                             && !box.text.includes('so far'))
            && ({CELLS_JS})().some(cell => cell.text === '{ITERATIONS:,} of {ITERATIONS:,}')""",
                               timeout=PAGE_WAIT_MS)
        next_frames(page)
        [progress] = page.evaluate(BOXES_JS, ".nvd-progress")
        assert f"finished {ITERATIONS:,} of {ITERATIONS:,} timed iterations" in progress["text"]
        assert _on_screen(progress), progress
        [verdict] = page.evaluate(BOXES_JS, ".nvd-run-verdict")
        assert_whole([verdict], "verdict")
        assert _on_screen(verdict), verdict
        assert "on run " in verdict["text"] and "the newest" in verdict["text"]
        # Whole: the table's verdict on the run and its second line, word for word (which
        # finding it is depends on how many process-list readings the run lasted).
        for column in ("verdict", "verdict_more"):
            [text] = page.evaluate(SUMMARY_COLUMN_JS, column)
            assert " ".join(text.split()) in " ".join(verdict["text"].split()), column

        cells = page.evaluate(CELLS_JS)
        headers = {cell["text"]: cell for cell in cells if cell["header"]}
        assert {"preset", "iterations", "examples/s"} <= set(headers), headers.keys()
        assert _on_screen(headers["preset"]), headers["preset"]
        clipped = [cell for cell in cells if cell["clipped"]]
        assert not clipped, clipped
        assert all(cell["right"] <= VIEWPORT["width"] for cell in cells), cells
        body = [cell["text"] for cell in cells if not cell["header"]]
        assert "ci" in body and f"{ITERATIONS:,} of {ITERATIONS:,}" in body, body
        screenshot(page, f"workload-first-run-finished-{theme}")

        # A page opened now draws the judged GPU's lines only, and says which GPU.
        page.reload()
        page.wait_for_function("() => window.nvdashboardLive && nvdashboardLive.frames > 0",
                               timeout=PAGE_WAIT_MS)
        assert "SIMULATED GPU 0: NVIDIA H200, the GPU run" in page.evaluate(
            MODEL_TEXT_JS, "workload-gpus")
        # Struck through in the legend as the reader sees it (inside Bokeh's shadow roots).
        struck_js = """() => {
          const out = {};
          const walk = (root) => {
            for (const el of root.querySelectorAll('*')) {
              if (el.shadowRoot) walk(el.shadowRoot);
              const key = el.dataset && el.dataset.series;
              if (key && /^gpu_util[0-9]+$/.test(key))
                out[key] = getComputedStyle(el).textDecorationLine.includes('line-through');
            }
          };
          walk(document);
          return out;
        }"""
        # The legends' values come about once a second: waited for until both are drawn.
        page.wait_for_function(f"() => Object.keys(({struck_js})()).length === 2",
                               timeout=PAGE_WAIT_MS)
        next_frames(page)
        hidden = page.evaluate(struck_js)
        assert hidden == {"gpu_util0": False, "gpu_util1": True}, hidden
        screenshot(page, f"workload-first-run-reloaded-{theme}")
        watched.assert_clean()


# The time axis the iteration points are drawn on (shared with the GPU charts), and where
# the points are: the first preset chart's source.
AXIS_AND_POINTS_JS = """() => {
  const doc = Bokeh.documents[0];
  const chart = doc.get_model_by_name('workload-steps-0');
  if (!chart) return null;
  const times = chart.renderers[0].data_source.data.time;
  return {start: chart.x_range.start, end: chart.x_range.end,
          first: Math.min(...times), last: Math.max(...times), points: times.length};
}"""


def _assert_axis_follows_the_run(page) -> None:  # noqa: ANN001 - playwright Page
    """The run's points spread over the chart: the axis spans the run's timed part and a
    little more, never minutes of which the run is a stripe."""
    page.wait_for_function(f"""() => {{ const a = ({AXIS_AND_POINTS_JS})();
        return a && a.start <= a.first && a.end >= a.last
               && a.end - a.start <= 1.25 * (a.last - a.first) + 1500; }}""",
                           timeout=PAGE_WAIT_MS)
    axis = page.evaluate(AXIS_AND_POINTS_JS)
    assert axis["start"] <= axis["first"] and axis["end"] >= axis["last"], axis


def _assert_table_fits(page, width: int) -> None:  # noqa: ANN001 - playwright Page
    cells = page.evaluate(CELLS_JS)
    assert cells, "no table on the page"
    clipped = [cell for cell in cells if cell["clipped"]]
    assert not clipped, clipped
    beyond = [cell for cell in cells if cell["right"] > width]
    assert not beyond, beyond


def test_the_default_run_ends_with_a_verdict() -> None:
    """A first-time user presses Start without changing anything (issue 44): the defaults
    (the path offered first, ci, the CPU) timed 0.2 s and ended "not enough samples: 3 of
    5". Now the panel says before Start how long a judged run takes, and the default run
    ends with a verdict on this loaded 2-core machine, which says what a CPU run is compared
    with; the chart follows the run, and the table fits the page, light and dark, at
    1280x800 and in a tab as narrow as JupyterLab's beside its sidebar."""
    with cli_server(["--simulate", "2", "--simulate-profile", "h200", "--interval", "0.2"]
                    ) as (url, _), chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        watched = watch(page)
        page.goto(with_token(url + "/Workload?theme=light"))
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0",
                               timeout=PAGE_WAIT_MS)
        hint = page.evaluate(MODEL_TEXT_JS, "workload-hint")
        assert "A verdict needs a timed part of" in hint, hint
        page.get_by_role("button", name="Start").click()
        page.wait_for_function(
            f"() => ({MODEL_TEXT_JS})('workload-progress').includes('Finished')",
            timeout=300_000)
        page.wait_for_function(f"""() =>
            ({BOXES_JS})('.nvd-run-verdict').some(box => box.text.includes('on run ')
                                                         && !box.text.includes('so far'))""",
                               timeout=PAGE_WAIT_MS)
        for theme in ("light", "dark"):
            if theme == "dark":  # the finished run, as a page opened afterwards shows it
                page.goto(url + "/Workload?theme=dark")
                page.wait_for_function(f"""() => window.Bokeh && Bokeh.documents.length > 0
                    && ({BOXES_JS})('.nvd-run-verdict').some(box => box.text.includes(
                        'on run '))""", timeout=PAGE_WAIT_MS)
            next_frames(page)
            [verdict] = page.evaluate(BOXES_JS, ".nvd-run-verdict")
            assert_whole([verdict], "verdict")
            text = verdict["text"]
            assert "not enough samples" not in text and "not judged" not in text, text
            assert "CPU run: " in text and "a CPU run is judged by its own steps" in text, text
            [status] = page.evaluate(SUMMARY_COLUMN_JS, "gpu_util_pct")
            assert status == "CPU run"
            _assert_axis_follows_the_run(page)
            _assert_table_fits(page, VIEWPORT["width"])
            screenshot(page, f"workload-default-run-{theme}")
        # A JupyterLab tab at 1280x800 beside the open sidebar is about 960 pixels wide.
        page.set_viewport_size({"width": 960, "height": 800})
        # SlickGrid fits its columns on the resize event: waited for until they do.
        page.wait_for_function(f"() => ({CELLS_JS})().every((cell) => cell.right <= 960)",
                               timeout=PAGE_WAIT_MS)
        next_frames(page)
        _assert_table_fits(page, 960)
        screenshot(page, "workload-default-run-narrow-dark")
        watched.assert_clean()
