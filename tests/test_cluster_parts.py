"""Cluster mode's parts without worker processes: the identity and heartbeat snapshot
(format, size, the simulated flag), which GPUs a worker reads (dask-cuda's layout, plain
workers, hand-over), the state folding (one reporter chosen the same way every time, stale,
lost, back, bad snapshots), the /Cluster-GPUs feed and page (SIMULATED rows, the window
picker and its long-window columns), a /Cluster-GPUs viewer keeping the local sampler awake,
and the plugin inside a real in-process ``distributed`` scheduler and worker (setup, identity
in the scheduler's metadata, heartbeat, errors, teardown)."""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")
import msgpack  # noqa: E402  (a dependency of distributed: its heartbeat encoding)
import numpy as np  # noqa: E402

from jupyterlab_nvdashboard.apps.cluster import (  # noqa: E402
    CLUSTER_PATH,
    LOST_HEAT,
    MAX_COLUMNS,
    STALE_HEAT,
    ClusterFeed,
    ClusterFeeds,
    ClusterGpusView,
    cluster_title,
    cluster_windows,
    feed_for_tick,
)
from jupyterlab_nvdashboard.cluster import METRIC_KEY  # noqa: E402
from jupyterlab_nvdashboard.cluster.ownership import GpuClaims  # noqa: E402
from jupyterlab_nvdashboard.cluster.plugin import GpuMetricsPlugin, WorkerGpus  # noqa: E402
from jupyterlab_nvdashboard.cluster.snapshot import (  # noqa: E402
    VERSION,
    decode,
    decode_identity,
)
from jupyterlab_nvdashboard.cluster.view import (  # noqa: E402
    LOST,
    OK,
    STALE,
    ClusterState,
    ClusterView,
)
from jupyterlab_nvdashboard.stream import frames  # noqa: E402
from jupyterlab_nvdashboard.stream.broadcaster import TIME_KEY, Broadcaster  # noqa: E402
from tests.support.cluster_page import fill_cluster_history  # noqa: E402
from tests.support.servers import in_process_server  # noqa: E402
from tests.support.stream_client import open_stream  # noqa: E402

# Live values only: 22 gauges and 3 counters, each GPU's a list in the identity's order.
MAX_LIVE_BYTES_PER_GPU = 120
MAX_IDENTITY_BYTES_PER_GPU = 160


@pytest.fixture(autouse=True)
def claims_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's workers claim GPUs in a folder of its own, removed with it."""
    monkeypatch.setenv("NVDASHBOARD_GPU_CLAIMS_DIR", str(tmp_path / "claims"))
    return tmp_path / "claims"


def node_reader(host: str, gpus: int, **environ: str) -> WorkerGpus:
    reader = WorkerGpus({"NVDASHBOARD_SIMULATE": str(gpus), "NVDASHBOARD_SIMULATE_HOST": host,
                         "NVDASHBOARD_GPU_CLAIMS_DIR": os.environ["NVDASHBOARD_GPU_CLAIMS_DIR"],
                         **environ})
    reader.check_claims(adopt=True)
    reader.metrics.sampler.tick()  # hand-driven samples: the rates need two
    reader.metrics.sampler.tick()
    return reader


def node_snapshots(host: str, gpus: int) -> tuple[dict, dict]:
    """A worker's first snapshot (with its identity) and a later one (live values only)."""
    reader = node_reader(host, gpus)
    first = reader.snapshot()
    reader.metrics.sampler.tick()
    return first, reader.snapshot()


