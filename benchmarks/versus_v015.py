"""This project against rapidsai's jupyterlab-nvdashboard 0.15.0, side by side (issue 47).

Two JupyterLabs run at the same time for the whole benchmark, each with a token and its own
HOME, settings, runtime and workspace folders, over the same 4 simulated GPUs:

* **ours**: this checkout, as ``tests/support/jupyter.py`` starts it (``NVDASHBOARD_SIMULATE=4``,
  the default profile; ``NVDASHBOARD_INTERVAL=0.2``, the documented default), with this
  checkout's labextension build (``jlpm build``; the run refuses without one, since an
  installed build may be another tree's);
* **v0.15**: ``jupyterlab-nvdashboard==0.15.0`` from PyPI in a virtual environment of its
  own (``benchmarks/v015_side.py``: made once under ``~/.cache/nvdashboard-benchmarks/``,
  ``--venv`` to choose), with the same JupyterLab version as here. Its fake: the real
  nvidia-ml-py over **this project's simulated NVML driver** (``simnvml/``, copied under
  another name), set as ``pynvml.nvmlLib`` by a ``sitecustomize`` hook before v0.15 calls
  ``nvmlInit()``; the same machine ``NVDASHBOARD_SIMULATE=4`` builds here
  (``benchmarks/v015_sitecustomize.py``). Its NVML calls are counted by that driver.

Cases, each a window of ``--window`` s after ``--settle`` s, in a fresh headless Chromium
(Debian's /usr/bin/chromium, 1280x800, a new workspace, both side areas collapsed):
**GPU Resources** and **GPU Utilization**, one visible tab (JupyterLab's Launcher behind
it), and a **bare Lab**: no dashboard tab, only the Launcher, which JupyterLab 4 reopens
whenever its main area is left empty. v0.15 runs each page at its default
``updateFrequency`` (100 ms) and at this project's repaint interval for the page
(``apps/live.py``: ``TIMELINE_REDRAW_MS`` for Resources, ``REPLACE_REDRAW_MS`` for
Utilization), set through JupyterLab's settings API before the page loads. Tabs open as
a user opens them: v0.15's by its sidebar's button, ours by its ``nvdashboard:open``
command (what its sidebar buttons run) through ``window.jupyterapp``
(``--LabApp.expose_app_in_browser``).

Measured per window: Chromium's CPU over all its processes (% of one core); each Lab
server's CPU, and ours' dashboard server (the Lab's child, which jupyter-server-proxy
starts); simulated NVML calls/s; repaints (ours: the pages' ``window.nvdashboardStreams``
draws, as ``dashboard_overhead.py`` reads them, or a table page's applied frames; v0.15: the
animation frames in which a MutationObserver saw its tab's DOM change, recharts being SVG);
the dashboards' websocket frames and bytes per second, and HTTP requests per second.

Rounds alternate which side goes first. Before each case the 1-minute load average is
waited on until under ``--max-load`` (at most ``--load-wait`` s); the load at each window is
printed. Prints one table per page: medians (ranges) of each side, ours ÷ v0.15 at the same
rate per round and its median; browser, server and their sum. Every window goes to
``--out DIR`` as JSON, with a screenshot at the end of each window.

Run it from the project root (a quick check first)::

    python benchmarks/versus_v015.py --window 5 --rounds 1
    python benchmarks/versus_v015.py [--rounds 3] [--window 20] [--settle 5] [--out DIR]
        [--max-load 1.5] [--load-wait 180] [--venv DIR] [--pages resources,utilization,bare]
        [--baseline REF]  # also this project at git REF, its own lab, side by side
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import v015_side  # noqa: E402
from benchmarks.dashboard_overhead import DRAWS_JS  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    children_cpu_s,
    chromium_cpu_s,
    cpu_s,
    per_process_pct,
)
from benchmarks.revision import revision_worktree  # noqa: E402
from jupyterlab_nvdashboard.apps.live import (  # noqa: E402
    REPLACE_REDRAW_MS,
    TIMELINE_REDRAW_MS,
)
from tests.support.browser import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402
from tests.support.jupyter import BUILT, JupyterLab, jupyter_lab, this_build  # noqa: E402

OURS = "ours"
V015_DEFAULT = "v0.15 default"
V015_SAME_RATE = "v0.15 at ours' rate"
V015 = "v0.15"  # a bare Lab: v0.15's settings do not matter without a tab
EXPOSE_APP = "--LabApp.expose_app_in_browser=True"  # window.jupyterapp, to run commands
PAGE_WAIT_MS = 120_000
V015_SIDEBAR_TAB = '.jp-SideBar [data-id="gpu-dashboard"]'
# A table page (the overview at /) counts the frames it applied, not canvas draws.
LIVE_FRAMES_JS = "() => window.nvdashboardLive ? window.nvdashboardLive.frames : -1"
# Animation frames in which v0.15's tab changed its DOM: one per repaint of its SVG.
V015_REPAINTS_JS = """() => {
  const tab = document.querySelector('#jp-main-dock-panel .lm-DockPanel-widget:not(.lm-mod-hidden)')
    || document.querySelector('#jp-main-dock-panel');
  window.v015Repaints = 0;
  let pending = false;
  new MutationObserver(() => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; window.v015Repaints += 1; });
  }).observe(tab, {subtree: true, childList: true, attributes: true, characterData: true});
}"""


@dataclass(frozen=True)
class Page:
    key: str  # --pages names it
    title: str
    route: str | None  # ours; None: a bare Lab
    v015_button: str | None  # v0.15's sidebar button
    rate_ms: int | None  # ours' repaint interval for it

    def sides(self, baseline: str | None = None) -> list[str]:
        """Who runs it: v0.15 (at its default and at ours' rate where that differs), the
        ``--baseline`` tree if any, and ours."""
        return ([V015_DEFAULT, V015_SAME_RATE] if self.route else [V015]) + \
            ([baseline] if baseline else []) + [OURS]


PAGES = [
    Page("resources", "GPU Resources", "/GPU-Resources", "GPU Resources", TIMELINE_REDRAW_MS),
    Page("utilization", "GPU Utilization", "/GPU-Utilization", "GPU Utilization",
         REPLACE_REDRAW_MS),
    Page("bare", "bare Lab", None, None, None),
]


@dataclass
class Window:
    """One measured window of one side."""

    round_index: int
    page: str
    side: str
    window_s: float = 0.0
    load_start: float = 0.0
    load_end: float = 0.0
    browser_cpu_pct: float = 0.0
    browser_by_process: dict[str, float] = field(default_factory=dict)
    lab_cpu_pct: float = 0.0
    dashboard_server_cpu_pct: float | None = None  # ours: the Lab's child processes
    nvml_calls_per_s: float | None = None
    repaints: int | None = None
    ws_frames_per_s: float = 0.0  # the dashboards' sockets, both directions
    ws_bytes_per_s: float = 0.0
    requests_per_s: float = 0.0
    update_frequency_ms: int | None = None  # v0.15's setting (None: its default)
    screenshot: str = ""

    @property
    def server_cpu_pct(self) -> float:
        return self.lab_cpu_pct + (self.dashboard_server_cpu_pct or 0.0)

    @property
    def total_cpu_pct(self) -> float:
        return self.browser_cpu_pct + self.server_cpu_pct

    @property
    def repaints_per_s(self) -> float | None:
        return None if self.repaints is None else self.repaints / self.window_s


# ----- the two labs --------------------------------------------------------------------
@dataclass
class Side:
    """A running lab and how to read its server."""

    name: str  # OURS, V015 or the baseline's
    lab: JupyterLab
    nvml_calls: Callable[[], int | None]

    @property
    def is_v015(self) -> bool:
        return self.name == V015

    def server_cpu_s(self) -> tuple[float, float]:
        """CPU seconds so far of (the Lab server, its child processes)."""
        lab = psutil.Process(self.lab.process.pid)
        return cpu_s(lab), children_cpu_s(lab)


def ours_nvml_calls(lab: JupyterLab) -> int | None:
    status, body = lab.get("nvdashboard/info.json")
    return json.loads(body).get("nvml_calls") if status == 200 else None


def our_side(name: str, lab: JupyterLab) -> Side:
    lab.dashboard_index()  # starts the dashboard server and waits for its GPUs
    return Side(name, lab, lambda: ours_nvml_calls(lab))


@contextmanager
def baseline_lab(revision: str, scratch: Path) -> Iterator[JupyterLab]:
    """A lab of this project at git ``revision``, with that tree's frontend built."""
    folder = scratch / "baseline"
    folder.mkdir()
    with revision_worktree(revision, folder) as tree:
        (tree / "node_modules").symlink_to((ROOT / "node_modules").resolve())
        print(f"... building {revision}'s labextension (jlpm build)", file=sys.stderr,
              flush=True)
        subprocess.run(["jlpm", "build"], cwd=tree, check=True, stdout=subprocess.DEVNULL)
        labextensions = folder / "share" / "labextensions"
        labextensions.mkdir(parents=True)
        (labextensions / "jupyterlab-nvdashboard").symlink_to(
            tree / "jupyterlab_nvdashboard" / "labextension")
        with jupyter_lab(simulate=4, extra_env={"PYTHONPATH": str(tree),
                                                "JUPYTER_PATH": str(folder / "share")},
                         extra_args=[EXPOSE_APP]) as lab:
            yield lab


@contextmanager
def labs(venv: Path, scratch: Path, baseline: str | None) -> Iterator[dict[str, Side]]:
    """Every side's lab, running together: ours, v0.15 and the baseline if asked for."""
    python = v015_side.v015_environment(venv)
    with ExitStack() as stack:
        share = scratch / "share"
        share.mkdir()
        sides = {OURS: our_side(OURS, stack.enter_context(jupyter_lab(
            simulate=4, extra_env=this_build(str(share)), extra_args=[EXPOSE_APP])))}
        if baseline:
            name = baseline_name(baseline)
            sides[name] = our_side(name, stack.enter_context(baseline_lab(baseline, scratch)))
        v015_folder = scratch / "v015"
        v015_folder.mkdir()
        v015 = stack.enter_context(v015_side.v015_lab(python, v015_folder))
        sides[V015] = Side(V015, v015, lambda: v015_side.nvml_calls(v015, v015_folder))
        yield sides


def baseline_name(revision: str) -> str:
    return f"ours at {revision}"


# ----- one window ------------------------------------------------------------------------
def wait_for_load(max_load: float, wait_s: float) -> float:
    """The 1-minute load average once under ``max_load``, or after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        time.sleep(5)
    return os.getloadavg()[0]


def open_lab(page, lab: JupyterLab, workspace: str) -> None:  # noqa: ANN001
    """A fresh workspace, restored, both side areas collapsed: the Launcher alone, which
    JupyterLab 4 opens again whenever its main area is left empty."""
    page.goto(f"{lab.url}lab/workspaces/{workspace}?token={lab.token}")
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=PAGE_WAIT_MS)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell",
                           timeout=PAGE_WAIT_MS)
    # The Launcher opens once the file browser has read the folder: the lab has settled.
    page.wait_for_selector("#jp-main-dock-panel .lm-TabBar-tab", timeout=PAGE_WAIT_MS)
    page.evaluate("() => { window.jupyterapp.shell.collapseLeft();"
                  " window.jupyterapp.shell.collapseRight(); }")


def open_ours(page, route: str, title: str) -> Callable[[], int | None]:  # noqa: ANN001
    """Open ``route`` by ours' command; returns the repaints-so-far reader: 0 until the
    page's frame is there, None for a page that counts neither draws nor frames."""
    page.evaluate("([route, label]) => window.jupyterapp.commands.execute("
                  "'nvdashboard:open', {route, label})", [route, title])

    def frames() -> list:
        return [frame for frame in page.frames
                if frame.url.split("?")[0].endswith("nvdashboard" + route)]

    def repaints() -> int | None:
        counts = []
        for frame in frames():
            drawn = frame.evaluate(DRAWS_JS)
            counts.append(drawn if drawn >= 0 else frame.evaluate(LIVE_FRAMES_JS))
        if not counts:
            return 0
        return sum(counts) if min(counts) >= 0 else None

    return repaints


def open_v015(page, button: str) -> Callable[[], int | None]:  # noqa: ANN001
    """Open v0.15's page by its sidebar's button; returns the repaints-so-far reader."""
    page.click(V015_SIDEBAR_TAB)
    page.click(f'button.gpu-dashboard-button:has-text("{button}")', timeout=PAGE_WAIT_MS)
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
    page.wait_for_selector("#jp-main-dock-panel .recharts-surface", timeout=PAGE_WAIT_MS)
    page.evaluate(V015_REPAINTS_JS)
    return lambda: page.evaluate("() => window.v015Repaints")


def wait_until_live(page, repaints: Callable[[], int | None],  # noqa: ANN001
                    frames_received: Callable[[], int], what: str) -> None:
    """Until the page has repainted (or, where it counts no repaints, received a frame)."""
    deadline = time.monotonic() + PAGE_WAIT_MS / 1000
    while True:
        drawn = repaints()
        if (drawn or 0) > 0 or (drawn is None and frames_received() > 0):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} showed nothing in {PAGE_WAIT_MS / 1000:.0f} s")
        page.wait_for_timeout(500)


