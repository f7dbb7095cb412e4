"""What K open dashboards cost the server, the wire and the browser.

Starts ``python -m jupyterlab_nvdashboard.server PORT --simulate 4 --interval 0.2`` as a
subprocess (on 127.0.0.1 only) and, for each K, opens K viewers of ``/GPU-Resources`` and
measures over a fixed window:

* server CPU (% of one core) and RSS at the start and end of the window (psutil);
* simulated NVML calls per second (``nvml_calls`` in ``/info.json``, simulate mode only);
* websocket bytes per second per client, server to client, and client to server;
* raw clients: update latency from a sample's own timestamp (the streamed ``time`` column,
  epoch ms) to its arrival at the client, p50 and p99;
* Chromium clients: the browser's CPU per open page (all chromium processes / pages), and
  on stderr the same split by Chromium process type (renderer, GPU process, browser);
  ``chromium-hidden`` is one page told it is hidden, as the JupyterLab extension tells a
  background tab;
* encodes per published tick and RSS per extra viewer, where the server reports them.

Run it from the project root::

    python benchmarks/dashboard_overhead.py [--window 20] [--raw 0,1,4,16,64] [--browser 1,4,16]
        [--baseline REF]  # also measure git REF (e.g. the per-session path), side by side
        [--source DIR]    # import the server from DIR instead of this checkout
        [--routes /GPU-Resources,/GPU-Health,/]  # the Chromium runs, one route after another
        [--profile DIR]   # a CDP CPU profile of each Chromium page, and its top functions
        [--rounds N]      # every run N times, sources alternating first; medians and ranges
        [--settle S]      # seconds from a page's document to its window (default 2)

Chromium pages are 1280x800. A route the baseline does not serve (``/index.json`` lacks it)
is skipped for the baseline; ``/`` is measured as a plain page (it has no Bokeh document).

With ``--baseline``, each K is measured for the baseline and then for this checkout, one
after the other, so both see the same machine. A raw viewer does what a page does: a
Bokeh session (pulling the document), plus the ``<route>/stream`` socket where the server
has one (``/info.json`` says so); raw clients run in this process, so their own CPU is
printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import statistics
import struct
import sys
import tempfile
import time
import urllib.request
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.harness import (  # noqa: E402
    DashboardServer,
    chromium_cpu_s,
    per_process_pct,
)
from benchmarks.revision import revision_worktree  # noqa: E402
from tests.support.bokeh_client import auth_headers, open_session  # noqa: E402
from tests.support.servers import free_port, with_token  # noqa: E402
from tests.support.stream_client import open_stream  # noqa: E402

ROUTE = "/GPU-Resources"
CHROMIUM = "/usr/bin/chromium"


@dataclass
class Result:
    kind: str
    viewers: int
    source: str = ""
    encodes_per_tick: float | None = None
    server_cpu_pct: float = 0.0
    nvml_calls_per_s: float | None = None
    rss_start_mb: float = 0.0
    rss_end_mb: float = 0.0
    down_bytes_per_s: float | None = None  # per client, server -> client
    up_bytes_per_s: float | None = None  # per client, client -> server
    up_messages_per_s: float | None = None
    latencies_ms: list[float] = field(default_factory=list)
    client_cpu_pct: float | None = None  # this process (raw) or per page (browser)
    # Chromium: the pages' repaints inside the window. None where a visible page of a live
    # route drew nothing: it never received its frames, so its figure is not a page's cost.
    draws: int | None = None
    round_index: int = 0  # --rounds: which round measured it
    route: str = ROUTE

    def percentile(self, q: float) -> str:
        if not self.latencies_ms:
            return "-"
        ordered = sorted(self.latencies_ms)
        return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.0f}"


def info(url: str) -> dict:
    request = urllib.request.Request(url + "/info.json", headers=auth_headers())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


class ServerUnderTest(DashboardServer):
    """The standalone server with 4 simulated GPUs, as every viewer here sees it."""

    def __init__(self, source: Path, interval_s: float) -> None:
        port = free_port()
        super().__init__(source, port, ["-m", "jupyterlab_nvdashboard.server", str(port),
                                         "--simulate", "4", "--interval", str(interval_s)])
        self.streams = "stream" in info(self.url)  # the broadcast path

    def encodes(self) -> tuple[int, int]:
        """(frames encoded, ticks published) so far; (0, 0) on the per-session path."""
        stream = info(self.url).get("stream")
        if not stream:
            return 0, 0
        return sum(stream["encodes"].values()), stream.get("publishes", 0)

    def nvml_calls(self) -> int | None:
        return info(self.url).get("nvml_calls")


# ----- decoding the streamed ``time`` column ----------------------------------------
def _decode_array(value: object, buffers: dict[str, bytes]) -> list[float]:
    """A streamed column: a plain list, or an ndarray as base64 bytes or a binary buffer."""
    if isinstance(value, list):
        return [float(v) for v in value if isinstance(v, (int, float))]
    if not isinstance(value, dict) or value.get("type") != "ndarray":
        return []
    array = value.get("array")
    if isinstance(array, list):
        return [float(v) for v in array]
    if not isinstance(array, dict):
        return []
    if array.get("type") == "bytes" and isinstance(array.get("data"), str):
        raw = base64.b64decode(array["data"])
    elif "id" in array and array["id"] in buffers:
        raw = buffers[array["id"]]
    elif isinstance(array.get("data"), dict) and array["data"].get("id") in buffers:
        raw = buffers[array["data"]["id"]]
    else:
        return []
    codes = {"float64": "d", "float32": "f", "int32": "i", "int64": "q", "uint32": "I"}
    code = codes.get(value.get("dtype", "float64"), "d")
    order = "<" if value.get("order", "little") == "little" else ">"
    count = len(raw) // struct.calcsize(code)
    return list(struct.unpack(f"{order}{count}{code}", raw[: count * struct.calcsize(code)]))


def streamed_times_ms(content: dict, buffers: dict[str, bytes]) -> list[float]:
    times: list[float] = []
    for event in content.get("events", []):
        if event.get("kind") != "ColumnsStreamed":
            continue
        data = event.get("data", {})
        if isinstance(data, dict) and data.get("type") == "map":
            entries = data.get("entries", [])
        elif isinstance(data, dict):
            entries = list(data.items())
        else:
            entries = []
        for key, column in entries:
            if key == "time":
                times.extend(_decode_array(column, buffers))
    return times


# ----- raw Bokeh-protocol clients ----------------------------------------------------
async def _read_messages(session, result_latencies: list[float], sizes: list[int],
                         window: dict[str, float]) -> None:
    """Read from the moment the session opens (so nothing queues up unread); count only
    what arrives inside the measured window."""
    connection = session.connection
    while time.monotonic() < window["stop_at"]:
        stop_at = window["stop_at"]
        try:
            header_frame = await asyncio.wait_for(connection.read_message(),
                                                  max(0.01, stop_at - time.monotonic()))
        except asyncio.TimeoutError:
            return
        if header_frame is None:
            return
        header = json.loads(header_frame)
        frames = [await connection.read_message() for _ in range(2)]
        buffers: dict[str, bytes] = {}
        for _ in range(header.get("num_buffers", 0)):
            buffer_header = json.loads(await connection.read_message())
            payload = await connection.read_message()
            buffers[buffer_header.get("id")] = payload if isinstance(payload, bytes) else b""
            if window["start_at"] <= time.monotonic() <= window["stop_at"]:
                sizes.append(len(payload or b""))
        arrived_ms = time.time() * 1000
        if not window["start_at"] <= time.monotonic() <= window["stop_at"]:
            continue
        sizes.append(len(header_frame) + sum(len(frame or "") for frame in frames))
        if header.get("msgtype") == "PATCH-DOC":
            stamps = streamed_times_ms(json.loads(frames[1]), buffers)
            if stamps:
                result_latencies.append(arrived_ms - max(stamps))


async def _read_stream(stream, result_latencies: list[float], sizes: list[int],
                       window: dict[str, float]) -> None:
    """Read a page's stream; latency from the newest sample's own timestamp to arrival."""
    while time.monotonic() < window["stop_at"]:
        try:
            frame = await stream.receive(max(0.01, window["stop_at"] - time.monotonic()))
        except (asyncio.TimeoutError, ConnectionError):
            return
        if window["start_at"] <= time.monotonic() <= window["stop_at"]:
            sizes.append(frame.size_bytes)
            times = frame.rows.numeric.get("time")
            if times is not None and len(times):
                result_latencies.append(time.time() * 1000 - float(times[-1]))


async def _raw_run(server: ServerUnderTest, viewers: int, window_s: float,
                   result: Result) -> None:
    sessions = []
    sizes: list[int] = []
    window = {"start_at": float("inf"), "stop_at": float("inf")}
    readers = []
    for _ in range(viewers):
        sessions.append(await open_session(server.url, ROUTE))
        readers.append(asyncio.ensure_future(
            _read_messages(sessions[-1], result.latencies_ms, sizes, window)))
        if server.streams:
            sessions.append(await open_stream(server.url, ROUTE))
            readers.append(asyncio.ensure_future(
                _read_stream(sessions[-1], result.latencies_ms, sizes, window)))
    await asyncio.sleep(1.0)  # let every session settle
    me = psutil.Process()
    my_cpu = sum(me.cpu_times()[:2])
    _window_start(server, result)
    window["start_at"] = time.monotonic()
    window["stop_at"] = window["start_at"] + window_s
    await asyncio.sleep(window_s)
    _window_end(server, result, window_s)
    # A reader may be waiting for a message that no longer comes (on the broadcast path
    # the Bokeh session carries none): closing ends every wait.
    await asyncio.sleep(0.2)
    for session in sessions:
        session.close()
    await asyncio.gather(*readers, return_exceptions=True)
    if viewers:
        result.down_bytes_per_s = sum(sizes) / window_s / viewers
        result.up_bytes_per_s = result.up_messages_per_s = 0.0
        result.client_cpu_pct = 100 * (sum(me.cpu_times()[:2]) - my_cpu) / window_s
    for session in sessions:
        session.close()


_marks: dict[str, float] = {}


def _window_start(server: ServerUnderTest, result: Result) -> None:
    result.rss_start_mb = server.rss_mb()
    calls = server.nvml_calls()
    encodes, publishes = server.encodes()
    _marks.update(cpu=server.cpu_s(), t=time.monotonic(), calls=-1 if calls is None else calls,
                  encodes=encodes, publishes=publishes)


def _window_end(server: ServerUnderTest, result: Result, window_s: float) -> None:
    elapsed = time.monotonic() - _marks["t"]
    result.server_cpu_pct = 100 * (server.cpu_s() - _marks["cpu"]) / elapsed
    result.rss_end_mb = server.rss_mb()
    calls = server.nvml_calls()
    if calls is not None and _marks["calls"] >= 0:
        result.nvml_calls_per_s = (calls - _marks["calls"]) / elapsed
    encodes, publishes = server.encodes()
    if publishes > _marks["publishes"]:
        result.encodes_per_tick = (encodes - _marks["encodes"]) / (publishes - _marks["publishes"])


def run_raw(source: Path, viewers: int, window_s: float, interval_s: float) -> Result:
    result = Result("raw", viewers, source.name)
    server = ServerUnderTest(source, interval_s)
    try:
        time.sleep(1.0)
        asyncio.run(_raw_run(server, viewers, window_s, result))
    finally:
        server.stop()
    return result


# ----- real Chromium pages -------------------------------------------------------------
# Repaints so far of every live view on the pages (apps/live_client.js counts them); -1 on
# a page without the counter (an older tree), which is then not judged by it.
DRAWS_JS = ("() => window.nvdashboardStreams ? Object.values(window.nvdashboardStreams)"
            ".reduce((sum, view) => sum + view.draws, 0) : -1")


def _draws(pages: list) -> int:
    return sum(page.evaluate(DRAWS_JS) for page in pages)


def top_functions(profile: dict, count: int = 12) -> list[tuple[float, str]]:
    """(ms of self time, "function file:line") of a CDP ``Profiler.stop`` profile, the
    largest first; idle and the profiler's own ``(program)`` bucket included, by name."""
    nodes = {node["id"]: node["callFrame"] for node in profile["nodes"]}
    self_us: dict[str, float] = {}
    for node_id, delta in zip(profile["samples"], profile["timeDeltas"], strict=False):
        frame = nodes[node_id]
        name = (f"{frame['functionName'] or '(anonymous)'} "
                f"{frame['url'].rsplit('/', 1)[-1].split('?')[0]}:{frame['lineNumber']}")
        self_us[name] = self_us.get(name, 0.0) + delta
    ranked = sorted(self_us.items(), key=lambda item: -item[1])[:count]
    return [(us / 1000, name) for name, us in ranked]


