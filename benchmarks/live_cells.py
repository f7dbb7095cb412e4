"""What ten running cells' live footers cost the server and the browser (issue 55, item 5).

Target: ten notebooks with a running cell each cost the dashboard server ≤ 1 % of a core
above none, and the browser ≤ 1 % of a core above the same Lab without live footers.

Starts a real ``jupyter lab`` (``tests/support/jupyter.py``: token, base URL /user/alice/,
4 simulated GPUs sampled every 200 ms, this checkout's build; the idle notice and
JupyterLab's autosave off, every other setting its default) and opens it in Debian's
Chromium at 1280x800, in one page: ``--notebooks`` (10) notebooks, each of whose kernels
holds memory on a simulated GPU (``simulated_holders.hold_gpu``, 2 GiB, some SM work) and
then runs a cell that sleeps for an hour. The first notebook is shown; the others stand in
background tabs, as a user has them. Three conditions of that one Lab, measured in turn in
each round:

* ``running``: the cells run, the footers on (``cellFooter`` at its default): the shown
  notebook's running cell reads the glance at 1 s, but never more often than the setting
  ``refreshRate`` (``src/poller.ts``: 2 s by default; ``--refresh-rate 1`` for the live
  pace), and the server judges each running cell (``apps/live_cells.py``, ``LiveCells``);
* ``footers off``: the same cells running, ``cellFooter: 'off'`` (set in the page, as the
  Settings Editor does): no live footer, and the glance at the status item's pace;
* ``no cell running``: the same kernels, still holding their GPUs, their cells interrupted
  (Jupyter's interrupt, the stop button); the footers on, with nothing to show live.

Which pair isolates what: the **server**'s cost is ``running`` against ``no cell
running``. The server judges the running cells whenever it builds a glance, whoever shows
it, so ``footers off`` still pays the judgments (at the status item's pace); with no cell
running, the same kernels, GPUs and page ask for the same glance with nothing to judge and
no footer asking for a faster one: everything the running cells add. The **browser**'s
cost is ``running`` against ``footers off``: the same Lab, the same kernels busy (their
spinners, the notebooks' busy state), only the live footers gone. Each round also prints
the other pairs, for what they are worth.

Measured over each ``--window``: Chromium's CPU over all its processes, the Lab server's
own (the ``jupyter lab`` process), the dashboard server's (the proxy's child), in % of one
core; the glance's socket messages per minute in the page; and the server's
``LiveCells.judgments`` and ``cpu_s`` over the window, read by a ``sitecustomize`` hook on
SIGUSR1 (``live_cells_probe.py``: no endpoint added); the pace the glance socket asked
for (``?interval=``). The 1-minute load before each window.

Run from the project root, after ``jlpm build``::

    python benchmarks/live_cells.py [--rounds 3] [--window 30] [--settle 10] [--notebooks 10]
                                    [--refresh-rate S]

Rounds alternate the conditions' order (running, footers off, no cell running; then the
other way round), and each round's differences are taken within that round. Medians and
ranges over rounds; compare figures from one run only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import live_cells_probe as probe  # noqa: E402
from benchmarks.bare_lab import GlanceTraffic  # noqa: E402
from benchmarks.figures import load_line, spread  # noqa: E402
from benchmarks.harness import chromium_cpu_s, cpu_s_by_pid, file_by_signal  # noqa: E402
from tests.support.browser import CHROMIUM, CHROMIUM_FLAGS, PAGE_WAIT_MS  # noqa: E402
from tests.support.idle_lab import write_settings  # noqa: E402
from tests.support.jupyter import (  # noqa: E402
    CHECKOUT,
    JupyterLab,
    dashboard_servers,
    lab_with_processes,
)
from tests.support.lab_cells import CELL_RUNNING_JS, OPEN_NOTEBOOK_JS, RUN_CELL_JS  # noqa: E402
from tests.test_lab_processes import call  # noqa: E402

RUNNING, OFF, IDLE = "running", "footers off", "no cell running"
CONDITIONS = (RUNNING, OFF, IDLE)
SLEEP_CELL = 1  # the cell that runs: the first one holds the GPU
TARGET_PCT = 1.0

# The user's settings of this extension, set in the page: the Lab reads them once, and
# applies a change the settings registry signals (src/index.ts). The registry is the
# service JupyterLab's settings plugin provides.
SET_FOOTERS_JS = """async (mode) => {
  const app = window.jupyterapp;
  const plugins = (app.pluginRegistry || app)._plugins;
  const settings = plugins.get('@jupyterlab/apputils-extension:settings');
  const registry = await app.resolveRequiredService(settings.provides);
  await registry.set('jupyterlab-nvdashboard:plugin', 'cellFooter', mode);
}"""

# Whether the shown notebook's sleep cell has a footer (live while it runs).
SLEEP_FOOTER_JS = """(index) => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
  return Boolean(cell.node.querySelector('.nvdashboard-cell-footer'));
}"""

READY_JS = """(path) => {
  const panel = window.jupyterapp.shell.currentWidget;
  const kernel = panel && panel.context && panel.context.path === path
    && panel.sessionContext.session && panel.sessionContext.session.kernel;
  return Boolean(kernel && kernel.status === 'idle' && kernel.connectionStatus === 'connected');
}"""

ACTIVATE_JS = """(path) => {
  const app = window.jupyterapp;
  for (const widget of app.shell.widgets('main')) {
    if (widget.context && widget.context.path === path) {
      app.shell.activateById(widget.id);
      return true;
    }
  }
  return false;
}"""


@dataclass
class Window:
    condition: str
    round_index: int
    browser_pct: float
    lab_pct: float
    dashboard_pct: float
    glance_messages_per_min: float
    judgments_per_min: float
    judgments_cpu_pct: float
    glance_pace_s: float  # the interval the page's glance socket asked for
    load_1min: float


def notebook_content(index: int) -> dict:
    hold = ("from jupyterlab_nvdashboard.simulated_holders import hold_gpu\n"
            f"hold_gpu({index % 4}, gib=2, busy_pct={30 + 5 * index})")
    cells = [hold, "import time\ntime.sleep(3600)"]
    return {"cells": [{"cell_type": "code", "source": source, "metadata": {}, "outputs": [],
                       "execution_count": None, "id": f"cell-{i}"}
                      for i, source in enumerate(cells)],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                        "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def progress(text: str) -> None:
    print(f"... {text}", file=sys.stderr, flush=True)


class LiveLab:
    """The Lab, its page and its notebooks, switched between the conditions."""

    def __init__(self, lab: JupyterLab, page, paths: list[str], probe_file: Path) -> None:  # noqa: ANN001
        self.lab, self.page, self.paths, self.probe_file = lab, page, paths, probe_file
        self.process = psutil.Process(lab.process.pid)
        self.traffic = GlanceTraffic(page)
        self.paces: list[float] = []  # each glance socket's ?interval=, as opened
        page.on("websocket", self._socket)
        self.footers = "gpu"
        self.cells_running = False

    def _socket(self, socket) -> None:  # noqa: ANN001 - playwright WebSocket
        if "nvdashboard/glance/stream" in socket.url:
            self.paces.append(float(parse_qs(urlparse(socket.url).query)["interval"][0]))

    def open_all(self) -> None:
        """Open every notebook, hold its GPU (run its first cell), and run its sleep."""
        self.page.goto(f"{self.lab.url}lab?token={self.lab.token}")
        self.page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=120_000)
        self.page.wait_for_selector("#jp-main-dock-panel .lm-TabBar-tab", timeout=120_000)
        for path in self.paths:
            progress(f"opening {path}")
            self.page.evaluate(OPEN_NOTEBOOK_JS, path)
            # This notebook shown, its kernel ready (the one shown before is ready too).
            self.page.wait_for_function(READY_JS, arg=path, timeout=PAGE_WAIT_MS)
            self.page.evaluate(RUN_CELL_JS, 0)
            self.page.wait_for_function(
                """() => window.jupyterapp.shell.currentWidget.content.widgets[0]
                  .model.executionCount !== null""", timeout=PAGE_WAIT_MS)
        self.run_cells()

    def run_cells(self) -> None:
        """Each notebook's sleep cell, run from its page as Shift+Enter does."""
        for path in self.paths:
            self.show(path)
            self.page.evaluate(RUN_CELL_JS, SLEEP_CELL)
            self.page.wait_for_function(CELL_RUNNING_JS, arg=SLEEP_CELL, timeout=PAGE_WAIT_MS)
        self.show(self.paths[0])
        self.cells_running = True

    def interrupt_cells(self) -> None:
        """Jupyter's interrupt for each kernel (the stop button); until all are idle."""
        kernels = [k["id"] for k in call(self.lab, "GET", "api/kernels")]  # type: ignore[union-attr]
        for kernel in kernels:
            call(self.lab, "POST", f"api/kernels/{kernel}/interrupt", {})
        deadline = time.monotonic() + 60
        while any(call(self.lab, "GET", f"api/kernels/{k}")["execution_state"] != "idle"  # type: ignore[index]
                  for k in kernels):
            if time.monotonic() > deadline:
                raise RuntimeError("the kernels were not idle 60 s after their interrupt")
            time.sleep(0.5)
        self.cells_running = False

    def show(self, path: str) -> None:
        if not self.page.evaluate(ACTIVATE_JS, path):
            raise RuntimeError(f"{path} is not open")
        self.page.wait_for_function(
            "(path) => window.jupyterapp.shell.currentWidget.context.path === path",
            arg=path, timeout=PAGE_WAIT_MS)

    def set_footers(self, mode: str) -> None:
        if mode != self.footers:
            self.page.evaluate(SET_FOOTERS_JS, mode)
            self.footers = mode

    def enter(self, condition: str) -> None:
        if condition == IDLE:
            self.set_footers("gpu")
            if self.cells_running:
                self.interrupt_cells()
            return
        if not self.cells_running:
            self.run_cells()
        self.set_footers("off" if condition == OFF else "gpu")
        # The shown notebook's running cell shows its live footer, or none.
        shown = "" if condition == RUNNING else "!"
        self.page.wait_for_function(f"(index) => {shown}({SLEEP_FOOTER_JS})(index)",
                                    arg=SLEEP_CELL, timeout=PAGE_WAIT_MS)

    def judged(self, server: psutil.Process | None) -> dict:
        """The dashboard server's ``LiveCells`` counts (``live_cells_probe.py``)."""
        if server is None:
            return {"judgments": 0, "cpu_s": 0.0}
        return file_by_signal(server, self.probe_file, 30,  # type: ignore[arg-type,return-value]
                              "the dashboard server did not write its live cells' counts")

    def measure(self, condition: str, round_index: int, window_s: float) -> Window:
        load = os.getloadavg()[0]
        servers = dashboard_servers(self.process.pid)
        server = servers[0] if servers else None
        judged0 = self.judged(server)
        browser0, lab0 = chromium_cpu_s(), cpu_s_by_pid([self.process])
        dash0 = cpu_s_by_pid(servers)
        messages0 = self.traffic.messages
        started = time.monotonic()
        self.page.wait_for_timeout(window_s * 1000)  # the page's events come while it waits
        elapsed = time.monotonic() - started
        browser1, lab1 = chromium_cpu_s(), cpu_s_by_pid([self.process])
        dash1 = cpu_s_by_pid(servers)
        judged1 = self.judged(server)

        def pct(before: dict, after: dict) -> float:
            return 100 * sum(after[k] - before.get(k, 0.0) for k in after) / elapsed

        window = Window(condition, round_index, pct(browser0, browser1), pct(lab0, lab1),
                        pct(dash0, dash1), (self.traffic.messages - messages0) * 60 / elapsed,
                        (judged1["judgments"] - judged0["judgments"]) * 60 / elapsed,
                        100 * (judged1["cpu_s"] - judged0["cpu_s"]) / elapsed,
                        self.paces[-1] if self.paces else math.nan, load)
        print(f"    round {round_index + 1} {condition:>16}: browser {window.browser_pct:.2f}%, "
              f"dashboard server {window.dashboard_pct:.2f}% (judgments "
              f"{window.judgments_per_min:.0f}/min, {window.judgments_cpu_pct:.3f}%), "
              f"lab server {window.lab_pct:.2f}%, glance {window.glance_messages_per_min:.0f} "
              f"messages/min at {window.glance_pace_s:g} s (load {load:.2f})",
              file=sys.stderr, flush=True)
        return window


