"""Which GPU is free (issue 44, item 2.1): the one rule of ``diagnosis/free.py`` over a window
of readings, and the same judgment on the overview and in ``/glance.json``, from the
simulated driver's readings."""

from __future__ import annotations

import json
import os
import re

import pytest

from jupyterlab_nvdashboard.diagnosis.free import (
    QUIET_MEMORY_SHARE,
    QUIET_PCT,
    by_device,
    judge_free,
)
from jupyterlab_nvdashboard.metrics import GpuFacts, GpuReading, HostReading, Sample
from jupyterlab_nvdashboard.metrics.families import GPM_FAMILY, GpmReading
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from tests.support.servers import get, in_process_server
from tests.support.waiting import until

GIB = 2**30
TOTAL = 80 * GIB


def _facts(index: int = 0, kind: str = "gpu") -> GpuFacts:
    values: list[object] = [None] * len(GpuFacts._fields)
    facts = GpuFacts(*values)
    return facts._replace(index=index, kind=kind, label=f"GPU {index}",
                          memory_total_bytes=TOTAL)


def _window(activity: list[float | None], memory_share: float = 0.01,
            gpm: list[float | None] | None = None, lost_last: bool = False) -> list[Sample]:
    """One sample a second: device 0's utilization (or, with ``gpm``, no utilization and
    GPM's SM activity) and memory in use."""
    host = HostReading(*([None] * len(HostReading._fields)))
    samples = []
    for i, util in enumerate(activity):
        reading = GpuReading.unavailable(0, lost=lost_last and i == len(activity) - 1)
        if not reading.lost:
            reading = reading._replace(utilization_pct=util, memory_total_bytes=TOTAL,
                                       memory_used_bytes=memory_share * TOTAL)
        extra: dict[str, object] = {}
        if gpm is not None:
            values: list[object] = [None] * len(GpmReading._fields)
            extra[GPM_FAMILY] = {0: GpmReading(*values)._replace(sm_activity_pct=gpm[i])}
        samples.append(Sample(i, 1000.0 + i, (reading,), host, extra=extra))
    return samples


QUIET = QUIET_PCT / 2
BUSY = QUIET_PCT * 4


@pytest.mark.parametrize(("name", "window", "processes", "free"), [
    ("nothing on it, quiet now", _window([BUSY, BUSY, QUIET]), 0, True),
    ("nothing listed, but busy now", _window([QUIET, QUIET, BUSY]), 0, False),
    ("nothing listed, memory in use now", _window([QUIET] * 3, 2 * QUIET_MEMORY_SHARE), 0,
     False),
    ("held, quiet all along", _window([QUIET] * 5), 1, True),
    ("held, busy a minute ago", _window([QUIET, BUSY, QUIET, QUIET]), 2, False),
    ("held, quiet but for a reading not taken", _window([None, QUIET, QUIET]), 1, True),
    ("held, its memory full", _window([QUIET] * 5, 0.5), 1, False),
    ("held, quiet by GPM's SM activity (MIG)", _window([None] * 3, gpm=[QUIET] * 3), 1, True),
    ("held, busy by GPM's SM activity (MIG)", _window([None] * 3, gpm=[QUIET, BUSY, QUIET]),
     1, False),
    ("nothing to read", _window([None] * 3), 0, False),
    ("lost", _window([QUIET] * 3, lost_last=True), 0, False),
    ("not read yet", [], 0, False),
])
def test_the_free_rule(name: str, window: list[Sample], processes: int, free: bool) -> None:
    judgment = judge_free(by_device(window).get(0, []), _facts(), processes)
    assert judgment.free is free, (name, judgment)
    assert judgment.why  # said in words, either way
    assert judgment.why.startswith("free") is free, judgment.why


def test_the_overview_and_glance_mark_the_same_free_gpus() -> None:
    """Every GPU idle (the ``idle`` scenario); a process of this test's holds most of GPU 1
    and a little of GPU 2: GPUs 0, 2 and 3 are free, GPU 1 is not, on both views."""
    with in_process_server(gpus=4, profile="mixed", scenario="idle") as server:
        server.simulator.set_processes([
            SimulatedProcess(1, os.getpid(), 60 * GIB), SimulatedProcess(2, os.getpid(), GIB)])

        def glance() -> dict:
            return json.loads(get(server.url + "/glance.json")[1])

        # Once a process pass has seen both processes and their owner (this test's user).
        devices = until(lambda: (lambda d: d if [x["mine"] for x in d] == [
            False, True, True, False] else None)(glance()["devices"]),
            "GPUs 1 and 2 held by this test's user in /glance.json")
        assert [d["free"] for d in devices] == [True, False, True, True], devices
        assert devices[1]["free_why"].startswith("in use: ") and "memory" in \
            devices[1]["free_why"]
        assert "held by 1 process but quiet" in devices[2]["free_why"]
        page = get(server.url + "/")[1].decode()
        rows = re.findall(r"<tr class='main[^']*' data-key='gpu-(\d)'[^>]*?( data-free)?>", page)
        assert rows == [("0", " data-free"), ("1", ""), ("2", " data-free"),
                        ("3", " data-free")], rows
        assert page.count("class='badge free'") == 3
        assert "<b>3 of 4</b> free" in page
