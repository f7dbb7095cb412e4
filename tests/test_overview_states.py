"""Every state said where it shows: the overview (``/``), /GPU-Health's rows and the GPM
notice for a lost GPU, a consumer card, MIG and no processes; and the simulator's numbers
agree with each other (a process holds at most its GPU's used memory, MIG devices fit in
their GPU)."""

from __future__ import annotations

import os
import re
import time

import pytest

from jupyterlab_nvdashboard.apps.activity import without_gpm
from jupyterlab_nvdashboard.apps.health import CANNOT_READ, gpu_health
from jupyterlab_nvdashboard.apps.overview import NO_PROCESSES
from jupyterlab_nvdashboard.metrics import PROCESS_FAMILY
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from tests.support.servers import get, in_process_server

GIB = 2**30


def _text(page: str) -> str:
    page = re.sub(r"<(style|script)>.*?</\1>", "", page, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)).replace("&#x27;", "'")


def _wait(condition, timeout_s: float = 15.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _health_rows(server) -> dict[str, list[str]]:  # noqa: ANN001
    feed = gpu_health(server.metrics)
    return feed.rows(server.metrics.history.window(5)).text


def test_lost_gpu_says_lost_once_and_no_none() -> None:
    with in_process_server(gpus=2, profile="mixed") as server:
        _wait(lambda: server.metrics.history.latest() is not None)
        server.simulator.lose_gpu(1)
        _wait(lambda: any(r.lost for r in server.metrics.history.latest().gpus))
        page = _text(get(server.url + "/")[1].decode())
        assert "GPU lost: it stopped answering" in page
        rows = _health_rows(server)
        assert rows["clocks"][1] == "GPU lost" and "GPU lost" in rows["clocks_mark"][1]
        assert rows["xid"][1] != "none" and rows["power"][1] == CANNOT_READ
        assert "not available" not in " ".join(value[1] for value in rows.values())
        assert rows["xid"][0] == "none"  # the other GPU carries on as before


def test_consumer_card_gives_reasons_not_blanks() -> None:
    with in_process_server(gpus=1, profile="consumer") as server:
        _wait(lambda: server.metrics.history.latest() is not None)
        time.sleep(0.5)
        page = _text(get(server.url + "/")[1].decode())
        assert "util: not supported by this GPU or driver" in page
        assert "GeForce" in page and NO_PROCESSES in page
        rows = _health_rows(server)
        assert "not available of not available" not in rows["power"][0]
        assert rows["power"][0] == "power: not supported by this GPU or driver"
        reasons = [reason for _, reason in without_gpm(server.metrics)]
        assert reasons and all("newer nvidia-ml-py" not in r for r in reasons)
        assert "NVIDIA GeForce RTX 3080 has none" in reasons[0]


def test_mig_rows_say_why_and_fit_their_gpu() -> None:
    with in_process_server(gpus=1, profile="a100-mig") as server:
        server.simulator.set_processes([SimulatedProcess(0, os.getpid(), 30 * GIB, mig=0)])
        _wait(lambda: server.metrics.history.latest() is not None)
        page = _text(get(server.url + "/")[1].decode())
        assert "↳ GPU 0 · MIG 1" in page
        assert "NVML reports no utilization for a MIG device" in page
        assert "whole-GPU reading: see GPU 0" in page
        assert "not reported for the whole GPU while MIG is enabled" in page
        # Health reads the whole GPU: its row names the MIG devices that share it.
        health = _health_rows(server)["gpu"]
        assert health == ["GPU 0: NVIDIA A100-SXM4-80GB · MIG enabled: 3g.40gb, 4g.40gb "
                          "(these readings are the whole GPU's)"]
        frozen = [time.monotonic()]  # each sample read at one instant, across the load waves
        server.simulator.set_clock(lambda: frozen[0])
        for _ in range(20):
            frozen[0] += 5.0
            seq = server.metrics.history.latest().seq
            _wait(lambda seq=seq: server.metrics.history.latest().seq > seq + 1)
            sample = server.metrics.history.latest()
            readings = {r.index: r for r in sample.gpus}
            parent = readings[0]
            children = [readings[f.index] for f in server.metrics.facts if f.parent == 0]
            assert sum(c.memory_used_bytes for c in children) <= parent.memory_used_bytes
            for child, facts in zip(children, [f for f in server.metrics.facts
                                               if f.parent == 0], strict=True):
                assert child.memory_used_bytes <= facts.memory_total_bytes


@pytest.mark.parametrize("profile", ["mixed", "a100-mig"])
def test_no_process_holds_more_than_its_gpu_uses(profile: str) -> None:
    with in_process_server(gpus=2, profile=profile) as server:
        # 61 GB on an 80 GB A100 (whose used memory waves between 8 and 72 GB), or 30 GiB on
        # a 4g.40gb MIG device.
        big = SimulatedProcess(1 if profile == "mixed" else 0, os.getpid(),
                               61 * 10**9 if profile == "mixed" else 30 * GIB,
                               mig=None if profile == "mixed" else 1)
        server.simulator.set_processes([big, SimulatedProcess(0, 1, 3 * GIB, mig=None
                                                              if profile == "mixed" else 0)])

        def listed() -> bool:
            sample = server.metrics.history.latest()
            return sample is not None and len(sample.extra.get(PROCESS_FAMILY) or ()) == 2

        _wait(listed)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            sample = server.metrics.history.latest()
            used = {r.index: r.memory_used_bytes for r in sample.gpus}
            for process in sample.extra.get(PROCESS_FAMILY) or ():
                assert process.used_memory_bytes <= used[process.device], (process, used)
            time.sleep(0.1)
