"""Cluster mode's parts without worker processes: the heartbeat snapshot (format, size),
the state folding (dedupe, stale, lost, back, bad snapshots) and the plugin inside a real
in-process ``distributed`` scheduler and worker (setup, heartbeat, errors, teardown)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

pytest.importorskip("distributed")
import msgpack  # noqa: E402  (a dependency of distributed: its heartbeat encoding)

from jupyterlab_nvdashboard.cluster import METRIC_KEY  # noqa: E402
from jupyterlab_nvdashboard.cluster.plugin import GpuMetricsPlugin, WorkerGpus  # noqa: E402
from jupyterlab_nvdashboard.cluster.snapshot import VERSION, decode  # noqa: E402
from jupyterlab_nvdashboard.cluster.view import LOST, OK, STALE, ClusterState  # noqa: E402

MAX_BYTES_PER_GPU = 300


def node_snapshot(host: str, gpus: int) -> dict:
    reader = WorkerGpus({"NVDASHBOARD_SIMULATE": str(gpus), "NVDASHBOARD_SIMULATE_HOST": host})
    reader.metrics.nvml.ensure_initialized()
    reader.metrics.sampler.tick()  # hand-driven samples: the rates need two
    reader.metrics.sampler.tick()
    return reader.snapshot()


def test_snapshot_is_small_versioned_and_round_trips() -> None:
    payload = node_snapshot("node-x", 8)
    assert payload["v"] == VERSION and payload["host"] == "node-x"
    assert len(payload["gpus"]) == 8 and all(key.startswith("GPU-") for key in payload["gpus"])
    size = len(msgpack.packb(payload))
    assert size / 8 <= MAX_BYTES_PER_GPU, size
    node = decode(msgpack.unpackb(msgpack.packb(payload)))
    assert set(node.gpus) == set(payload["gpus"])
    gpu = next(iter(node.gpus.values()))
    assert gpu.hostname == "node-x" and gpu.identity.pci_bus_id.startswith("00000000:")


@pytest.mark.parametrize("payload", [None, {"v": 2, "host": "h", "t": 0, "gpus": {}},
                                     {"v": 1, "host": "h"}, {"v": 1, "host": "h", "t": 0,
                                                             "gpus": {"GPU-1": [0]}}])
def test_a_foreign_or_broken_snapshot_is_refused_in_one_line(payload: object) -> None:
    with pytest.raises(ValueError) as error:
        decode(payload)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


def view(now: float, workers: dict[str, tuple[float, dict | None]]) -> dict:
    return {"now": now, "heartbeat_s": 0.5,
            "workers": {address: {"host": "127.0.0.1", "last_seen": seen, "snapshot": snap}
                        for address, (seen, snap) in workers.items()}}


def test_state_dedupes_marks_stale_and_lost_and_brings_back() -> None:
    a, b = node_snapshot("node-a", 2), node_snapshot("node-b", 4)
    state = ClusterState()
    tick = state.update(view(100.0, {"w1": (99.9, a), "w2": (99.8, a), "w3": (99.9, b)}))
    assert [gpu.gpu.hostname for gpu in tick.gpus] == ["node-a"] * 2 + ["node-b"] * 4
    assert {gpu.workers for gpu in tick.gpus if gpu.gpu.hostname == "node-a"} == {("w1", "w2")}
    assert {gpu.state for gpu in tick.gpus} == {OK}
    # w3 misses 3 heartbeats (1.5 s): stale, not yet lost.
    tick = state.update(view(101.6, {"w1": (101.5, a), "w2": (101.5, a), "w3": (100.0, b)}))
    assert {g.state for g in tick.gpus if g.gpu.hostname == "node-b"} == {STALE}
    # w3 leaves: lost, still listed; w2 leaves too, but w1 still reports node-a.
    tick = state.update(view(102.0, {"w1": (101.9, a)}))
    assert {g.state for g in tick.gpus if g.gpu.hostname == "node-b"} == {LOST}
    assert {g.state for g in tick.gpus if g.gpu.hostname == "node-a"} == {OK}
    assert len(tick.gpus) == 6
    tick = state.update(view(103.0, {"w1": (102.9, a), "w4": (102.9, b)}))
    assert {g.state for g in tick.gpus} == {OK}


def test_one_bad_worker_does_not_hide_the_others() -> None:
    state = ClusterState()
    tick = state.update(view(10.0, {"good": (10.0, node_snapshot("node-a", 2)),
                                    "bad": (10.0, {"v": 99}), "none": (10.0, None)}))
    assert len(tick.gpus) == 2 and "bad" in state.rejected


def _reader_threads() -> int:
    return sum(t.name.startswith("nvdashboard-") for t in threading.enumerate())


def test_plugin_publishes_on_the_heartbeat_and_tears_down(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from distributed import Scheduler, Worker

    monkeypatch.setenv("NVDASHBOARD_SIMULATE", "2")
    monkeypatch.setenv("NVDASHBOARD_SIMULATE_HOST", "node-p")
    threads_before = _reader_threads()

    async def run() -> None:
        async with Scheduler(dashboard_address=":0") as scheduler, \
                Worker(scheduler.address, nthreads=1, dashboard=False) as worker:
            await worker.plugin_add(GpuMetricsPlugin())
            assert METRIC_KEY in worker.metrics
            assert _reader_threads() == threads_before + 3  # the sampler's own threads
            deadline = time.monotonic() + 30
            seen = None
            while time.monotonic() < deadline:
                await worker.heartbeat()
                seen = scheduler.workers[worker.address].metrics.get(METRIC_KEY)
                if seen and seen["gpus"]:
                    break
                await asyncio.sleep(0.2)
            assert seen and decode(seen).hostname == "node-p" and len(seen["gpus"]) == 2
            await worker.plugin_remove(GpuMetricsPlugin.name)
            assert METRIC_KEY not in worker.metrics
            assert _reader_threads() == threads_before

    asyncio.run(run())


def test_plugin_setup_errors_leave_the_worker_running(monkeypatch: pytest.MonkeyPatch) -> None:
    from distributed import Scheduler, Worker

    monkeypatch.setenv("NVDASHBOARD_SIMULATE", "not-a-number")

    async def run() -> None:
        async with Scheduler(dashboard_address=":0") as scheduler, \
                Worker(scheduler.address, nthreads=1, dashboard=False) as worker:
            plugin = GpuMetricsPlugin()
            await worker.plugin_add(plugin)
            assert METRIC_KEY not in worker.metrics
            await worker.heartbeat()  # the worker still reports
            assert scheduler.workers[worker.address].metrics
            await worker.plugin_remove(GpuMetricsPlugin.name)

    asyncio.run(run())


def test_scaled_fields_round_trip_to_their_units() -> None:
    from jupyterlab_nvdashboard.cluster.snapshot import encode
    from jupyterlab_nvdashboard.export.dcgm import FIELDS, ExportedGpu, GpuIdentity

    values = tuple(float(i) + 0.25 for i in range(len(FIELDS)))
    position = {field.name: i for i, field in enumerate(FIELDS)}
    values = list(values)
    values[position["DCGM_FI_PROF_SM_ACTIVE"]] = 0.4567
    values[position["DCGM_FI_PROF_PCIE_TX_BYTES"]] = 12.5e9
    gpu = ExportedGpu("h", GpuIdentity(3, "GPU-x", "NVIDIA H200", None), False, tuple(values))
    (back,) = decode(msgpack.unpackb(msgpack.packb(encode("h", 1.0, [gpu])))).gpus.values()
    assert back.identity == gpu.identity
    assert back.values[position["DCGM_FI_PROF_SM_ACTIVE"]] == pytest.approx(0.457)
    assert back.values[position["DCGM_FI_PROF_PCIE_TX_BYTES"]] == pytest.approx(12.5e9, rel=1e-6)
    assert back.values[position["DCGM_FI_DEV_FB_USED"]] == pytest.approx(2.25)
