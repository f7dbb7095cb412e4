"""Cost of the per-process pass on the sampler's reader thread: 8 simulated GPUs with
50 processes each (400 rows), read through the real NVML reader and choke point.

    python benchmarks/process_pass.py [--repeats 50]

Prints the median and range (min–max) of one ``ProcessReader.read_all()`` (the NVML process
lists and per-process utilization, on the GPU reader thread), and, beside it, one
attribution pass (``ProcessAttributor``, psutil, on the slow thread) over the same 400 PIDs
once its (pid, create time) cache is warm, and the /GPU-Processes table rows the event
loop encodes (rebuilt at most once a second, else cached), and the idle-holder tracking
(``apps/usage.py``, issue 28) the sampler's tick thread runs as a history listener: on a
sample with a process pass, and on one without (most ticks), and ``/glance.json``. The PIDs
are this benchmark's own child processes, so psutil reads real /proc entries.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's package

from jupyterlab_nvdashboard.apps.processes import ProcessTableFeed, glance
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.metrics import PROCESS_FAMILY
from jupyterlab_nvdashboard.metrics.attribution import ProcessAttributor
from jupyterlab_nvdashboard.metrics.binding import binding_loader
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader
from jupyterlab_nvdashboard.metrics.processes import ProcessReader
from jupyterlab_nvdashboard.simnvml import SimulatedNvml
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess

GPUS, PER_GPU = 8, 50


def timed(step, repeats: int) -> list[float]:  # noqa: ANN001
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append((time.perf_counter() - started) * 1e3)
    return times


def line(name: str, times: list[float]) -> str:
    return (f"{name:<44} median {statistics.median(times):7.2f} ms   "
            f"range {min(times):6.2f}–{max(times):6.2f} ms   (n={len(times)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    children = [subprocess.Popen(["sleep", "600"]) for _ in range(GPUS * PER_GPU)]
    try:
        simulator = SimulatedNvml(gpu_count=GPUS, profile="h200")
        simulator.set_processes([
            SimulatedProcess(i // PER_GPU, child.pid, (i + 1) * 10**8, sm_pct=i % 100)
            for i, child in enumerate(children)])
        nvml = NvmlReader(binding_loader(simulator.library))
        nvml.ensure_initialized()
        reader = ProcessReader(nvml)
        reader.read_all()
        nvml_times = timed(reader.read, args.repeats)
        assert len(reader.latest) == GPUS * PER_GPU
        attributor = ProcessAttributor(lambda: reader.latest, host_namespace=True)
        attributor.family()  # fills the cache
        owner_times = timed(attributor.family, args.repeats)
        # The table the event loop encodes: rebuilt (cache cleared) and as cached per tick.
        metrics = create_metrics(Config(token=None, simulation=SimulationConfig(
            gpu_count=GPUS, profile="h200")), environ={}, simulator=simulator)
        metrics.nvml.ensure_initialized()
        metrics.sampler.tick()
        metrics.sampler.read_slow()
        metrics.sampler.tick()
        sources = DashboardSources(metrics)
        feed = ProcessTableFeed(sources)

        def rebuild() -> None:
            feed._cache = None
            feed.rows([])

        rebuild_times = timed(rebuild, args.repeats)
        tick_times = timed(lambda: feed.rows([]), args.repeats)
        samples = metrics.history.window(metrics.history_s)
        with_pass = next(s for s in reversed(samples) if PROCESS_FAMILY in s.extra)
        plain = with_pass.__class__(**{**with_pass.__dict__, "extra": {}})
        usage_pass_times = timed(lambda: sources.usage.on_sample(with_pass), args.repeats)
        usage_tick_times = timed(lambda: sources.usage.on_sample(plain), args.repeats)
        glance_times = timed(lambda: glance(sources), args.repeats)
        print(f"{GPUS} simulated GPUs x {PER_GPU} processes; Python {sys.version.split()[0]}")
        print(line("process pass (NVML lists + utilization)", nvml_times))
        print(line("attribution pass (/proc stat, cache warm)", owner_times))
        print(line("table rows, rebuilt (event loop, <= 1/s)", rebuild_times))
        print(line("table rows, per tick (event loop, cached)", tick_times))
        print(line("idle tracking, sample with a pass (tick thr.)", usage_pass_times))
        print(line("idle tracking, sample without (tick thread)", usage_tick_times))
        print(line("/glance.json with idle judgments (loop)", glance_times))
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
