"""The idle-kernel notice in Chromium at 1280x800 under a real ``jupyter lab`` (token,
base_url /user/alice/, 4 simulated GPUs), with real kernels the simulated driver lists:

- a.ipynb (GPU 0) and e.ipynb (GPU 1) hold GPU memory and do no GPU work: one notification
  each, with its figures, and "idle on GPU for …" beside each in "Your GPU kernels";
- b.ipynb works on GPU 2 (per-process SM samples), c.ipynb runs a cell (Jupyter says busy),
  and a process of another user names d.ipynb's kernel on GPU 3: none raises anything;
- "Shut down kernel" ends e.ipynb's kernel and its row goes;
- "Not now" on a.ipynb is quiet for the snooze time (6 s here, a setting), then the notice
  comes once more;
- "Don't ask for this notebook" survives a reload, even once a.ipynb is in a new idle
  episode (a cell ran in it), which would otherwise be told again.

The user's settings (through Jupyter's settings API): told after 0 minutes, snooze 0.1
minute. It runs the extension built from this checkout (``jlpm build``) and, with
``PYTHONPATH`` naming this checkout, its server extension. Screenshots go to
test-artifacts/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.browser import chromium, screenshot, watch
from tests.support.idle_lab import (
    GIB,
    TOAST,
    judged,
    kernel_entry,
    place,
    run_cell,
    start_notebook,
    toasts_in_place,
    wait_glance,
    write_settings,
)
from tests.support.jupyter import lab_with_processes
from tests.support.waiting import until_ended
from tests.test_browser_lab import open_lab, show_sidebar

pytestmark = [pytest.mark.browser, pytest.mark.lab]
SIDEBAR = "#nvdashboard-sidebar"
SNOOZE_S = 6.0
NOTICE = re.compile(r"^(\w)\.ipynb holds (\d+\.\d) GiB on (.+) and has done no GPU work for "
                    r"\d+ (s|min)\.$")
STATE_ID = "jupyterlab-nvdashboard:idle-notice"


@pytest.fixture(scope="module")
def lab(processes_file) -> Iterator[object]:  # noqa: ANN001
    with lab_with_processes(processes_file, simulate=4) as running:
        yield running


def another_users_process(kernel_id: str) -> subprocess.Popen:
    """A process of user ``nobody`` whose command line names ``kernel_id``'s connection file,
    as that user's own kernel would (only root can start one)."""
    if os.geteuid() != 0:
        pytest.skip("a process of another user needs root")
    # The system's Python: this one may live where that user cannot read.
    return subprocess.Popen(["/usr/bin/python3", "-c", "import time; time.sleep(600)", "-f",
                             f"/tmp/kernel-{kernel_id}.json"], user="nobody")


# In the page: the time of the next click (caught before any handler of the page's own, so
# no later than the one the snooze counts from), and the time a.ipynb's notice is back
# after it was gone (a DOM change is seen no earlier than when the page made it).
SNOOZE_CLOCK_JS = """(toast) => {
  const clock = window.nvSnooze = {clicked: null, gone: false, back: null};
  document.addEventListener('click', () => { clock.clicked ??= Date.now(); }, true);
  new MutationObserver(() => {
    if (clock.clicked === null || clock.back !== null) return;
    const shown = [...document.querySelectorAll(toast)]
      .some(el => el.textContent.includes('a.ipynb holds'));
    if (!shown) clock.gone = true;
    else if (clock.gone) clock.back = Date.now();
  }).observe(document.body, {childList: true, subtree: true, characterData: true});
}"""


def toasts(page) -> list[str]:  # noqa: ANN001
    return page.eval_on_selector_all(f"{TOAST} .jp-toast-message",
                                     "els => els.map(e => e.textContent)")


def toast_for(page, notebook: str):  # noqa: ANN001, ANN201
    return page.locator(TOAST, has_text=f"{notebook} holds")


class GlanceReads:
    """Counts the page's answered reads of glance.json: "nothing was raised" is checked
    after the page has read the glance some more times, not after a guessed wait."""

    def __init__(self, page) -> None:  # noqa: ANN001
        self.count = 0
        page.on("response", self._seen)
        page.on("websocket", self._socket)

    def _seen(self, response) -> None:  # noqa: ANN001
        if "nvdashboard/glance.json" in response.url and response.status == 200:
            self.count += 1

    def _socket(self, socket) -> None:  # noqa: ANN001
        # After its first answer, the page reads the glance from its socket.
        if "nvdashboard/glance/stream" in socket.url:
            socket.on("framereceived", self._message)

    def _message(self, _payload: object) -> None:
        self.count += 1

    def wait_more(self, page, n: int = 3) -> None:  # noqa: ANN001
        target = self.count + n
        deadline = time.monotonic() + 60
        while self.count < target:
            assert time.monotonic() < deadline, "the page stopped reading the glance"
            page.wait_for_timeout(200)


def saved_memory(lab) -> dict:  # noqa: ANN001
    """The notice's memory as JupyterLab saved it in the workspace (its state database)."""
    status, body = lab.get("lab/api/workspaces/default")
    if status != 200:
        return {}
    return json.loads(body).get("data", {}).get(STATE_ID) or {}