MEASURES = (("dashboard server CPU %", "dashboard_pct"), ("Chromium CPU %", "browser_pct"),
            ("Lab server CPU %", "lab_pct"), ("glance messages/min", "glance_messages_per_min"),
            ("glance socket's pace s", "glance_pace_s"),
            ("judgments/min", "judgments_per_min"), ("judgments' CPU %", "judgments_cpu_pct"),
            ("load (1 min)", "load_1min"))
# What each side's cost is: (measure, the condition it is taken against).
COSTS = (("dashboard server CPU %", "dashboard_pct", IDLE),
         ("Chromium CPU %", "browser_pct", OFF),
         ("dashboard server CPU %", "dashboard_pct", OFF),
         ("Chromium CPU %", "browser_pct", IDLE),
         ("Lab server CPU %", "lab_pct", IDLE),
         ("Lab server CPU %", "lab_pct", OFF))


def by_round(windows: list[Window], condition: str, attr: str) -> dict[int, float]:
    return {w.round_index: getattr(w, attr) for w in windows if w.condition == condition}


def differences(windows: list[Window], attr: str, against: str) -> list[float]:
    mine, theirs = by_round(windows, RUNNING, attr), by_round(windows, against, attr)
    return [mine[r] - theirs[r] for r in sorted(mine) if r in theirs]


