"""Notebook cells run from the page in a real ``jupyter lab`` on 2 simulated GPUs, for the
cell-footer tests (issues 45 and 53).

``cells_lab`` starts the Lab (token, base_url, this checkout's build, the "starved"
scenario, so that a GPU's finding has a cause to name) with the user's settings, JupyterLab's
``recordTiming`` on (each cell's span on the kernel's clock is in the notebook), a notebook
of named cells and ``simulated_gpu.py`` beside it: what the cells call to tell the simulated
driver about their own kernel (``os.getpid()``, as ``idle_lab.place`` does) and to wait for
the test, kept out of the cells so that the pictures show short cells.

``CellRequests`` records every ``/cell.json`` request a page sends and its answer; the
JavaScript snippets run cells as Shift+Enter does and read what the notebook recorded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from jupyterlab_nvdashboard.instants import parse_instant
from tests.support.browser import PAGE_WAIT_MS
from tests.support.idle_lab import GIB, place, write_settings
from tests.support.jupyter import JupyterLab, lab_with_processes
from tests.support.waiting import until
from tests.test_lab_processes import call

FOOTER = ".nvdashboard-cell-footer"
DARK = "window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})"
DARK_APPLIED = "() => document.body.dataset.jpThemeLight === 'false'"
LIGHT_APPLIED = "() => document.body.dataset.jpThemeLight === 'true'"
# The frontend's wait between a cell's reply and its request (src/cells/notebookFooters.ts).
CELL_REPORT_DELAY_MS = 1500
# A wait for a request not to be sent has to last: well past the footer's wait after a reply.
NOTHING_ASKED_MS = 3 * CELL_REPORT_DELAY_MS


def go_file(processes_file: Path) -> Path:
    """What ``until_told`` waits for (each wait takes it away)."""
    return processes_file.parent / "go"


def told_log(processes_file: Path) -> list[str]:
    """What ``until_told`` wrote: ``waiting`` when a cell began to wait, ``told`` when it
    was told."""
    log = processes_file.parent / "told.log"
    return log.read_text().split() if log.exists() else []


def helper_module(processes_file: Path) -> str:
    """``simulated_gpu.py``, the cells' side of the simulated driver (see the module
    comment). Each write replaces the process file whole, as the driver may read it at any
    time."""
    return f'''"""The simulated driver's process list, for this test's notebook."""
import json, os, time

PROCESSES = {str(processes_file)!r}
GO = {str(go_file(processes_file))!r}
LOG = {str(processes_file.parent / "told.log")!r}


def _list(processes):
    with open(PROCESSES + ".new", "w") as f:
        json.dump(processes, f)
    os.replace(PROCESSES + ".new", PROCESSES)


def use_gpu(sm_pct, gpu=1, gib=6):
    """This kernel holds ``gib`` GiB on GPU ``gpu`` and works it ``sm_pct``%."""
    _list([{{"gpu": gpu, "pid": os.getpid(), "until_exit": True,
             "used_memory_bytes": gib * {GIB}, "sm_pct": sm_pct}}])


def release():
    """This kernel holds no GPU memory any more."""
    _list([])


def _log(word):
    with open(LOG, "a") as f:
        f.write(word + "\\n")


def until_told():
    """Until the test says go (each go is taken by one wait)."""
    _log("waiting")
    while not os.path.exists(GO):
        time.sleep(0.05)
    os.remove(GO)
    _log("told")
'''


@contextmanager
def cells_lab(processes_file: Path, notebook: str, cells: dict[str, str],
              settings: dict[str, object]) -> Iterator[JupyterLab]:
    """A Lab with ``notebook``, whose cells are ``cells`` (name: source; the cell's id is
    ``cell-<name>``), and the user's GPU Dashboards ``settings`` (the idle notice off, so
    that no notification covers the page)."""
    with lab_with_processes(processes_file, simulate=2,
                            extra_env={"NVDASHBOARD_SIMULATE_SCENARIO": "starved"},
                            extra_args=["--LabApp.expose_app_in_browser=True"]) as running:
        place(processes_file, [])
        write_settings(running, {"idleNotice": False, **settings})
        call(running, "PUT", "lab/api/settings/@jupyterlab/notebook-extension:tracker",
             {"raw": json.dumps({"recordTiming": True})})
        call(running, "PUT", "api/contents/simulated_gpu.py",
             {"type": "file", "format": "text", "content": helper_module(processes_file)})
        content = [{"cell_type": "code", "source": source, "metadata": {}, "outputs": [],
                    "execution_count": None, "id": f"cell-{name}"}
                   for name, source in cells.items()]
        call(running, "PUT", f"api/contents/{notebook}",
             {"type": "notebook", "content": {"cells": content, "metadata": {
                 "kernelspec": {"name": "python3", "display_name": "Python 3",
                                "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}})
        yield running


# Run a cell as Shift+Enter does, without waiting for it to end.
RUN_CELL_JS = """(index) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  panel.content.activeCellIndex = index;
  panel.content.deselectAll();
  void app.commands.execute('notebook:run-cell');
}"""

CELL_RUNNING_JS = """(index) => window.jupyterapp.shell.currentWidget.content.widgets[index]
  .model.executionState === 'running'"""

# A cell's run is done: its reply came (recordTiming wrote its end) and it is idle.
CELL_DONE_JS = """(index) => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel && panel.content ? panel.content.widgets : [];
  const cell = cells[index];
  const timing = cell && cell.model.getMetadata('execution');
  return Boolean(cell && cell.model.executionState === 'idle' && timing
                 && timing['shell.execute_reply']);
}"""

TIMING_JS = """(index) => {
  const panel = window.jupyterapp.shell.currentWidget;
  return panel.content.widgets[index].model.getMetadata('execution');
}"""

OPEN_NOTEBOOK_JS = """(path) => {
  void window.jupyterapp.commands.execute('docmanager:open', {path});
}"""


def cell_node(index: int) -> str:
    return f".jp-NotebookPanel .jp-Notebook .jp-Cell:nth-child({index + 1})"


def open_notebook(page, path: str) -> None:  # noqa: ANN001
    """Open the notebook and wait until its kernel is ready."""
    page.evaluate(OPEN_NOTEBOOK_JS, path)
    page.wait_for_function("""() => {
      const panel = window.jupyterapp.shell.currentWidget;
      const kernel = panel && panel.sessionContext && panel.sessionContext.session
        && panel.sessionContext.session.kernel;
      return Boolean(kernel && kernel.status === 'idle' && kernel.connectionStatus === 'connected');
    }""", timeout=PAGE_WAIT_MS)


def run_cell(page, index: int) -> None:  # noqa: ANN001
    page.evaluate(RUN_CELL_JS, index)
    page.wait_for_function(CELL_DONE_JS, arg=index, timeout=PAGE_WAIT_MS)


def kernel_id(page) -> str:  # noqa: ANN001
    return page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id")


def footer_text(page, index: int) -> str:  # noqa: ANN001
    page.wait_for_selector(f"{cell_node(index)} {FOOTER}", timeout=PAGE_WAIT_MS)
    return page.inner_text(f"{cell_node(index)} {FOOTER} .nvdashboard-cell-verdict")


def details_text(page, index: int) -> str:  # noqa: ANN001
    return page.evaluate("(sel) => document.querySelector(sel).textContent",
                         f"{cell_node(index)} {FOOTER} .nvdashboard-cell-details")


def saved_cells(lab: JupyterLab, path: str) -> list[dict]:
    """The notebook's cells as saved on disk."""
    return call(lab, "GET", f"api/contents/{path}?content=1")["content"]["cells"]  # type: ignore[index]