def served_routes(url: str, timeout_s: float = 30.0) -> dict:
    """``/index.json`` once the GPUs have been read (GPU routes are listed only then)."""
    deadline = time.monotonic() + timeout_s
    while True:
        request = urllib.request.Request(url + "/index.json", headers=auth_headers())
        with urllib.request.urlopen(request, timeout=10) as response:
            routes = json.loads(response.read())
        if "/GPU-Utilization" in routes or time.monotonic() > deadline:
            return routes
        time.sleep(0.5)


def run_hidden_browser(source: Path, viewers: int, window_s: float,
                       interval_s: float, route: str = ROUTE,
                       profile_dir: Path | None = None, settle_s: float = 2.0) -> Result | None:
    return run_browser(source, viewers, window_s, interval_s, hidden=True, route=route,
                       profile_dir=profile_dir, settle_s=settle_s)


def run_browser(source: Path, viewers: int, window_s: float, interval_s: float,
                hidden: bool = False, route: str = ROUTE,
                profile_dir: Path | None = None, settle_s: float = 2.0) -> Result | None:
    from playwright.sync_api import sync_playwright

    result = Result("chromium-hidden" if hidden else "chromium", viewers, source.name,
                    route=route)
    server = ServerUnderTest(source, interval_s)
    if route != "/" and route not in served_routes(server.url):
        server.stop()
        return None
    counters = {"down": 0, "up": 0, "up_messages": 0}

    def on_websocket(ws) -> None:  # noqa: ANN001 - playwright WebSocket
        def received(payload) -> None:  # noqa: ANN001
            counters["down"] += len(payload)

        def sent(payload) -> None:  # noqa: ANN001
            counters["up"] += len(payload)
            if isinstance(payload, str) and '"msgtype"' in payload:
                counters["up_messages"] += 1

        ws.on("framereceived", received)
        ws.on("framesent", sent)

    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True,
                args=["--no-sandbox", "--disable-gpu", "--no-first-run",
                      "--disable-background-networking", "--disable-dev-shm-usage",
                      "--disable-renderer-backgrounding",
                      "--disable-background-timer-throttling"],
            )
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            pages = []
            for _ in range(viewers):
                page = context.new_page()
                page.on("websocket", on_websocket)
                page.goto(with_token(server.url + route))
                if route != "/":
                    page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0",
                                           timeout=60_000)
                pages.append(page)
                if hidden:  # what the extension posts to a background tab's page
                    page.evaluate("window.postMessage({type: 'nvdashboard:visibility', "
                                  "visible: false}, window.location.origin)")
            # Up to here Chromium is still starting its fresh profile's services and V8 is
            # compiling and optimizing BokehJS; a longer settle measures an open tab later on.
            pages[0].wait_for_timeout(settle_s * 1000)
            for key in counters:
                counters[key] = 0
            profiler = None
            if profile_dir is not None:  # the first page's JavaScript, sampled (CDP)
                profiler = pages[0].context.new_cdp_session(pages[0])
                profiler.send("Profiler.enable")
                profiler.send("Profiler.start")
            browser_cpu = chromium_cpu_s()
            draws_before = _draws(pages)
            _window_start(server, result)
            # Let playwright dispatch websocket events while the window runs.
            pages[0].wait_for_timeout(window_s * 1000)
            _window_end(server, result, window_s)
            by_process = per_process_pct(browser_cpu, chromium_cpu_s(), window_s)
            result.client_cpu_pct = sum(by_process.values()) / viewers
            result.draws = _draws(pages) - draws_before
            print("    chromium CPU by process, % of a core: " + ", ".join(
                f"{kind} {pct:.2f}" for kind, pct in by_process.items())
                + f"; repaints in the window: {result.draws}", file=sys.stderr, flush=True)
            if profiler is not None and profile_dir is not None:
                profile = profiler.send("Profiler.stop")["profile"]
                name = f"{source.name}{route.replace('/', '-') or '-root'}.cpuprofile"
                profile_dir.mkdir(parents=True, exist_ok=True)
                (profile_dir / name).write_text(json.dumps(profile))
                print(f"    CDP profile {profile_dir / name}; self time, ms:", file=sys.stderr)
                for ms, function in top_functions(profile):
                    print(f"      {ms:9.1f}  {function}", file=sys.stderr)
            result.down_bytes_per_s = counters["down"] / window_s / viewers
            result.up_bytes_per_s = counters["up"] / window_s / viewers
            result.up_messages_per_s = counters["up_messages"] / window_s / viewers
            browser.close()
    finally:
        server.stop()
    return result


