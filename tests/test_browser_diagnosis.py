"""The diagnosis in a real browser at 1280x800, both themes: the /Workload verdict and its
second line, and the /GPU-Activity diagnosis lines, are whole on screen (wrapped, never cut
off or scrolled away). Screenshots are saved to test-artifacts/."""

from __future__ import annotations

import time

import pytest

from tests.support.browser import PAGE_WAIT_MS, chromium, next_frames, screenshot, watch
from tests.support.servers import cli_server, with_token
from tests.test_browser_standalone import _start_run, _wait_for_run

pytestmark = pytest.mark.browser
VIEWPORT = {"width": 1280, "height": 800}

# Each element of ``selector`` (inside Bokeh's shadow roots too): its box, whether its text
# overflows it, and whether its cell (the element whose box clips it) cuts it off.
BOXES_JS = """(selector) => {
  const found = [];
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    if (el.matches(selector)) found.push(el);
    if (el.shadowRoot) walk(el.shadowRoot); } };
  walk(document);
  return found.map(el => {
    const box = el.getBoundingClientRect();
    let clip = el.parentElement, cut = false;
    while (clip) {
      const style = getComputedStyle(clip);
      if (style.overflow !== 'visible' || style.overflowY !== 'visible') {
        const c = clip.getBoundingClientRect();
        cut = box.bottom > c.bottom + 1 || box.right > c.right + 1 || box.top < c.top - 1;
        break;
      }
      clip = clip.parentElement || (clip.getRootNode() && clip.getRootNode().host);
    }
    return {text: el.textContent, left: box.left, right: box.right, top: box.top,
            bottom: box.bottom, overflowing: el.scrollWidth > el.clientWidth + 1 ||
            el.scrollHeight > el.clientHeight + 1, cut};
  });
}"""


# Scrolls the first element of ``selector`` (inside shadow roots too) into view.
SCROLL_JS = """(selector) => {
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    if (el.matches(selector)) return el;
    if (el.shadowRoot) { const inner = walk(el.shadowRoot); if (inner) return inner; } }
    return null; };
  const el = walk(document);
  if (el) el.scrollIntoView({block: 'center'});
  return !!el;
}"""


def assert_whole(boxes: list[dict], what: str) -> None:
    assert boxes, f"no {what} on the page"
    for box in boxes:
        assert box["text"].strip(), (what, box)
        assert 0 <= box["left"] and box["right"] <= VIEWPORT["width"], (what, box)
        assert not box["overflowing"] and not box["cut"], (what, box)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_workload_verdict_and_activity_lines_are_whole_at_1280x800(theme: str) -> None:
    with cli_server(["--simulate", "2", "--simulate-profile", "h200", "--interval", "0.2"]
                    ) as (url, _), chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        watched = watch(page)
        page.goto(with_token(url + "/"))
        page.goto(url + f"/Workload?theme={theme}")
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0",
                               timeout=PAGE_WAIT_MS)
        _start_run(page, "numpy", 6000)
        _wait_for_run(page, "numpy", "done")
        # The table refreshes once a second: waited for until the drawn verdict is this
        # run's, both lines, since a loaded machine refreshes late.
        page.wait_for_function(f"""() => ({BOXES_JS})('.nvd-verdict').some(box =>
            box.text.includes('not using SIMULATED GPU 0') && box.text.includes('try:'))""",
                               timeout=PAGE_WAIT_MS)
        next_frames(page)
        assert page.evaluate(SCROLL_JS, ".nvd-verdict")
        next_frames(page)
        verdicts = page.evaluate(BOXES_JS, ".nvd-verdict")
        assert_whole(verdicts, "verdict")
        assert 0 <= verdicts[0]["top"] and verdicts[0]["bottom"] <= VIEWPORT["height"]
        assert "not using SIMULATED GPU 0" in verdicts[0]["text"]
        assert "try:" in verdicts[0]["text"]  # the second line
        screenshot(page, f"diagnosis-workload-{theme}")

        page.goto(url + f"/GPU-Activity?theme={theme}")
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0",
                               timeout=PAGE_WAIT_MS)
        # 5 GPM readings, then the next refresh of the lines (every 5 s, apps/activity.py):
        # polled to a deadline that holds on a loaded machine, not for a count of polls.
        # A line per group of GPUs with the same finding, each GPU's own in its details.
        deadline = time.monotonic() + 120
        while True:
            page.wait_for_timeout(500)
            every = page.evaluate(BOXES_JS, ".nvdashboard-diagnosis li")
            lines = [box for box in every if box["bottom"] > box["top"]]  # the window shown
            named = " ".join(line["text"] for line in lines)
            if "so far" not in named and all(f"SIMULATED GPU {i} " in named for i in (0, 1)) \
                    or time.monotonic() > deadline:
                break
        # Lines for 2, 10 and 30 minutes, and the store's 6 h, 24 h and 7 d.
        assert len(page.evaluate(BOXES_JS, ".nvdashboard-diagnosis")) == 6
        assert 1 <= len(lines) <= 2, every
        assert all(f"SIMULATED GPU {i} " in named for i in (0, 1)), lines
        assert_whole(lines, "diagnosis line")
        assert all(line["text"].startswith("SIMULATED GPU ") for line in lines)
        screenshot(page, f"diagnosis-gpu-activity-{theme}")
        watched.assert_clean()