class CellRequests:
    """Every ``/cell.json`` request a page sends, in order, with whether the notebook was
    on screen then (``shown``, set by the test), and each answer by URL."""

    def __init__(self, page) -> None:  # noqa: ANN001
        self.page = page
        self.asked: list[tuple[str, bool]] = []
        self.answers: dict[str, dict] = {}
        self.shown = True
        page.on("request", self._on_request)
        page.on("response", self._on_response)

    @staticmethod
    def _ours(url: str) -> bool:
        return urlparse(url).path.endswith("/nvdashboard/cell.json")

    def _on_request(self, request) -> None:  # noqa: ANN001
        if self._ours(request.url):
            self.asked.append((request.url, self.shown))

    def _on_response(self, response) -> None:  # noqa: ANN001
        if self._ours(response.url):
            self.answers[response.url] = (response.json() if response.status == 200
                                          else {"status": response.status,
                                                "body": response.text()[:300]})

    @property
    def urls(self) -> list[str]:
        return [url for url, _ in self.asked]

    def until_answered(self, count: int) -> None:
        """Until ``count`` requests have their answers."""
        deadline = time.monotonic() + PAGE_WAIT_MS / 1000
        while time.monotonic() < deadline:
            if len(self.asked) >= count and all(url in self.answers
                                                for url in self.urls[:count]):
                return
            self.page.wait_for_timeout(200)
        raise AssertionError(f"not answered: {self.asked}, {list(self.answers)}")

    def none_more(self, count: int) -> None:
        """No request beyond the first ``count``, however long the page is given."""
        self.page.wait_for_timeout(NOTHING_ASKED_MS)
        assert len(self.asked) == count, self.asked

    def span_of(self, url: str) -> tuple[str, float, float]:
        """A request's (kernel, start, end), the times as sent read as instants."""
        query = parse_qs(urlparse(url).query)
        return (query["kernel"][0], parse_instant(query["start"][0]),
                parse_instant(query["end"][0]))