def table(results: list[Result]) -> str:
    head = ("| source | route | client | K | server CPU % | encodes/tick | NVML calls/s "
            "| RSS start→end MB | down B/s/client | up B/s/client | up msgs/s/client "
            "| latency p50/p99 ms | client CPU % |")
    lines = [head, "|" + "---|" * 13]
    for r in results:
        calls = "-" if r.nvml_calls_per_s is None else f"{r.nvml_calls_per_s:.1f}"
        down = "-" if r.down_bytes_per_s is None else f"{r.down_bytes_per_s:,.0f}"
        up = "-" if r.up_bytes_per_s is None else f"{r.up_bytes_per_s:,.0f}"
        up_messages = "-" if r.up_messages_per_s is None else f"{r.up_messages_per_s:.1f}"
        client = "-" if r.client_cpu_pct is None else (
            f"{r.client_cpu_pct:.1f}" + (" per page" if r.kind == "chromium" else " (all)"))
        if r.kind == "chromium" and r.route != "/" and r.draws == 0:
            client += " (no repaint: not a live page's figure)"
        encodes = "-" if r.encodes_per_tick is None else f"{r.encodes_per_tick:.2f}"
        lines.append(
            f"| {r.source} | {r.route} | {r.kind} | {r.viewers} | "
            f"{r.server_cpu_pct:.1f} | {encodes} | "
            f"{calls} | "
            f"{r.rss_start_mb:.0f}→{r.rss_end_mb:.0f} | {down} | {up} | {up_messages} | "
            f"{r.percentile(0.5)}/{r.percentile(0.99)} | {client} |"
        )
    return "\n".join(lines)


