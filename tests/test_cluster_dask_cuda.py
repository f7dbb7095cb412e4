"""Cluster mode in dask-cuda's layout, scraped by a real Prometheus, read as NVIDIA's
Grafana board reads it.

Two simulated hosts of 4 GPUs each (``NVDASHBOARD_SIMULATE_HOST``: UUIDs of their own), one
worker process per GPU with ``CUDA_VISIBLE_DEVICES`` rotated as dask-cuda rotates it
(``0,1,2,3``, ``1,2,3,0``, ...). Then:

* each GPU is read by exactly one worker (the NVML passes of each worker, counted by its
  simulated driver, are one GPU's), and all 8 appear once;
* NVML's PCIe counter (``nvdashboard_gpu_pcie_transmit_bytes_total``) never decreases over
  the window Prometheus scraped, its growth over the scraped span is the simulated traffic,
  in bytes (the heartbeat carries it in KiB), and ``rate()`` over it is that growth, as
  Prometheus extrapolates it over the window;
* every panel of NVIDIA's board (``tests/support/dcgm_exporter_board.json``), with its own
  template variables, gets one series per GPU (one in all for its sum and average panels),
  from the cluster's dashboard and from a single server.
"""

from __future__ import annotations

import json
import math
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distributed")
pytest.importorskip("prometheus_client")

from tests.support.dask_cluster import DaskCluster, start_scheduler  # noqa: E402
from tests.support.grafana import check_nvidia_board  # noqa: E402
from tests.support.prometheus import api, scrape_config, start, stop  # noqa: E402
from tests.support.servers import cli_server, free_port, get  # noqa: E402

PROMETHEUS = shutil.which("prometheus")
pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus package")]
HOSTS, GPUS_PER_HOST = ("dgx-a", "dgx-b"), 4
PROFILE = {"NVDASHBOARD_SIMULATE_PROFILE": "h200"}  # GPM, power and clocks on every GPU
# simnvml/machine.py: PCIe TX runs at 8e9 B/s x wave(t, period 11 s), a wave between 0 and 1.
# Prometheus' window below is three periods.
PEAK_KIB_PER_S = 8e9 / 1024
TRAFFIC_PERIOD_S = 11.0
# How much older one end's counter reading may be than the other's, against their scrapes:
# the PCIe counters are read once a second, later on a loaded machine (one run saw 1.3 s).
READING_AGE_S = 5.0
PCIE_COUNTER = "nvdashboard_gpu_pcie_transmit_bytes_total"  # NVML's own, in bytes
WINDOW_S = 33


@pytest.fixture(scope="module")
def cluster() -> Iterator[DaskCluster]:
    dask = start_scheduler(free_port())
    try:
        for host in HOSTS:
            for first in range(GPUS_PER_HOST):
                rotation = ",".join(str((first + i) % GPUS_PER_HOST)
                                    for i in range(GPUS_PER_HOST))
                dask.start_worker(f"{host}-{first}", GPUS_PER_HOST, host, rotation, PROFILE)
        yield dask
    finally:
        dask.stop()


def probe(dask_worker: Any) -> dict[str, Any]:
    """On each worker: what it reads, its NVML passes and its ticks."""
    gpus = dask_worker.plugins["nvdashboard-gpus"].gpus
    latest = gpus.metrics.history.latest()
    return {"host": gpus.hostname, "reading": gpus.reading,
            "passes": gpus.metrics.simulator.calls["nvmlDeviceGetUtilizationRates"],
            "ticks": latest.seq if latest else 0,
            "visible": sorted(gpus.metrics.nvml.cuda_positions)}


def gpu_of(series: dict[str, Any]) -> tuple[str, str]:
    """A Prometheus series' GPU: (hostname, UUID)."""
    return series["metric"]["hostname"], series["metric"]["UUID"]


def by_gpu(answer: dict[str, Any]) -> dict[tuple[str, str], float]:
    """An instant vector's values by GPU."""
    return {gpu_of(each): float(each["value"][1]) for each in answer["result"]}


