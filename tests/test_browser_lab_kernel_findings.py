"""The sidebar tells a user about their own kernel, and /GPU-Processes keeps an ended
notebook's usage (issues 43 and 44), in Chromium at 1280x800, light and dark, under a real
``jupyter lab`` (token, base_url /user/alice/) whose 2 simulated GPUs play the "starved"
scenario, so that every GPU's finding comes with advice on feeding the GPU:

- a.ipynb's kernel holds memory on GPU 1 and does no GPU work, beside another process that
  works there: GPU 1's line says a.ipynb is idle and that the finding is the GPU's, with
  its other process, and gives no advice; b.ipynb's kernel works alone on GPU 0, and GPU
  0's finding is b.ipynb's, with its advice;
- "idle on GPU" and the stale status item reach 4.5:1 in the light theme;
- once c.ipynb's kernel is shut down, /GPU-Processes still shows its GiB·h and GPU
  working, marked ended.

It runs the extension built from this checkout (``jlpm build``) and, with ``PYTHONPATH``
naming this checkout, its servers. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.support.browser import chromium, next_frames, screenshot, watch
from tests.support.idle_lab import GIB, judged, place, start_notebook, wait_glance, write_settings
from tests.support.jupyter import lab_with_processes
from tests.support.waiting import until, until_ended
from tests.test_browser_lab import dashboard_frame, open_lab, show_sidebar
from tests.test_lab_processes import call

pytestmark = [pytest.mark.browser, pytest.mark.lab]
SIDEBAR = "#nvdashboard-sidebar"
STATUS_ITEM = ".nvdashboard-statusbar-item"
DARK = "window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})"
LIGHT = "window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})"
DARK_APPLIED = "() => document.body.dataset.jpThemeLight === 'false'"
LIGHT_APPLIED = "() => document.body.dataset.jpThemeLight === 'true'"

# An element's text colour and the background it is drawn on (the nearest ancestor's that
# is not transparent), each as sRGB bytes: a canvas turns any CSS colour (color-mix
# included) into bytes.
COLOURS_JS = """(selector) => {
  const el = document.querySelector(selector);
  const bytes = (css) => {
    const ctx = document.createElement('canvas').getContext('2d');
    ctx.fillStyle = '#000'; ctx.fillStyle = css; ctx.fillRect(0, 0, 1, 1);
    return [...ctx.getImageData(0, 0, 1, 1).data];
  };
  let back = el;
  while (back && bytes(getComputedStyle(back).backgroundColor)[3] === 0) {
    back = back.parentElement;
  }
  return {text: bytes(getComputedStyle(el).color),
          background: back ? bytes(getComputedStyle(back).backgroundColor) : [255, 255, 255, 255]};
}"""


def contrast(text: list[int], background: list[int]) -> float:
    """WCAG 2 contrast ratio of ``text`` over ``background`` (RGBA bytes, alpha composited)."""
    alpha = text[3] / 255
    mixed = [alpha * t + (1 - alpha) * b for t, b in zip(text[:3], background[:3], strict=True)]

    def luminance(rgb: list[float]) -> float:
        linear = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4
                  for c in rgb]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(mixed), luminance([float(b) for b in background[:3]])),
                       reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.fixture(scope="module")
def lab(processes_file) -> Iterator[object]:  # noqa: ANN001
    with lab_with_processes(processes_file, simulate=2,
                            extra_env={"NVDASHBOARD_SIMULATE_SCENARIO": "starved"},
                            # window.jupyterapp: the theme is switched by its command.
                            extra_args=["--LabApp.expose_app_in_browser=True"]) as running:
        # "idle on GPU" from the first idle reading on, and no notification over the page.
        write_settings(running, {"idleNotice": False, "idleNoticeMinutes": 0})
        yield running


@pytest.fixture(scope="module")
def holders(lab, processes_file: Path) -> Iterator[dict[str, str]]:  # noqa: ANN001
    """a.ipynb idle on GPU 1 beside a process that works there, b.ipynb working alone on
    GPU 0, both judged so by the server and both GPUs diagnosed starved: kernel id by
    notebook."""
    a, a_pid = start_notebook(lab, "a.ipynb")
    b, b_pid = start_notebook(lab, "b.ipynb")
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        place(processes_file, [
            {"gpu": 1, "pid": a_pid, "used_memory_bytes": 4 * GIB, "sm_pct": 0},
            {"gpu": 1, "pid": job.pid, "used_memory_bytes": 8 * GIB, "sm_pct": 90},
            {"gpu": 0, "pid": b_pid, "used_memory_bytes": 6 * GIB, "sm_pct": 60},
        ])
        # Both GPUs read as the scenario they play: the first diagnoses of a young server
        # cover a second or so of samples, too little to see the 1.5 s gaps, and say "busy".
        wait_glance(lab, lambda d: judged(d, a, "idle") and judged(d, b, "busy")
                    and {g["index"]: g["cause"] for g in d.get("diagnoses", [])}
                    == {0: "starved", 1: "starved"},
                    "a.ipynb idle, b.ipynb busy, both GPUs diagnosed starved")
        yield {"a.ipynb": a, "b.ipynb": b}
    finally:
        job.kill()
        job.wait()


def finding(page, index: int) -> dict:  # noqa: ANN001
    """GPU ``index``'s line in the sidebar: its whole text (closed or open), its tooltip,
    and whose the page says it is."""
    return page.evaluate("""(index) => {
      const details = document.querySelector(
        `#nvdashboard-sidebar .nvdashboard-diagnosis[data-index="${index}"]`);
      return {text: details.textContent, whose: details.dataset.whose,
              title: details.querySelector('summary').title};
    }""", index)


def test_the_sidebar_gives_an_idle_holder_no_feeding_advice(lab, holders) -> None:  # noqa: ANN001
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        open_lab(page, lab)
        show_sidebar(page)
        page.wait_for_function(f"() => document.querySelectorAll('{SIDEBAR} "
                               ".nvdashboard-diagnosis').length === 2", timeout=60_000)
        for theme, switch, applied in (("light", None, LIGHT_APPLIED),
                                       ("dark", DARK, DARK_APPLIED)):
            if switch:
                page.evaluate(switch)
            page.wait_for_function(applied, timeout=30_000)
            idle = finding(page, 1)
            assert idle["whose"] == "gpu", idle
            assert "Your a.ipynb is idle here" in idle["text"], idle
            assert "The GPU's finding, with 1 other process" in idle["text"], idle
            assert "Try:" not in idle["text"] and "Try:" not in idle["title"], idle
            working = finding(page, 0)
            assert working["whose"] == "yours", working
            assert "About your b.ipynb" in working["text"], working
            assert "Try:" in working["text"], working
            for index in (0, 1):
                page.click(f'{SIDEBAR} .nvdashboard-diagnosis[data-index="{index}"] summary')
            page.wait_for_function(f"() => document.querySelectorAll('{SIDEBAR} "
                                   ".nvdashboard-diagnosis[open]').length === 2")
            screenshot(page, f"lab-sidebar-idle-holder-findings-{theme}")
            for index in (0, 1):  # closed again for the next theme
                page.click(f'{SIDEBAR} .nvdashboard-diagnosis[data-index="{index}"] summary')
        page.evaluate(LIGHT)
        watched.assert_clean()


def test_idle_and_stale_text_reach_4_5_to_1_in_the_light_theme(lab, holders) -> None:  # noqa: ANN001
    idle = f'{SIDEBAR} [data-kernel-id="{holders["a.ipynb"]}"] .nvdashboard-kernel-idle'
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        # The glance's socket, passed through to the server, so that the test can cut it.
        glance_sockets = []

        def pass_through(socket) -> None:  # noqa: ANN001 - playwright WebSocketRoute
            socket.connect_to_server()
            glance_sockets.append(socket)

        page.route_web_socket("**/nvdashboard/glance/stream*", pass_through)
        open_lab(page, lab)
        page.evaluate(LIGHT)
        page.wait_for_function(LIGHT_APPLIED, timeout=30_000)
        show_sidebar(page)
        page.wait_for_function(f"() => /^idle on GPU for/.test("
                               f"document.querySelector('{idle}')?.textContent)",
                               timeout=60_000)
        colours = page.evaluate(COLOURS_JS, idle)
        ratio = contrast(colours["text"], colours["background"])
        print(f"'idle on GPU' in the light theme: {ratio:.2f}:1 {colours}")
        assert ratio >= 4.5, colours
        # The status item goes stale when the glance stops coming: its socket cut, and
        # glance.json, which the page then asks, not answering.
        page.wait_for_selector(STATUS_ITEM, timeout=30_000)
        page.route("**/nvdashboard/glance.json*", lambda route: route.abort())
        for socket in glance_sockets:
            socket.close()
        page.wait_for_selector(f"{STATUS_ITEM}.nvdashboard-mod-stale", timeout=30_000)
        screenshot(page, "lab-status-item-stale-light")
        colours = page.evaluate(COLOURS_JS, STATUS_ITEM)
        ratio = contrast(colours["text"], colours["background"])
        print(f"the stale status item in the light theme: {ratio:.2f}:1 {colours}")
        assert ratio >= 4.5, colours
        page.unroute("**/nvdashboard/glance.json*")


# The process table's rows (its source, filled by the page's live script): each row's
# notebook-or-command text, "held for" and notebook GiB·h.
TABLE_ROWS_JS = """() => {
  if (!window.Bokeh || Bokeh.documents.length === 0) return [];
  const source = [...Bokeh.documents[0].all_models].find(m => m.data && m.data.what);
  if (!source) return [];
  const d = source.data;
  return [...d.what].map((what, i) => ({what, held: d.held[i], gib_h: d.notebook_held[i],
                                        working: d.notebook_working[i]}));
}"""


def ended_row(frame, notebook: str) -> dict | None:  # noqa: ANN001
    """``notebook``'s row marked ended, or None (also while the page reloads for a theme)."""
    try:
        rows = frame.evaluate(TABLE_ROWS_JS)
    except PlaywrightError:  # the page navigated away under the evaluation
        return None
    return next((row for row in rows
                 if f'data-notebook="{notebook}"' in row["what"] and row["held"] == "ended"),
                None)


