"""What the server reads, and what it costs, with no page, one page and 64 pages open.

Starts the standalone server (``python -m jupyterlab_nvdashboard.server PORT --simulate 4
--interval 0.2``, the store on, in a temporary folder) and measures, on that one process:

* ``no page``: nobody watching (after the server noticed: one check, 1 s);
* ``1 viewer``: one viewer of ``/GPU-Utilization`` (``--route``), doing what a page does (a Bokeh
  session pulling the document, and the ``/GPU-Utilization/stream`` socket);
* ``64 viewers``: 63 more of the same.

For each: simulated NVML calls per second, by family (the core pass, GPM, health, the
process lists, other: counted by function name, below), the server's CPU in % of one core
and its RSS, over a window of ``--window`` seconds; and the RSS per extra viewer,
(RSS with 64 - RSS with 1) / 63. The simulated driver counts every call it answers
(``SimulatedNvml.calls``, by function); the server under test writes them to a file on
SIGUSR1 (``--serve`` below wraps the server for that, for this checkout and a baseline
alike).

Run from the project root::

    python benchmarks/read_rates.py                       # this checkout, 3 rounds
    python benchmarks/read_rates.py --baseline 82e110b    # and that revision, in turn
    python benchmarks/read_rates.py --rounds 1 --window 5 # quicker

Medians and ranges over the rounds; the revisions take turns in each round, so both see
the same machine. NVML call counts do not depend on the machine's load; CPU does.

``--idle``: what an unwatched server costs (issue 51, item 7). Starts this checkout and
the baseline, each with and without the store (``--no-store``), all four at once and side
by side, nobody connected; after ``--warm`` seconds (60), measures ``--rounds`` windows of
``--window`` seconds (3 of 60) on all four together: the server's CPU in % of one core and
its NVML calls per second by family, with the load average at each window's start and end.
``--scenario idle`` plays GPUs with nothing running (the simulated profile's own load keeps
them busy, with no process listed)::

    python benchmarks/read_rates.py --idle --baseline e4fabee --scenario idle
    python benchmarks/read_rates.py --idle --baseline e4fabee
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    # The server under test, imported from PYTHONPATH (this checkout or a baseline's):
    # nothing of this checkout comes first on the path.
    import json
    import os
    import signal

    from jupyterlab_nvdashboard import server

    simulators: list = []
    made = server.create_metrics

    def create_metrics(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        metrics = made(*args, **kwargs)
        simulators.append(metrics.simulator)
        return metrics

    server.create_metrics = create_metrics

    def dump(*_: object) -> None:
        calls = dict(simulators[0].calls) if simulators else {}
        path = os.environ["READ_RATES_CALLS"]
        with open(path + ".part", "w") as out:
            json.dump(calls, out)
        os.replace(path + ".part", path)

    signal.signal(signal.SIGUSR1, dump)
    sys.exit(server.main(sys.argv[2:]))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from contextlib import nullcontext  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.figures import spread  # noqa: E402
from benchmarks.harness import DashboardServer, file_by_signal  # noqa: E402
from benchmarks.revision import revision_worktree  # noqa: E402
from tests.support.bokeh_client import open_session  # noqa: E402
from tests.support.servers import free_port  # noqa: E402
from tests.support.stream_client import open_stream  # noqa: E402

ROUTE = "/GPU-Utilization"
GPUS = 4
SCENARIOS = ("no page", "1 viewer", "64 viewers")
FAMILIES = ("core", "gpm", "health", "processes", "other")
SETTLE_S = 3.0  # the server checks its viewers once a second


def family_of(function: str) -> str:
    """Which reading family an NVML function belongs to (metrics/nvml.py, gpm.py,
    health.py, processes.py); ``other``: start-up, rescans, static facts."""
    if function.startswith("nvmlGpm"):
        return "gpm"
    if "RunningProcesses" in function or function == "nvmlDeviceGetProcessUtilization":
        return "processes"
    if function in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
                    "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetTemperature",
                    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetFieldValues",
                    "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetNvLinkUtilizationCounter"):
        return "core"
    if function.startswith(("nvmlEventSet", "nvmlDeviceGetClockInfo",
                            "nvmlDeviceGetPerformanceState", "nvmlDeviceGetCurrentClocks",
                            "nvmlDeviceGetFanSpeed", "nvmlDeviceGetTotalEccErrors",
                            "nvmlDeviceGetRemappedRows", "nvmlDeviceGetEnforcedPowerLimit",
                            "nvmlDeviceGetCurrPcieLink")):
        return "health"
    return "other"


class ServerUnderTest(DashboardServer):
    """This script's ``--serve`` (the server, counting the simulated driver's calls) from
    ``source``, with an empty runs folder and a store of its own in ``folder``."""

    def __init__(self, source: Path, folder: Path, interval_s: float, store: bool = True,
                 scenario: str = "") -> None:
        port = free_port()
        self.calls_file = folder / f"calls-{port}.json"
        runs = folder / f"runs-{port}"  # an empty runs folder of its own
        runs.mkdir()
        super().__init__(
            source, port,
            [str(Path(__file__).resolve()), "--serve", str(port), "--simulate", str(GPUS),
             "--interval", str(interval_s), *([] if store else ["--no-store"])],
            env={"NVDASHBOARD_STORE": str(folder / f"store-{port}.sqlite"),
                 "NVDASHBOARD_RUNS_DIR": str(runs),
                 **({"NVDASHBOARD_SIMULATE_SCENARIO": scenario} if scenario else {}),
                 "READ_RATES_CALLS": str(self.calls_file)},
        )

    def calls(self) -> dict[str, int]:
        """The simulated driver's calls so far, by function."""
        return file_by_signal(self.process, self.calls_file, 10,
                              "the server wrote no call counts")


