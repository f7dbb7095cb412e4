"""The parts of ``benchmarks/versus_v015.py`` that need neither PyPI nor a browser: the
simulated GPUs it gives rapidsai's jupyterlab-nvdashboard 0.15, and its tables."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import v015_side
from benchmarks import v015_sitecustomize as hook
from benchmarks.versus_v015 import (
    OURS,
    PAGES,
    V015_DEFAULT,
    V015_SAME_RATE,
    Window,
    page_table,
    per_round,
    ratios,
)
from jupyterlab_nvdashboard.composition import create_simulator
from jupyterlab_nvdashboard.config import load_config
from jupyterlab_nvdashboard.metrics.binding import load_binding

# What v0.15's lab process does at start-up with the hook on its path, then: the devices it
# sees, the project modules it imported, and its NVML call count as the socket answers it.
V015_START = """
import json, socket, sys
import pynvml
pynvml.nvmlInit()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
devices = [[pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h),
            pynvml.nvmlDeviceGetMemoryInfo(h).total] for h in handles]
import sitecustomize
with socket.socket(socket.AF_UNIX) as connection:
    connection.connect(sitecustomize.calls_socket(sys.argv[1], __import__("os").getpid()))
    calls = int(connection.recv(64))
print(json.dumps({"devices": devices, "calls": calls, "project_modules": [
    name for name in sys.modules if name.startswith("jupyterlab_nvdashboard")]}))
"""


def test_v015_runs_the_real_binding_over_the_machine_ours_simulates(tmp_path: Path) -> None:
    path = v015_side.simulation_path(tmp_path)
    # A Unix socket's path has at most 107 bytes: pytest's folders can be longer.
    sockets = tempfile.mkdtemp(prefix="v015-", dir="/tmp")
    environment = {**os.environ, "PYTHONPATH": str(path),
                   hook.SETTINGS_VARIABLE: json.dumps(v015_side.simulation_settings()),
                   hook.SOCKET_FOLDER_VARIABLE: sockets}
    try:
        done = subprocess.run([sys.executable, "-c", V015_START, sockets], cwd=tmp_path,
                              env=environment, capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    # The copy of simnvml imports nothing from the project (whose package has v0.15's name).
    assert seen["project_modules"] == []

    ours = create_simulator(load_config([], v015_side.SIMULATE).simulation)
    pynvml = load_binding(ours.library)
    pynvml.nvmlInit()
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                   for i in range(pynvml.nvmlDeviceGetCount())]
        expected = [[pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h),
                     pynvml.nvmlDeviceGetMemoryInfo(h).total] for h in handles]
    finally:
        pynvml.nvmlShutdown()
    assert len(expected) == 4
    assert seen["devices"] == expected
    # init, count, and four handles' name, UUID and memory at least: the driver counted them.
    assert seen["calls"] >= 2 + 4 * 4


def windows_of(figures: dict[str, list[float | None]]) -> list[Window]:
    """A window per side and round, browser CPU as given (None: that round not measured)."""
    return [Window(round_index, "GPU Resources", side, window_s=20.0, browser_cpu_pct=value,
                   lab_cpu_pct=1.0, repaints=10)
            for side, values in figures.items()
            for round_index, value in enumerate(values) if value is not None]


def test_ratios_pair_each_round_with_the_same_round_of_v015() -> None:
    windows = windows_of({OURS: [8.0, 9.0, 12.0], V015_SAME_RATE: [10.0, None, 8.0],
                          V015_DEFAULT: [50.0, 60.0, 55.0]})
    ours = per_round(windows, OURS, lambda w: w.browser_cpu_pct)
    theirs = per_round(windows, V015_SAME_RATE, lambda w: w.browser_cpu_pct)
    assert ours == {0: 8.0, 1: 9.0, 2: 12.0}
    # Round 1 has no v0.15 window: it has no ratio rather than one against another round.
    assert ratios(ours, theirs) == [8.0 / 10.0, 12.0 / 8.0]


def test_the_page_table_gives_medians_ranges_and_the_median_ratio() -> None:
    browser = {OURS: [8.0, 9.0, 12.0], V015_SAME_RATE: [10.0, 9.0, 8.0],
               V015_DEFAULT: [50.0, 60.0, 55.0]}
    table = page_table(PAGES[0], windows_of(browser))
    row = next(line for line in table.splitlines() if line.startswith("| browser CPU %"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[0] == "browser CPU %"
    for cell, side in zip(cells[1:4], PAGES[0].sides(), strict=True):
        values = browser[side]
        assert cell == (f"{statistics.median(values):.2f} "
                        f"({min(values):.2f}-{max(values):.2f})")
    each = [o / t for o, t in zip(browser[OURS], browser[V015_SAME_RATE], strict=True)]
    assert cells[4] == ", ".join(f"{r:.2f}" for r in each)
    assert cells[5] == f"{statistics.median(each):.2f}"
    # The server's and the sum's rows are compared too; repaints are shown, not compared.
    assert any(line.startswith("| browser + server %") for line in table.splitlines())
    repaints = next(line for line in table.splitlines() if line.startswith("| repaints/s"))
    assert repaints.rstrip().endswith("|  |  |")


def test_a_baseline_tree_gets_its_own_column_and_ratios() -> None:
    baseline = "ours at abc1234"
    browser = {OURS: [8.0, 9.0], baseline: [16.0, 18.0], V015_SAME_RATE: [10.0, 9.0],
               V015_DEFAULT: [50.0, 60.0]}
    table = page_table(PAGES[0], windows_of(browser), baseline).splitlines()
    header = [cell.strip() for cell in table[2].strip("|").split("|")]
    assert header[1:5] == [f"{side} median (range)" for side in
                           (V015_DEFAULT, V015_SAME_RATE, baseline, OURS)]
    row = next(line for line in table if line.startswith("| browser CPU %"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert header[5] == f"{baseline} ÷ {V015_SAME_RATE}, per round"
    assert cells[5] == ", ".join(f"{b / v:.2f}" for b, v in zip(
        browser[baseline], browser[V015_SAME_RATE], strict=True))
    assert header[7] == f"{OURS} ÷ {V015_SAME_RATE}, per round"
    assert cells[7] == ", ".join(f"{o / v:.2f}" for o, v in zip(
        browser[OURS], browser[V015_SAME_RATE], strict=True))
