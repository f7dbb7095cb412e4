"""Cost of judging which GPUs are free (``diagnosis/free.py``), as the overview does once a
second and ``/glance.json`` at each poll, on the server's event loop.

    python benchmarks/free_rule_cost.py [--gpus 8] [--interval 0.2] [--repeats 30]

Builds the window the rule reads: ``FREE_WINDOW_S`` of samples at ``--interval`` (the
default tick), every GPU quiet and held by one process, so each judgment walks its whole
window (the dearest case: a busy or unheld GPU is judged on its newest reading). Prints the
median and range (min-max) of one judgment of every GPU, in wall time and in the thread's
CPU time (on a shared machine, wall time includes waiting for a core).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jupyterlab_nvdashboard.diagnosis.free import FREE_WINDOW_S, by_device, judge_free
from jupyterlab_nvdashboard.metrics import GpuFacts, GpuReading, HostReading, Sample

GIB = 2**30


def window(gpus: int, interval_s: float) -> tuple[list[GpuFacts], list[Sample]]:
    facts = [GpuFacts(*([None] * len(GpuFacts._fields)))._replace(
        index=i, kind="gpu", label=f"GPU {i}", memory_total_bytes=80 * GIB)
        for i in range(gpus)]
    host = HostReading(*([None] * len(HostReading._fields)))
    ticks = round(FREE_WINDOW_S / interval_s)
    samples = [Sample(n, 1000.0 + n * interval_s, tuple(
        GpuReading.unavailable(i, lost=False)._replace(
            utilization_pct=float(n % 3), memory_used_bytes=0.5 * GIB,
            memory_total_bytes=80 * GIB) for i in range(gpus)), host)
        for n in range(ticks)]
    return facts, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    facts, samples = window(args.gpus, args.interval)
    wall, cpu = [], []
    for _ in range(args.repeats):
        started, started_cpu = time.perf_counter(), time.thread_time()
        readings = by_device(samples)
        judged = [judge_free(readings.get(f.index, ()), f, 1) for f in facts]
        cpu.append(1000 * (time.thread_time() - started_cpu))
        wall.append(1000 * (time.perf_counter() - started))
        assert all(j.free for j in judged), judged  # the dearest case: every window walked
    print(f"free rule, {args.gpus} GPUs, {len(samples)} samples ({FREE_WINDOW_S:.0f} s at "
          f"{args.interval} s), {args.repeats} repeats, pid {os.getpid()}")
    for name, values in (("wall", wall), ("CPU", cpu)):
        print(f"  {name}: median {statistics.median(values):.2f} ms, range "
              f"{min(values):.2f}-{max(values):.2f} ms")


if __name__ == "__main__":
    main()
