"""The JupyterLab extension in a real browser (Debian Chromium through Playwright), with
the dashboards behind jupyter-server-proxy under base_url /user/alice/ and a token.

Screenshots of the sidebar and every dashboard, light and dark, go to test-artifacts/. The
lab loads the extension built from this checkout where there is one (``this_build``).
"""

from __future__ import annotations

import tempfile
import time

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.support.bar_rows import BAR_PAGE_JS, BAR_ROWS_JS
from tests.support.browser import (
    PAGE_WAIT_MS,
    canvas_ink,
    chromium,
    drawn_canvas,
    screenshot,
    watch,
)
from tests.support.jupyter import jupyter_lab, this_build
from tests.support.waiting import until

pytestmark = [pytest.mark.browser, pytest.mark.lab]

SIDEBAR_TAB = 'li[data-id="nvdashboard-sidebar"]'
SIDEBAR_PANEL = "#nvdashboard-sidebar"
DARK_BACKGROUND = "rgb(32, 38, 43)"


@pytest.fixture(scope="module")
def lab():
    # An A100 with MIG and two MIG devices, and a plain A100: MIG devices must show as
    # children of their GPU in the sidebar and in every GPU dashboard, in both themes.
    with tempfile.TemporaryDirectory() as share, \
            jupyter_lab(simulate=2, extra_env={"NVDASHBOARD_SIMULATE_PROFILE": "a100-mig",
                                               **this_build(share)},
                        extra_args=["--LabApp.expose_app_in_browser=True"]) as running:
        yield running


@pytest.fixture(scope="module")
def browser():
    with chromium() as running:
        yield running


def dashboard_frame(page, route: str, query: str = ""):  # noqa: ANN001, ANN201
    """The iframe of ``route``, once it has navigated to the dashboard (with ``query`` in
    its address: a frame whose ``src`` was just changed shows the old document until the
    new one commits, and a script run in the old one is cut off by that navigation)."""
    deadline = time.monotonic() + PAGE_WAIT_MS / 1000  # a deadline, not a count of polls
    while time.monotonic() < deadline:
        for frame in page.frames:
            path, _, found = frame.url.partition("?")
            if path.endswith("nvdashboard" + route) and query in found:
                return frame
        page.wait_for_timeout(300)
    raise AssertionError(f"no iframe for {route}: {[f.url for f in page.frames]}")


# Dashboards drawn as a table, not a canvas: "updates" means the live script applied frames.
TABLE_ROUTES = {"/GPU-Processes", "/GPU-Overview"}
# A table's first frame is applied; an unchanged table is not sent again (the process table of
# an idle kernel), so only the overview, whose readings change, is checked for updates.
TABLE_LIVE_JS = "() => window.nvdashboardLive && nvdashboardLive.frames > 0"
UNCHANGING_ROUTES = {"/GPU-Processes"}


def wait_for_plot(frame) -> dict:  # noqa: ANN001
    frame.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0",
                            timeout=PAGE_WAIT_MS)
    if frame.evaluate(BAR_PAGE_JS):  # HTML bars: their words change with each reading
        frame.wait_for_function(f"() => ({BAR_ROWS_JS})().rows.length > 0",
                                timeout=PAGE_WAIT_MS)
        return frame.evaluate(f"() => ({{checksum: ({BAR_ROWS_JS})().rows.map("
                              "(row) => row.label).join('|')})")
    if frame.url.split("?")[0].endswith(tuple(TABLE_ROUTES)):
        frame.wait_for_function(TABLE_LIVE_JS, timeout=PAGE_WAIT_MS)
        return frame.evaluate("() => ({checksum: nvdashboardLive.frames})")
    return drawn_canvas(frame, 500)


# Per-GPU bar dashboards: one row per device, each MIG device right under its GPU.
BAR_ROUTES = {"/GPU-Utilization", "/GPU-Memory"}
EXPECTED_MIG_ROWS = ["GPU 0: NVIDIA A100-SXM4-80GB", "  ↳ GPU 0 · MIG 1 (CUDA 0): 3g.40gb",
                     "  ↳ GPU 0 · MIG 2 (CUDA 1): 4g.40gb", "GPU 1 (CUDA 2): NVIDIA A100-SXM4-80GB"]