def tables(windows: list[Window]) -> str:
    lines = ["| measure | " + " | ".join(f"{c} median (range)" for c in CONDITIONS) + " |",
             "|---|" + "---|" * len(CONDITIONS)]
    for label, attr in MEASURES:
        digits = 3 if attr == "judgments_cpu_pct" else 2 if attr.endswith("pct") else 1
        cells = [spread(list(by_round(windows, c, attr).values()), digits) for c in CONDITIONS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", f"| cost ({RUNNING} − against) | against | median (range) | per round |",
              "|---|---|---|---|"]
    for label, attr, against in COSTS:
        values = differences(windows, attr, against)
        lines.append(f"| {label} | {against} | {spread(values, 2)} | "
                     + ", ".join(f"{v:+.2f}" for v in values) + " |")
    server = statistics.median(differences(windows, "dashboard_pct", IDLE))
    browser = statistics.median(differences(windows, "browser_pct", OFF))
    lines += ["", f"server: {server:+.2f} % of a core above no cell running: "
              f"{'met' if server <= TARGET_PCT else 'NOT met'} (≤ {TARGET_PCT:g} %)",
              f"browser: {browser:+.2f} % of a core above footers off: "
              f"{'met' if browser <= TARGET_PCT else 'NOT met'} (≤ {TARGET_PCT:g} %)"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=30.0, help="seconds per window")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds after a condition is set, before its window")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--notebooks", type=int, default=10)
    parser.add_argument("--refresh-rate", type=float, metavar="S",
                        help="the setting refreshRate (default: its default, 2 s)")
    args = parser.parse_args()
    if not (ROOT / "jupyterlab_nvdashboard" / "labextension" / "package.json").exists():
        parser.error("no build of this checkout: run `jlpm build` first")
    from playwright.sync_api import sync_playwright

    print(f"# {os.uname().nodename} {os.cpu_count()} cores, load {load_line()}, "
          f"{args.notebooks} notebooks, window {args.window:g} s, settle {args.settle:g} s, "
          f"{args.rounds} rounds, refreshRate {args.refresh_rate or 'default'}, "
          "4 simulated GPUs every 200 ms, Chromium 1280x800",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="nvdashboard-live-cells-") as folder:
        hook = Path(folder) / "hook"
        hook.mkdir()
        shutil.copyfile(probe.__file__, hook / "sitecustomize.py")
        probe_file = Path(folder) / "live_cells.json"
        env = {probe.PROBE_VARIABLE: str(probe_file),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), CHECKOUT,
                                                           os.environ.get("PYTHONPATH")]))}
        processes_file = Path(folder) / "processes.json"
        processes_file.write_text("[]")
        progress("starting the Lab")
        with lab_with_processes(processes_file, simulate=4, extra_env=env,
                                extra_args=["--LabApp.expose_app_in_browser=True"]) as lab, \
                sync_playwright() as playwright:
            write_settings(lab, {"idleNotice": False, **(
                {} if args.refresh_rate is None else {"refreshRate": args.refresh_rate})})
            # Ten dirty notebooks saved every 2 minutes land in any window, whatever it
            # measures: not what the footers cost.
            call(lab, "PUT", "lab/api/settings/@jupyterlab/docmanager-extension:plugin",
                 {"raw": json.dumps({"autosave": False})})
            paths = [f"live-{i:02d}.ipynb" for i in range(args.notebooks)]
            for index, path in enumerate(paths):
                call(lab, "PUT", f"api/contents/{path}",
                     {"type": "notebook", "content": notebook_content(index)})
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                 args=CHROMIUM_FLAGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                live = LiveLab(lab, page, paths, probe_file)
                live.open_all()
                live.traffic.wait_until_live(page)
                windows: list[Window] = []
                for round_index in range(args.rounds):
                    order = CONDITIONS if round_index % 2 == 0 else CONDITIONS[::-1]
                    for condition in order:
                        progress(f"round {round_index + 1}: {condition}")
                        live.enter(condition)
                        page.wait_for_timeout(args.settle * 1000)
                        windows.append(live.measure(condition, round_index, args.window))
            finally:
                browser.close()
    print(f"# load after: {load_line()}")
    print(tables(windows))
    print(json.dumps({"windows": [w.__dict__ for w in windows]}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