def measure_window(server: ServerUnderTest, window_s: float) -> dict[str, float]:
    before, cpu, started = server.calls(), server.cpu_s(), time.monotonic()
    time.sleep(window_s)
    after, cpu_after = server.calls(), server.cpu_s()
    elapsed = time.monotonic() - started
    result = {family: 0.0 for family in FAMILIES}
    for function, count in after.items():
        result[family_of(function)] += (count - before.get(function, 0)) / elapsed
    result["total"] = sum(result[family] for family in FAMILIES)
    result["cpu_pct"] = 100 * (cpu_after - cpu) / elapsed
    result["rss_mb"] = server.rss_mb()
    return result


async def open_viewer(url: str, route: str) -> list[Any]:
    """What a page opens: its Bokeh session and its stream socket."""
    return [await open_session(url, route), await open_stream(url, route)]


async def drain(connection: Any) -> None:
    """Read and drop what the server sends, as a page does (a full buffer slows it)."""
    try:
        while await connection.read_message() is not None:
            pass
    except Exception:  # noqa: BLE001 - closed
        return


async def one_round(server: ServerUnderTest, window_s: float, route: str
                    ) -> dict[str, dict[str, float]]:
    loop = asyncio.get_running_loop()
    out: dict[str, dict[str, float]] = {}
    await asyncio.sleep(SETTLE_S)
    out["no page"] = await loop.run_in_executor(None, measure_window, server, window_s)
    connections: list[Any] = []
    readers = []
    for count, name in ((1, "1 viewer"), (64, "64 viewers")):
        while len(connections) < 2 * count:
            opened = await open_viewer(server.url, route)
            connections += opened
            readers += [asyncio.ensure_future(drain(connection)) for connection in opened]
        await asyncio.sleep(SETTLE_S)
        out[name] = await loop.run_in_executor(None, measure_window, server, window_s)
    for connection in connections:
        connection.close()
    await asyncio.gather(*readers, return_exceptions=True)
    out["64 viewers"]["rss_per_viewer_mb"] = \
        (out["64 viewers"]["rss_mb"] - out["1 viewer"]["rss_mb"]) / 63
    return out


def run(source: Path, folder: Path, window_s: float, interval_s: float, route: str
        ) -> dict[str, dict[str, float]]:
    server = ServerUnderTest(source, folder, interval_s)
    try:
        return asyncio.run(one_round(server, window_s, route))
    finally:
        server.stop()


def table(results: dict[str, list[dict[str, dict[str, float]]]]) -> str:
    columns = ["total", *FAMILIES, "cpu_pct", "rss_mb"]
    lines = ["| source | scenario | NVML calls/s | " + " | ".join(columns[1:]) + " |",
             "|---" * (len(columns) + 2) + "|"]
    for source, rounds in results.items():
        for scenario in SCENARIOS:
            cells = [spread([r[scenario][column] for r in rounds]) for column in columns]
            lines.append(f"| {source} | {scenario} | " + " | ".join(cells) + " |")
    lines.append("")
    for source, rounds in results.items():
        per_viewer = [r["64 viewers"]["rss_per_viewer_mb"] for r in rounds]
        above = [r["64 viewers"]["cpu_pct"] - r["1 viewer"]["cpu_pct"] for r in rounds]
        lines.append(f"{source}: RSS per extra viewer {spread(per_viewer, 2)} MB; "
                     f"CPU of 64 viewers above one {spread(above)} % of a core")
    return "\n".join(lines)