def measure_window(browser, side: Side, case: Page, side_name: str,  # noqa: ANN001
                   args: argparse.Namespace, round_index: int) -> Window:
    result = Window(round_index, case.title, side_name, window_s=args.window)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    counters = {"frames": 0, "received": 0, "bytes": 0, "requests": 0}

    def on_websocket(ws) -> None:  # noqa: ANN001 - playwright WebSocket
        if "nvdashboard" not in ws.url:
            return

        def counted(payload) -> None:  # noqa: ANN001
            counters["frames"] += 1
            counters["bytes"] += len(payload)

        def received(payload) -> None:  # noqa: ANN001
            counters["received"] += 1
            counted(payload)

        ws.on("framereceived", received)
        ws.on("framesent", counted)

    def on_request(_request) -> None:  # noqa: ANN001
        counters["requests"] += 1

    page.on("websocket", on_websocket)
    page.on("request", on_request)
    open_lab(page, side.lab, f"versus-{round_index}-{case.key}-{side_name.replace(' ', '-')}"
             .replace("'", "").replace(".", ""))
    repaints: Callable[[], int | None] = lambda: None  # noqa: E731 - a bare Lab
    if case.route and not side.is_v015:
        repaints = open_ours(page, case.route, case.title)
    elif case.v015_button:
        repaints = open_v015(page, case.v015_button)
    if case.route:
        wait_until_live(page, repaints, lambda: counters["received"],
                        f"{side_name}'s {case.title}")
    page.wait_for_timeout(args.settle * 1000)

    for key in counters:
        counters[key] = 0
    result.load_start = os.getloadavg()[0]
    browser_before = chromium_cpu_s()
    lab_before, children_before = side.server_cpu_s()
    calls_before = side.nvml_calls()
    repaints_before = repaints()
    started = time.monotonic()
    page.wait_for_timeout(args.window * 1000)  # playwright dispatches socket events meanwhile
    elapsed = time.monotonic() - started
    by_process = per_process_pct(browser_before, chromium_cpu_s(), elapsed)
    lab_after, children_after = side.server_cpu_s()
    calls_after = side.nvml_calls()
    repaints_after = repaints()
    result.load_end = os.getloadavg()[0]

    result.window_s = elapsed
    result.browser_by_process = by_process
    result.browser_cpu_pct = sum(by_process.values())
    result.lab_cpu_pct = 100 * (lab_after - lab_before) / elapsed
    if not side.is_v015:
        result.dashboard_server_cpu_pct = 100 * (children_after - children_before) / elapsed
    if calls_before is not None and calls_after is not None:
        result.nvml_calls_per_s = (calls_after - calls_before) / elapsed
    if repaints_before is not None and repaints_after is not None:
        result.repaints = repaints_after - repaints_before
    result.ws_frames_per_s = counters["frames"] / elapsed
    result.ws_bytes_per_s = counters["bytes"] / elapsed
    result.requests_per_s = counters["requests"] / elapsed
    shot = args.out / "screens" / (f"round{round_index}-{case.key}-"
                                   f"{side_name.replace(' ', '-').replace(chr(39), '')}.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot))
    result.screenshot = str(shot)
    context.close()
    return result


# ----- the tables ---------------------------------------------------------------------------
MEASURES: list[tuple[str, Callable[[Window], float | None]]] = [
    ("browser CPU %", lambda w: w.browser_cpu_pct),
    ("server CPU %", lambda w: w.server_cpu_pct),
    ("browser + server %", lambda w: w.total_cpu_pct),
    ("  Lab server %", lambda w: w.lab_cpu_pct),
    ("  dashboard server %", lambda w: w.dashboard_server_cpu_pct),
    ("repaints/s", lambda w: w.repaints_per_s),
    ("dashboard ws frames/s", lambda w: w.ws_frames_per_s),
    ("dashboard ws KB/s", lambda w: w.ws_bytes_per_s / 1000),
    ("HTTP requests/s", lambda w: w.requests_per_s),
    ("NVML calls/s", lambda w: w.nvml_calls_per_s),
    ("1-min load at start", lambda w: w.load_start),
]
RATIO_MEASURES = {"browser CPU %", "server CPU %", "browser + server %"}


def median_range(values: list[float]) -> str:
    if not values:
        return "-"
    text = f"{statistics.median(values):.2f}"
    return text + (f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else "")


def per_round(windows: list[Window], side: str,
              measure: Callable[[Window], float | None]) -> dict[int, float]:
    """``measure`` of ``side``'s window in each round that measured it."""
    return {w.round_index: value for w in windows
            if w.side == side and (value := measure(w)) is not None}


def ratios(ours: dict[int, float], theirs: dict[int, float]) -> list[float]:
    """Ours ÷ theirs, round by round, over the rounds both measured (theirs not 0)."""
    return [ours[i] / theirs[i] for i in sorted(ours) if theirs.get(i)]


def page_table(page: Page, windows: list[Window], baseline: str | None = None) -> str:
    """One page's table: each side's median (range), and each of ours' trees ÷ v0.15 at
    the same rate, per round and their median."""
    mine = [w for w in windows if w.page == page.title]
    sides = page.sides(baseline)
    compared = V015_SAME_RATE if page.route else V015
    ours_sides = [side for side in sides if side in (baseline, OURS)]
    lines = [f"### {page.title}" + (f" (ours repaints every {page.rate_ms} ms)"
                                    if page.rate_ms else ""),
             "", "| measure | " + " | ".join(f"{s} median (range)" for s in sides)
             + "".join(f" | {s} ÷ {compared}, per round | median ratio" for s in ours_sides)
             + " |", "|" + "---|" * (1 + len(sides) + 2 * len(ours_sides))]
    for name, measure in MEASURES:
        by_side = {side: per_round(mine, side, measure) for side in sides}
        if not any(by_side.values()):
            continue
        cells = [median_range(list(values.values())) for values in by_side.values()]
        for side in ours_sides:
            if name not in RATIO_MEASURES:
                cells += ["", ""]
                continue
            each = ratios(by_side[side], by_side[compared])
            cells += [", ".join(f"{r:.2f}" for r in each) or "-",
                      f"{statistics.median(each):.2f}" if each else "-"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ----- the run --------------------------------------------------------------------------------
def run(args: argparse.Namespace, pages: list[Page]) -> list[Window]:
    from playwright.sync_api import sync_playwright

    windows: list[Window] = []
    with tempfile.TemporaryDirectory(prefix="nvdashboard-versus-") as scratch, \
            labs(args.venv, Path(scratch), args.baseline) as running, \
            sync_playwright() as playwright:
        print("# " + ", ".join(f"{name}: {side.lab.url}" for name, side in running.items())
              + f" (v0.15 from {args.venv})", file=sys.stderr, flush=True)
        for round_index in range(args.rounds):
            for page in pages:
                sides = page.sides(args.baseline and baseline_name(args.baseline))
                # Each round swaps which side goes first, so neither always follows the
                # other on a machine whose load drifts.
                for side_name in sides if round_index % 2 == 0 else sides[::-1]:
                    side = running.get(side_name, running[V015])
                    frequency = page.rate_ms if side_name == V015_SAME_RATE else None
                    if side.is_v015:
                        v015_side.set_update_frequency(side.lab, frequency)
                    load = wait_for_load(args.max_load, args.load_wait)
                    print(f"... round {round_index + 1}/{args.rounds}: {page.title}, "
                          f"{side_name} (1-min load {load:.2f})", file=sys.stderr, flush=True)
                    browser = playwright.chromium.launch(
                        executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
                    try:
                        window = measure_window(browser, side, page, side_name, args,
                                                round_index)
                    finally:
                        browser.close()
                    window.update_frequency_ms = frequency if side.is_v015 else None
                    windows.append(window)
                    repaints = window.repaints_per_s
                    print(f"    browser {window.browser_cpu_pct:.1f}%, server "
                          f"{window.server_cpu_pct:.1f}%, repaints/s "
                          f"{'-' if repaints is None else f'{repaints:.2f}'}, load "
                          f"{window.load_start:.2f}→{window.load_end:.2f}; "
                          + ", ".join(f"{kind} {pct:.1f}" for kind, pct
                                      in window.browser_by_process.items()),
                          file=sys.stderr, flush=True)
                    (args.out / "windows.json").write_text(json.dumps(
                        [asdict(w) for w in windows], indent=1))
    return windows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=20.0, help="seconds per window")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds from a page's first repaint to its window")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-load", type=float, default=1.5,
                        help="wait before each case until the 1-minute load is under this")
    parser.add_argument("--load-wait", type=float, default=180.0,
                        help="at most this many seconds of that wait")
    parser.add_argument("--venv", type=Path, default=v015_side.default_environment(),
                        help="v0.15's virtual environment (made there when missing)")
    parser.add_argument("--pages", default=",".join(p.key for p in PAGES),
                        help="which cases, comma-separated: "
                             + ", ".join(p.key for p in PAGES))
    parser.add_argument("--baseline", metavar="REF",
                        help="also measure this project at git REF (its frontend built with "
                             "jlpm in a temporary worktree), beside this tree")
    parser.add_argument("--out", type=Path,
                        default=Path(tempfile.gettempdir()) / "nvdashboard-versus-v015",
                        help="where every window's JSON and screenshot go")
    args = parser.parse_args()
    known = {p.key: p for p in PAGES}
    unknown = [key for key in args.pages.split(",") if key and key not in known]
    if unknown:
        parser.error(f"unknown page {', '.join(unknown)} (choose from {', '.join(known)})")
    pages = [known[key] for key in args.pages.split(",") if key]
    if not (BUILT / "package.json").exists():
        parser.error(f"no labextension build in {BUILT.parent}: run `jlpm build` first, so "
                     "that ours is this tree's frontend")
    if not Path(CHROMIUM).exists():
        parser.error(f"no {CHROMIUM}")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"# {platform.node()}, {os.cpu_count()} cores, JupyterLab "
          f"{importlib.metadata.version('jupyterlab')}, window {args.window:g} s, "
          f"settle {args.settle:g} s, {args.rounds} round(s), max load {args.max_load:g}; "
          "4 simulated GPUs (this project's simnvml driver, profile "
          f"{v015_side.simulation_settings()['profile']}) under both: v0.15 runs "
          "nvidia-ml-py over it as its loaded NVML library", flush=True)
    windows = run(args, pages)
    for page in pages:
        print()
        print(page_table(page, windows, args.baseline and baseline_name(args.baseline)))
    print(f"\n# {len(windows)} windows in {(time.monotonic() - started) / 60:.1f} min; "
          f"JSON and screenshots in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
