"""Run inside a test's PID namespace (``pidns.py``): the real sampler over the simulated
driver (every GPU compute-bound), then the verdict on a run whose process is this
namespace's PID ``RUN_PID``, pinned to GPU ``ROW``. Prints the verdict as one JSON line.

    python ns_judge.py PROCESSES_FILE RUN_PID ROW
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jupyterlab_nvdashboard.composition import create_metrics  # noqa: E402
from jupyterlab_nvdashboard.config import Config, SimulationConfig  # noqa: E402
from jupyterlab_nvdashboard.runs.verdict import judge  # noqa: E402
from jupyterlab_nvdashboard.runs.watcher import Run  # noqa: E402


def main() -> None:
    processes, run_pid, row = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    metrics = create_metrics(Config(simulation=SimulationConfig(
        gpu_count=2, profile="h200", processes_file=processes, scenario="compute-bound")),
        environ={})
    metrics.start()
    try:
        deadline = time.monotonic() + 120
        # Eight process passes, paired with the node holders the slow thread found.
        nodes = getattr(metrics, "nodes", None)  # this server's GPU node holders
        while time.monotonic() < deadline and (
                metrics.processes.passes < 8 or (nodes is not None and nodes.passes < 3)):
            time.sleep(0.2)
        samples = metrics.history.window(metrics.history_s)
        facts = metrics.facts
        first, last = samples[0].time_s, samples[-1].time_s
        steps = [first + 1.0 + 0.5 * i for i in range(int((last - first - 1.0) / 0.5))]
        run = Run("r", start={"time": first - 1.0, "device": "gpu", "path": "plugin",
                              "pid": run_pid, "gpu": {"uuid": facts[row].uuid, "index": row,
                                                      "visible": None}},
                  iterations=[{"time": t, "ms": 50.0} for t in steps],
                  warmup_end_s=first + 0.5)
        verdict = judge(run, samples, facts, simulated=True)
        print(json.dumps({"cause": verdict.cause, "text": verdict.text,
                          "signal": verdict.signal, "level_pct": verdict.level_pct}))
    finally:
        metrics.stop()


if __name__ == "__main__":
    main()
