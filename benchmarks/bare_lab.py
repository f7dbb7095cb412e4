"""What a bare JupyterLab costs with this extension, and without it (issue 47, item 3).

Starts a real ``jupyter lab`` (``tests/support/jupyter.py``: token, base URL /user/alice/,
4 simulated GPUs sampled every 200 ms) and opens ``/lab`` in Debian's Chromium at 1280x800
with no dashboard tab, then measures over a window:

* Chromium's CPU over all its processes (``harness.chromium_cpu_s``), in % of
  one core;
* the Lab server's own CPU (the ``jupyter lab`` process, not its children);
* the dashboard server's CPU (the child that jupyter-server-proxy started, once something
  asked it);
* what reached the browser for the glance: ``glance.json`` requests and ``glance/stream``
  messages, per minute.

Each lab is measured twice on one page: with the dashboards sidebar closed, then open.
The sources, one lab each, in every round:

* ``without``: this checkout with the extension's frontend disabled
  (``labconfig/page_config.json``, what ``jupyter labextension disable`` writes), the floor;
* ``REF`` (with ``--baseline REF``): that git revision, its frontend built with ``jlpm``;
* this checkout, with its own build (``jlpm build`` first).

Run it from the project root::

    python benchmarks/bare_lab.py [--window 30] [--settle 10] [--rounds 3] [--baseline REF]

Rounds alternate which source goes first. With more than one round it prints each source's
median and range, and each round's ratio of this checkout to the others. The machine's
1-minute load is printed before each window: compare figures from one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.figures import spread  # noqa: E402
from benchmarks.harness import chromium_cpu_s, cpu_s_by_pid  # noqa: E402
from benchmarks.revision import revision_worktree  # noqa: E402
from tests.support.browser import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402
from tests.support.jupyter import dashboard_servers, jupyter_lab  # noqa: E402

SIDEBAR_TAB = '[data-id="nvdashboard-sidebar"]'
SIDEBAR_PANEL = "#nvdashboard-sidebar"
WITHOUT = "without"


@dataclass
class Source:
    name: str
    tree: Path  # whose package the lab imports and whose build it loads
    enabled: bool = True


@dataclass
class Window:
    source: str
    case: str  # "sidebar closed" or "sidebar open"
    round_index: int
    browser_pct: float
    lab_pct: float
    dashboard_pct: float
    glance_requests_per_min: float
    glance_messages_per_min: float
    load_1min: float


def build_frontend(tree: Path) -> None:
    """``jlpm build`` in ``tree`` (a revision's worktree), with this checkout's node_modules."""
    modules = tree / "node_modules"
    if not modules.exists():
        modules.symlink_to((ROOT / "node_modules").resolve())
    print(f"... building {tree.name}'s frontend", file=sys.stderr, flush=True)
    subprocess.run(["jlpm", "build"], cwd=tree, check=True, stdout=subprocess.DEVNULL)


@contextmanager
def lab_of(source: Source) -> Iterator[object]:
    """A lab that imports ``source``'s package and loads its build (or no frontend)."""
    with tempfile.TemporaryDirectory(prefix="nvdashboard-bare-") as share:
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(source.tree),
                                                           os.environ.get("PYTHONPATH")]))}
        build = source.tree / "jupyterlab_nvdashboard" / "labextension"
        if source.enabled:
            (Path(share) / "labextensions").mkdir()
            (Path(share) / "labextensions" / "jupyterlab-nvdashboard").symlink_to(build)
            env["JUPYTER_PATH"] = share
        else:
            config = Path(share) / "labconfig"
            config.mkdir()
            (config / "page_config.json").write_text(json.dumps(
                {"disabledExtensions": {"jupyterlab-nvdashboard": True}}))
            env["JUPYTER_CONFIG_PATH"] = share
        with jupyter_lab(simulate=4, extra_env=env) as lab:
            yield lab


class GlanceTraffic:
    """Counts what the page receives for the glance: requests and socket messages."""

    def __init__(self, page) -> None:  # noqa: ANN001 - playwright Page
        self.requests = 0
        self.messages = 0
        page.on("request", self._request)
        page.on("websocket", self._socket)

    def _request(self, request) -> None:  # noqa: ANN001
        if "nvdashboard/glance" in request.url:
            self.requests += 1

    def _socket(self, socket) -> None:  # noqa: ANN001
        if "nvdashboard/glance" in socket.url:
            socket.on("framereceived", self._message)

    def _message(self, _payload: object) -> None:
        self.messages += 1

    def wait_until_live(self, page, timeout_s: float = 60.0) -> None:  # noqa: ANN001
        """Until the socket has brought a glance: the steady state, not the start.

        The first ``glance.json`` (and its retries while the proxy launches the
        dashboard server) comes before the socket; a window that opens before
        the socket's first message counts them as if the glance were polled.
        """
        deadline = time.monotonic() + timeout_s
        while self.messages == 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no glance came over its socket in {timeout_s:.0f} s")
            page.wait_for_timeout(100)  # Playwright delivers the page's events while it waits


