"""A running cell shows what it does on the GPU, live (issue 55): a real ``jupyter lab``
(token, base_url /user/alice/), a real kernel and Chromium at 1280x800, light and dark theme,
on 2 simulated GPUs.

One cell of 40 s: it works GPU 1 at 90% for its first 12 s (the cell writes the simulated
driver's process file with its own PID, ``tests/support/lab_cells.py``), then holds the
memory with 0% for the rest. While it runs, its footer is live: it says "running", the
kernel's memory now and its work now, and the verdict so far, busy first, then, once the idle
part outweighs the busy one, held idle. The running-cell notice (set to 15 s here) appears
once, then not again. When the cell ends, the footer is the finished verdict, the one
``/cell.json`` answers. Screenshots of the live footer in both themes go to test-artifacts/.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.support.browser import PAGE_WAIT_MS, chromium, next_frames, screenshot, watch
from tests.support.idle_lab import TOAST
from tests.support.lab_cells import (
    CELL_DONE_JS,
    CELL_RUNNING_JS,
    DARK,
    DARK_APPLIED,
    FOOTER,
    LIGHT_APPLIED,
    RUN_CELL_JS,
    CellRequests,
    cell_node,
    cells_lab,
    footer_text,
    open_notebook,
)
from tests.test_browser_lab import open_lab

pytestmark = [pytest.mark.browser, pytest.mark.lab]
NOTEBOOK_PATH = "live.ipynb"
BUSY_S, CELL_S = 12, 40
NOTICE_S = 15
RUNNING = ".nvdashboard-mod-running"
NOTICE = re.compile(rf"^{NOTEBOOK_PATH}, cell \[1\] has held GPU 1 for \d+ s and (barely used "
                    r"it|keeps it waiting between bursts of work \(starved\))\.$")
CELL_SOURCES = {
    "a": "import time\n"
         "from simulated_gpu import use_gpu\n"
         "use_gpu(sm_pct=90)  # the simulated driver: this kernel works GPU 1\n"
         f"time.sleep({BUSY_S})\n"
         "use_gpu(sm_pct=0)  # and now holds its memory, doing nothing\n"
         f"time.sleep({CELL_S - BUSY_S})",
}


@pytest.fixture(scope="module")
def lab(processes_file: Path) -> Iterator[object]:
    with cells_lab(processes_file, NOTEBOOK_PATH, CELL_SOURCES,
                   {"liveCellNoticeMinutes": NOTICE_S / 60}) as running:
        yield running


def live_text(page, words: str) -> str:  # noqa: ANN001
    """The live footer's text once it contains ``words``."""
    selector = f"{cell_node(0)} {FOOTER} .nvdashboard-cell-verdict"
    try:
        page.wait_for_function(
            """([sel, words]) => { const f = document.querySelector(sel);
               return Boolean(f && f.textContent.includes(words)); }""",
            arg=[f"{cell_node(0)} {FOOTER}{RUNNING} .nvdashboard-cell-verdict", words],
            timeout=CELL_S * 1000)
    except PlaywrightTimeout:
        shown = page.evaluate("(sel) => { const f = document.querySelector(sel);"
                              " return f ? f.textContent : null; }", selector)
        raise AssertionError(f"no live footer saying {words!r}; it says {shown!r}") from None
    return footer_text(page, 0)


def notices(page) -> list[str]:  # noqa: ANN001
    return page.eval_on_selector_all(f"{TOAST} .jp-toast-message",
                                     "els => els.map(e => e.textContent)")


@pytest.mark.timeout(300)
def test_a_running_cell_shows_busy_then_idle_then_its_verdict(lab) -> None:  # noqa: ANN001
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        requests = CellRequests(page)
        open_lab(page, lab)
        page.wait_for_function(LIGHT_APPLIED, timeout=30_000)
        open_notebook(page, NOTEBOOK_PATH)
        started = time.monotonic()
        page.evaluate(RUN_CELL_JS, 0)  # as Shift+Enter, not waiting for it to end
        page.wait_for_function(CELL_RUNNING_JS, arg=0, timeout=PAGE_WAIT_MS)

        busy = live_text(page, "so far: GPU 1: busy")
        assert busy.startswith("running "), busy
        assert "GPU 1: 6.0 GiB now" in busy and "working 90% now" in busy, busy
        assert requests.asked == []  # live from the glance: no request of its own
        next_frames(page)
        screenshot(page, "lab-live-cell-busy-light")

        idle = live_text(page, "so far: held 6.0 GiB on GPU 1, but this cell worked it")
        assert "working 0% now" in idle, idle
        assert time.monotonic() - started < CELL_S + 5, "the idle verdict came after the cell"
        # The notice: once the cell has held its GPU for the set time and is held idle.
        page.wait_for_function(
            "(sel) => [...document.querySelectorAll(sel)].some("
            "(e) => e.textContent.includes('has held GPU 1 for'))",
            arg=f"{TOAST} .jp-toast-message", timeout=PAGE_WAIT_MS)
        [said] = [text for text in notices(page) if "has held GPU 1 for" in text]
        # The first cause worth telling once the set time has passed: held idle, or, where
        # the GPU's "starved" scenario already showed in the cell's own busy seconds (the
        # kernel is its only process, so the finding is its), starved.
        assert NOTICE.match(said), said
        page.evaluate(DARK)
        page.wait_for_function(DARK_APPLIED, timeout=30_000)
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=PAGE_WAIT_MS)
        next_frames(page)
        screenshot(page, "lab-live-cell-idle-dark")

        # Ended: the finished footer, the server's verdict for the whole cell, in place.
        page.wait_for_function(CELL_DONE_JS, arg=0, timeout=CELL_S * 1000)
        requests.until_answered(1)
        url, _ = requests.asked[0]
        answer = requests.answers[url]
        page.wait_for_selector(f"{cell_node(0)} {FOOTER}{RUNNING}", state="detached",
                               timeout=PAGE_WAIT_MS)
        finished = footer_text(page, 0)
        assert finished == answer["verdict"], (finished, answer)
        assert answer["running"] is False and answer["state"] == "held-idle", answer
        # The notice said once, then not again.
        page.wait_for_function("(t) => Date.now() > t", arg=time.time() * 1000 + 3000,
                               timeout=PAGE_WAIT_MS)
        assert len([t for t in notices(page) if "has held GPU 1 for" in t]) == 1, notices(page)
        page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme',"
                      " {theme: 'JupyterLab Light'})")
        page.wait_for_function(LIGHT_APPLIED, timeout=30_000)
        print(f"busy: {busy}\nidle: {idle}\nnotice: {said}\nfinished: {finished}")
        watched.assert_clean()
