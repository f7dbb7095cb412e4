"""The README's "What you get" pictures, taken by Chromium at 1280x800 in both themes and
kept small (issue 44, section 5): the overview of four simulated GPUs, and JupyterLab with
the GPU Dashboards panel open beside a notebook whose kernel holds a GPU (by the README's own
one line, ``hold_gpu``).

Each picture goes to test-artifacts/ full size and as the README's small copy. With
``NVDASHBOARD_README_SCREENSHOTS=1`` the small copies also replace the committed ones in
docs/images/, to refresh them: a test never writes into the checkout otherwise. The
committed pictures themselves are checked by tests/test_docs_links.py.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.apps.processes import current_user
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from tests.support.browser import ARTIFACTS, chromium, next_frames, screenshot, watch
from tests.support.idle_lab import connection_file
from tests.support.jupyter import cell_reply, jupyter_lab
from tests.support.servers import in_process_server, with_token
from tests.test_browser_lab import open_lab, show_sidebar
from tests.test_browser_overview import BACKGROUND, ROWS_JS
from tests.test_docs_links import PICTURE_WIDTH_PX
from tests.test_lab_processes import NOTEBOOK, call, kernel_pid
from tests.test_simulated_holders import readme_line

pytestmark = [pytest.mark.browser, pytest.mark.lab]
IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
REFRESH = os.environ.get("NVDASHBOARD_README_SCREENSHOTS") == "1"
SIDEBAR = "#nvdashboard-sidebar"


def small_copy(page, name: str) -> None:  # noqa: ANN001 - playwright Page
    """The page at full size in the artifacts, and halved for the README."""
    from PIL import Image

    full = screenshot(page, f"readme-{name}")
    with Image.open(full) as image:
        height = round(image.height * PICTURE_WIDTH_PX / image.width)
        small = image.convert("RGB").resize((PICTURE_WIDTH_PX, height), Image.LANCZOS)
    out = io.BytesIO()
    small.save(out, "PNG", optimize=True)
    (ARTIFACTS / f"readme-{name}-small.png").write_bytes(out.getvalue())
    if REFRESH:
        (IMAGES / f"{name}.png").write_bytes(out.getvalue())


def test_the_overview_pictures() -> None:
    user = current_user()
    with in_process_server(gpus=4, profile="mixed") as server, chromium() as browser:
        # This test's process holds two GPUs, so the overview says whose they are.
        server.simulator.set_processes([SimulatedProcess(1, os.getpid(), 30 * 2**30),
                                        SimulatedProcess(2, os.getpid(), 6 * 2**30)])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        page.goto(with_token(server.url + "/"))
        for theme in ("light", "dark"):
            page.goto(f"{server.url}/?theme={theme}")
            page.wait_for_function("() => getComputedStyle(document.body).backgroundColor"
                                   f" === '{BACKGROUND[theme]}'", timeout=20_000)
            # The streamed table, with the holders' owner read (their user, not "?").
            page.wait_for_function(f"() => ({ROWS_JS})().rows.filter((r) => "
                                   f"r.text.includes({user!r})).length === 2", timeout=60_000)
            small_copy(page, f"overview-{theme}")
        watched.assert_clean()


def test_the_jupyterlab_pictures(tmp_path: Path) -> None:
    processes_file = tmp_path / "processes.json"
    with jupyter_lab(simulate=4, extra_env={"NVDASHBOARD_SIMULATE_PROCESSES": str(processes_file)},
                     extra_args=["--LabApp.expose_app_in_browser=True"]) as lab, \
            chromium() as browser:
        call(lab, "PUT", "api/contents/train.ipynb", {"type": "notebook", "content": NOTEBOOK})
        session = call(lab, "POST", "api/sessions", {"path": "train.ipynb", "name":
                                                     "train.ipynb", "type": "notebook",
                                                     "kernel": {"name": "python3"}})
        kernel_id = session["kernel"]["id"]  # type: ignore[index]
        connection = connection_file(kernel_pid(lab, kernel_id), kernel_id)
        # The README's line, in the notebook's kernel: the simulated driver lists it.
        assert cell_reply(connection, readme_line())["status"] == "ok"
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        open_lab(page, lab)
        show_sidebar(page)
        page.wait_for_selector(f'.nvdashboard-kernel[data-kernel-id="{kernel_id}"]',
                               timeout=60_000)
        page.wait_for_function(f"() => document.querySelectorAll('{SIDEBAR} "
                               ".nvdashboard-glance-device').length === 4", timeout=30_000)
        small_copy(page, "lab-light")
        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', "
                      "{theme: 'JupyterLab Dark'})")
        # Drawn dark: the theme's stylesheet has reached the sidebar, and JupyterLab has taken
        # away the splash it shows while it changes themes.
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=30_000)
        page.wait_for_function(f"() => getComputedStyle(document.querySelector("
                               f"'{SIDEBAR}')).backgroundColor !== 'rgb(255, 255, 255)'",
                               timeout=30_000)
        next_frames(page)
        small_copy(page, "lab-dark")
