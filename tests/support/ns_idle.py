"""Run inside a test's PID namespace (``pidns.py``): the real sampler over the simulated
driver (every GPU playing ``SCENARIO``), then ``/glance.json``'s ``idle`` judgment of the
kernel ``KERNEL_ID``, whose process is this namespace's and which Jupyter calls idle.
Prints the judgment as one JSON line.

    python ns_idle.py PROCESSES_FILE KERNEL_ID SCENARIO
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jupyterlab_nvdashboard.apps.processes import glance  # noqa: E402
from jupyterlab_nvdashboard.apps.sources import DashboardSources  # noqa: E402
from jupyterlab_nvdashboard.composition import create_metrics  # noqa: E402
from jupyterlab_nvdashboard.config import Config, SimulationConfig  # noqa: E402
from jupyterlab_nvdashboard.jupyter_sessions import JupyterSessions, Session  # noqa: E402


def main() -> None:
    processes, kernel_id, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
    metrics = create_metrics(Config(simulation=SimulationConfig(
        gpu_count=2, profile="h200", processes_file=processes, scenario=scenario)),
        environ={})
    jupyter = JupyterSessions(None)
    jupyter.sessions = {kernel_id: Session("alpha.ipynb", "notebook", "alpha.ipynb", "idle")}
    sources = DashboardSources(metrics, jupyter=jupyter)
    metrics.start()
    try:
        deadline = time.monotonic() + 120
        nodes = metrics.nodes
        while time.monotonic() < deadline:
            kernels = glance(sources)["kernels"]
            if metrics.processes.passes >= 8 and (nodes is None or nodes.passes >= 3) \
                    and kernels and kernels[0]["idle"]["figures"].get("quiet_passes", 0) + \
                    (kernels[0]["idle"]["state"] == "busy") * 3 >= 3:
                break
            time.sleep(0.2)
        kernels = glance(sources)["kernels"]
        print(json.dumps({"kernels": kernels}))
    finally:
        metrics.stop()


if __name__ == "__main__":
    main()
