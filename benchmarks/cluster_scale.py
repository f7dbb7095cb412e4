"""What cluster mode costs at 64 nodes x 8 GPUs.

Starts a real Dask scheduler (``python -m distributed.cli.dask_scheduler``), then one more
process that runs 64 **in-process simulated workers**: 64 real ``distributed.Worker``
objects on one event loop, each connected to the scheduler over TCP and heartbeating as
usual. Each worker publishes through the plugin's own path (``worker.metrics``, the
version-2 snapshot, its identity in the scheduler's metadata) the snapshot of one real
simulated 8-GPU reader (``WorkerGpus``), with its host name and UUIDs re-labelled per
worker, so 64 x 8 = 512 distinct GPUs reach the scheduler while the machine runs one GPU
reader instead of 64. Then it measures:

* heartbeat payload: msgpack bytes of one worker's snapshot, and per GPU per heartbeat,
  before (version 1: identity in every row) and after (version 2: live values only; the
  identity sent once);
* scheduler CPU added: the scheduler's CPU (% of one core) with the workers up but
  publishing nothing, then publishing and polled by a dashboard server once a second;
* dashboard server CPU with 4 viewers of /Cluster-GPUs (stream sockets, as the pages'
  scripts open them), % of one core (target <= 5%);
* time to first draw of /Cluster-GPUs in Debian's Chromium: from navigation to the first
  frame drawn and the heat map's canvas inked (target <= 2 s).

Each CPU figure is measured over ``--repeats`` windows of ``--window`` seconds and printed
as the median and the range. Run from the project root::

    python benchmarks/cluster_scale.py [--workers 64] [--gpus 8] [--window 5] [--repeats 3]
    python benchmarks/cluster_scale.py --payload-only     # just the payload figures
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


# ----- the worker process -----------------------------------------------------------------
def relabel_identity(identity: dict, index: int) -> dict:
    """One node's identity from the shared reader's: its own host name, UUIDs and epoch."""
    rows = []
    for key, gpu, uuid, *rest in identity["gpus"]:
        new = f"GPU-{index:04x}{uuid[8:]}"
        rows.append([new if key == uuid else key, gpu, new, *rest])
    return {**identity, "host": f"node-{index:02d}", "e": f"{identity['e']}-{index}",
            "gpus": rows}


def relabel(snapshot: dict, index: int) -> dict:
    """One node's live snapshot from the shared reader's (its identity too, if it has it)."""
    out = {**snapshot, "e": f"{snapshot['e']}-{index}"}
    if "id" in snapshot:
        out["id"] = relabel_identity(snapshot["id"], index)
    return out


def version_1(identity: dict, live: dict) -> dict:
    """What the same heartbeat weighed before (issue 21): version 1 sent every GPU's
    identity in every heartbeat, ``{UUID: [gpu, uuid, model, bus, gi, profile, lost,
    *values]}``, with the host name and time."""
    return {"v": 1, "host": identity["host"], "t": live["t"],
            "gpus": {key: [*rest, *row] for (key, *rest), row in
                     zip(identity["gpus"], live["gpus"], strict=True)}}


def ready_reader(gpus: int, claims_dir: str) -> Any:
    """A simulated 8-GPU worker reader (H200s: GPM fills every field) once it reads them."""
    from jupyterlab_nvdashboard.cluster.plugin import WorkerGpus

    reader = WorkerGpus({"NVDASHBOARD_SIMULATE": str(gpus), "NVDASHBOARD_SIMULATE_HOST": "bench",
                         "NVDASHBOARD_SIMULATE_PROFILE": "h200",
                         "NVDASHBOARD_GPU_CLAIMS_DIR": claims_dir})
    reader.start()
    reader.check_claims(adopt=True)
    time.sleep(3)  # GPM needs two samples a second apart
    return reader


async def serve_workers(address: str, workers: int, gpus: int) -> None:
    from distributed import Worker

    from jupyterlab_nvdashboard.cluster import METRIC_KEY

    claims = tempfile.TemporaryDirectory(prefix="cluster-scale-claims-")
    reader = ready_reader(gpus, claims.name)
    started = [await Worker(address, nthreads=1, dashboard=False, name=f"w{i}")
               for i in range(workers)]
    loop = asyncio.get_running_loop()

    def publish() -> None:
        identity = reader.identity()
        for i, worker in enumerate(started):
            worker.metrics[METRIC_KEY] = lambda _, i=i: relabel(reader.snapshot(), i)
            loop.create_task(worker.scheduler.set_metadata(
                keys=[METRIC_KEY, worker.address], value=relabel_identity(identity, i)))

    loop.add_signal_handler(signal.SIGUSR1, publish)
    print("workers ready", flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for worker in started:
        await worker.close()
    reader.stop()
    claims.cleanup()


# ----- the driver --------------------------------------------------------------------------
def cpu_percent(pid: int, window_s: float) -> float:
    process = psutil.Process(pid)
    before, started = process.cpu_times(), time.monotonic()
    time.sleep(window_s)
    after, elapsed = process.cpu_times(), time.monotonic() - started
    used = (after.user - before.user) + (after.system - before.system)
    return 100.0 * used / elapsed


def cpu_windows(pid: int, window_s: float, repeats: int) -> list[float]:
    return [cpu_percent(pid, window_s) for _ in range(repeats)]


def figure(values: list[float], unit: str) -> str:
    return (f"median {statistics.median(values):.2f}{unit}, range {min(values):.2f}"
            f"-{max(values):.2f}{unit} (n={len(values)})")


def wait_for(check, timeout_s: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise TimeoutError(what)


async def viewers_open(url: str, count: int, seconds: float) -> list[int]:
    from tests.support.stream_client import open_stream

    clients = [await open_stream(url, "/Cluster-GPUs") for _ in range(count)]
    deadline = asyncio.get_running_loop().time() + seconds
    while (left := deadline - asyncio.get_running_loop().time()) > 0:
        await asyncio.gather(*(c.receive(left) for c in clients), return_exceptions=True)
    sizes = [sum(frame.size_bytes for frame in c.frames[1:]) for c in clients]
    for client in clients:
        client.close()
    return sizes


def first_draws(url: str, loads: int) -> dict[str, list[float]]:
    """Seconds from navigation to: the page loaded, the first frame applied, drawn."""
    from tests.support.browser import canvas_ink, chromium
    from tests.support.servers import with_token

    times: dict[str, list[float]] = {"loaded": [], "first frame": [], "drawn": []}
    with chromium() as browser:
        for _ in range(loads):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            started = time.monotonic()
            page.goto(with_token(f"{url}/Cluster-GPUs"))
            times["loaded"].append(time.monotonic() - started)
            page.wait_for_function("window.nvdashboardLive && window.nvdashboardLive.frames > 0",
                                   timeout=30_000, polling=20)
            times["first frame"].append(time.monotonic() - started)
            page.wait_for_function("() => new Promise(r => requestAnimationFrame(() => r(true)))")
            times["drawn"].append(time.monotonic() - started)
            assert canvas_ink(page)["ink"] > 1000, "the heat map drew nothing"
            page.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--payload-only", action="store_true",
                        help="print the heartbeat payload figures and stop")
    parser.add_argument("--serve-workers", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_workers:
        asyncio.run(serve_workers(args.serve_workers, args.workers, args.gpus))
        return 0

    import msgpack

    from tests.support.dask_cluster import start_scheduler
    from tests.support.servers import cli_server, free_port, get

    print(f"machine: {platform.machine()}, {psutil.cpu_count()} cores, Python "
          f"{platform.python_version()}; {args.workers} in-process simulated workers x "
          f"{args.gpus} GPUs")
    # The largest snapshot: H200s, whose GPM fills every activity field.
    with tempfile.TemporaryDirectory(prefix="cluster-scale-claims-") as claims:
        reader = ready_reader(args.gpus, claims)
        first = relabel(reader.snapshot(), 1)  # the identity rides on the first one
        time.sleep(1.1)
        live = relabel(reader.snapshot(), 1)
        reader.stop()
    before = len(msgpack.packb(version_1(first["id"], live)))
    after = len(msgpack.packb(live))
    identity = len(msgpack.packb(first["id"]))
    per_round = args.workers * after
    print(f"heartbeat payload per GPU per heartbeat: before (version 1) {before / args.gpus:.0f}"
          f" B, after (version 2) {after / args.gpus:.0f} B ({before} -> {after} B per "
          f"{args.gpus}-GPU worker; {args.workers} workers: {args.workers * before} -> "
          f"{per_round} B a heartbeat round); identity once: {identity / args.gpus:.0f} B per "
          f"GPU")
    if args.payload_only:
        return 0

    dask = start_scheduler(free_port())
    log = tempfile.NamedTemporaryFile("w+", prefix="cluster-scale-workers-", suffix=".log")  # noqa: SIM115
    workers = subprocess.Popen(
        [sys.executable, __file__, "--serve-workers", dask.address, "--workers",
         str(args.workers), "--gpus", str(args.gpus)], stdout=log, stderr=subprocess.STDOUT,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_for(lambda: "workers ready" in Path(log.name).read_text(), 180, "workers")
        time.sleep(2)
        idle = cpu_windows(dask.scheduler.pid, args.window, args.repeats)
        print(f"scheduler CPU, workers publishing nothing: {figure(idle, '%')}")
        workers.send_signal(signal.SIGUSR1)
        with cli_server(["--dask-scheduler", dask.address, "--metrics"]) as (url, server):
            def all_reported() -> bool:
                body = json.loads(get(url + "/cluster.json")[1])
                return len(body["gpus"]) == args.workers * args.gpus

            wait_for(all_reported, 120, "every GPU on /cluster.json")
            busy = cpu_windows(dask.scheduler.pid, args.window, args.repeats)
            print(f"scheduler CPU, publishing and polled: {figure(busy, '%')}; added "
                  f"{statistics.median(busy) - statistics.median(idle):.2f}% (medians)")
            quiet = cpu_windows(server.pid, args.window, args.repeats)
            print(f"dashboard server CPU, no viewer: {figure(quiet, '%')}")
            watched: list[float] = []
            sizes: list[int] = []

            async def measure() -> None:
                task = asyncio.ensure_future(
                    viewers_open(url, 4, args.window * args.repeats + 2))
                await asyncio.sleep(1.5)  # past the catch-up frames
                for _ in range(args.repeats):
                    watched.append(await asyncio.to_thread(cpu_percent, server.pid,
                                                           args.window))
                sizes.extend(await task)

            asyncio.run(measure())
            rate = statistics.median(sizes) / (args.window * args.repeats + 2) / 1e3
            print(f"dashboard server CPU, 4 viewers of /Cluster-GPUs: {figure(watched, '%')} "
                  f"(target <= 5%); {rate:.1f} kB/s per viewer")
            draws = first_draws(url, args.repeats)
            print(f"first draw of /Cluster-GPUs in Chromium: {figure(draws['drawn'], ' s')} "
                  f"(target <= 2 s); page loaded {figure(draws['loaded'], ' s')}, first frame "
                  f"applied {figure(draws['first frame'], ' s')}")
    finally:
        workers.send_signal(signal.SIGTERM)
        try:
            workers.wait(60)
        except subprocess.TimeoutExpired:
            workers.kill()
        dask.stop()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
