"""Who is using the GPU, in a real browser: a real ``jupyter lab`` (token, base_url
/user/alice/, simulated GPUs) runs a notebook kernel whose PID the simulated driver lists on
GPU 0. The status-bar item and the sidebar's bars follow the simulated load; "Your GPU
kernels" lists the kernel, and shutting it down (after the confirmation dialog) ends the
kernel and removes the row. /GPU-Processes names the notebook; screenshots of it and of the
sidebar, light and dark, go to test-artifacts/.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.support.browser import chromium, screenshot, watch
from tests.support.jupyter import jupyter_lab
from tests.support.waiting import until_ended
from tests.test_browser_lab import dashboard_frame, open_lab, show_sidebar
from tests.test_lab_processes import (
    NOTEBOOK,
    call,
    kernel_pid,
)

pytestmark = [pytest.mark.browser, pytest.mark.lab]
GB = 10**9
# The table's source (filled by the page's live script) names the notebook.
TABLE_NAMES_TRAIN = """() => window.Bokeh && Bokeh.documents.length > 0 &&
  [...Bokeh.documents[0].all_models].some(m => m.data && m.data.what &&
    [...m.data.what].some(w => w.includes('train.ipynb')))"""


@pytest.fixture(scope="module")
def lab(processes_file):
    with jupyter_lab(simulate=2, extra_env={"NVDASHBOARD_SIMULATE_PROCESSES": str(processes_file)},
                     extra_args=["--LabApp.expose_app_in_browser=True"]) as running:
        yield running


def watch_for_change(page, script: str, seconds: float = 60) -> tuple[str, str]:  # noqa: ANN001
    first = page.evaluate(script)
    deadline = time.monotonic() + seconds  # a deadline, not a count of polls: load slows them
    while time.monotonic() < deadline:
        page.wait_for_timeout(500)
        now = page.evaluate(script)
        if now != first:
            return first, now
    raise AssertionError(f"{script} stayed {first!r}")


def test_status_bar_sidebar_kernels_and_process_table(lab, processes_file) -> None:  # noqa: ANN001
    call(lab, "PUT", "api/contents/train.ipynb", {"type": "notebook", "content": NOTEBOOK})
    session = call(lab, "POST", "api/sessions", {"path": "train.ipynb", "name": "train.ipynb",
                                                 "type": "notebook",
                                                 "kernel": {"name": "python3"}})
    kernel_id = session["kernel"]["id"]  # type: ignore[index]
    pid = kernel_pid(lab, kernel_id)
    processes_file.write_text(json.dumps([
        {"gpu": 0, "pid": pid, "used_memory_bytes": 4 * GB, "sm_pct": 35, "memory_pct": 9,
         "until_exit": True},
        {"gpu": 1, "pid": 1, "used_memory_bytes": 7 * GB, "until_exit": True},
    ]))
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        unsafe: list[tuple[str, str, bool]] = []  # (method, url, from the dashboard iframe)
        page.on("request", lambda r: (r.method != "GET" or "/api/kernels" in r.url)
                and unsafe.append((r.method, r.url, r.frame != page.main_frame)))
        open_lab(page, lab)
        show_sidebar(page)
        row = f'.nvdashboard-kernel[data-kernel-id="{kernel_id}"]'
        page.wait_for_selector(row, timeout=60_000)
        assert "train.ipynb" in page.inner_text(row) and "3.7 GiB on GPU 0" in page.inner_text(row)

        # The status bar and the bars follow the simulated load (a wave, 17 s period).
        item = ".nvdashboard-statusbar-item"
        page.wait_for_function(f"() => document.querySelector('{item}')"
                               f".textContent.includes('%')", timeout=30_000)
        before, after = watch_for_change(page, f"() => document.querySelector('{item}')"
                                         ".textContent")
        assert before.startswith("GPU ") and after.startswith("GPU ")
        watch_for_change(page, "() => [...document.querySelectorAll("
                         "'.nvdashboard-bar-util')].map(b => b.dataset.value).join()")
        screenshot(page, "lab-sidebar-gpu-kernels-light")

        # The table, through the proxy, in JupyterLab.
        page.click('.nvdashboard-button[data-route="/GPU-Processes"]')
        frame = dashboard_frame(page, "/GPU-Processes")
        frame.wait_for_function(TABLE_NAMES_TRAIN,
                                timeout=60_000)
        page.wait_for_timeout(1000)
        screenshot(page, "lab-gpu-processes-light")
        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', "
                      "{theme: 'JupyterLab Dark'})")
        page.wait_for_function("() => [...document.querySelectorAll('iframe')].some(f => "
                               "f.src.includes('GPU-Processes?theme=dark'))", timeout=30_000)
        frame = dashboard_frame(page, "/GPU-Processes", query="theme=dark")
        frame.wait_for_function(TABLE_NAMES_TRAIN,
                                timeout=60_000)
        page.wait_for_timeout(1000)
        screenshot(page, "lab-gpu-processes-dark")
        screenshot(page, "lab-sidebar-gpu-kernels-dark")
        # The row's notebook link opens the notebook in a JupyterLab tab (by postMessage to
        # the extension), not inside the dashboard's frame.
        frame.locator('a[data-notebook="train.ipynb"]').click()
        page.wait_for_selector('.lm-TabBar-tab[data-id] >> text="train.ipynb"', timeout=30_000)
        assert dashboard_frame(page, "/GPU-Processes").url.split("?")[0].endswith(
            "nvdashboard/GPU-Processes")
        # Close the notebook tab (its session and kernel stay): JupyterLab's own notebook
        # would otherwise log "Kernel is dead" when the kernel is shut down below.
        page.click('.lm-TabBar-tab:has-text("train.ipynb") .lm-TabBar-tabCloseIcon')
        page.click('.jp-Dialog button:has-text("Discard")')  # the empty cell it added
        page.wait_for_selector('.lm-TabBar-tab[data-id] >> text="train.ipynb"',
                               state="detached", timeout=30_000)
        # Nothing so far could have stopped a kernel: the dashboard pages sent nothing but
        # GETs and never touched the kernel API, and nothing changed a kernel or session.
        assert not [u for u in unsafe if u[2]], unsafe
        assert not [u for u in unsafe if u[0] != "GET" and
                    ("/api/kernels" in u[1] or "/api/sessions" in u[1])], unsafe

        # Shut down through the sidebar, after the confirmation dialog.
        page.click(f"{row} .nvdashboard-kernel-shutdown")
        page.wait_for_selector(".jp-Dialog", timeout=10_000)
        assert "train.ipynb" in page.inner_text(".jp-Dialog")
        page.click(".jp-Dialog .jp-mod-accept")
        until_ended(pid)
        page.wait_for_selector(row, state="detached", timeout=30_000)
        deletes = [u for u in unsafe if u[0] == "DELETE"]
        assert deletes and all(f"api/kernels/{kernel_id}" in u[1] and not u[2]
                               for u in deletes), deletes
        watched.assert_clean()
