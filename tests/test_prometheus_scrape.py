"""A real Prometheus (Debian's ``prometheus`` package, installed by .ci/install) scrapes
``/metrics`` of a simulated 4-GPU server, with the server's token, for about 10 s; its HTTP
API must then return DCGM_FI_DEV_GPU_UTIL for each GPU with dcgm-exporter's labels, types
that match dcgm-exporter's own list, and no series for a metric the GPUs do not support."""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.support.dcgm_reference import DCGM_LABELS, DCGM_REFERENCE
from tests.support.prometheus import PROMETHEUS, api, prometheus
from tests.support.servers import cli_server

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus package")
pytest.importorskip("prometheus_client")
SCRAPES_WANTED = 8  # at one scrape a second: about 10 s of scraping with the start-up


def test_prometheus_scrapes_dcgm_names_from_a_simulated_server(tmp_path: Path) -> None:
    env = {"NVDASHBOARD_SIMULATE_FAULTS": "unsupported=power"}
    with cli_server(["--simulate", "4", "--metrics", "--interval", "0.5"], env=env) as (url, _):
        target = urllib.parse.urlsplit(url).netloc
        with prometheus(tmp_path, target) as base:
            scrapes, deadline = 0.0, time.monotonic() + 60
            while scrapes < SCRAPES_WANTED and time.monotonic() < deadline:
                time.sleep(1)
                try:
                    result = api(base, "query", query="count_over_time(up[1m])")["result"]
                except OSError:
                    continue  # not listening yet
                scrapes = float(result[0]["value"][1]) if result else 0.0
            assert scrapes >= SCRAPES_WANTED, (tmp_path / "prometheus.log").read_text()[-2000:]
            targets = api(base, "targets")["activeTargets"]
            assert [t["health"] for t in targets] == ["up"], targets

            series = api(base, "query", query="DCGM_FI_DEV_GPU_UTIL")["result"]
            by_gpu = {s["metric"]["gpu"]: s["metric"] for s in series}
            assert sorted(by_gpu) == ["0", "1", "2", "3"]
            for gpu, labels in by_gpu.items():
                assert DCGM_LABELS <= set(labels), labels
                assert labels["device"] == f"nvidia{gpu}"
                assert labels["UUID"].startswith("GPU-")
                assert labels["pci_bus_id"].startswith("00000000:")
                assert labels["modelName"].startswith("NVIDIA ")
            assert len({labels["UUID"] for labels in by_gpu.values()}) == 4

            metadata = api(base, "metadata")
            dcgm = {name: entries[0]["type"] for name, entries in metadata.items()
                    if name.startswith("DCGM_")}
            assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                    "DCGM_FI_DEV_GPU_TEMP"} <= set(dcgm)
            for name, kind in dcgm.items():
                assert DCGM_REFERENCE.get(name) == kind, (name, kind)
            # DCGM never sends its PCIe throughput fields; NVML's own counter is ours, and a
            # DCGM counter keeps its field's name: no DCGM _total series exists.
            assert "DCGM_FI_DEV_PCIE_TX_THROUGHPUT" not in dcgm
            assert api(base, "query", query="nvdashboard_gpu_pcie_transmit_bytes_total")["result"]
            assert not api(base, "query", query='{__name__=~"DCGM_.*_total"}')["result"]
            # A query by dcgm-exporter's current host label (NVIDIA's own board, with its
            # instance and gpu variables, is run in test_cluster_dask_cuda.py).
            hostnames = api(base, "label/hostname/values", **{"match[]": "DCGM_FI_DEV_FB_FREE"})
            assert len(hostnames) == 1
            panel = api(base, "query", query=(
                f'max(DCGM_FI_DEV_FB_USED{{hostname=~"{hostnames[0]}", gpu=~"0|1|2|3"}}) '
                "by (hostname, gpu, GPU_I_ID, GPU_I_PROFILE)"))["result"]
            assert len(panel) == 4
            # Power is unsupported on these GPUs: no series at all, not zeros.
            assert "DCGM_FI_DEV_POWER_USAGE" not in metadata
            assert api(base, "query", query="DCGM_FI_DEV_POWER_USAGE")["result"] == []