def drawn(page) -> bool:  # noqa: ANN001
    """Whether the dark page's table is drawn from its data; False while the page is still
    reloading for the theme (its frame navigates under the evaluation)."""
    try:
        next_frames(dashboard_frame(page, "/GPU-Processes"))
    except PlaywrightError:
        return False
    return True


def test_an_ended_notebooks_usage_stays_on_gpu_processes(lab, processes_file: Path  # noqa: ANN001
                                                         ) -> None:
    kernel_id, pid = start_notebook(lab, "c.ipynb")
    place(processes_file, [{"gpu": 0, "pid": pid, "used_memory_bytes": 5 * GIB,
                            "sm_pct": 40}])
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        open_lab(page, lab)
        page.evaluate(LIGHT)
        page.wait_for_function(LIGHT_APPLIED, timeout=30_000)
        show_sidebar(page)
        page.click('.nvdashboard-button[data-route="/GPU-Processes"]')
        frame = dashboard_frame(page, "/GPU-Processes")
        # While it runs: its row, with the notebook's GiB·h counting up.
        until(lambda: any('data-notebook="c.ipynb"' in row["what"] and row["gib_h"]
                          for row in frame.evaluate(TABLE_ROWS_JS)),
              "c.ipynb's row with its GiB·h", seconds=90)
        call(lab, "DELETE", f"api/kernels/{kernel_id}")
        until_ended(pid)
        try:
            row = until(lambda: ended_row(frame, "c.ipynb"), "c.ipynb's usage, marked ended",
                        seconds=90)
        except AssertionError as error:
            raise AssertionError(f"{error}: {frame.evaluate(TABLE_ROWS_JS)}") from None
        assert row["gib_h"].endswith("GiB·h") and row["working"], row
        assert "· GPU use ended" in row["what"], row
        next_frames(frame)  # the table drawn from its data
        screenshot(page, "lab-gpu-processes-ended-notebook-light")
        page.evaluate(DARK)
        page.wait_for_function("() => [...document.querySelectorAll('iframe')].some(f => "
                               "f.src.includes('GPU-Processes?theme=dark'))", timeout=30_000)
        frame = dashboard_frame(page, "/GPU-Processes", query="theme=dark")
        row = until(lambda: ended_row(frame, "c.ipynb"), "c.ipynb's usage, marked ended, "
                    "in the dark theme", seconds=60)
        assert row["gib_h"].endswith("GiB·h"), row
        until(lambda: drawn(page), "the dark table drawn", seconds=60)
        screenshot(page, "lab-gpu-processes-ended-notebook-dark")
        page.evaluate(LIGHT)
        watched.assert_clean()