def rounds_table(results: list[Result], sources: list[Path]) -> str:
    """Client CPU per (route, kind, K): each source's median and range over the rounds, and
    each round's ratio of this tree to the first source (measured one right after the other)."""
    head = ("| route | client | K | " + " | ".join(f"{s.name} median (range)" for s in sources)
            + (" | ratio per round | ratio of medians |" if len(sources) > 1 else " |"))
    lines = [head, "|" + "---|" * (3 + len(sources) + (2 if len(sources) > 1 else 0))]
    cases = dict.fromkeys((r.route, r.kind, r.viewers) for r in results
                          if r.client_cpu_pct is not None)
    for route, kind, viewers in cases:
        measured = [{r.round_index: r.client_cpu_pct for r in results if r.source == s.name
                     and (r.route, r.kind, r.viewers) == (route, kind, viewers)
                     and r.client_cpu_pct is not None and r.draws != 0} for s in sources]
        per_source = [list(by_round.values()) for by_round in measured]
        cells = [f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}), {len(v)} runs"
                 if v else "-" for v in per_source]
        line = f"| {route} | {kind} | {viewers} | " + " | ".join(cells)
        if len(sources) > 1:
            first, last = measured[0], measured[-1]
            ratios = [last[i] / first[i] for i in sorted(first) if i in last and first[i]]
            line += " | " + ", ".join(f"{r:.2f}" for r in ratios) + " | " + (
                f"{statistics.median(last.values()) / statistics.median(first.values()):.2f}"
                if first and last and statistics.median(first.values()) else "-")
        lines.append(line + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured per K")
    parser.add_argument("--interval", type=float, default=0.2, help="server sampling interval")
    parser.add_argument("--raw", default="0,1,4,16,64", help="viewer counts, raw websocket")
    parser.add_argument("--browser", default="1,4,16", help="viewer counts, Chromium (<= 16)")
    parser.add_argument("--hidden", default="1", help="viewer counts, hidden Chromium pages")
    parser.add_argument("--source", type=Path, default=ROOT,
                        help="directory whose jupyterlab_nvdashboard the server imports")
    parser.add_argument("--baseline", metavar="REF",
                        help="git ref to measure side by side (extracted to a temp dir)")
    parser.add_argument("--routes", default=ROUTE,
                        help="routes the Chromium runs open, comma-separated")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds between a Chromium page's document being ready and "
                             "the window's start")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat every run this many times, alternating which source "
                             "goes first, and print each source's median and range")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="write a CDP CPU profile of each Chromium run's first page to "
                             "DIR and print its top functions (the profiler costs CPU too)")
    args = parser.parse_args()
    routes = [route for route in args.routes.split(",") if route]
    counts = {"raw": [int(k) for k in args.raw.split(",") if k],
              # A browser run of no page measures nothing (the raw run of 0 is the idle
              # server): 0 there is left out, as an empty list is.
              "chromium": [int(k) for k in args.browser.split(",") if k and int(k)],
              "chromium-hidden": [int(k) for k in args.hidden.split(",") if k and int(k)]}
    if any(k > 16 for k in counts["chromium"]):
        parser.error("--browser counts must be <= 16")
    if counts["chromium"] and not Path(CHROMIUM).exists():
        print(f"no {CHROMIUM}: skipping the browser runs", file=sys.stderr)
        counts["chromium"] = counts["chromium-hidden"] = []
    with tempfile.TemporaryDirectory(prefix="nvdashboard-baseline-") as folder, \
            (revision_worktree(args.baseline, Path(folder)) if args.baseline
             else nullcontext()) as baseline:
        sources = [baseline, args.source] if baseline else [args.source]
        return measure(args, routes, counts, sources)


