"""What the Lab's dashboard server judged for the live cell footers, for ``live_cells.py``.

``live_cells.py`` copies this file as ``sitecustomize.py`` into a folder of its own and puts
that folder first on its Lab's PYTHONPATH, with ``NVDASHBOARD_LIVE_CELLS_PROBE`` naming a
file. Python imports ``sitecustomize`` at start-up in every process of that Lab (the Lab,
its kernels, the dashboard server the proxy starts); in each, SIGUSR1 then writes to that
file the ``judgments`` and ``cpu_s`` (``apps/live_cells.py``) of every ``LiveCells`` the
process holds: none but in the dashboard server, the only process the benchmark signals
(``harness.file_by_signal``). No endpoint of the server is added for it, and nothing runs
until the signal comes.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys

PROBE_VARIABLE = "NVDASHBOARD_LIVE_CELLS_PROBE"


def _dump(*_: object) -> None:
    module = sys.modules.get("jupyterlab_nvdashboard.apps.live_cells")
    found = ([o for o in gc.get_objects() if isinstance(o, module.LiveCells)]
             if module is not None else [])
    path = os.environ[PROBE_VARIABLE]
    with open(path + ".part", "w") as out:
        json.dump({"instances": len(found),
                   "judgments": sum(live.judgments for live in found),
                   "cpu_s": sum(live.cpu_s for live in found)}, out)
    os.replace(path + ".part", path)


if os.environ.get(PROBE_VARIABLE):
    signal.signal(signal.SIGUSR1, _dump)
