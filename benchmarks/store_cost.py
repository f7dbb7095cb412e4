"""What the history store (store/) costs, measured side by side with the store on and off.

    python benchmarks/store_cost.py [--rounds 3] [--seconds 60] [--fills 3] [--draws 5]
        [--parts size,draw,cpu]

1. **CPU**: a real server (``--simulate 8``, a sample every 200 ms, idle interval 200 ms so
   the sampler runs at its busy rate with no page open) is run ``--seconds`` with the store
   on, then off, ``--rounds`` times interleaved. Prints the store writer thread's CPU time
   (its own ``thread_time``, from ``/info.json``) and the whole server's CPU, each as a
   share of one core: median and range (min-max) over the rounds.
2. **Size after 30 days**: a store filled, through the writer's own code path on a scripted
   clock, with 30 days of 8 GPUs whose readings vary every sample (random walks plus noise,
   which compress worse than real idle GPUs). The size depends on the buckets, not on the
   samples in them: the last 24 hours get one sample per 5-second bucket, the 29 days
   before one per minute (every 1-minute bucket; their 5-second buckets are pruned to 24
   hours as it goes, as they would be). Size of the file and its WAL after the fill, over
   ``--fills`` fills (different seeds). With the store off, nothing is written.
3. **Time to first draw of the 7-day window**: a real server over the filled store (its
   30 days end now); a page's stream is opened for the 7-day window of /GPU-Resources and
   timed until its catch-up frame is decoded (what the page draws first), ``--draws`` times.
   Side by side: the longest window without a store (30 minutes, from memory), the same way.
   On a machine shared with other jobs wall time includes waiting for a core, so the
   server's part is also timed in this process as CPU time (``thread_time``): the
   catch-up frame of a new page on each window (the store's read, the rows, the encode).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.figures import summary  # noqa: E402
from benchmarks.harness import stop  # noqa: E402
from jupyterlab_nvdashboard.store import HistoryStore  # noqa: E402
from tests.support.servers import free_port  # noqa: E402
from tests.support.store_fill import fill_store  # noqa: E402
from tests.support.stream_client import open_stream  # noqa: E402

GPUS = 8
TOKEN = "store-benchmark-token-0123456789"
DAY_S = 86400


def start_server(port: int, store: Path | None, extra: list[str] | None = None
                 ) -> subprocess.Popen:
    env = {**os.environ, "NVDASHBOARD_TOKEN": TOKEN}
    args = [sys.executable, "-m", "jupyterlab_nvdashboard.server", str(port), "--simulate",
            str(GPUS), "--simulate-profile", "h200", "--idle-interval", "0.2",
            *(["--store", str(store)] if store else ["--no-store"]), *(extra or [])]
    process = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            info = get_info(port)
            if not info["reading_gpus"]:
                return process
        except OSError:
            pass
        time.sleep(0.3)
    process.kill()
    raise RuntimeError("the server did not start")


def get_info(port: int) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/info.json",
                                     headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def cpu_round(store: Path | None, seconds: float) -> tuple[float, float | None]:
    """(the server's CPU share of one core, the store writer's) over ``seconds``."""
    port = free_port()
    process = start_server(port, store)
    try:
        time.sleep(3)  # past start-up
        me = psutil.Process(process.pid)
        before, writer_before = me.cpu_times(), (get_info(port)["store"] or {})
        started = time.monotonic()
        time.sleep(seconds)
        after, writer_after = me.cpu_times(), (get_info(port)["store"] or {})
        wall = time.monotonic() - started
    finally:
        stop(process, 20)
    server = (after.user + after.system - before.user - before.system) / wall * 100
    writer = None
    if writer_after:
        writer = (writer_after["writer_cpu_s"] - writer_before["writer_cpu_s"]) / wall * 100
    return server, writer


def size_of(path: Path) -> int:
    return sum(Path(f"{path}{suffix}").stat().st_size for suffix in ("", "-wal")
               if Path(f"{path}{suffix}").exists())


async def first_frame(port: int, window_s: float) -> float:
    started = time.perf_counter()
    page = await open_stream(f"http://127.0.0.1:{port}", "/GPU-Resources", window_s=window_s,
                             headers={"Authorization": f"token {TOKEN}"})
    elapsed = time.perf_counter() - started
    rows = len(page.column("time"))
    page.close()
    if rows == 0:
        raise RuntimeError("the catch-up frame had no rows")
    return elapsed


def draw_times(store: Path | None, window_s: float, draws: int) -> list[float]:
    port = free_port()
    process = start_server(port, store)
    try:
        time.sleep(2)
        # Each draw is a new page; the family is reset between them (nobody else watches).
        return [asyncio.run(first_frame(port, window_s)) for _ in range(draws)]
    finally:
        stop(process, 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--fills", type=int, default=3)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--parts", default="size,draw,cpu",
                        help="which measurements, comma-separated (draw fills a store if "
                        "size did not)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    folder = Path(tempfile.mkdtemp(prefix="nvdashboard-store-bench-"))
    try:
        print(f"machine: {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}), "
              f"{GPUS} simulated GPUs, python {sys.version.split()[0]}")
        sizes, fill_s = [], []
        for seed in range(args.fills if "size" in parts else 0):
            path = folder / f"fill{seed}" / "history.sqlite"
            fill_s.append(fill_store(path, seed))
            sizes.append(size_of(path) / 2**20)
            print(f"  fill {seed}: {sizes[-1]:.1f} MiB in {fill_s[-1]:.0f} s", flush=True)
        if sizes:
            print(f"size after 30 days, store on: {summary(sizes, 'MiB', 1)}; store off: "
                  "0 MiB")
        if "draw" in parts:
            measure_draws(folder, args.draws, filled=bool(sizes))
        if "cpu" in parts:
            measure_cpu(folder, args.rounds, args.seconds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure_draws(folder: Path, draws: int, filled: bool) -> None:
    store = folder / "fill0" / "history.sqlite"
    if not filled:
        print(f"  filled 8 days in {fill_store(store, 0, days=8):.0f} s", flush=True)
    week = draw_times(store, 7 * DAY_S, draws)
    memory = draw_times(None, 1800, draws)
    print(f"first frame of the 7-day window, store on: {summary(week, 's', 3)}")
    print(f"first frame of the longest window, store off (30 min): {summary(memory, 's', 3)}")
    week_cpu = catch_up_cpu(store, 7 * DAY_S, draws)
    memory_cpu = catch_up_cpu(None, 1800, draws)
    print(f"  its CPU time in the server, 7 days, store on: {summary(week_cpu, 's', 3)}")
    print(f"  its CPU time in the server, 30 min, store off: {summary(memory_cpu, 's', 3)}")


def catch_up_cpu(store: Path | None, window_s: float, draws: int) -> list[float]:
    """CPU seconds of the catch-up frame of a new page on ``window_s`` (8 GPUs, in-process)."""
    from jupyterlab_nvdashboard.apps.gpu import gpu_resources
    from jupyterlab_nvdashboard.composition import create_metrics
    from jupyterlab_nvdashboard.config import Config, SimulationConfig
    from jupyterlab_nvdashboard.stream.broadcaster import Broadcaster

    metrics = create_metrics(Config(history_s=1800, simulation=SimulationConfig(
        gpu_count=GPUS, profile="h200")), environ={})
    metrics.nvml.ensure_initialized()
    template = metrics.sampler.tick()
    # The history a server holds: a full 30 minutes at 200 ms (the same readings each tick:
    # the frame's cost does not depend on the values), ending now.
    ticks = 9000 if store is None else 50
    now = time.time()
    for tick in range(ticks):
        at = now - (ticks - tick) * 0.2
        metrics.history.append(at, template.gpus, template.host, monotonic_s=at)
    past = None
    if store is not None:
        uuids = {facts.index: facts.uuid for facts in metrics.facts}
        past = HistoryStore(store, device_uuids=lambda: uuids)
        past.open()
    feed = gpu_resources(metrics)
    took = []
    for _ in range(draws):
        broadcaster = Broadcaster(metrics.history, 0.2, lambda route: feed, (window_s,),
                                  past=past)
        started = time.thread_time()
        broadcaster.subscribe("/GPU-Resources", window_s, -1, _Page())
        took.append(time.thread_time() - started)
    if past is not None:
        past.close()
    return took


class _Page:
    def send(self, frame: bytes) -> None:
        pass

    def close(self, code: int | None = None, reason: str | None = None) -> None:
        pass


def measure_cpu(folder: Path, rounds: int, seconds: float) -> None:
    on_server, on_writer, off_server = [], [], []
    for round_number in range(rounds):
        store = folder / f"cpu{round_number}" / "history.sqlite"
        server, writer = cpu_round(store, seconds)
        on_server.append(server)
        on_writer.append(writer or 0.0)
        off_server.append(cpu_round(None, seconds)[0])
        print(f"  round {round_number}: on {server:.2f}% (writer {writer or 0:.3f}%), "
              f"off {off_server[-1]:.2f}%", flush=True)
    print(f"store writer thread, % of a core: {summary(on_writer, '%', 3)}")
    print(f"whole server, % of a core: store on {summary(on_server, '%', 2)}; "
          f"store off {summary(off_server, '%', 2)}")


if __name__ == "__main__":
    main()
