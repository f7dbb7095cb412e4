"""The GPU reader thread's per-tick cost with GPM and health included, 8 simulated GPUs.

What one pass of the reader thread costs (``Sampler.read_gpus``: ``NvmlReader.read()`` and
then each reading family), for a profile with GPM (``h200``: 8 H200s) and the mixed one
(4 H200 with GPM, 4 A100 without). Four variants, interleaved in blocks so drift in machine
load hits every variant alike:

- ``core``: ``NvmlReader.read()`` alone, as before this issue;
- ``+health``: plus ``HealthReader`` (clocks, P-state, reasons, fan every pass; ECC,
  remapped rows and the power limit every 5 s; the XID event set polled with timeout 0);
- ``+health+gpm (every pass)``: plus ``GpmReader`` sampling and deriving on *every* pass,
  the worst case (its default is once a second);
- ``+health+gpm (default)``: GPM at its own rate (1 s) with passes 0.2 s apart, so one pass
  in five carries the GPM work. Its passes sleep between reads (not timed).

Times are wall (``perf_counter``) and this thread's CPU (``thread_time``), per pass, in ms:
median, min and max, and the 95th percentile. The simulated NVML is Python, so its own cost
is inside every figure: an upper bound on the reader's share.

Run from the project root::

    python benchmarks/reader_tick_cost.py              # about 30 s
    python benchmarks/reader_tick_cost.py --passes 50  # quicker

The figures also go to ``$OUT/reader_tick_cost.json`` when ``$OUT`` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jupyterlab_nvdashboard.metrics.binding import binding_loader  # noqa: E402
from jupyterlab_nvdashboard.metrics.gpm import GpmReader  # noqa: E402
from jupyterlab_nvdashboard.metrics.health import HealthReader  # noqa: E402
from jupyterlab_nvdashboard.metrics.host import HostReader  # noqa: E402
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader  # noqa: E402
from jupyterlab_nvdashboard.metrics.sampler import History, Sampler  # noqa: E402
from jupyterlab_nvdashboard.simnvml import SimulatedNvml  # noqa: E402

GPUS = 8
BUDGET_MS = 5.0  # the acceptance: under 5 ms per tick on the reader thread
BLOCK = 25
TICK_S = 0.2
VARIANTS = ("core", "+health", "+health+gpm (every pass)", "+health+gpm (default)")


def make_pass(profile: str, variant: str) -> tuple[Callable[[], None], SimulatedNvml]:
    simulator = SimulatedNvml(GPUS, profile=profile)
    nvml = NvmlReader(binding_loader(simulator.library))
    families: list[Any] = []
    if variant != "core":
        families.append(HealthReader(nvml))
    if "every pass" in variant:
        families.append(GpmReader(nvml, every_s=0.0))
    elif "default" in variant:
        families.append(GpmReader(nvml))
    sampler = Sampler(nvml, HostReader(), History(10), TICK_S, families=families)
    nvml.ensure_initialized()
    return sampler.read_gpus, simulator


def summary(values_ms: list[float]) -> dict[str, float]:
    ordered = sorted(values_ms)
    return {"n": len(ordered), "median": statistics.median(ordered), "min": ordered[0],
            "max": ordered[-1], "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]}


def measure(profile: str, passes: int, warmup: int) -> dict[str, dict[str, Any]]:
    runs = {variant: make_pass(profile, variant) for variant in VARIANTS}
    wall: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    cpu: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for step, _ in runs.values():
        for _ in range(warmup):
            step()
    calls_before = {variant: sim.total_calls for variant, (_, sim) in runs.items()}
    while any(len(wall[v]) < passes for v in VARIANTS):
        for variant, (step, _) in runs.items():
            for _ in range(min(BLOCK, passes - len(wall[variant]))):
                if "default" in variant:
                    time.sleep(TICK_S)  # GPM at its own rate needs real time between passes
                started_wall, started_cpu = time.perf_counter(), time.thread_time()
                step()
                cpu[variant].append((time.thread_time() - started_cpu) * 1000)
                wall[variant].append((time.perf_counter() - started_wall) * 1000)
    return {variant: {"wall_ms": summary(wall[variant]), "thread_cpu_ms": summary(cpu[variant]),
                      "nvml_calls_per_pass": (runs[variant][1].total_calls
                                              - calls_before[variant]) / passes}
            for variant in VARIANTS}


def table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = ["| profile | variant | NVML calls/pass | wall ms median (min-max, p95) | "
             "thread CPU ms median (min-max) | under 5 ms |",
             "|---|---|---|---|---|---|"]
    for profile, variants in results.items():
        for variant, figures in variants.items():
            wall, cpu = figures["wall_ms"], figures["thread_cpu_ms"]
            lines.append(
                f"| {profile} | {variant} | {figures['nvml_calls_per_pass']:.1f} | "
                f"{wall['median']:.2f} ({wall['min']:.2f}-{wall['max']:.2f}, "
                f"{wall['p95']:.2f}) | {cpu['median']:.2f} ({cpu['min']:.2f}-{cpu['max']:.2f})"
                f" | {'yes' if wall['median'] < BUDGET_MS else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profiles", default="h200,mixed")
    args = parser.parse_args(argv)
    results = {}
    for profile in args.profiles.split(","):
        print(f"measuring {profile} ({GPUS} GPUs)", file=sys.stderr)
        results[profile] = measure(profile, args.passes, args.warmup)
    print(f"Reader thread, one pass, {GPUS} simulated GPUs; {platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(table(results))
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "reader_tick_cost.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
