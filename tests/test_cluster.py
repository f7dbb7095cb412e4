"""Cluster mode with a real ``distributed``: a scheduler and worker processes with 2, 4 and
8 simulated GPUs (plus a second worker on the 2-GPU host), a dashboard server pointed at
the scheduler, and what /cluster.json, /Cluster-GPUs/stream, /metrics and the page show as
workers come and go."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("distributed")
pytest.importorskip("prometheus_client")

from tests.support.dask_cluster import DaskCluster, start_scheduler  # noqa: E402
from tests.support.servers import cli_server, free_port, get  # noqa: E402
from tests.support.stream_client import live_frames  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.browser]

HOSTS = {"node-a": 2, "node-b": 4, "node-c": 8}
ALL_GPUS = sum(HOSTS.values())


@pytest.fixture(scope="module")
def cluster() -> Iterator[DaskCluster]:
    dask = start_scheduler(free_port())
    try:
        for host, gpus in HOSTS.items():
            dask.start_worker(f"worker-{host}", gpus, host)
        # A second worker on node-a, seeing the same GPUs (two processes on one machine).
        dask.start_worker("worker-node-a-2", HOSTS["node-a"], "node-a")
        yield dask
    finally:
        dask.stop()


@pytest.fixture(scope="module")
def dashboard(cluster: DaskCluster) -> Iterator[str]:
    with cli_server(["--dask-scheduler", cluster.address, "--metrics"]) as (url, _):
        yield url


def summary(url: str) -> dict:
    status, body = get(url + "/cluster.json")
    assert status == 200, body
    return json.loads(body)


def wait_for(url: str, done: Callable[[dict], bool], timeout_s: float = 90.0) -> dict:
    """Poll /cluster.json until ``done``; a hang is reported with the last answer."""
    deadline = time.monotonic() + timeout_s
    view = summary(url)
    while not done(view) and time.monotonic() < deadline:
        time.sleep(0.25)
        view = summary(url)
    assert done(view), view
    return view


def states(view: dict, host: str) -> set[str]:
    return {gpu["state"] for gpu in view["gpus"] if gpu["host"] == host}


def all_up(view: dict) -> bool:
    """Every worker is there and every GPU is read: in state ok, with a reading (a GPU a
    worker has just taken up is ok before its first reading arrives)."""
    return view["workers"] == 4 and len(view["gpus"]) == ALL_GPUS and \
        all(gpu["state"] == "ok" and gpu["utilization_pct"] is not None
            for gpu in view["gpus"])


def test_every_gpu_of_the_cluster_once_with_its_host(dashboard: str) -> None:
    view = wait_for(dashboard, all_up)
    # The JupyterLab sidebar lists what /index.json lists.
    assert "/Cluster-GPUs" in json.loads(get(dashboard + "/index.json")[1])
    assert Counter(gpu["host"] for gpu in view["gpus"]) == HOSTS
    assert len({gpu["uuid"] for gpu in view["gpus"]}) == ALL_GPUS  # UUIDs differ by host
    for gpu in view["gpus"]:
        # node-a's two workers see the same GPUs: one of them reads them, the other none.
        assert len(gpu["workers"]) == 1, gpu
    assert len({gpu["workers"][0] for gpu in view["gpus"] if gpu["host"] == "node-a"}) == 1
    assert [gpu["gpu"] for gpu in view["gpus"] if gpu["host"] == "node-c"] == list(range(8))

    # The page's stream: one row per GPU per tick, one encode for every page.
    client = asyncio.run(live_frames(dashboard, "/Cluster-GPUs", wanted=2, timeout_s=10))
    live = client.frames[1:]
    assert live and all(frame.header["rows"] % ALL_GPUS == 0 for frame in live)
    assert sorted(set(live[-1].rows.numeric["row"])) == list(range(ALL_GPUS))

    # One scrape covers the cluster, each GPU with the hostname of the node that read it.
    status, body = get(dashboard + "/metrics")
    assert status == 200
    lines = [line for line in body.decode().splitlines()
             if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    hostnames = Counter(line.split('hostname="')[1].split('"')[0] for line in lines)
    assert hostnames == HOSTS


def test_a_killed_worker_is_lost_within_3_heartbeats_and_a_restarted_one_is_back(
        cluster: DaskCluster, dashboard: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    view = wait_for(dashboard, all_up)
    uuids = {gpu["uuid"] for gpu in view["gpus"] if gpu["host"] == "node-b"}
    polls_before = view["polls"]
    heartbeat_s = view["heartbeat_s"]
    cluster.kill_worker("worker-node-b")
    view = wait_for(dashboard, lambda v: states(v, "node-b") == {"lost"})
    # The reader polls once a second; 3 heartbeats of 0.5 s are 1.5 s: at most 2 polls
    # (plus the one that may have been under way when the worker died).
    assert view["polls"] - polls_before <= math.ceil(3 * heartbeat_s / 1.0) + 1, view
    assert states(view, "node-a") == states(view, "node-c") == {"ok"}
    # Killing one of node-a's two workers loses nothing: the other still reports them.
    assert {gpu["uuid"] for gpu in view["gpus"] if gpu["host"] == "node-b"} == uuids

    from tests.support.cluster_page import screenshot_cluster_page

    screenshot_cluster_page(dashboard, "cluster-gpus-one-lost")

    cluster.start_worker("worker-node-b", HOSTS["node-b"], "node-b")
    view = wait_for(dashboard, all_up)
    assert {gpu["uuid"] for gpu in view["gpus"] if gpu["host"] == "node-b"} == uuids


def test_two_workers_of_one_host_then_one_of_them(cluster: DaskCluster, dashboard: str) -> None:
    view = wait_for(dashboard, all_up)
    (reader,) = {gpu["workers"][0] for gpu in view["gpus"] if gpu["host"] == "node-a"}
    # Kill the one that reads node-a's GPUs: the other takes them up.
    cluster.kill_worker(cluster.worker_names()[reader])
    view = wait_for(dashboard, lambda v: v["workers"] == 3 and states(v, "node-a") == {"ok"})
    assert all(len(gpu["workers"]) == 1 for gpu in view["gpus"])
