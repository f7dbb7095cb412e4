"""Cost of diagnosing one GPU over a 30-minute window, as the server does for /diagnosis.json,
/GPU-Activity and the /metrics gauge.

    python benchmarks/diagnosis_cost.py [--repeats 30] [--minutes 30] [--interval 0.2]

Builds the history a server would hold: 8 H200-class GPUs (facts from the simulated driver),
one sample per tick (default 0.2 s) with GPM refreshed once a second (the same reading in
the ticks between), health every tick, process lists in one sample a second (as the sampler
stores them) and host CPU, all varying. Prints the median and range
(min-max) of one ``diagnose()`` of one GPU over the whole window, in wall time and in the
thread's CPU time (on a machine shared with other jobs, wall time includes waiting for a
core), against the 5 ms target.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's package

from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.diagnosis import diagnose
from jupyterlab_nvdashboard.metrics import GpuReading, HostReading, Sample
from jupyterlab_nvdashboard.metrics.families import (
    GPM_FAMILY,
    HEALTH_FAMILY,
    PROCESS_FAMILY,
    GpmReading,
    HealthReading,
    ProcessReading,
)

GPUS = 8
TARGET_MS = 5.0


def history(facts: list[Any], ticks: int, interval: float) -> list[Sample]:
    per_second = max(1, round(1.0 / interval))
    samples: list[Sample] = []
    gpm: dict[int, GpmReading] = {}
    processes: tuple[ProcessReading, ...] = ()
    for i in range(ticks):
        wave = 50.0 + 45.0 * math.sin(i / 37.0)
        gpus = tuple(GpuReading.unavailable(f.index, lost=False)._replace(
            utilization_pct=wave, pcie_rx_bytes_per_s=1e9 + 1e7 * (i % 50),
            pcie_tx_bytes_per_s=5e8, nvlink_tx_bytes_per_s=2e9, nvlink_rx_bytes_per_s=2e9)
            for f in facts)
        if i % per_second == 0:
            gpm = {f.index: GpmReading(wave * 0.6, 40.0, 10.0, 30.0, 1.0, 20.0, 5.0, 1e9, 5e8,
                                       2e9, 2e9) for f in facts}
            processes = tuple(ProcessReading(f.index, 1000 + f.index, "compute", 1e9, wave,
                                             10.0) for f in facts)
        health_values: list[Any] = [1410.0, 1980.0, 2619.0, 2619.0, 0, 0x4 if i % 3 else 0,
                                    60.0, 87.0, 92.0, 500.0, 700.0, None, 0, 0, 0, 0,
                                    False, False, ()]
        health = {f.index: HealthReading(*health_values) for f in facts}
        host = HostReading(30.0 + (i % 40), 1e10, 6e10, 0.0, 0.0, 0.0, 0.0)
        extra: dict[str, object] = {GPM_FAMILY: gpm, HEALTH_FAMILY: health}
        if i % per_second == 0:  # as the sampler stores them: only in their pass's sample
            extra[PROCESS_FAMILY] = processes
        samples.append(Sample(i, 1.8e9 + i * interval, gpus, host, extra=extra))
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=0.2)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.minutes <= 0 or args.interval <= 0:
        parser.exit(2, "diagnosis_cost.py: --repeats, --minutes and --interval must be > 0\n")
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=GPUS,
                                                                profile="h200")), environ={})
    metrics.nvml.ensure_initialized()
    facts = metrics.facts
    ticks = int(args.minutes * 60 / args.interval)
    samples = history(facts, ticks, args.interval)
    for what, pid in (("one GPU", None), ("one GPU for a run (its own PID too)", 1003)):
        diagnose(samples, facts, 3, pid=pid)  # warm-up
        costs, cpu = [], []
        for _ in range(args.repeats):
            started, cpu_started = time.perf_counter(), time.thread_time()
            result = diagnose(samples, facts, 3, pid=pid)
            cpu.append((time.thread_time() - cpu_started) * 1000)
            costs.append((time.perf_counter() - started) * 1000)
        median, cpu_median = statistics.median(costs), statistics.median(cpu)
        print(f"diagnosis of {what} over {args.minutes:g} min ({ticks} samples, {GPUS} GPUs "
              f"in each), {args.repeats} runs: wall median {median:.2f} ms, range "
              f"{min(costs):.2f}-{max(costs):.2f} ms; CPU time median {cpu_median:.2f} ms, "
              f"range {min(cpu):.2f}-{max(cpu):.2f} ms (target < {TARGET_MS:g} ms: "
              f"{'met' if cpu_median < TARGET_MS else 'NOT met'} on CPU time)")
    print(f"  it read: {result.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
