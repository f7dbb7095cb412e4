"""``examples/embedding-paths.ipynb`` in a real ``jupyter lab`` (issue 55, item 4), as a user
opens and runs it: Chromium at 1280x800, one simulated GPU, Run All. Each training cell's
footer is live while it trains, then finished, and the two footers say which path kept the
GPU working: the optimized path's mean SM above the native baseline's. The finished page is
the README's picture (with ``NVDASHBOARD_README_SCREENSHOTS=1``, docs/images/).

tests/test_example_notebook.py runs the same notebook with nbclient and asks ``/cell.json``
itself; this one checks what the user sees.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.support.browser import chromium, next_frames, screenshot, watch
from tests.support.idle_lab import place, write_settings
from tests.support.jupyter import lab_with_processes
from tests.support.lab_cells import FOOTER, LIGHT_APPLIED, cell_node, open_notebook
from tests.test_browser_lab import open_lab
from tests.test_browser_readme_screenshots import small_copy
from tests.test_lab_processes import call

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "embedding-paths.ipynb"
RUNNING = ".nvdashboard-mod-running"
# The notebook's cells: an introduction, the setup, the baseline, the optimized path.
BASELINE, OPTIMIZED = 2, 3
# Both training cells, with TensorFlow's start, on a loaded 2-core machine.
RUN_ALL_S = 240
SM = re.compile(r"^GPU 0: busy \d+% of .+ at (\d+)% SM")

pytestmark = [
    pytest.mark.browser, pytest.mark.lab, pytest.mark.timeout(480),
    pytest.mark.skipif(find_spec("tensorflow") is None,
                       reason="the notebook trains TensorFlow paths: pip install '.[tensorflow]'"),
]


@pytest.fixture(scope="module")
def lab(processes_file: Path) -> Iterator[object]:
    with lab_with_processes(processes_file, simulate=1,
                            extra_args=["--LabApp.expose_app_in_browser=True"]) as running:
        place(processes_file, [])
        write_settings(running, {"idleNotice": False, "liveCellNotice": False})
        call(running, "PUT", f"api/contents/{NOTEBOOK.name}",
             {"type": "notebook", "format": "json",
              "content": json.loads(NOTEBOOK.read_text())})
        yield running


def footer(page, index: int, running: bool) -> str:  # noqa: ANN001
    """Cell ``index``'s footer text once it is live (``running``) or finished."""
    selector = f"{cell_node(index)} {FOOTER}" + (RUNNING if running else f":not({RUNNING})")
    page.wait_for_selector(selector, timeout=RUN_ALL_S * 1000)
    return page.inner_text(f"{selector} .nvdashboard-cell-verdict")


def test_the_example_notebook_tells_the_paths_apart(lab) -> None:  # noqa: ANN001
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        open_lab(page, lab)
        page.wait_for_function(LIGHT_APPLIED, timeout=30_000)
        open_notebook(page, NOTEBOOK.name)
        page.evaluate("() => { void window.jupyterapp.commands.execute("
                      "'notebook:run-all-cells'); }")
        live = footer(page, BASELINE, running=True)
        assert live.startswith("running ") and "so far: " in live, live
        baseline = footer(page, BASELINE, running=False)
        live_optimized = footer(page, OPTIMIZED, running=True)
        assert live_optimized.startswith("running "), live_optimized
        optimized = footer(page, OPTIMIZED, running=False)
        sm = [SM.match(text) for text in (baseline, optimized)]
        assert all(sm), (baseline, optimized)
        baseline_sm, optimized_sm = (int(match.group(1)) for match in sm)  # type: ignore[union-attr]
        assert optimized_sm > baseline_sm, (baseline, optimized)
        page.locator(f"{cell_node(OPTIMIZED)} {FOOTER}").scroll_into_view_if_needed()
        next_frames(page)
        screenshot(page, "lab-example-notebook")
        small_copy(page, "example-notebook-footers")
        print(f"baseline: {baseline}\noptimized: {optimized}")
        watched.assert_clean()
