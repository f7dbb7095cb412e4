"""The sidebar read at a glance, in Chromium at 1280x800 under a real ``jupyter lab`` (token,
base_url /user/alice/, 4 simulated GPUs, two notebook kernels the simulated driver lists on
GPUs 0 and 1):

- every dashboard button is on screen with the kernels, the meters and the "why slow" lines,
  without scrolling the sidebar;
- the status bar, the sidebar and the dashboards say a GPU's memory alike, to the unit
  (GiB, as nvidia-smi counts it);
- after a keyboard Shut down, the keyboard is on the next kernel's row, not lost to <body>.

It runs the extension built from this checkout (``jlpm build`` writes
``jupyterlab_nvdashboard/labextension``), put first on Jupyter's path for this lab only,
and the installed one where there is no build. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.bar_rows import BAR_ROWS_JS
from tests.support.browser import chromium, screenshot, watch
from tests.support.jupyter import lab_with_processes
from tests.support.waiting import until, until_ended
from tests.test_browser_lab import dashboard_frame, open_lab, show_sidebar
from tests.test_browser_lab_keyboard import STATUS_ITEM, tab_until
from tests.test_lab_processes import NOTEBOOK, call, kernel_pid

pytestmark = [pytest.mark.browser, pytest.mark.lab]
GIB = 2**30
SIDEBAR = "#nvdashboard-sidebar"
MEMORY = re.compile(r"\d+(?:\.\d)? (?:GiB|MiB) of \d+(?:\.\d)? (?:GiB|MiB)")


@pytest.fixture(scope="module")
def lab(processes_file) -> Iterator[object]:  # noqa: ANN001
    with lab_with_processes(processes_file, simulate=4) as running:
        yield running


def start_kernels(lab, processes_file: Path) -> dict[str, str]:  # noqa: ANN001
    """Two notebooks, each with a kernel holding GPU memory (a.ipynb on GPU 0, b.ipynb on
    GPU 1): kernel id by notebook."""
    kernels = {}
    placed = []
    for gpu, name in enumerate(("a.ipynb", "b.ipynb")):
        call(lab, "PUT", f"api/contents/{name}", {"type": "notebook", "content": NOTEBOOK})
        session = call(lab, "POST", "api/sessions", {"path": name, "name": name,
                                                     "type": "notebook",
                                                     "kernel": {"name": "python3"}})
        kernel_id = session["kernel"]["id"]  # type: ignore[index]
        kernels[name] = kernel_id
        placed.append({"gpu": gpu, "pid": kernel_pid(lab, kernel_id),
                       "used_memory_bytes": (4 + 2 * gpu) * GIB, "until_exit": True})
    processes_file.write_text(json.dumps(placed))
    return kernels


def gpu0_memory_in_sidebar(page) -> str:  # noqa: ANN001
    return page.get_attribute(f'{SIDEBAR} .nvdashboard-glance-device[data-index="0"] '
                              ".nvdashboard-bar-memory", "aria-valuetext") or ""


def memory_texts_on_dashboard(frame) -> list[str]:  # noqa: ANN001
    """The per-GPU memory texts /GPU-Memory shows (its bars' values)."""
    return [row["text"] for row in frame.evaluate(BAR_ROWS_JS)["rows"]]


def test_the_sidebar_reads_at_a_glance(lab, processes_file) -> None:  # noqa: ANN001
    kernels = start_kernels(lab, processes_file)
    index = lab.dashboard_index()
    rows = {name: f'.nvdashboard-kernel[data-kernel-id="{kernel_id}"]'
            for name, kernel_id in kernels.items()}
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        open_lab(page, lab)
        show_sidebar(page)
        for row in rows.values():
            page.wait_for_selector(row, timeout=60_000)
        page.wait_for_function(
            f"() => document.querySelectorAll('.nvdashboard-button').length === {len(index)}",
            timeout=60_000)
        page.wait_for_function(f"() => document.querySelectorAll('{SIDEBAR} "
                               ".nvdashboard-glance-device').length === 4", timeout=30_000)
        # The GPUs of both kernels get their line on why they are slow, once the server has
        # a window of samples to judge.
        page.wait_for_function(f"() => document.querySelectorAll('{SIDEBAR} "
                               ".nvdashboard-diagnoses summary').length === 2",
                               timeout=60_000)
        page.wait_for_timeout(500)
        screenshot(page, "lab-glance-4-gpus-2-kernels")

        # Every dashboard button on screen, with nothing scrolled.
        layout = page.evaluate(f"""() => {{
          const sidebar = document.querySelector('{SIDEBAR}');
          const box = sidebar.getBoundingClientRect();
          const buttons = [...sidebar.querySelectorAll('.nvdashboard-button')];
          return {{scrollTop: sidebar.scrollTop, bottom: Math.min(box.bottom, innerHeight),
                   buttons: buttons.map(b => [b.dataset.route, b.getBoundingClientRect().bottom,
                                              b.getBoundingClientRect().height])}};
        }}""")
        assert layout["scrollTop"] == 0, layout
        below = [(route, bottom) for route, bottom, height in layout["buttons"]
                 if height <= 0 or bottom > layout["bottom"]]
        assert not below, f"below the fold at 1280x800 (sidebar ends at {layout['bottom']})" \
                          f": {below}"
        # One short line per GPU; the whole finding is its tooltip and opens on a click.
        briefs = page.eval_on_selector_all(
            f"{SIDEBAR} .nvdashboard-diagnoses summary",
            "els => els.map(e => [e.textContent, e.title, e.getBoundingClientRect().height])")
        for text, title, height in briefs:
            assert text.startswith("SIMULATED GPU ") and len(text) <= 60, text
            assert len(title) > len(text), (text, title)
            assert height < 24, (text, height)  # one line
        page.click(f"{SIDEBAR} .nvdashboard-diagnoses summary")
        screenshot(page, "lab-glance-why-opened")
        page.click(f"{SIDEBAR} .nvdashboard-diagnoses summary")

        # Memory: the status bar, the sidebar and the dashboards say it alike, in GiB.
        sidebar_text = gpu0_memory_in_sidebar(page)
        assert MEMORY.fullmatch(sidebar_text), sidebar_text
        # No figure in decimal GB anywhere in the sidebar ("A100-SXM4-80GB" is a name).
        assert not re.search(r"\d GB\b", page.inner_text(SIDEBAR)), page.inner_text(SIDEBAR)
        # The status bar's GPU (the user's), and its memory in the sidebar, read together:
        # both draw one poll of glance.json, and the simulated memory moves every poll, so
        # two reads seconds apart on a loaded machine saw two polls. Waited for until one
        # read finds them drawn from the same poll (each draws a poll as it comes).
        status, in_sidebar = page.wait_for_function(f"""() => {{
          const status = document.querySelector('{STATUS_ITEM}')?.innerText || '';
          const busiest = status.split(' · ')[0];  // "SIMULATED GPU 2 99%"
          const name = busiest.slice(0, busiest.lastIndexOf(' '));
          const index = name.slice(name.lastIndexOf(' ') + 1);
          const memory = document.querySelector(
            `{SIDEBAR} .nvdashboard-glance-device[data-index="${{index}}"] ` +
            '.nvdashboard-bar-memory')?.getAttribute('aria-valuetext');
          return memory && status.includes(memory) ? [status, memory] : null;
        }}""", timeout=60_000).json_value()
        assert MEMORY.search(status) and MEMORY.fullmatch(in_sidebar), (status, in_sidebar)
        page.click('.nvdashboard-button[data-route="/GPU-Memory"]')
        frame = dashboard_frame(page, "/GPU-Memory")
        frame.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0",
                                timeout=30_000)
        # The sidebar polls every 2 s and the dashboard draws at most once a second, each
        # the newest sample then, and the simulated memory moves with every sample: two
        # moving figures agree only by chance. So a process now holds all of GPU 0's memory
        # (the simulated driver's "used" is never below what its processes hold), and both
        # must come to say one figure for it.
        total_gib = re.search(r" of (\d+(?:\.\d)?) GiB$", sidebar_text)
        assert total_gib, sidebar_text
        holder = {"gpu": 0, "pid": os.getpid(), "until_exit": True,
                  "used_memory_bytes": int(float(total_gib.group(1)) * GIB)}
        processes_file.write_text(json.dumps([*json.loads(processes_file.read_text()),
                                              holder]))
        seen: list[str] = []

        def both_say_one_figure() -> bool:
            seen.append(gpu0_memory_in_sidebar(page))
            return seen[-1] in memory_texts_on_dashboard(frame)

        try:
            until(both_say_one_figure, "one figure for GPU 0's memory", every_s=0.5)
        except AssertionError as error:
            raise AssertionError(f"{error}: the sidebar said {seen[-3:]}, /GPU-Memory "
                                 f"{memory_texts_on_dashboard(frame)}") from None
        screenshot(page, "lab-glance-gpu-memory")

        # The keyboard on a.ipynb's Shut down; after the dialog, it is on b.ipynb's row.
        page.keyboard.press("Escape")
        tab_until(page, f"() => document.activeElement?.matches('{STATUS_ITEM}')")
        page.keyboard.press("Enter")
        name = "Shut down the kernel of a.ipynb"
        tab_until(page, f"() => document.activeElement?.getAttribute('aria-label') === '{name}'")
        pid = kernel_pid(lab, kernels["a.ipynb"])
        page.keyboard.press("Enter")
        page.wait_for_selector(".jp-Dialog", timeout=10_000)
        page.keyboard.press("Enter")  # the dialog's default button: Shut Down
        until_ended(pid)
        page.wait_for_selector(rows["a.ipynb"], state="detached", timeout=30_000)
        page.wait_for_function(
            "() => document.activeElement?.getAttribute('aria-label') === "
            "'Shut down the kernel of b.ipynb'", timeout=15_000)
        screenshot(page, "lab-glance-focus-after-shutdown")
        watched.assert_clean()