def test_static_facts_once_then_live_values_only() -> None:
    first, later = node_snapshots("node-x", 8)
    assert first["v"] == later["v"] == VERSION and "id" in first and "id" not in later
    identity = decode_identity(msgpack.unpackb(msgpack.packb(first["id"])))
    assert identity.hostname == "node-x" and len(identity.gpus) == 8
    assert all(gpu.uuid.startswith("GPU-") for gpu in identity.gpus)
    live = len(msgpack.packb(later))
    assert live / 8 <= MAX_LIVE_BYTES_PER_GPU, live
    assert len(msgpack.packb(first["id"])) / 8 <= MAX_IDENTITY_BYTES_PER_GPU
    # No UUID, model or bus ID travels with the live values.
    assert b"GPU-" not in msgpack.packb(later) and b"NVIDIA" not in msgpack.packb(later)
    node = decode(msgpack.unpackb(msgpack.packb(later)), identity)
    assert set(node.gpus) == {gpu.key for gpu in identity.gpus}
    gpu = next(iter(node.gpus.values()))
    assert gpu.hostname == "node-x" and gpu.identity.pci_bus_id.startswith("00000000:")


IDENTITY = {"v": 2, "host": "h", "e": "a.1", "gpus": [["GPU-1", 0, "GPU-1", "m", None, None,
                                                        None]]}


@pytest.mark.parametrize("payload", [None, {"v": 1, "host": "h", "t": 0, "gpus": {}},
                                     {"v": 2, "e": "a.1"}, {"v": 2, "e": "a.1", "t": 0,
                                                            "gpus": [[False, 1], [False]]},
                                     {"v": 2, "e": "b.7", "t": 0, "gpus": []}])
def test_a_foreign_or_broken_snapshot_is_refused_in_one_line(payload: object) -> None:
    with pytest.raises(ValueError) as error:
        decode(payload, decode_identity(IDENTITY))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("payload", [None, {"v": 2}, {"v": 2, "host": "h", "e": 1,
                                                      "gpus": [[1, 2]]}])
def test_a_broken_identity_is_refused_in_one_line(payload: object) -> None:
    with pytest.raises(ValueError) as error:
        decode_identity(payload)
    assert "\n" not in str(error.value)


def view(now: float, workers: dict[str, tuple[float, dict | None]]) -> dict:
    return {"now": now, "heartbeat_s": 0.5,
            "workers": {address: {"host": "127.0.0.1", "last_seen": seen, "snapshot": snap}
                        for address, (seen, snap) in workers.items()}}


def test_state_marks_stale_and_lost_and_brings_back() -> None:
    (a, a2), (b, b2) = node_snapshots("node-a", 2), node_snapshots("node-b", 4)
    state = ClusterState()
    tick = state.update(view(100.0, {"w1": (99.9, a), "w3": (99.9, b)}))
    assert [gpu.gpu.hostname for gpu in tick.gpus] == ["node-a"] * 2 + ["node-b"] * 4
    assert {gpu.state for gpu in tick.gpus} == {OK}
    # Later heartbeats carry live values only: the identity is remembered per worker.
    tick = state.update(view(100.5, {"w1": (100.4, a2), "w3": (100.4, b2)}))
    assert len(tick.gpus) == 6 and {gpu.state for gpu in tick.gpus} == {OK}
    # w3 misses 3 heartbeats (1.5 s): stale, not yet lost.
    tick = state.update(view(102.0, {"w1": (101.9, a2), "w3": (100.4, b2)}))
    assert {g.state for g in tick.gpus if g.gpu.hostname == "node-b"} == {STALE}
    tick = state.update(view(102.5, {"w1": (102.4, a2)}))  # w3 leaves: lost, still listed
    assert {g.state for g in tick.gpus if g.gpu.hostname == "node-b"} == {LOST}
    assert {g.state for g in tick.gpus if g.gpu.hostname == "node-a"} == {OK}
    assert len(tick.gpus) == 6
    tick = state.update(view(103.0, {"w1": (102.9, a2), "w4": (102.9, b)}))
    assert {g.state for g in tick.gpus} == {OK}