def test_dask_cuda_layout_one_reader_per_gpu_counters_prometheus_can_rate_and_the_board(
        cluster: DaskCluster, tmp_path: Path) -> None:
    from distributed import Client

    with cli_server(["--dask-scheduler", cluster.address, "--metrics"]) as (dashboard, _), \
            cli_server(["--simulate", "4", "--metrics", "--interval", "0.5"],
                       env=PROFILE) as (single, _):
        deadline, view = time.monotonic() + 120, {}
        while time.monotonic() < deadline:
            view = json.loads(get(dashboard + "/cluster.json")[1])
            if view["workers"] == 8 and len(view["gpus"]) == 8 and \
                    all(g["state"] == "ok" and len(g["workers"]) == 1 for g in view["gpus"]):
                break
            time.sleep(0.5)
        # All 8 once, each reported by one worker, the 4 of each host by 4 different ones.
        assert len({(g["host"], g["uuid"]) for g in view["gpus"]}) == 8, view
        assert all(g["state"] == "ok" and len(g["workers"]) == 1 for g in view["gpus"]), view
        assert len({g["workers"][0] for g in view["gpus"]}) == 8

        targets = {"cluster": urllib.parse.urlsplit(dashboard).netloc,
                   "single": urllib.parse.urlsplit(single).netloc}
        prometheus, base = start(tmp_path, scrape_config(
            {job: [target] for job, target in targets.items()}))
        try:
            with Client(cluster.address, timeout="10s", set_as_default=False) as client:
                before = client.run(probe)
                scrape_started = time.monotonic()
                while time.monotonic() - scrape_started < WINDOW_S + 3:
                    time.sleep(1)
                after = client.run(probe)
            # Each worker read exactly one GPU, its own, on each of its ticks.
            read = {}
            for address, now in after.items():
                assert len(now["visible"]) == GPUS_PER_HOST, now
                assert len(now["reading"]) == 1, now
                ticks = now["ticks"] - before[address]["ticks"]
                passes = now["passes"] - before[address]["passes"]
                assert ticks >= 10 and passes <= ticks + 2, (now, before[address])
                read[(now["host"], now["reading"][0])] = address
            assert len(read) == 8  # every GPU by one worker

            assert api(base, "query", query="count_over_time(up[1m])")["result"], \
                (tmp_path / "prometheus.log").read_text()[-2000:]
            selector = 'job="cluster"'
            series = api(base, "query", query=f"DCGM_FI_DEV_GPU_UTIL{{{selector}}}")["result"]
            assert sorted(gpu_of(s) for s in series) == sorted(read)
            # The counter, sample by sample, over the window: never down.
            window = api(base, "query",
                         query=f"{PCIE_COUNTER}{{{selector}}}[{WINDOW_S}s]")
            assert len(window["result"]) == 8
            for each in window["result"]:
                values = [float(v) for _, v in each["values"]]
                assert len(values) >= WINDOW_S - 5, each["metric"]
                assert all(b >= a for a, b in zip(values, values[1:], strict=False)), values
            # rate() of the counter against what the counter itself says moved over the
            # scrapes in the window, both at one evaluation time: that of a scrape already
            # stored. A scrape is stored when it ends, stamped with its start, so at "now"
            # the second query could see a scrape that the first did not.
            at = str(min(each["values"][-1][0] for each in window["result"]))
            rates = by_gpu(api(base, "query", time=at, query=(
                f"rate({PCIE_COUNTER}{{{selector}}}[{WINDOW_S}s])")))
            scraped = api(base, "query", time=at, query=(
                f"{PCIE_COUNTER}{{{selector}}}[{WINDOW_S}s]"))["result"]
            assert len(rates) == 8 and len(scraped) == 8
            for each in scraped:
                gpu = gpu_of(each)
                (t_first, first), (t_last, last) = each["values"][0], each["values"][-1]
                span_s = t_last - t_first
                # KiB/s over the scraped span, from the counter's bytes
                moved = (float(last) - float(first)) / 1024 / span_s
                # The traffic the simulated GPU ran, in KiB (a KiB count sent as bytes would
                # be 1,024 times off):
                # each value is the reader's latest, read a moment before its scrape, so the
                # growth is over L = span +- READING_AGE_S seconds, and the wave's integral
                # over any L seconds is (0.5 L +- period / (2 pi)) x the peak.
                swing_s = TRAFFIC_PERIOD_S / (2 * math.pi)
                low = (0.5 * (span_s - READING_AGE_S) - swing_s) / span_s
                high = (0.5 * (span_s + READING_AGE_S) + swing_s) / span_s
                assert low * PEAK_KIB_PER_S <= moved <= high * PEAK_KIB_PER_S, \
                    (gpu, moved / PEAK_KIB_PER_S, low, high, span_s)
                # Prometheus extrapolates the increase from the scraped span towards the
                # window's ends, never beyond: a scrape missed at an end lowers rate() by
                # up to the share of the window it left unscraped.
                assert moved * span_s / WINDOW_S * 0.98 <= rates[gpu] / 1024 <= moved * 1.02, \
                    (gpu, rates[gpu], moved, span_s)
            # NVIDIA's board, with its own variables, on both.
            instances = api(base, "label/instance/values", **{"match[]": "DCGM_FI_DEV_GPU_TEMP"})
            assert sorted(instances) == sorted(targets.values())
            check_nvidia_board(base, targets["cluster"], 8)
            check_nvidia_board(base, targets["single"], 4)
        finally:
            stop(prometheus)