def idle_cost(sources: dict[str, Path], folder: Path, args: argparse.Namespace) -> str:
    """``--idle``: every source with and without the store, side by side, nobody
    connected; the same windows measured on all of them at once."""
    servers: dict[str, ServerUnderTest] = {}
    try:
        for name, source in sources.items():
            for store in (True, False):
                label = f"{name}, {'store' if store else 'no store'}"
                servers[label] = ServerUnderTest(source, folder, args.interval, store,
                                                 args.scenario)
        print(f"{len(servers)} servers up; {args.warm:g} s before the first window",
              file=sys.stderr)
        time.sleep(args.warm)
        windows: dict[str, list[dict[str, float]]] = {label: [] for label in servers}
        loads: list[tuple[float, float]] = []
        for number in range(args.rounds):
            load = os.getloadavg()[0]
            before = {label: (server.calls(), server.cpu_s(), time.monotonic())
                      for label, server in servers.items()}
            time.sleep(args.window)
            for label, server in servers.items():
                calls, cpu, started = before[label]
                after, cpu_after = server.calls(), server.cpu_s()
                elapsed = time.monotonic() - started
                result = {family: 0.0 for family in FAMILIES}
                for function, count in after.items():
                    result[family_of(function)] += (count - calls.get(function, 0)) / elapsed
                result["total"] = sum(result[family] for family in FAMILIES)
                result["cpu_pct"] = 100 * (cpu_after - cpu) / elapsed
                windows[label].append(result)
            loads.append((load, os.getloadavg()[0]))
            print(f"window {number + 1}, load {load:.2f} to {loads[-1][1]:.2f}: " + ", ".join(
                f"{label} {rows[-1]['cpu_pct']:.3f}%" for label, rows in windows.items()),
                file=sys.stderr)
    finally:
        for server in servers.values():
            server.stop()
    columns = ["cpu_pct", "total", *FAMILIES]
    lines = [f"nobody connected, {args.rounds} windows of {args.window:g} s, "
             f"{args.warm:g} s after start, scenario {args.scenario or '(the profile own)'}; "
             "load average (1 min) at each window's start and end: " +
             ", ".join(f"{a:.2f}-{b:.2f}" for a, b in loads), "",
             "| server | CPU % of a core | each window | NVML calls/s | "
             + " | ".join(FAMILIES) + " |", "|---" * (len(columns) + 2) + "|"]
    for label, rows in windows.items():
        cells = [spread([r[c] for r in rows], 3 if c == "cpu_pct" else 1) for c in columns]
        each = ", ".join(f"{r['cpu_pct']:.3f}" for r in rows)
        lines.append(f"| {label} | {cells[0]} | {each} | " + " | ".join(cells[1:]) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="also measure this git revision, in turn")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=15.0, help="seconds per measure")
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--route", default=ROUTE, help=f"what the viewers open ({ROUTE})")
    parser.add_argument("--idle", action="store_true",
                        help="nobody connected: with and without the store, side by side")
    parser.add_argument("--warm", type=float, default=60.0,
                        help="--idle: seconds after start before the first window")
    parser.add_argument("--scenario", default="",
                        help="--idle: NVDASHBOARD_SIMULATE_SCENARIO (e.g. idle)")
    args = parser.parse_args()
    if args.idle and args.window == parser.get_default("window"):
        args.window = 60.0
    print(f"{platform.node()}: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} at start, "
          f"{GPUS} simulated GPUs, {args.rounds} rounds of {args.window:g} s windows",
          file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="read-rates-") as folder_name:
        folder = Path(folder_name)
        sources: dict[str, Path] = {"this checkout": ROOT}
        with (revision_worktree(args.baseline, folder) if args.baseline else nullcontext()) as tree:
            if tree is not None:
                sources = {f"baseline {args.baseline}": tree, **sources}
            if args.idle:
                print(idle_cost(sources, folder, args))
                print(f"load {os.getloadavg()[0]:.2f} at the end", file=sys.stderr)
                return 0
            results: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in sources}
            for number in range(args.rounds):
                order = list(sources.items())
                if number % 2:
                    order.reverse()
                for name, source in order:
                    result = run(source, folder, args.window, args.interval, args.route)
                    results[name].append(result)
                    print(f"round {number + 1}, {name}: " + ", ".join(
                        f"{s} {result[s]['total']:.0f} calls/s {result[s]['cpu_pct']:.2f}%"
                        for s in SCENARIOS), file=sys.stderr)
    print(f"load {os.getloadavg()[0]:.2f} at the end", file=sys.stderr)
    print(f"viewers of {args.route}")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
