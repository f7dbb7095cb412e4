"""The JupyterLab frontend with the keyboard only, in Chromium, under a real ``jupyter lab``
(token, base_url /user/alice/, simulated GPUs, a notebook kernel the simulated driver lists
on GPU 0): Tab to the status-bar item and Enter opens the sidebar with the keyboard in it;
Tab and Enter open a dashboard; back in the sidebar, Tab reaches that kernel's own "Shut
down" button, Enter and Enter again (the dialog) shut it down, and the row goes. Then the
dashboard server stops answering (SIGSTOP) and the status bar and the sidebar say "stale"
within two poll intervals; it answers again (SIGCONT) and the stale state goes.

It runs the extension built from this checkout (``jlpm build:prod`` writes
``jupyterlab_nvdashboard/labextension``), put first on Jupyter's path for this lab only,
and the installed one where there is no build. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator

import psutil
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.support.browser import chromium, screenshot, watch
from tests.support.jupyter import lab_with_processes
from tests.support.waiting import until_ended
from tests.test_browser_lab import dashboard_frame, open_lab
from tests.test_lab_processes import NOTEBOOK, call, kernel_pid

pytestmark = [pytest.mark.browser, pytest.mark.lab]
GIB = 2**30
STATUS_ITEM = ".nvdashboard-statusbar-item"
POLL_S = 2  # the refreshRate default


@pytest.fixture(scope="module")
def lab(processes_file) -> Iterator[object]:  # noqa: ANN001
    with lab_with_processes(processes_file, simulate=2) as running:
        yield running


def focused(page) -> str:  # noqa: ANN001
    """What has the keyboard: class, text and accessible name of the active element."""
    return page.evaluate("""() => { const e = document.activeElement;
      return e ? [e.tagName, e.className, e.getAttribute('aria-label') || '',
                  (e.textContent || '').trim().slice(0, 60)].join(' | ') : ''; }""")


def tab_until(page, script: str, limit: int = 400, back: bool = False) -> None:  # noqa: ANN001
    """Press Tab (or Shift+Tab) until ``script`` (about document.activeElement) is true."""
    for _ in range(limit):
        if page.evaluate(script):
            return
        page.keyboard.press("Shift+Tab" if back else "Tab")
    raise AssertionError(f"Tab never reached {script}; at {focused(page)}")


def dashboard_server(lab) -> psutil.Process:  # noqa: ANN001
    for process in psutil.Process(lab.process.pid).children(recursive=True):
        try:
            if "jupyterlab_nvdashboard.server" in " ".join(process.cmdline()):
                return process
        except psutil.Error:
            continue
    raise AssertionError("the proxied dashboard server is not running")


def test_keyboard_only_sidebar_dashboard_shutdown_and_stale(lab, processes_file) -> None:  # noqa: ANN001
    call(lab, "PUT", "api/contents/train.ipynb", {"type": "notebook", "content": NOTEBOOK})
    session = call(lab, "POST", "api/sessions", {"path": "train.ipynb", "name": "train.ipynb",
                                                 "type": "notebook",
                                                 "kernel": {"name": "python3"}})
    kernel_id = session["kernel"]["id"]  # type: ignore[index]
    pid = kernel_pid(lab, kernel_id)
    processes_file.write_text(json.dumps([
        {"gpu": 0, "pid": pid, "used_memory_bytes": 4 * GIB, "until_exit": True}]))
    row = f'.nvdashboard-kernel[data-kernel-id="{kernel_id}"]'
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        open_lab(page, lab)
        page.wait_for_function(f"() => document.querySelector('{STATUS_ITEM}')?.textContent"
                               ".includes('%')", timeout=60_000)
        # The status item: the user's GPU, a tooltip line per GPU, a named button.
        text = page.inner_text(STATUS_ITEM)
        assert text.startswith("GPU ") and " GiB of " in text, text  # as nvidia-smi counts
        tooltip = page.get_attribute(STATUS_ITEM, "title") or ""
        assert "GPU 0:" in tooltip and "GPU 1:" in tooltip, tooltip
        assert page.get_attribute(STATUS_ITEM, "role") == "button"

        # Keyboard only from here: Tab to the status item, Enter opens the sidebar.
        page.keyboard.press("Escape")
        tab_until(page, f"() => document.activeElement?.matches('{STATUS_ITEM}')")
        page.keyboard.press("Enter")
        page.wait_for_selector("#nvdashboard-sidebar", state="visible", timeout=10_000)
        try:
            page.wait_for_function("() => document.querySelector('#nvdashboard-sidebar')"
                                   ".contains(document.activeElement)", timeout=10_000)
        except PlaywrightTimeoutError:
            raise AssertionError(f"the keyboard is not in the sidebar: {focused(page)}") from None
        page.wait_for_selector(row, timeout=60_000)
        assert "4.0 GiB on GPU 0" in page.inner_text(row)
        headings = page.eval_on_selector_all(
            "#nvdashboard-sidebar h2, #nvdashboard-sidebar h3:not([hidden])",
            "els => els.map(e => e.textContent)")
        assert headings[:2] == ["GPU Dashboards", "Your GPU kernels"], headings
        meters = page.eval_on_selector_all("#nvdashboard-sidebar [role=meter]",
                                           "els => els.map(e => e.getAttribute('aria-label'))")
        assert "GPU 0 utilization" in meters, meters
        # "Your GPU kernels" is on screen at 1280x800 without scrolling.
        box = page.locator(row).bounding_box()
        assert box is not None and box["y"] + box["height"] <= 800, box
        screenshot(page, "lab-keyboard-sidebar")

        # Tab to the GPU Utilization button; Enter opens the dashboard. The GPU dashboards
        # join the list once the server has read its GPUs (this page may open before).
        page.wait_for_selector('.nvdashboard-button[data-route="/GPU-Utilization"]',
                               timeout=30_000)
        tab_until(page, "() => document.activeElement?.dataset?.route === '/GPU-Utilization'")
        page.keyboard.press("Enter")
        dashboard_frame(page, "/GPU-Utilization")
        page.wait_for_selector('.lm-TabBar-tab >> text="GPU Utilization"', timeout=30_000)
        page.wait_for_timeout(2000)
        screenshot(page, "lab-keyboard-dashboard")

        # Back to the sidebar by the status item, then Tab to this kernel's "Shut down".
        tab_until(page, f"() => document.activeElement?.matches('{STATUS_ITEM}')")
        page.keyboard.press("Enter")
        name = "Shut down the kernel of train.ipynb"
        tab_until(page, f"() => document.activeElement?.getAttribute('aria-label') === '{name}'")
        screenshot(page, "lab-keyboard-shutdown-focused")
        page.keyboard.press("Enter")
        page.wait_for_selector(".jp-Dialog", timeout=10_000)
        assert "train.ipynb" in page.inner_text(".jp-Dialog")
        screenshot(page, "lab-keyboard-shutdown-dialog")
        page.keyboard.press("Enter")  # the dialog's default button: Shut Down
        until_ended(pid)
        page.wait_for_selector(row, state="detached", timeout=30_000)
        # No GPU of the user's any more: the status item counts the free GPUs instead, as
        # the server judged them (here 2 GPUs under the simulated load).
        page.wait_for_function(f"() => /^[0-2] of 2 GPUs free$/.test(document.querySelector("
                               f"'{STATUS_ITEM}')?.textContent || '')", timeout=30_000)
        screenshot(page, "lab-keyboard-status-free-count")
        watched.assert_clean()

        # The dashboard server stops answering: "stale" within two poll intervals.
        server = dashboard_server(lab)
        server.send_signal(signal.SIGSTOP)
        try:
            page.wait_for_function(f"() => document.querySelector('{STATUS_ITEM}')"
                                   ".textContent.includes('stale')",
                                   timeout=(2 * POLL_S + 1) * 1000)
            assert "stale" in page.inner_text(".nvdashboard-glance .nvdashboard-stale")
            screenshot(page, "lab-keyboard-stale")
        finally:
            server.send_signal(signal.SIGCONT)
        page.wait_for_function(f"() => !document.querySelector('{STATUS_ITEM}')"
                               ".textContent.includes('stale')", timeout=(2 * POLL_S + 3) * 1000)