def test_a_live_snapshot_waits_for_its_identity_from_the_scheduler() -> None:
    first, later = node_snapshots("node-a", 2)
    state = ClusterState()
    tick = state.update(view(10.0, {"w1": (10.0, later)}))  # the first heartbeat was missed
    assert tick.gpus == () and not state.rejected
    workers = view(11.0, {"w1": (11.0, later)})
    workers["workers"]["w1"]["identity"] = first["id"]  # the scheduler's metadata has it
    assert len(state.update(workers).gpus) == 2


def test_two_reporters_of_one_gpu_one_is_chosen_the_same_way_every_time(
        tmp_path: Path) -> None:
    # Two readers of one host's GPUs (claims in two folders: nothing stops them), their
    # snapshots taken apart, so their values differ.
    readers = [node_reader("node-a", 2, NVDASHBOARD_GPU_CLAIMS_DIR=str(tmp_path / name))
               for name in ("one", "two")]
    first = [reader.snapshot() for reader in readers]
    for reader in readers:
        reader.metrics.sampler.tick()
    later = [reader.snapshot() for reader in readers]
    w1 = decode(later[0], decode_identity(first[0]["id"]))
    state = ClusterState()
    state.update(view(100.0, {"w2": (99.9, first[1]), "w1": (99.8, first[0])}))
    for now, (w1_seen, w2_seen) in [(101.0, (100.7, 100.9)), (102.0, (101.9, 101.5)),
                                    (103.0, (102.2, 102.9))]:
        tick = state.update(view(now, {"w2": (w2_seen, later[1]), "w1": (w1_seen, later[0])}))
        assert len(tick.gpus) == 2 and {g.workers for g in tick.gpus} == {("w1", "w2")}
        # Whichever heartbeat was freshest, w1's values are shown.
        assert [g.gpu.values for g in tick.gpus] == [w1.gpus[g.gpu.identity.key].values
                                                    for g in tick.gpus]
    assert later[0]["gpus"] != later[1]["gpus"]
    for reader in readers:
        reader.claims.release()


def test_one_bad_worker_does_not_hide_the_others() -> None:
    state = ClusterState()
    good, _ = node_snapshots("node-a", 2)
    tick = state.update(view(10.0, {"good": (10.0, good), "bad": (10.0, {"v": 99}),
                                    "none": (10.0, None)}))
    assert len(tick.gpus) == 2 and "bad" in state.rejected


def test_each_gpu_says_whether_its_worker_reads_simulated_gpus() -> None:
    first, _ = node_snapshots("node-s", 2)  # NVDASHBOARD_SIMULATE: the simulated driver
    assert first["id"]["sim"] is True and decode_identity(first["id"]).simulated
    # No flag: real GPUs (a real host, or a worker of an earlier release).
    real_identity = {**IDENTITY, "host": "node-r", "e": "r.1"}
    assert "sim" not in real_identity and not decode_identity(real_identity).simulated
    real = {"v": 2, "e": "r.1", "t": 100.0, "gpus": [[False, 50]], "id": real_identity}
    cluster = ClusterView("tcp://127.0.0.1:9")
    tick = cluster.poll_once(lambda: view(100.0, {"w1": (99.9, first), "w2": (99.9, real)}))
    assert [(g.gpu.hostname, g.simulated) for g in tick.gpus] == \
        [("node-r", False), ("node-s", True), ("node-s", True)]
    assert [(g["host"], g["simulated"]) for g in cluster.summary()["gpus"]] == \
        [("node-r", False), ("node-s", True), ("node-s", True)]
    # A lost GPU is still the simulated one it was.
    tick = cluster.poll_once(lambda: view(101.0, {"w2": (100.9, {**real, "t": 101.0})}))
    assert [(g.state, g.simulated) for g in tick.gpus] == \
        [(OK, False), (LOST, True), (LOST, True)]


def _feed(hosts: dict[str, tuple[int, bool]]) -> ClusterFeed:
    cluster = ClusterView("tcp://127.0.0.1:9")
    fill_cluster_history(cluster, hosts, 3, lambda host, gpu, age: 50.0)
    return feed_for_tick(cluster)