def mig_rows(frame) -> list[str]:  # noqa: ANN001
    """The bar rows' device names, top to bottom, as the page shows them (two spaces for
    a row set in under its GPU)."""
    rows = frame.evaluate(BAR_ROWS_JS)["rows"]
    return [("  " if row["gpuIndent"] > 0 else "") + row["gpuText"] for row in rows]


def open_lab(page, lab) -> None:  # noqa: ANN001
    """Load JupyterLab and wait until it has restored its layout.

    The sidebar's tab is drawn before the layout is restored; a click on it in between can
    be undone by the restore (the left area goes back to what the saved layout shows), and
    then the sidebar stays hidden and never polls. JupyterLab removes its splash screen once
    the restore is done.

    With an empty main area, JupyterLab opens its Launcher and gives it the keyboard, once
    its file browser has read the folder: on a loaded machine, seconds after the restore.
    A tab in the main area (the Launcher, or what the layout restored) says that is done.
    """
    page.goto(f"{lab.url}lab?token={lab.token}")
    page.wait_for_selector(SIDEBAR_TAB, timeout=PAGE_WAIT_MS)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=PAGE_WAIT_MS)
    page.wait_for_selector("#jp-main-dock-panel .lm-TabBar-tab", timeout=PAGE_WAIT_MS)


def show_sidebar(page) -> None:  # noqa: ANN001
    """Open the dashboards sidebar the way a user does, by its tab, unless it is open."""
    for _ in range(3):
        if page.is_visible(SIDEBAR_PANEL):
            return
        page.click(SIDEBAR_TAB)
        try:
            page.wait_for_selector(SIDEBAR_PANEL, state="visible", timeout=5_000)
            return
        except PlaywrightTimeoutError:
            continue
    raise AssertionError(f"the sidebar did not open: {page.inner_text('body')[:500]!r}")


def test_sidebar_dashboards_reload_and_theme(lab, browser) -> None:
    index = lab.dashboard_index()
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    watched = watch(page)
    open_lab(page, lab)

    show_sidebar(page)
    try:
        page.wait_for_function(
            f"() => document.querySelectorAll('.nvdashboard-button').length === {len(index)}",
            timeout=PAGE_WAIT_MS)
    except PlaywrightTimeoutError:
        screenshot(page, "lab-sidebar-not-listed")
        raise AssertionError(f"the sidebar does not list {len(index)} dashboards: "
                             f"{page.inner_text(SIDEBAR_PANEL)!r}") from None
    listed = page.eval_on_selector_all(".nvdashboard-button",
                                       "els => els.map(e => e.dataset.route)")
    assert sorted(listed) == sorted(index)
    assert "Simulated" in page.inner_text("#nvdashboard-sidebar")
    # The GPU lines are one click under the status headline (the list stays above the fold).
    page.click("summary.nvdashboard-status-headline")
    page.wait_for_selector(".nvdashboard-status-mig", timeout=PAGE_WAIT_MS)
    mig_lines = page.eval_on_selector_all(".nvdashboard-status-mig", "els => els.map(e => "
                                          "[e.innerText, getComputedStyle(e).paddingLeft, "
                                          "getComputedStyle(e).marginLeft])")
    assert [line[0].split(" (")[0] for line in mig_lines] == ["↳ GPU 0 · MIG 1", "↳ GPU 0 · MIG 2"]
    assert all(line[1] != "0px" or line[2] != "0px" for line in mig_lines), mig_lines  # indented
    screenshot(page, "lab-sidebar-light")

    for route in index:
        page.click(f'.nvdashboard-button[data-route="{route}"]')
        frame = dashboard_frame(page, route)
        first = wait_for_plot(frame)
        if route in UNCHANGING_ROUTES:
            screenshot(page, "lab-light" + route.replace("/", "-").lower())
            continue
        # Some readings refresh once a second (the PCIe snapshot on this profile's driver):
        # polled to a deadline that holds on a loaded machine, not for a count of polls.
        def updated(frame=frame, route=route, first=first) -> bool:  # noqa: ANN001
            second = wait_for_plot(frame) if route in TABLE_ROUTES or \
                frame.evaluate(BAR_PAGE_JS) else canvas_ink(frame)
            return second["checksum"] != first["checksum"]
        until(updated, f"{route} did not update", seconds=30, every_s=0.5)
        if route in BAR_ROUTES:
            assert mig_rows(frame) == EXPECTED_MIG_ROWS, route
        screenshot(page, "lab-light" + route.replace("/", "-").lower())

    # Clicking an open dashboard again activates its tab instead of opening a second one.
    first_route = next(iter(index))
    page.click(f'.nvdashboard-button[data-route="{first_route}"]')
    # Either way (its tab activated, or a second one opened) it is then the current widget.
    page.wait_for_function(f"() => window.jupyterapp.shell.currentWidget?.route === "
                           f"'{first_route}'", timeout=PAGE_WAIT_MS)
    assert page.locator(".nvdashboard-widget").count() == len(index)

    page.reload()
    page.wait_for_selector(SIDEBAR_TAB, timeout=PAGE_WAIT_MS)
    page.wait_for_function(
        f"() => document.querySelectorAll('.nvdashboard-widget').length === {len(index)}",
        timeout=PAGE_WAIT_MS)

    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', "
                  "{theme: 'JupyterLab Dark'})")
    for route in index:
        page.click(f'.nvdashboard-button[data-route="{route}"]')
        page.wait_for_function(
            f"() => [...document.querySelectorAll('iframe')].some(f => "
            f"f.src.includes('nvdashboard{route}?theme=dark'))", timeout=PAGE_WAIT_MS)
        frame = dashboard_frame(page, route, query="theme=dark")
        wait_for_plot(frame)
        frame.wait_for_function(
            f"() => getComputedStyle(document.body).backgroundColor === '{DARK_BACKGROUND}'",
            timeout=PAGE_WAIT_MS)
        if route in BAR_ROUTES:
            assert mig_rows(frame) == EXPECTED_MIG_ROWS, route
        screenshot(page, "lab-dark" + route.replace("/", "-").lower())
    screenshot(page, "lab-sidebar-dark")
    watched.assert_clean()



