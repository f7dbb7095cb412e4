"""In a real ``jupyter lab`` inside a container (a new PID namespace, ``tests/support/pidns.py``),
in Chromium: the simulated driver names processes by host PIDs (the older drivers'
behaviour, the hardest case), and GPU 0 holds the notebook's kernel beside another
container's process. The status bar and "Your GPU kernels" list the kernel, /GPU-Processes
names its notebook and the other container's process as such, and Shut down ends the
kernel. Needs root (CI runs as root). Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.support.browser import chromium, screenshot, watch
from tests.support.jupyter import jupyter_lab
from tests.support.pidns import PidNamespace, namespace_pids, unavailable
from tests.support.waiting import until_ended
from tests.test_browser_lab import dashboard_frame, open_lab, show_sidebar
from tests.test_containers import ROOT, hold_in_kernel
from tests.test_lab_processes import NOTEBOOK, call, kernel_pid

pytestmark = [pytest.mark.browser, pytest.mark.lab,
              pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))]
GB = 10**9
TABLE_SAYS = """() => window.Bokeh && Bokeh.documents.length > 0 &&
  [...Bokeh.documents[0].all_models].some(m => m.data && m.data.what &&
    [...m.data.what].some(w => w.includes('train.ipynb')) &&
    [...m.data.what].some(w => w.includes("another container")))"""


def test_status_bar_kernels_and_shutdown_in_a_container() -> None:
    with PidNamespace(gpus=2) as ns, open(os.devnull, "wb") as quiet:
        listing = Path(ns.folder) / "processes.json"
        listing.write_text("[]")
        environment = {"NVDASHBOARD_SIMULATE_PROCESSES": str(listing), "PYTHONPATH": ROOT,
                       "NVDASHBOARD_SIMULATE_PROFILE": "h200"}
        with jupyter_lab(simulate=2, extra_env=environment,
                         extra_args=["--LabApp.expose_app_in_browser=True"],
                         wrap=lambda command, cwd: ns.command(command, cwd)) as lab:
            call(lab, "PUT", "api/contents/train.ipynb", {"type": "notebook",
                                                          "content": NOTEBOOK})
            session = call(lab, "POST", "api/sessions", {
                "path": "train.ipynb", "name": "train.ipynb", "type": "notebook",
                "kernel": {"name": "python3"}})
            kernel_id = session["kernel"]["id"]  # type: ignore[index]
            kernel = kernel_pid(lab, kernel_id)
            runtime = next(Path(arg).parent for arg in psutil.Process(kernel).cmdline()
                           if arg.endswith(f"kernel-{kernel_id}.json"))
            hold_in_kernel(runtime, kernel_id, 0)
            outside = subprocess.Popen(["sleep", "600"], stdout=quiet)
            try:
                listing.write_text(json.dumps([  # host PIDs: the driver's default
                    {"gpu": 0, "pid": kernel, "used_memory_bytes": 12 * GB, "sm_pct": 80,
                     "until_exit": True, "namespace_pids": namespace_pids(kernel, ns)},
                    {"gpu": 0, "pid": outside.pid, "used_memory_bytes": 5 * GB,
                     "namespace_pids": namespace_pids(outside.pid, None)}]))
                with chromium() as browser:
                    page = browser.new_page(viewport={"width": 1280, "height": 800})
                    watched = watch(page)
                    open_lab(page, lab)
                    show_sidebar(page)
                    row = f'.nvdashboard-kernel[data-kernel-id="{kernel_id}"]'
                    page.wait_for_selector(row, timeout=90_000)
                    assert "train.ipynb" in page.inner_text(row)
                    item = ".nvdashboard-statusbar-item"
                    page.wait_for_function(f"() => document.querySelector('{item}')"
                                           ".textContent.includes('%')", timeout=30_000)
                    screenshot(page, "lab-container-sidebar-kernels")
                    page.click('.nvdashboard-button[data-route="/GPU-Processes"]')
                    frame = dashboard_frame(page, "/GPU-Processes")
                    frame.wait_for_function(TABLE_SAYS, timeout=60_000)
                    page.wait_for_timeout(1000)
                    screenshot(page, "lab-container-gpu-processes")
                    page.click(f"{row} .nvdashboard-kernel-shutdown")
                    page.wait_for_selector(".jp-Dialog", timeout=10_000)
                    assert "train.ipynb" in page.inner_text(".jp-Dialog")
                    page.click(".jp-Dialog .jp-mod-accept")
                    until_ended(kernel)
                    page.wait_for_selector(row, state="detached", timeout=30_000)
                    watched.assert_clean()
            finally:
                outside.kill()
                outside.wait()