def test_the_page_says_simulated_on_each_simulated_row_and_in_the_title() -> None:
    mixed = _feed({"real-a": (2, False), "sim-b": (1, True)})
    assert mixed.simulated == (False, False, True)
    assert cluster_title(mixed) == "Cluster GPUs (some SIMULATED)"
    page = ClusterGpusView(mixed, 1.0)
    assert page.row_labels == ["real-a · GPU 0", "real-a · GPU 1", "sim-b · GPU 0 (SIMULATED)"]
    assert cluster_title(_feed({"sim-b": (2, True)})) == "Cluster GPUs (SIMULATED)"
    assert cluster_title(_feed({"real-a": (2, False)})) == "Cluster GPUs"
    assert cluster_title(_feed({})) == "Cluster GPUs"


class _Page:
    """A subscriber that keeps nothing: the catch-up is what ``subscribe`` returns."""

    def send(self, frame: bytes) -> None:
        pass

    def close(self, code: int | None = None, reason: str | None = None) -> None:
        pass


def test_the_long_window_shows_older_columns() -> None:
    cluster = ClusterView("tcp://127.0.0.1:9")
    # 15 minutes of 5 GPUs: busy (90 %) until 5 minutes ago, idle (10 %) since.
    fill_cluster_history(cluster, {"node-a": (2, True), "node-b": (3, False)}, 900,
                         lambda host, gpu, age: 90.0 if age >= 300 else 10.0)
    windows = cluster_windows(cluster)
    assert windows == (120.0, 600.0, 1800.0)  # the timelines' windows the history fills
    page = ClusterGpusView(feed_for_tick(cluster), cluster.interval_s, windows)
    assert page.picker is not None and page.picker.labels == ["2 min", "10 min", "30 min"]
    broadcaster = Broadcaster(cluster.history, cluster.interval_s, ClusterFeeds(cluster),
                              windows)
    newest_ms = cluster.latest().time_s * 1000

    def catch_up(window_s: float) -> dict[str, np.ndarray]:
        frame = broadcaster.subscribe(CLUSTER_PATH, window_s, -1, _Page())
        return frames.decode(frame)[1].numeric

    short, long = catch_up(120.0), catch_up(600.0)
    # 2 minutes: a column a second, all of them idle.
    assert newest_ms - short[TIME_KEY].min() <= 120_000
    assert len(short[TIME_KEY]) == 5 * 121 and set(short["heat"]) == {10.0}
    # 10 minutes: the busy columns from before, cut into 240 columns of 2.5 s.
    assert newest_ms - long[TIME_KEY].min() >= 590_000
    assert {90.0, 10.0} <= set(long["heat"])
    times = np.unique(long[TIME_KEY])
    assert len(times) <= MAX_COLUMNS + 1 and len(long[TIME_KEY]) == 5 * len(times)
    assert np.allclose(np.diff(times), 2500.0)
    assert page.live.rollover["600"] >= len(long[TIME_KEY])


def test_a_long_window_column_is_the_mean_of_its_readings() -> None:
    feed = ClusterFeed((("h", "GPU-0"), ("h", "GPU-1")), ("h · GPU 0", "h · GPU 1"),
                       (False, False))
    nan = math.nan
    # Four ticks of two GPUs (tick-major), two buckets of 2 s.
    heat = [20, nan, 40, 60, 50, LOST_HEAT, STALE_HEAT, 80]
    rows = frames.Rows({TIME_KEY: np.repeat([0.0, 1000.0, 2000.0, 3000.0], 2),
                 "row": np.tile([0.0, 1.0], 4), "heat": np.array(heat, float),
                 "mem_pct": np.arange(8.0), "mem_used_gib": np.arange(8.0),
                 "mem_total_gib": np.full(8, 141.0)})
    out = feed.downsample(rows, 2.0, np.array([0.0, 1.0, 2.0, 3.0]) + 500.0).numeric
    assert list(out[TIME_KEY]) == [1000.0, 1000.0, 3000.0, 3000.0]  # the buckets' middles
    assert list(out["row"]) == [0.0, 1.0, 0.0, 1.0]
    # Means of the utilization readings; stale at the bucket's end is drawn stale.
    assert list(out["heat"]) == [30.0, 60.0, STALE_HEAT, 80.0]
    assert list(out["mem_pct"]) == [2.0, 3.0, 6.0, 7.0]  # memory at the bucket's end