def test_the_idle_notice(lab, processes_file: Path) -> None:  # noqa: ANN001
    write_settings(lab, {"idleNoticeMinutes": 0, "idleNoticeSnoozeMinutes": SNOOZE_S / 60})
    kernels = {name: start_notebook(lab, f"{name}.ipynb") for name in "abcde"}
    other = another_users_process(kernels["d"][0])
    try:
        # c runs a cell for the whole test: Jupyter says it is busy.
        run_cell(kernels["c"][1], kernels["c"][0], "import time; time.sleep(600)",
                 wait=False)
        place(processes_file, [
            {"gpu": 0, "pid": kernels["a"][1], "used_memory_bytes": 4 * GIB, "sm_pct": 0},
            {"gpu": 1, "pid": kernels["e"][1], "used_memory_bytes": 6 * GIB, "sm_pct": 0},
            {"gpu": 2, "pid": kernels["b"][1], "used_memory_bytes": 3 * GIB, "sm_pct": 50},
            {"gpu": 3, "pid": kernels["c"][1], "used_memory_bytes": 2 * GIB, "sm_pct": 0},
            {"gpu": 3, "pid": other.pid, "used_memory_bytes": 5 * GIB, "sm_pct": 0},
        ])
        ids = {name: kernel_id for name, (kernel_id, _) in kernels.items()}
        data = wait_glance(lab, lambda d: judged(d, ids["a"], "idle")
                           and judged(d, ids["e"], "idle") and judged(d, ids["b"], "busy")
                           and judged(d, ids["c"], "busy"), "the judgments")
        # The other user's process is not listed as d.ipynb's, nor as anyone's of ours.
        assert kernel_entry(data, ids["d"]) is None, data

        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            watched = watch(page)
            reads = GlanceReads(page)
            open_lab(page, lab)
            show_sidebar(page)
            page.wait_for_function(f"() => document.querySelectorAll('{TOAST}').length >= 2",
                                   timeout=60_000)
            reads.wait_more(page)
            said = sorted(toasts(page))
            assert len(said) == 2, said
            figures = [NOTICE.match(text) for text in said]
            assert all(figures), said
            assert [(m.group(1), m.group(2)) for m in figures] == [("a", "4.0"), ("e", "6.0")]
            assert "GPU 0" in figures[0].group(3) and "GPU 1" in figures[1].group(3), said
            for name in "ae":
                row = f'{SIDEBAR} [data-kernel-id="{ids[name]}"] .nvdashboard-kernel-idle'
                page.wait_for_function(f"() => /^idle on GPU for \\d+ (s|min)$/.test("
                                       f"document.querySelector('{row}')?.textContent)",
                                       timeout=30_000)
            for name in "bc":
                row = f'{SIDEBAR} [data-kernel-id="{ids[name]}"] .nvdashboard-kernel-idle'
                assert page.is_hidden(row), name
            buttons = toast_for(page, "a.ipynb").locator(".jp-toast-button").all_inner_texts()
            assert [b.strip() for b in buttons] == [
                "Shut down kernel", "Open notebook", "Not now",
                "Don't ask for this notebook"]
            toasts_in_place(page)
            screenshot(page, "idle-notice-two-holders")

            # Shut down kernel: e.ipynb's kernel ends, and its row goes.
            toast_for(page, "e.ipynb").get_by_role("button", name="Shut down kernel").click()
            until_ended(kernels["e"][1])
            page.wait_for_selector(f'{SIDEBAR} [data-kernel-id="{ids["e"]}"]',
                                   state="detached", timeout=30_000)
            screenshot(page, "idle-notice-after-shutdown")

            # Not now: quiet for the snooze time, then once more. The page's own clock times
            # it, from the click to the notice's return: the test's clock would count from
            # whenever Playwright's click returned, which a busy machine delays.
            page.evaluate(SNOOZE_CLOCK_JS, f"{TOAST}")
            toast_for(page, "a.ipynb").get_by_role("button", name="Not now").click()
            page.wait_for_function(f"() => !document.querySelector('{TOAST}')",
                                   timeout=30_000)
            toast_for(page, "a.ipynb").wait_for(timeout=60_000)
            page.wait_for_function("() => window.nvSnooze.back !== null", timeout=30_000)
            clock = page.evaluate("() => window.nvSnooze")
            assert clock["back"] - clock["clicked"] >= SNOOZE_S * 1000, clock
            reads.wait_more(page)
            assert len(toasts(page)) == 1, toasts(page)
            toasts_in_place(page)
            screenshot(page, "idle-notice-after-snooze")

            # Don't ask: kept in the workspace, and after a reload and a new idle episode
            # (a cell ran in a.ipynb) nothing is said.
            episode = kernel_entry(wait_glance(lab, lambda d: judged(d, ids["a"], "idle"),
                                               "a idle"), ids["a"])["idle"]["episode"]
            toast_for(page, "a.ipynb").get_by_role(
                "button", name="Don't ask for this notebook").click()
            deadline = time.monotonic() + 30
            while "a.ipynb" not in saved_memory(lab).get("dontAsk", []):
                assert time.monotonic() < deadline, saved_memory(lab)
                time.sleep(0.3)
            run_cell(kernels["a"][1], ids["a"], "1 + 1")
            wait_glance(lab, lambda d: judged(d, ids["a"], "idle") and kernel_entry(
                d, ids["a"])["idle"]["episode"] != episode, "a new idle episode of a.ipynb")
            page.reload()
            page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
            show_sidebar(page)
            page.wait_for_selector(f'{SIDEBAR} [data-kernel-id="{ids["a"]}"] '
                                   ".nvdashboard-kernel-idle:not([hidden])", timeout=60_000)
            reads.wait_more(page)
            assert toasts(page) == []
            screenshot(page, "idle-notice-dont-ask-after-reload")
            watched.assert_clean()
    finally:
        other.kill()
        other.wait(10)