def measure_window(lab, page, traffic: GlanceTraffic, source: str, case: str,  # noqa: ANN001
                   round_index: int, window_s: float) -> Window:
    lab_process = psutil.Process(lab.process.pid)
    load = os.getloadavg()[0]
    servers = dashboard_servers(lab_process.pid)
    browser0, lab0, dash0 = chromium_cpu_s(), cpu_s_by_pid([lab_process]), cpu_s_by_pid(servers)
    requests0, messages0 = traffic.requests, traffic.messages
    started = time.monotonic()
    # Playwright delivers the page's events while it waits.
    page.wait_for_timeout(window_s * 1000)
    elapsed = time.monotonic() - started
    browser1, lab1, dash1 = chromium_cpu_s(), cpu_s_by_pid([lab_process]), cpu_s_by_pid(servers)
    for server in dashboard_servers(lab_process.pid):  # one that started in the window
        if server.pid not in dash0:
            dash0[server.pid] = 0.0
            dash1.update(cpu_s_by_pid([server]))

    def pct(before: dict, after: dict) -> float:
        return 100 * sum(after[k] - before.get(k, 0.0) for k in after) / elapsed

    per_min = 60 / elapsed
    window = Window(source, case, round_index, pct(browser0, browser1), pct(lab0, lab1),
                    pct(dash0, dash1), (traffic.requests - requests0) * per_min,
                    (traffic.messages - messages0) * per_min, load)
    print(f"    {source:>10} {case}: browser {window.browser_pct:.2f}%, lab server "
          f"{window.lab_pct:.2f}%, dashboard server {window.dashboard_pct:.2f}%, glance "
          f"{window.glance_requests_per_min:.1f} requests/min, "
          f"{window.glance_messages_per_min:.1f} messages/min (load {load:.2f})",
          file=sys.stderr, flush=True)
    return window


def measure_source(browser, source: Source, round_index: int, window_s: float,  # noqa: ANN001
                   settle_s: float) -> list[Window]:
    print(f"... {source.name}, round {round_index + 1}", file=sys.stderr, flush=True)
    with lab_of(source) as lab:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        traffic = GlanceTraffic(page)
        try:
            page.goto(f"{lab.url}lab?token={lab.token}")
            page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=120_000)
            page.wait_for_selector("#jp-main-dock-panel .lm-TabBar-tab", timeout=120_000)
            # No dashboard tab: the Launcher is what a bare Lab shows.
            page.wait_for_timeout(settle_s * 1000)
            if source.enabled:
                traffic.wait_until_live(page)
            windows = [measure_window(lab, page, traffic, source.name, "sidebar closed",
                                      round_index, window_s)]
            if source.enabled:
                page.click(SIDEBAR_TAB)
                page.wait_for_selector(SIDEBAR_PANEL, state="visible", timeout=60_000)
                page.wait_for_timeout(settle_s * 1000)
                windows.append(measure_window(lab, page, traffic, source.name,
                                              "sidebar open", round_index, window_s))
            return windows
        finally:
            page.close()


def tables(windows: list[Window], sources: list[Source]) -> str:
    measures = (("Chromium CPU %", "browser_pct"), ("Lab server CPU %", "lab_pct"),
                ("dashboard server CPU %", "dashboard_pct"),
                ("glance requests/min", "glance_requests_per_min"),
                ("glance messages/min", "glance_messages_per_min"))
    rounds = sorted({w.round_index for w in windows})
    this = sources[-1].name
    others = [s.name for s in sources[:-1]]
    head = ("| case | measure | " + " | ".join(f"{s.name} median (range)" for s in sources)
            + "".join(f" | {this} ÷ {o} per round" for o in others) + " |")
    lines = [head, "|" + "---|" * (2 + len(sources) + len(others))]
    for case in ("sidebar closed", "sidebar open"):
        for label, attr in measures:
            by_source = {s.name: {w.round_index: getattr(w, attr) for w in windows
                                  if w.source == s.name and w.case == case}
                         for s in sources}
            if not any(by_source.values()):
                continue
            cells = [spread(list(v.values()), 2) if v else "-" for v in by_source.values()]
            ratios = []
            for other in others:
                mine, theirs = by_source[this], by_source[other]
                ratios.append(", ".join(f"{mine[r] / theirs[r]:.2f}" for r in rounds
                                        if r in mine and theirs.get(r)) or "-")
            lines.append(f"| {case} | {label} | " + " | ".join(cells)
                         + "".join(f" | {r}" for r in ratios) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=30.0, help="seconds per window")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds after the page (or the sidebar) opened, before a window")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", metavar="REF", help="git revision measured beside")
    parser.add_argument("--no-without", action="store_true",
                        help="skip the lab with the extension's frontend disabled")
    args = parser.parse_args()
    if not (ROOT / "jupyterlab_nvdashboard" / "labextension" / "package.json").exists():
        parser.error("no build of this checkout: run `jlpm build` first")
    from playwright.sync_api import sync_playwright

    with ExitStack() as stack:
        sources = [] if args.no_without else [Source(WITHOUT, ROOT, enabled=False)]
        if args.baseline:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="nvdashboard-baseline-")))
            tree = stack.enter_context(revision_worktree(args.baseline, folder))
            build_frontend(tree)
            sources.append(Source(args.baseline, tree))
        sources.append(Source(ROOT.name, ROOT))
        print(f"# {os.uname().nodename} {os.cpu_count()} cores, window {args.window:g} s, "
              f"settle {args.settle:g} s, 4 simulated GPUs every 200 ms, Chromium 1280x800 "
              f"on /lab with no dashboard tab; sources {[s.name for s in sources]}",
              flush=True)
        playwright = stack.enter_context(sync_playwright())
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=CHROMIUM_FLAGS)
        stack.callback(browser.close)
        windows: list[Window] = []
        for round_index in range(args.rounds):
            order = sources if round_index % 2 == 0 else sources[::-1]
            for source in order:
                windows += measure_source(browser, source, round_index, args.window,
                                          args.settle)
        print(tables(windows, sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