def test_a_cluster_page_alone_keeps_the_local_sampler_awake(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClusterView, "start", lambda self: None)  # no scheduler to poll
    with in_process_server(gpus=1, idle_interval_s=5.0,
                           dask_scheduler="tcp://127.0.0.1:9") as server:
        sampler = server.metrics.sampler
        deadline = time.monotonic() + 30
        while not sampler.idle and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sampler.idle  # nobody watches: one tick in 5 s

        async def watch() -> tuple[bool, set[float]]:
            page = await open_stream(server.url, CLUSTER_PATH)
            woken = not sampler.idle  # by the subscription itself
            intervals = set()
            for _ in range(25):  # past the viewer checks (once a second) that slow it down
                await asyncio.sleep(0.1)
                intervals.add(sampler.current_interval_s)
            page.close()
            return woken, intervals

        woken, intervals = asyncio.run(watch())
        assert woken and intervals == {server.config.interval_s}  # never the idle 5 s


def uuids(count: int) -> list[str]:
    return [f"GPU-{i:08d}-0000-4000-8000-000000000000" for i in range(count)]


def rotation(gpus: list[str], first: int) -> dict[str, int]:
    """dask-cuda's CUDA_VISIBLE_DEVICES for its worker ``first``: the GPUs from there on."""
    order = gpus[first:] + gpus[:first]
    return {uuid: position for position, uuid in enumerate(order)}


def test_dask_cuda_workers_each_read_their_own_gpu_whoever_starts_first(
        claims_dir: Path) -> None:
    gpus = uuids(4)
    workers = [GpuClaims("node-a", claims_dir) for _ in gpus]
    # Worker 0 starts alone and, past its grace time, adopts the GPUs nobody owns yet.
    assert workers[0].update(rotation(gpus, 0), own_first=True) == set(gpus)
    for step in range(3):  # the others start: each check hands a GPU over, never shares it
        readers = [w.update(rotation(gpus, i), own_first=True) if i <= step + 1 else set()
                   for i, w in enumerate(workers)]
        assert sum(len(r) for r in readers) <= 4 and \
            all(not (r & q) for i, r in enumerate(readers) for q in readers[i + 1:])
    for _ in range(2):
        readers = [w.update(rotation(gpus, i), own_first=True) for i, w in enumerate(workers)]
    assert readers == [{gpu} for gpu in gpus]
    workers[2].release()  # worker 2 dies: the kernel drops its locks
    readers = [w.update(rotation(gpus, i), own_first=True) for i, w in enumerate(workers)
               if i != 2]
    assert set().union(*readers) == set(gpus) and sum(len(r) for r in readers) == 4
    for worker in workers:
        worker.release()