def test_a_background_dashboard_tab_applies_no_updates_and_catches_up(lab, browser) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    watched = watch(page)
    open_lab(page, lab)
    button = '.nvdashboard-button[data-route="/GPU-Resources"]'
    show_sidebar(page)
    page.wait_for_selector(button, timeout=PAGE_WAIT_MS)
    page.click('.nvdashboard-button[data-route="/GPU-Resources"]')
    frame = dashboard_frame(page, "/GPU-Resources")
    frame.wait_for_function("() => window.nvdashboardLive && nvdashboardLive.frames > 3",
                            timeout=PAGE_WAIT_MS)
    live = "() => [nvdashboardLive.hidden, nvdashboardLive.frames, nvdashboardLive.seq, " \
           "nvdashboardLive.resets]"
    # Another dashboard in front: the first tab is in the background.
    page.click('.nvdashboard-button[data-route="/GPU-Memory"]')
    frame.wait_for_function("() => nvdashboardLive.hidden && !nvdashboardLive.socket",
                            timeout=PAGE_WAIT_MS)
    hidden = frame.evaluate(live)
    # Meanwhile the server sends 10 more frames to the dashboard in front: an event to wait
    # for, where a fixed time means less on a loaded machine.
    dashboard_frame(page, "/GPU-Memory").wait_for_function(
        f"() => window.nvdashboardLive && nvdashboardLive.seq >= {hidden[2] + 10}",
        timeout=PAGE_WAIT_MS)
    assert frame.evaluate(live) == hidden  # not one frame applied while in the background
    page.click('.nvdashboard-button[data-route="/GPU-Resources"]')
    frame.wait_for_function(f"() => !nvdashboardLive.hidden && nvdashboardLive.seq >= "
                            f"{hidden[2] + 10}", timeout=PAGE_WAIT_MS)
    shown = frame.evaluate(live)
    assert shown[3] == hidden[3]  # caught up from `since`: no reset, no gap
    screenshot(page, "lab-light-caught-up-gpu-resources")
    watched.assert_clean()
