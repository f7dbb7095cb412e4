"""Issue 55, items 1 to 3, the server's part: a running cell's verdict so far.

``/cell.json`` without an end answers the span up to now and says the cell still runs; the
glance carries each of the user's GPU kernels' running cell so far, judged by the same rules
as the finished footer, with what it is worth a notice for."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from jupyterlab_nvdashboard.diagnosis.cell import NOTICE_CAUSES
from jupyterlab_nvdashboard.jupyter_sessions import JupyterSessions, Session
from jupyterlab_nvdashboard.kernel_executions import CellSpan
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from tests.support.servers import RunningServer, get, in_process_server
from tests.support.stand_in_kernel import Kernel, stand_in_kernel
from tests.support.waiting import until
from tests.test_cell_server import attributed, iso, passes_since

GIB = 2**30


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    with stand_in_kernel(tmp_path) as kernel:
        yield kernel


def under_jupyter(server: RunningServer, kernel: Kernel, cells: tuple[CellSpan, ...],
                  state: str = "busy") -> JupyterSessions:
    """The Jupyter server this one would run under, as its refreshes leave it: the kernel's
    notebook and its cells (the executions route's)."""
    jupyter = JupyterSessions(None)
    jupyter.sessions = {kernel.kernel_id: Session("work/train.ipynb", "notebook", "train.ipynb",
                                                  state)}
    jupyter.cells = {kernel.kernel_id: cells}
    server.sources.jupyter = server.sources.usage.jupyter = jupyter
    return jupyter


def so_far(server: RunningServer, kernel: Kernel, start: float) -> tuple[int, dict]:
    query = urlencode({"kernel": kernel.kernel_id, "start": iso(start)})
    status, body = get(f"{server.url}/cell.json?{query}")
    return status, json.loads(body) if status == 200 else {"error": body.decode()}


def glance_cell(server: RunningServer, kernel: Kernel) -> dict | None:
    status, body = get(f"{server.url}/glance.json")
    assert status == 200, body
    [entry] = [k for k in json.loads(body)["kernels"] if k["kernel_id"] == kernel.kernel_id] \
        or [{}]
    return entry.get("cell")


def test_cell_json_without_an_end_answers_so_far(kernel: Kernel) -> None:
    with in_process_server(gpus=2, profile="h200", scenario="compute-bound") as server:
        server.simulator.set_processes([SimulatedProcess(1, kernel.pid, 12 * GIB, sm_pct=87)])
        until(lambda: attributed(server, kernel.kernel_id), "the kernel's processes attributed")
        start = time.time()
        until(lambda: passes_since(server, start) >= 4 and time.time() - start >= 3.5,
              "four process passes and 3.5 s")
        status, report = so_far(server, kernel, start)
        assert status == 200, report
        assert report["running"] is True and report["state"] == "busy", report
        assert [g["index"] for g in report["gpus"]] == [1], report
        assert report["end_s"] - start >= 3.0 and report["end_s"] <= time.time(), report
        # Held all along: from the span's start, or from its first pass where the pass
        # before it came too long before (a loaded machine).
        assert report["duration_s"] - 1.5 <= report["held_s"] <= report["duration_s"], report
        assert report["notice"] is None, report  # busy on its own: nothing to say
        # Once Jupyter says the cell ended, the span is the cell's, not "so far".
        ended = time.time() - 1.0
        under_jupyter(server, kernel, (CellSpan(3, start, ended),), state="idle")
        status, report = so_far(server, kernel, start)
        assert status == 200 and report["running"] is False, report
        assert report["end_s"] == pytest.approx(ended) and report["count"] == 3, report
        # A bad start is one line, as for every span.
        status, _ = get(f"{server.url}/cell.json?{urlencode({'kernel': kernel.kernel_id})}")
        assert status == 400


def test_the_glance_carries_a_running_cell_so_far_busy_then_held_idle(kernel: Kernel) -> None:
    """A cell busy for a while, then idle: the glance's verdict so far is busy, then, once
    the idle part outweighs the busy one, held-idle with a notice; a cell of a GPU shared
    with another process gets no notice; and once the cell has ended the glance has none."""
    with in_process_server(gpus=2, profile="h200", scenario="compute-bound") as server:
        server.simulator.set_processes([SimulatedProcess(1, kernel.pid, 12 * GIB, sm_pct=87)])
        until(lambda: attributed(server, kernel.kernel_id), "the kernel's processes attributed")
        start = time.time()
        under_jupyter(server, kernel, (CellSpan(1, start - 30, start - 29),
                                       CellSpan(2, start, None)))
        until(lambda: (glance_cell(server, kernel) or {}).get("duration_s", 0) >= 3.0,
              "a verdict so far of three seconds or more")
        busy = glance_cell(server, kernel)
        assert busy is not None and busy["running"] and busy["state"] == "busy", busy
        assert busy["start_s"] == pytest.approx(start) and busy["count"] == 2, busy
        assert busy["verdict"].startswith("GPU 1: busy"), busy
        assert busy["notice"] is None, busy
        idle_from = time.time()
        server.simulator.set_scenario("idle")
        server.simulator.set_processes([SimulatedProcess(1, kernel.pid, 12 * GIB, sm_pct=0)])
        until(lambda: (glance_cell(server, kernel) or {}).get("state") == "held-idle",
              "the verdict so far turns held-idle", seconds=60)
        idle = glance_cell(server, kernel)
        assert idle["notice"] == "held-idle" and idle["notice"] in NOTICE_CAUSES, idle
        assert idle["end_s"] > idle_from and idle["held_s"] >= idle["duration_s"] - 1.5, idle
        assert idle["verdict"].startswith("held 12.0 GiB on GPU 1, but this cell worked it "), \
            idle
        # Shared with another user's process: cannot tell, and no notice.
        server.simulator.set_processes([SimulatedProcess(1, kernel.pid, 12 * GIB, sm_pct=0),
                                        SimulatedProcess(1, 1, 2 * GIB)])
        until(lambda: (glance_cell(server, kernel) or {}).get("gpus", [{}])[0]
              .get("shared_with"), "the kernel's GPU shared", seconds=60)
        assert glance_cell(server, kernel)["notice"] is None
        # Ended: the glance carries no running cell.
        under_jupyter(server, kernel, (CellSpan(2, start, time.time()),), state="idle")
        assert glance_cell(server, kernel) is None
        judged = server.sources.live_cells.judgments
        assert judged >= 3, judged