def test_one_worker_reads_all_and_two_plain_workers_never_overlap_nor_split(
        claims_dir: Path) -> None:
    gpus = uuids(4)
    # LocalCUDACluster(n_workers=1): CUDA_VISIBLE_DEVICES=0,1,2,3 and nobody else.
    alone = GpuClaims("node-b", claims_dir)
    assert alone.update(rotation(gpus, 0), own_first=True, adopt=False) == {gpus[0]}
    assert alone.update(rotation(gpus, 0), own_first=True) == set(gpus)
    alone.release()
    # Two `dask worker` processes without CUDA_VISIBLE_DEVICES: one reads, then the other.
    first, second = GpuClaims("node-c", claims_dir), GpuClaims("node-c", claims_dir)
    assert first.update(rotation(gpus, 0), own_first=False) == set(gpus)
    assert second.update(rotation(gpus, 0), own_first=False) == set()
    first.release()
    assert second.update(rotation(gpus, 0), own_first=False) == set(gpus)
    second.release()
    # Two plain workers checking at the same moment: the one that adopts first adopts them
    # all (here it is midway through its check, with one GPU taken), never a split.
    first, second = GpuClaims("node-e", claims_dir), GpuClaims("node-e", claims_dir)
    assert first.update({gpus[0]: 0}, own_first=False) == {gpus[0]}
    assert second.update(rotation(gpus, 0), own_first=False) == set()
    assert first.update(rotation(gpus, 0), own_first=False) == set(gpus)
    first.release()
    second.release()


def test_worker_gpus_read_only_what_they_claim(claims_dir: Path) -> None:
    readers = [node_reader("node-d", 4, CUDA_VISIBLE_DEVICES=",".join(
        str((first + i) % 4) for i in range(4))) for first in range(4)]
    for reader in readers:  # a second check: every hand-over is done
        reader.check_claims(adopt=True)
    read = [reader.reading for reader in readers]
    assert all(len(uuids) == 1 for uuids in read), read
    assert len({uuid for uuids in read for uuid in uuids}) == 4
    for reader in readers:
        calls = reader.metrics.simulator.calls["nvmlDeviceGetUtilizationRates"]
        reader.metrics.sampler.tick()
        # One NVML pass a tick over one GPU, whichever GPUs the host has.
        assert reader.metrics.simulator.calls["nvmlDeviceGetUtilizationRates"] - calls == 1
        reader.claims.release()


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
            # The sampler's own threads and the claims' one.
            assert _reader_threads() == threads_before + 4
            deadline = time.monotonic() + 30
            seen, identity = None, None
            while time.monotonic() < deadline:
                await worker.heartbeat()
                seen = scheduler.workers[worker.address].metrics.get(METRIC_KEY)
                identity = scheduler.task_metadata.get(METRIC_KEY, {}).get(worker.address)
                # Each change of the GPUs read (they are adopted a moment after setup) is a
                # new identity, sent to the metadata without awaiting it: wait for the one
                # the latest snapshot names.
                if seen and seen["gpus"] and identity and identity["e"] == seen["e"]:
                    break
                await asyncio.sleep(0.2)
            assert seen and len(seen["gpus"]) == 2
            # The static facts are in the scheduler's metadata, once.
            assert identity is not None
            assert decode(seen, decode_identity(identity)).hostname == "node-p"
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
    from jupyterlab_nvdashboard.cluster.snapshot import encode, encode_identity
    from jupyterlab_nvdashboard.export.dcgm import FIELDS, ExportedGpu, GpuIdentity

    values = tuple(float(i) + 0.25 for i in range(len(FIELDS)))
    position = {field.name: i for i, field in enumerate(FIELDS)}
    values = list(values)
    values[position["DCGM_FI_PROF_SM_ACTIVE"]] = 0.4567
    values[position["DCGM_FI_PROF_PCIE_TX_BYTES"]] = 12.5e9
    gpu = ExportedGpu("h", GpuIdentity(3, "GPU-x", "NVIDIA H200", None), False, tuple(values))
    identity = decode_identity(encode_identity("h", "e.1", [gpu.identity]))
    (back,) = decode(msgpack.unpackb(msgpack.packb(encode("e.1", 1.0, [gpu]))),
                     identity).gpus.values()
    assert back.identity == gpu.identity
    assert back.values[position["DCGM_FI_PROF_SM_ACTIVE"]] == pytest.approx(0.457)
    assert back.values[position["DCGM_FI_PROF_PCIE_TX_BYTES"]] == pytest.approx(12.5e9, rel=1e-6)
    assert back.values[position["DCGM_FI_DEV_FB_USED"]] == pytest.approx(2.25)