# Every view of a notebook in the main area, and under each of its cells the footer if there
# is one: its verdict and details, whether it is a running cell's live footer, and where it
# stands (scrolled into view to be measured).
FOOTERS_JS = """async () => {
  const frames = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const views = [];
  for (const panel of window.jupyterapp.shell.widgets('main')) {
    if (!(panel.content && panel.content.widgets && panel.sessionContext)) continue;
    const cells = [];
    for (const cell of panel.content.widgets) {
      const footer = cell.node.querySelector(':scope > .nvdashboard-cell-footer');
      if (!footer) { cells.push(null); continue; }
      if (panel.isVisible) { cell.node.scrollIntoView({block: 'nearest'}); await frames(); }
      const box = footer.getBoundingClientRect();
      const next = cell.node.nextElementSibling;
      const others = [...cell.node.children].filter(
        c => c !== footer && c.getBoundingClientRect().height > 0);
      cells.push({
        verdict: footer.querySelector('.nvdashboard-cell-verdict').textContent,
        details: footer.querySelector('.nvdashboard-cell-details').textContent,
        running: footer.classList.contains('nvdashboard-mod-running'),
        last: cell.node.lastElementChild === footer,
        drawn: box.height > 0,
        below: others.length > 0
          && others.every(c => c.getBoundingClientRect().bottom <= box.top + 1),
        above_next: !next || box.bottom <= next.getBoundingClientRect().top + 1,
      });
    }
    views.push({id: panel.id, visible: panel.isVisible, cells});
  }
  return views;
}"""


def views(page) -> list[dict]:  # noqa: ANN001
    """Each notebook view in the main area: its id, whether it is shown, and under each cell
    its footer (None: none)."""
    return page.evaluate(FOOTERS_JS)


def footers_in_place(view: dict, cells: list[str]) -> dict[str, dict]:
    """The view's footers by cell name (``cells``: the notebook's, in order), each checked to
    stand under its own cell."""
    found = {}
    for name, footer in zip(cells, view["cells"], strict=True):
        if footer is None:
            continue
        assert footer["last"] and footer["drawn"], (name, footer)
        if view["visible"]:
            assert footer["below"] and footer["above_next"], (name, footer)
        found[name] = footer
    return found


def until_footers(page, cells: list[str], names: list[str],  # noqa: ANN001
                  view: int = 0) -> dict[str, dict]:
    """Until exactly the cells ``names`` of view ``view`` show footers; those footers."""
    def shown() -> dict[str, dict] | None:
        found = views(page)
        if len(found) <= view:
            return None
        footers = footers_in_place(found[view], cells)
        return footers if sorted(footers) == sorted(names) else None
    return until(shown, f"footers under {names} in view {view}", seconds=PAGE_WAIT_MS / 1000,
                 every_s=0.2)


def timing(page, index: int) -> tuple[float, float]:  # noqa: ANN001
    """Cell ``index``'s last span as recordTiming kept it (execute_input, execute_reply)."""
    recorded = page.evaluate(TIMING_JS, index)
    return (parse_instant(recorded["iopub.execute_input"]),
            parse_instant(recorded["shell.execute_reply"]))
