"""The cluster page in tests: a history of a made-up cluster, and /Cluster-GPUs in Chromium
(it draws; a screenshot in both themes)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from jupyterlab_nvdashboard.cluster.snapshot import encode, encode_identity
from jupyterlab_nvdashboard.cluster.view import CLUSTER_FAMILY, ClusterView
from jupyterlab_nvdashboard.export.dcgm import FIELDS, ExportedGpu, GpuIdentity
from jupyterlab_nvdashboard.metrics import HostReading
from tests.support.browser import chromium, drawn_canvas, screenshot, watch
from tests.support.servers import with_token


def screenshot_cluster_page(url: str, name: str) -> None:
    with chromium() as browser:
        for theme in ("light", "dark"):
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            watched = watch(page)
            page.goto(with_token(f"{url}/Cluster-GPUs?theme={theme}"))
            page.wait_for_function("window.nvdashboardLive && window.nvdashboardLive.frames > 1",
                                   timeout=30_000)
            # The bars are drawn on the next animation frame.
            assert drawn_canvas(page, 1000)["ink"] > 1000
            # The totals name each node and its lost GPUs (Bokeh's Divs are in shadow roots,
            # which Playwright's text locators pierce).
            page.get_by_text("4 lost").first.wait_for(timeout=10_000)
            assert page.get_by_text("node-c").count() >= 1
            # The workers read simulated GPUs: the page says so.
            assert "SIMULATED" in page.title(), page.title()
            screenshot(page, f"{name}-{theme}")
            watched.assert_clean()
            page.close()


Utilization = Callable[[str, int, float], float | None]  # (host, GPU, age in s) -> percent


def fill_cluster_history(view: ClusterView, hosts: Mapping[str, tuple[int, bool]],
                         seconds: int, utilization: Utilization,
                         away: Callable[[str, float], bool] = lambda host, age: False) -> None:
    """``seconds`` polls of a made-up cluster into ``view`` (a ``ClusterView``), one a
    second and the newest now, each through the workers' wire format and the reader's own
    ``ClusterState``. ``hosts``: name -> (GPUs, simulated), one worker each;
    ``away(host, age)``: that host's worker has left the cluster at that age."""
    position = {field.name: i for i, field in enumerate(FIELDS)}
    identities = {}
    for host, (count, simulated) in hosts.items():
        gpus = [GpuIdentity(i, f"GPU-{host}-{i:04d}", "NVIDIA H200", f"00000000:{i:02X}:00.0")
                for i in range(count)]
        identities[host] = (gpus, encode_identity(host, f"{host}.1", gpus, simulated))
    no_host = HostReading(None, None, None, None, None, None, None)
    wall, clock = time.time(), time.monotonic()
    for age in range(seconds - 1, -1, -1):
        workers = {}
        for host, (gpus, identity) in identities.items():
            if away(host, age):
                continue
            rows = []
            for gpu in gpus:
                values: list[float | None] = [None] * len(FIELDS)
                values[position["DCGM_FI_DEV_GPU_UTIL"]] = utilization(host, gpu.gpu, age)
                used = 40_000.0 + 1000 * gpu.gpu
                values[position["DCGM_FI_DEV_FB_USED"]] = used
                values[position["DCGM_FI_DEV_FB_FREE"]] = 143_771.0 - used
                values[position["DCGM_FI_DEV_FB_RESERVED"]] = 0.0
                rows.append(ExportedGpu(host, gpu, False, tuple(values)))
            workers[f"tcp://{host}:1"] = {"host": host, "last_seen": wall - age,
                                          "snapshot": encode(identity["e"], wall - age, rows),
                                          "identity": identity}
        tick = view.state.update({"now": wall - age, "heartbeat_s": 0.5, "workers": workers})
        view.history.append(tick.time_s, (), no_host, None, extra={CLUSTER_FAMILY: tick},
                            monotonic_s=clock - age)
