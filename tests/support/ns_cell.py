"""Run inside a test's PID namespace (``pidns.py``): the real sampler over the simulated
driver (every GPU playing ``SCENARIO``), standalone (no Jupyter), then ``/cell.json``'s
report on the kernel ``KERNEL_ID``, whose process is this namespace's, over a span of five
process passes once the kernel's processes are attributed. Prints the report as one JSON
line.

    python ns_cell.py PROCESSES_FILE KERNEL_ID SCENARIO
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jupyterlab_nvdashboard.apps.cells import cell_report  # noqa: E402
from jupyterlab_nvdashboard.apps.sources import DashboardSources  # noqa: E402
from jupyterlab_nvdashboard.composition import create_metrics  # noqa: E402
from jupyterlab_nvdashboard.config import Config, SimulationConfig  # noqa: E402


def wait(condition: object, what: str, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {seconds:g} s: {what}")
        time.sleep(0.1)


def main() -> None:
    processes, kernel_id, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
    metrics = create_metrics(Config(simulation=SimulationConfig(
        gpu_count=2, profile="h200", processes_file=processes, scenario=scenario)),
        environ={})
    sources = DashboardSources(metrics)
    metrics.start()
    try:
        usage = sources.usage
        wait(lambda: any(kernel == kernel_id for _, kernel in usage.snapshot()[0])
             and (metrics.nodes is None or metrics.nodes.passes >= 3),
             "the kernel's processes attributed")
        before = usage.passes
        wait(lambda: usage.passes >= before + 2, "two passes")  # its samples settle
        start = time.time()
        wait(lambda: usage.passes >= before + 7, "five passes in the span")
        print(json.dumps(cell_report(sources, kernel_id, start, time.time())))
    finally:
        metrics.stop()


if __name__ == "__main__":
    main()
