"""What one ``/metrics`` scrape costs under each name set (``--metrics-names``, issue 46).

A scrape renders the newest sample of 8 simulated H200s (GPM, health and counters: every
DCGM family present) into OpenMetrics text, as the route does, under ``classic``,
``dcgm47`` and ``both``; the sets are interleaved run by run, so drift in the machine's
load hits them alike. Prints, per set, the milliseconds per scrape (median and min-max of
the runs' medians) and the body's size.

    python benchmarks/metrics_names_cost.py                 # 8 runs of 200 scrapes each
    python benchmarks/metrics_names_cost.py --runs 3 --scrapes 20 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jupyterlab_nvdashboard.composition import create_metrics  # noqa: E402
from jupyterlab_nvdashboard.config import Config, SimulationConfig  # noqa: E402
from jupyterlab_nvdashboard.export.collector import DcgmCollector, Scrape, render  # noqa: E402
from jupyterlab_nvdashboard.export.dcgm import exported_gpus  # noqa: E402
from jupyterlab_nvdashboard.export.names import NAME_SETS  # noqa: E402

GPUS = 8


def scrape_of_eight_gpus() -> Scrape:
    """The newest sample of 8 simulated H200s, after the slow readers ran once."""
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=GPUS,
                                                                profile="h200")), environ={})
    metrics.nvml.ensure_initialized()
    sampler = metrics.sampler
    sampler.tick()
    sampler.read_slow()  # GPM, health and the counters need a first reading to rate
    time.sleep(1.1)  # GPM rates need two GPM samples a second apart
    sampler.read_slow()
    sample = sampler.tick()
    gpus = exported_gpus("bench-host", metrics.facts, sample)
    return Scrape(gpus, [("bench-host", sample.host)])


def measure(runs: int, scrapes: int) -> dict[str, dict[str, object]]:
    scrape = scrape_of_eight_gpus()
    collectors = {name_set: DcgmCollector(lambda: scrape, "hostname", name_set)
                  for name_set in NAME_SETS}
    medians: dict[str, list[float]] = {name_set: [] for name_set in NAME_SETS}
    for _ in range(runs):
        for name_set, collector in collectors.items():
            render(collector)  # warm-up
            times = []
            for _ in range(scrapes):
                started = time.perf_counter()
                render(collector)
                times.append((time.perf_counter() - started) * 1000)
            medians[name_set].append(statistics.median(times))
    return {name_set: {"ms_per_scrape": values,
                       "body_bytes": len(render(collectors[name_set])[0]),
                       "families": sum(1 for line in render(collectors[name_set])[0].decode()
                                       .splitlines() if line.startswith("# TYPE DCGM_"))}
            for name_set, values in medians.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    figures = measure(args.runs, args.scrapes)
    print(f"/metrics scrape of {GPUS} simulated H200s, {args.runs} runs x {args.scrapes} "
          "scrapes")
    print("| name set | DCGM families | body bytes | ms per scrape, median (min-max) |")
    print("|---|---:|---:|---:|")
    for name_set, each in figures.items():
        values = each["ms_per_scrape"]
        assert isinstance(values, list)
        print(f"| {name_set} | {each['families']} | {each['body_bytes']} | "
              f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}) |")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
