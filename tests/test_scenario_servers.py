"""Each simulated scenario, played by a real server's simulated driver, reads as its cause.

The scenario is a load model written from NVIDIA's documentation (simnvml/scenarios.py);
the driver answers every NVML call from it (utilization, GPM, clocks, clock-event reasons,
temperature, power, PCIe and NVLink byte counters, the current PCIe link), the real
nvidia-ml-py and the reader read it, and /diagnosis.json must name the scenario's cause
first, on every GPU (the pages show the same cache: diagnosis/live.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from jupyterlab_nvdashboard.simnvml.scenarios import SCENARIOS
from tests.support.servers import RunningServer, get, in_process_server

# GPM findings need their own readings (diagnosis/thresholds.py MIN_SAMPLES, once a second).
SETTLE_S = 8.0
# Until every GPU names the cause: a deadline that holds when a CPU hog and two other test
# workers share the two cores with these servers, whose readings then come late.
CAUSE_WITHIN_S = 120.0


@pytest.fixture(scope="module")
def playing() -> Iterator[tuple[dict[str, RunningServer], float]]:
    """A server per scenario, all started together: they settle at the same time."""
    with ExitStack() as stack:
        servers = {name: stack.enter_context(in_process_server(gpus=2, profile="h200",
                                                               scenario=name))
                   for name in SCENARIOS}
        yield servers, time.monotonic()


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_server_playing_the_scenario_names_its_cause_first(
        name: str, playing: tuple[dict[str, RunningServer], float]) -> None:
    servers, started = playing
    server, cause = servers[name], SCENARIOS[name].cause
    deadline = started + CAUSE_WITHIN_S
    time.sleep(max(0.0, started + SETTLE_S - time.monotonic()))
    while True:
        body = json.loads(get(server.url + "/diagnosis.json?seconds=30")[1])
        causes = [device["cause"] for device in body["devices"]]
        if all(found == cause for found in causes) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert causes == [cause, cause], [device["line"] for device in body["devices"]]
