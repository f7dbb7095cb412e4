"""Run files as the server sees them, the launcher's schema, and the /Workload summary."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.apps.workload import native_baseline, summarize, verdict
from jupyterlab_nvdashboard.metrics import GpuReading, HostReading, Sample
from jupyterlab_nvdashboard.workload.runs import Run, RunLauncher, RunsWatcher

HOST = HostReading(*([None] * len(HostReading._fields)))


def gpu(index: int, utilization: float, memory: float = 1e9, pcie: float = 0.0) -> GpuReading:
    return GpuReading.unavailable(index, lost=False)._replace(
        utilization_pct=utilization, memory_used_bytes=memory, memory_total_bytes=8e10,
        pcie_tx_bytes_per_s=pcie, pcie_rx_bytes_per_s=pcie)


def write(path: Path, *events: dict, partial: str = "") -> None:
    with open(path, "a") as handle:
        for event in events:
            handle.write(json.dumps(event) + "\n")
        handle.write(partial)


def test_watcher_tails_files_incrementally_and_skips_torn_lines(tmp_path: Path) -> None:
    watcher = RunsWatcher(tmp_path)
    run_file = tmp_path / "r1.jsonl"
    write(run_file, {"event": "start", "run_id": "r1", "time": 10.0, "path": "plugin",
                     "device": "cpu", "preset": "ci"}, partial='{"event": "itera')
    watcher.poll()
    version = watcher.version
    [run] = watcher.runs()
    assert run.path == "plugin" and run.iterations == [] and not run.finished
    write(run_file, partial='tion", "run_id": "r1", "time": 11.0, "ms": 5.0}\nnot json\n')
    write(run_file, {"event": "end", "run_id": "r1", "time": 12.0, "median_ms": 5.0})
    watcher.poll()
    [run] = watcher.runs()
    assert [event["ms"] for event in run.iterations] == [5.0] and run.finished
    assert watcher.version > version
    watcher.poll()  # nothing new: no change, no version bump
    assert watcher.runs()[0].iterations == run.iterations


def test_launcher_rejects_anything_outside_its_schema(tmp_path: Path) -> None:
    launcher = RunLauncher(tmp_path)
    for bad in ({"path": "plugin; rm -rf /", "preset": "ci", "iterations": 5},
                {"path": "plugin", "preset": "ci", "iterations": 5, "events": "/etc/passwd"},
                {"path": "plugin", "preset": "ci", "iterations": True},
                {"path": "plugin", "preset": "ci", "iterations": 10**9},
                {"path": "plugin", "preset": "../x", "iterations": 5},
                ["plugin"]):
        with pytest.raises(ValueError):
            launcher.start(bad)  # type: ignore[arg-type]
    assert not launcher.running


def test_launcher_runs_one_at_a_time_and_the_watcher_sees_it(tmp_path: Path) -> None:
    launcher, watcher = RunLauncher(tmp_path), RunsWatcher(tmp_path)
    launcher.start({"path": "numpy", "preset": "ci", "iterations": 100000, "device": "cpu"})
    with pytest.raises(ValueError, match="already in progress"):
        launcher.start({"path": "numpy", "preset": "ci", "iterations": 5, "device": "cpu"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        watcher.poll()
        runs = watcher.runs()
        if runs and len(runs[0].iterations) >= 3:
            break
        time.sleep(0.2)
    assert runs and runs[0].path == "numpy" and len(runs[0].iterations) >= 3
    assert launcher.stop() == "stopping the run"
    while launcher.running and time.monotonic() < deadline:
        time.sleep(0.1)
    watcher.poll()
    [run] = watcher.runs()
    assert run.finished and run.end["interrupted"] is True and launcher.last_error == ""


def test_summary_averages_the_gpu_over_the_run_and_judges_it() -> None:
    run = Run("r2", start={"time": 100.0, "path": "plugin", "device": "gpu", "preset": "ci",
                           "config": {"batch": 1000}},
              iterations=[{"time": 101.0, "ms": 10.0}, {"time": 102.0, "ms": 20.0}],
              end={"time": 103.0, "median_ms": 15.0, "samples_per_s": 66666.7,
                   "peak_device_memory_bytes": None})
    samples = [Sample(i, 100.0 + i, (gpu(0, util, 2e9, 1e9), gpu(1, util, 3e9, 1e9)), HOST)
               for i, util in enumerate([90.0, 100.0, 98.0])]
    row = summarize(run, samples, simulated=False, native_median_ms=90.0, now_s=104.0)
    assert row["gpu_util_pct"] == 96 and row["pcie_gb_s"] == 4.0
    assert row["peak_gpu_memory_gb"] == 5.0 and row["speedup"] == "6.0x"
    assert row["verdict"] == "GPU busy 96% of the run" and row["status"] == "done"


def test_a_run_that_died_silently_is_not_running_forever() -> None:
    run = Run("r5", start={"time": 100.0}, iterations=[{"time": 101.0, "ms": 1.0}])
    assert summarize(run, [], False, None, now_s=120.0)["status"] == "running"
    assert summarize(run, [], False, None, now_s=500.0)["status"] == "stopped without a summary"


def test_verdicts() -> None:
    run = Run("r3", start={"device": "gpu"})
    assert verdict(run, 29.0, simulated=False) == (
        "GPU idle 71% of the run: this embedding path is not using the GPU")
    assert verdict(run, 94.0, simulated=True) == "SIMULATED GPU: GPU busy 94% of the run"
    assert "ran on the CPU" in verdict(Run("r4", start={"device": "cpu"}), None, False)


def test_speedup_compares_with_newest_native_run_of_same_preset() -> None:
    runs = [Run("a", start={"path": "native", "preset": "ci", "time": 1}, end={"median_ms": 40}),
            Run("b", start={"path": "native", "preset": "densedemo", "time": 2},
                end={"median_ms": 180}),
            Run("c", start={"path": "native", "preset": "ci", "time": 3}, end={"median_ms": 30})]
    assert native_baseline(runs, "ci") == 30 and native_baseline(runs, "large-vocab") is None
