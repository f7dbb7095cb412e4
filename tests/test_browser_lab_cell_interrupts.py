"""The footer stays under its own cell and run through an interrupt and a kernel restart
mid-run (issue 53, item 5): a real ``jupyter lab`` (token, base_url /user/alice/), a real
kernel and Chromium at 1280x800, on 2 simulated GPUs (``tests/support/lab_cells.py``), with a
footer under every cell run (``cellFooter: all``).

- **Run All, interrupted**: (w) works on GPU 1 (90% SM, 6 GiB) until the user interrupts
  it; Run All had queued (q), (x) and (y) behind it, which the kernel aborts. (w) gets one
  ``/cell.json`` request, for its own span up to the interrupt, and its footer; (q), (x)
  and (y) never ran: no request, no footer.
- **A kernel restart mid-run**: (x) works on GPU 1 (2 GiB) and is still running when the
  user restarts the kernel. While it runs its footer is live, and after the restart it is
  never live again (it would say "running" for good). jupyter_client interrupts a kernel
  before it shuts it down, so (x) may reply: where the reply reached the page, (x) has the
  footer of its own run up to the restart, from one request for that span; where it did
  not, no footer and nothing asked. (w)'s footer, of a run that ended, stays.
- **After the restart**: (y) runs in the new kernel process (1 GiB) and gets one request for
  its own span, and a footer of its own figures: the old process, gone with its 2 GiB, is
  no part of it.

A screenshot in test-artifacts/ (``lab-cell-interrupts-light``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.instants import parse_instant
from tests.support.browser import PAGE_WAIT_MS, chromium, next_frames, screenshot, watch
from tests.support.lab_cells import (
    CELL_DONE_JS,
    CELL_RUNNING_JS,
    LIGHT_APPLIED,
    NOTHING_ASKED_MS,
    RUN_CELL_JS,
    TIMING_JS,
    CellRequests,
    cells_lab,
    kernel_id,
    open_notebook,
    timing,
    told_log,
    until_footers,
    views,
)
from tests.support.waiting import until
from tests.test_browser_lab import open_lab

pytestmark = [pytest.mark.browser, pytest.mark.lab]
NOTEBOOK_PATH = "interrupts.ipynb"

CELLS = {
    "w": "from simulated_gpu import release, until_told, use_gpu\n"
         "use_gpu(sm_pct=90)  # the simulated driver: this kernel works on GPU 1, 6 GiB\n"
         "until_told()  # until the user interrupts it",
    "q": "import time\n"
         "time.sleep(2)  # Run All's next cell",
    "x": "use_gpu(sm_pct=90, gib=2)\n"
         "until_told()  # until the kernel is restarted under it",
    "y": "import time\n"
         "from simulated_gpu import release, use_gpu\n"
         "use_gpu(sm_pct=90, gib=1)\n"
         "time.sleep(4)\n"
         "release()",
}
NAMES = list(CELLS)
# In apps/cells.py::verdict's words (the share and the span's length vary with a loaded
# machine's timing, and the scenario's finding may be named in brackets). A change is said
# where a process pass fell just before the cell; a loaded machine's can slip.
W_VERDICT = re.compile(r"GPU 1: busy \d+% of [^,]+, peak 6\.0 GiB(?: \(\+6\.0\))?")
# (x) begins holding (w)'s 6 GiB and lets 4 go.
X_VERDICT = re.compile(r"GPU 1: busy \d+% of [^,]+, peak 6\.0 GiB(?: \([+-]\d\.\d\))?")
# (y) ends by freeing its 1 GiB: where a pass saw that before the reply, no change.
Y_VERDICT = re.compile(r"GPU 1: busy \d+% of [^,]+, peak 1\.0 GiB(?: \(\+[01]\.0\))?")

KERNEL_READY_JS = """() => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  return kernel.status === 'idle' && kernel.connectionStatus === 'connected';
}"""


@pytest.fixture(scope="module")
def lab(processes_file: Path) -> Iterator[object]:
    with cells_lab(processes_file, NOTEBOOK_PATH, CELLS, {"cellFooter": "all"}) as running:
        yield running


def footer_under(page, name: str) -> dict | None:  # noqa: ANN001
    return views(page)[0]["cells"][NAMES.index(name)]


def working_live(page, processes_file: Path, name: str, waits: int) -> None:  # noqa: ANN001
    """Until cell ``name`` works and waits (the ``waits``-th wait of the notebook) and its
    live footer says it works."""
    until(lambda: told_log(processes_file) == ["waiting"] * waits, f"({name}) works and waits",
          seconds=PAGE_WAIT_MS / 1000)
    until(lambda: (f := footer_under(page, name)) and f["running"]
          and "so far: GPU 1: busy" in f["verdict"],
          f"({name})'s live footer says it works", seconds=PAGE_WAIT_MS / 1000, every_s=0.2)


def check_footer(footer: dict, answer: dict, verdict: re.Pattern[str], count: int) -> None:
    """The footer shows the server's verdict for this cell's run, in its words."""
    assert not footer["running"], footer
    assert footer["verdict"] == answer["verdict"], (footer, answer)
    assert verdict.fullmatch(answer["verdict"]), answer["verdict"]
    assert f"Cell [{count}] ran" in footer["details"], (count, footer["details"])


def test_footers_through_an_interrupt_and_a_kernel_restart(lab, processes_file: Path) -> None:  # noqa: ANN001
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        requests = CellRequests(page)
        open_lab(page, lab)
        page.wait_for_function(LIGHT_APPLIED, timeout=30_000)
        open_notebook(page, NOTEBOOK_PATH)
        kernel = kernel_id(page)

        # Run All; (w) works until the user interrupts it, and the kernel aborts the rest.
        page.evaluate("() => { void window.jupyterapp.commands.execute("
                      "'notebook:run-all-cells'); }")
        working_live(page, processes_file, "w", waits=1)
        page.evaluate("() => { void window.jupyterapp.commands.execute("
                      "'notebook:interrupt-kernel'); }")
        page.wait_for_function(CELL_DONE_JS, arg=NAMES.index("w"), timeout=PAGE_WAIT_MS)
        requests.until_answered(1)
        requests.none_more(1)
        assert requests.span_of(requests.urls[0]) == (kernel, *timing(page, NAMES.index("w")))
        w_answer = requests.answers[requests.urls[0]]
        footers = until_footers(page, NAMES, ["w"])
        check_footer(footers["w"], w_answer, W_VERDICT, 1)
        assert "KeyboardInterrupt" in page.inner_text(".jp-Notebook .jp-Cell:nth-child(1)")

        # (x) is running when the kernel is restarted: its live footer goes, nothing is asked.
        page.evaluate(RUN_CELL_JS, NAMES.index("x"))
        page.wait_for_function(CELL_RUNNING_JS, arg=NAMES.index("x"), timeout=PAGE_WAIT_MS)
        working_live(page, processes_file, "x", waits=2)
        # As the user does: the notebook's restart, and its dialog accepted.
        page.evaluate("() => { void window.jupyterapp.commands.execute("
                      "'notebook:restart-kernel'); }")
        page.click(".jp-Dialog .jp-mod-accept", timeout=PAGE_WAIT_MS)
        page.wait_for_function(KERNEL_READY_JS, timeout=PAGE_WAIT_MS)
        assert kernel_id(page) == kernel  # Jupyter restarts a kernel under its id
        # jupyter_client interrupts a kernel before it shuts it down, so (x) may reply: where
        # the reply reached the page, (x) ran until the restart and has that run's footer.
        page.wait_for_timeout(NOTHING_ASKED_MS)
        replied = len(requests.asked) == 2
        if replied:
            # Its own span: from its start as JupyterLab recorded it (which may drop the
            # reply of a kernel it is restarting) to the reply.
            requests.until_answered(2)
            asked_kernel, start, end = requests.span_of(requests.urls[1])
            recorded = page.evaluate(TIMING_JS, NAMES.index("x"))
            assert asked_kernel == kernel and end > start, requests.urls[1]
            assert start == parse_instant(recorded["iopub.execute_input"]), recorded
        requests.none_more(1 + replied)
        ended = ["w", "x"] if replied else ["w"]
        footers = until_footers(page, NAMES, ended)
        if replied:
            check_footer(footers["x"], requests.answers[requests.urls[1]], X_VERDICT, 2)
        assert footers["w"]["verdict"] == w_answer["verdict"]

        # (y) in the new kernel process: its own span, and none of the old process's memory.
        asked_before = len(requests.asked)
        page.evaluate(RUN_CELL_JS, NAMES.index("y"))
        page.wait_for_function(CELL_DONE_JS, arg=NAMES.index("y"), timeout=PAGE_WAIT_MS)
        requests.until_answered(asked_before + 1)
        requests.none_more(asked_before + 1)
        y_url = requests.urls[-1]
        assert requests.span_of(y_url) == (kernel, *timing(page, NAMES.index("y")))
        footers = until_footers(page, NAMES, [*ended, "y"])
        check_footer(footers["y"], requests.answers[y_url], Y_VERDICT, 1)  # a new process's
        [gpu] = requests.answers[y_url]["gpus"]
        assert gpu["memory"]["start_bytes"] in (0, None), gpu["memory"]  # it began with none
        assert footers["w"]["verdict"] == w_answer["verdict"]
        print({name: footer["verdict"] for name, footer in footers.items()})
        page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[0]"
                      ".node.scrollIntoView({block: 'start'})")
        next_frames(page)
        screenshot(page, "lab-cell-interrupts-light")
        watched.assert_clean()