def measure(args: argparse.Namespace, routes: list[str], counts: dict[str, list[int]],
            sources: list[Path]) -> int:
    """Every configured run, for each source side by side; prints the table."""
    print(f"# {platform.node()} {os.cpu_count()} cores, python {platform.python_version()}, "
          f"window {args.window:.0f} s, settle {args.settle:g} s, "
          f"interval {args.interval * 1000:.0f} ms, "
          f"4 simulated GPUs, routes {routes}, sources {[str(s) for s in sources]}", flush=True)
    results = []
    runs = (("raw", run_raw), ("chromium", run_browser), ("chromium-hidden", run_hidden_browser))
    for round_index, kind, run in ((r, kind, run) for r in range(args.rounds)
                                   for kind, run in runs):
        for route in routes if kind != "raw" else [ROUTE]:
            for viewers in counts[kind]:
                # Each round swaps which source goes first, so neither always follows the
                # other on a machine whose load drifts.
                for source in sources if round_index % 2 == 0 else sources[::-1]:
                    print(f"... {source.name} {kind} {route} K={viewers}", file=sys.stderr,
                          flush=True)
                    extra = {} if kind == "raw" else {"route": route,
                                                      "profile_dir": args.profile,
                                                      "settle_s": args.settle}
                    measured = run(source, viewers, args.window, args.interval, **extra)
                    if measured is None:
                        print("    (not served there: skipped)", file=sys.stderr, flush=True)
                        continue
                    measured.round_index = round_index
                    results.append(measured)
                    latencies = results[-1].latencies_ms
                    if latencies:
                        print(f"    latency mean {statistics.mean(latencies):.0f} ms over "
                              f"{len(latencies)} updates", file=sys.stderr, flush=True)
    print(table(results))
    if args.rounds > 1:
        print(rounds_table(results, sources))
    rss = {(r.source, r.viewers): r.rss_end_mb for r in results if r.kind == "raw"}
    for source in sources:
        low, high = min(counts["raw"], default=0), max(counts["raw"], default=0)
        if high > low and (source.name, low) in rss:
            per_viewer = (rss[(source.name, high)] - rss[(source.name, low)]) / (high - low)
            print(f"{source.name}: server RSS per extra raw viewer {per_viewer:.2f} MB "
                  f"(K={low}→{high})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
