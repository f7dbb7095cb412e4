"""Cost of ``/cell.json``: what one notebook cell did on the GPU, over a 10-minute span of
8 GPUs (issue 45; target: 20 ms or less on this machine).

    python benchmarks/cell_report.py [--gpus 8] [--minutes 10] [--held 8] [--repeats 30]
    python benchmarks/cell_report.py --baseline 68adbdc [--rounds 3]

Builds the history a server holds: 30 minutes (the in-memory history's default length) of
``--gpus`` H200-class GPUs (facts from the simulated driver) at the default tick (0.2 s),
every GPU's utilization varying, GPM and per-process lists once a second with their owners
(a kernel and its child on ``--held`` GPUs, another user's process on the rest), health
every tick. Then times, ``--repeats`` times each:

- the report itself (``apps/cells.cell_report``: gathering the span and its passes, and the
  judgment with each held GPU's diagnosis over the span), in wall time and in the thread's
  CPU time (on a machine shared with other jobs, wall time includes waiting for a core);
- ``GET /cell.json`` on a real server over that history, from a client on this machine:
  what the footer waits for.

Prints the median and range (min-max) of each.

``--baseline REV`` times that git revision side by side with this tree: each round runs this
script once on the revision's package (checked out in a temporary worktree) and once on this
tree's, each in a fresh process over the same history (one span end for all), so drift in
the machine's load hits both alike. It prints each round's and all rounds' figures per side,
the load average before and after, and whether both sides answered the same report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

# The package to time: this checkout's, or (for --baseline) a revision's worktree.
sys.path.insert(0, os.environ.get("CELL_REPORT_PACKAGE_ROOT")
                or str(Path(__file__).resolve().parent.parent))

from tornado.ioloop import IOLoop

from jupyterlab_nvdashboard.apps.cells import cell_report
from jupyterlab_nvdashboard.apps.processes import current_user
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.metrics import (
    OWNER_FAMILY,
    PROCESS_FAMILY,
    GpuReading,
    HostReading,
    Metrics,
    ProcessOwner,
    ProcessReading,
)
from jupyterlab_nvdashboard.metrics.families import (
    GPM_FAMILY,
    HEALTH_FAMILY,
    GpmReading,
    HealthReading,
)
from jupyterlab_nvdashboard.server import make_server
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
GIB = float(2**30)
HISTORY_S = 1800.0
TARGET_MS = 20.0
KERNEL = "6f1c2a8e-0d4b-4c55-9a1e-3b7d2c9e8f01"
TOKEN = "cell-report-benchmark"


def fill(metrics: Metrics, held: int, interval_s: float, end_s: float) -> None:
    """``HISTORY_S`` of samples ending at ``end_s`` (wall time), appended to the history."""
    facts = metrics.facts
    me = current_user() or "me"
    owners = {4100: ProcessOwner(4100, "ok", me, f"python -f kernel-{KERNEL}.json", None,
                                 KERNEL, 4100),
              4101: ProcessOwner(4101, "ok", me, "python worker", None, KERNEL, 4100),
              4300: ProcessOwner(4300, "ok", "someone-else", "python train.py", None, None,
                                 None)}
    health_values: list[object] = [1410.0, 1980.0, 2619.0, 2619.0, 0, 0, 60.0, 87.0, 92.0,
                                   500.0, 700.0, None, 0, 0, 0, 0, False, False, ()]
    health = {f.index: HealthReading(*health_values) for f in facts}  # type: ignore[arg-type]
    per_second = max(1, round(1.0 / interval_s))
    ticks = int(HISTORY_S / interval_s)
    now_mono = time.monotonic()
    gpm: dict[int, GpmReading] = {}
    for i in range(ticks):
        t = end_s - (ticks - 1 - i) * interval_s
        wave = 50.0 + 45.0 * math.sin(i / 37.0)
        gpus = tuple(GpuReading.unavailable(f.index, lost=False)._replace(
            utilization_pct=wave, memory_used_bytes=13 * GIB, memory_total_bytes=141 * GIB,
            pcie_rx_bytes_per_s=1e9, pcie_tx_bytes_per_s=5e8) for f in facts)
        extra: dict[str, object] = {HEALTH_FAMILY: health}
        if i % per_second == 0:
            gpm = {f.index: GpmReading(wave * 0.6, 40.0, 10.0, 30.0, 1.0, 20.0, 5.0, 1e9, 5e8,
                                       2e9, 2e9) for f in facts}
            extra[PROCESS_FAMILY] = tuple(
                entry for f in facts for entry in (
                    (ProcessReading(f.index, 4100, "compute", 12 * GIB, wave, 10.0),
                     ProcessReading(f.index, 4101, "compute", GIB, wave, 10.0))
                    if f.index < held else
                    (ProcessReading(f.index, 4300, "compute", 13 * GIB, wave, 10.0),)))
            extra[OWNER_FAMILY] = owners
        extra[GPM_FAMILY] = gpm
        host = HostReading(30.0 + (i % 40), 1e10, 6e10, 0.0, 0.0, 0.0, 0.0)
        metrics.history.append(t, gpus, host, extra=extra,
                               monotonic_s=now_mono - (end_s - t))


def serve(config: Config, sources: DashboardSources) -> tuple[object, threading.Thread]:
    """A real server over ``sources`` (its sampler not started: the history is the
    script's), on its own IOLoop thread."""
    ready = threading.Event()
    holder: dict[str, object] = {}

    def run() -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        server = make_server(config, sources, io_loop=IOLoop.current())
        server.start()
        holder["server"] = server
        ready.set()
        server.io_loop.start()
        server.stop()
        server.io_loop.close(all_fds=True)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(30)
    return holder["server"], thread


def measure(gpus: int, held: int, minutes: float, interval: float, repeats: int,
            end: float) -> dict[str, Any]:
    """The report's wall and CPU ms and ``GET /cell.json``'s wall ms, ``repeats`` each, over
    a history ending at ``end``; and the report itself."""
    config = Config(port=free_port(), interval_s=interval, token=TOKEN,
                    runs_dir=Path(os.devnull).parent,
                    simulation=SimulationConfig(gpu_count=gpus, profile="h200"))
    metrics = create_metrics(config, environ={})
    metrics.nvml.ensure_initialized()
    sources = DashboardSources(metrics)
    fill(metrics, held, interval, end)
    start = end - minutes * 60
    span = (start, end - 2.0)  # a pass follows the span's end: nothing is waited for
    first = cell_report(sources, KERNEL, *span)  # warm-up, and what is timed says
    assert len(first["gpus"]) == held and first["state"] == "busy", first["verdict"]
    wall, cpu = [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.thread_time()
        cell_report(sources, KERNEL, *span)
        cpu.append(1000 * (time.thread_time() - started_cpu))
        wall.append(1000 * (time.perf_counter() - started))
    server, thread = serve(config, sources)
    url = f"http://127.0.0.1:{config.port}/cell.json?" + urlencode(
        {"kernel": KERNEL, "start": f"{span[0]:.3f}", "end": f"{span[1]:.3f}"})
    request = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    http = []
    try:
        for _ in range(repeats + 1):
            started = time.perf_counter()
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                assert response.status == 200
                response.read()
            http.append(1000 * (time.perf_counter() - started))
    finally:
        server.io_loop.add_callback(server.io_loop.stop)  # type: ignore[attr-defined]
        thread.join(10)
    samples = sum(1 for s in metrics.history.window(HISTORY_S + 1) if span[0] <= s.time_s
                  <= span[1])
    # The first request opens the connection pool's thread.
    return {"wall_ms": wall, "cpu_ms": cpu, "http_ms": http[1:], "samples": samples,
            "report": first}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ms ({min(values):.1f}-{max(values):.1f})"


def load() -> str:
    return "-".join(f"{value:.2f}" for value in os.getloadavg())


def side_by_side(revision: str, rounds: int, arguments: list[str]) -> int:
    """Alternate fresh processes of ``revision``'s package and this tree's, ``rounds``
    times, over one history (the same span end)."""
    from benchmarks.revision import in_turn  # this tree's (ROOT is on sys.path)

    loads = [load()]
    sides = in_turn(revision, rounds, __file__,
                    [*arguments, "--end", repr(time.time() - 5.0)], "CELL_REPORT_PACKAGE_ROOT")
    loads.append(load())
    first = sides["this tree"][0]
    print(f"/cell.json: {arguments[arguments.index('--minutes') + 1]}-minute span of "
          f"{arguments[arguments.index('--gpus') + 1]} GPUs, {first['samples']} samples, "
          f"{revision} against this tree, {rounds} alternating rounds of "
          f"{len(first['wall_ms'])} repeats; load average (1, 5, 15 min) {loads[0]} before, "
          f"{loads[1]} after\n")
    print("| round | tree | the report, wall | the report, CPU | `GET /cell.json`, wall |\n"
          "|---|---|---|---|---|")
    for round_number in range(rounds):
        for side in sides:
            run = sides[side][round_number]
            print(f"| {round_number + 1} | {side} | {spread(run['wall_ms'])} | "
                  f"{spread(run['cpu_ms'])} | {spread(run['http_ms'])} |")
    for side, runs in sides.items():
        pooled = [[v for run in runs for v in run[figure]]
                  for figure in ("wall_ms", "cpu_ms", "http_ms")]
        print(f"| all | {side} | " + " | ".join(spread(values) for values in pooled) + " |")
    same = all(run["report"] == first["report"] for runs in sides.values() for run in runs)
    print(f"\nthe same report on both sides: {'yes' if same else 'NO'}\n"
          f"  verdict: {first['report']['verdict'][:120]}...")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--held", type=int, default=None,
                        help="GPUs the kernel holds (default: all)")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--baseline", metavar="REV",
                        help="also time the report at this git revision, side by side")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds for --baseline (3)")
    parser.add_argument("--end", type=float, help=argparse.SUPPRESS)  # --baseline's sides
    parser.add_argument("--json", type=Path, help="write the per-run figures here")
    args = parser.parse_args(argv)
    held = args.gpus if args.held is None else args.held
    if args.baseline:
        return side_by_side(args.baseline, args.rounds,
                            ["--gpus", str(args.gpus), "--held", str(held),
                             "--minutes", f"{args.minutes:g}", "--interval",
                             f"{args.interval:g}", "--repeats", str(args.repeats)])
    result = measure(args.gpus, held, args.minutes, args.interval, args.repeats,
                     time.time() - 5.0 if args.end is None else args.end)
    if args.json:
        args.json.write_text(json.dumps(result))
    print(f"/cell.json: {args.minutes:g}-minute span of {args.gpus} GPUs (the kernel on "
          f"{held}), {result['samples']} samples at {args.interval} s in a "
          f"{HISTORY_S / 60:.0f}-minute history, {args.repeats} repeats, pid {os.getpid()}, "
          f"load average {load()}")
    verdict = result["report"]["verdict"]
    print(f"  verdict: {verdict[:120]}{'...' if len(verdict) > 120 else ''}")
    print(f"  the report, wall:  {spread(result['wall_ms'])}")
    print(f"  the report, CPU:   {spread(result['cpu_ms'])}")
    print(f"  GET /cell.json:    {spread(result['http_ms'])}  (target <= {TARGET_MS:g} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
