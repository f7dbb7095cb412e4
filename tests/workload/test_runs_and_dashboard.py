"""Run files as the server sees them, the launcher's schema, and the /Workload summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from jupyterlab_nvdashboard.apps.workload import memory_note, native_baseline, summarize
from jupyterlab_nvdashboard.metrics import GpuReading, HostReading, Sample
from jupyterlab_nvdashboard.runs.capabilities import GPU_EXTRA, devices_for
from jupyterlab_nvdashboard.runs.launcher import RunLauncher, _escalate
from jupyterlab_nvdashboard.runs.service import WorkloadService
from jupyterlab_nvdashboard.runs.watcher import MAX_RUNS, Run, RunsWatcher
from jupyterlab_nvdashboard.workload.events import MAX_LINE_BYTES, parse_event
from tests.workload.test_verdict import facts

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
    assert launcher.stop().startswith("stopping the run (Ctrl-C; SIGTERM after")
    while launcher.running and time.monotonic() < deadline:
        time.sleep(0.1)
    watcher.poll()
    [run] = watcher.runs()
    assert run.finished and run.end["interrupted"] is True and launcher.last_error == ""


def test_summary_judges_the_runs_own_gpu_and_its_own_memory_peak() -> None:
    uuid = facts()[1].uuid
    run = Run("r2", start={"time": 100.0, "path": "plugin", "device": "gpu", "preset": "ci",
                           "config": {"batch": 1000}, "gpu": {"uuid": uuid, "index": 1}},
              iterations=[{"time": 101.0 + i, "ms": 10.0 + i} for i in range(5)],
              end={"time": 106.0, "median_ms": 12.0, "samples_per_s": 83333.3,
                   "peak_device_memory_bytes": None, "interrupted": False},
              warmup_end_s=100.5, bad_lines=3)
    samples = [Sample(i, 100.0 + i * 0.5, (gpu(0, 5.0, 7e10, 9e9), gpu(1, util, 3e9, 1e9)),
                      HOST) for i, util in enumerate([0.0] + [96.0] * 12)]
    row = summarize(run, samples, facts(), simulated=False, native_median_ms=96.0,
                    now_s=107.0)
    assert row["gpu_util_pct"] == 96 and row["pcie_gb_s"] == 2.0  # GPU 1 only, timed part
    assert row["peak_gpu_memory_gib"] == "not available"  # its own peak, not the device
    assert row["speedup"] == "8.0x" and row["status"] == "done · 3 bad lines"
    assert row["verdict"].startswith("GPU 1 busy; whether the SMs are full cannot be told: "
                                     "utilization 96% over 10 samples")
    assert row["cause"] == "busy"
    assert row["verdict_more"].startswith("SM activity needs 5 GPM readings (0 so far)")


def test_a_failed_run_shows_its_error() -> None:
    run = Run("r6", start={"time": 100.0}, end={"time": 101.0, "error": "RuntimeError: boom"})
    row = summarize(run, [], facts(), False, None, now_s=102.0)
    assert row["status"] == "failed" and row["verdict"] == "failed: RuntimeError: boom"
    assert row["verdict_html"] == "failed: RuntimeError: boom"


def test_a_run_that_died_silently_is_not_running_forever() -> None:
    run = Run("r5", start={"time": 100.0}, iterations=[{"time": 101.0, "ms": 1.0}])
    assert summarize(run, [], facts(), False, None, now_s=120.0)["status"] == "running"
    assert summarize(run, [], facts(), False, None,
                     now_s=500.0)["status"] == "stopped without a summary"


def test_speedup_compares_only_native_runs_of_same_preset_device_and_batch() -> None:
    def native(name: str, preset: str, device: str, batch: int, median: float) -> Run:
        return Run(name, start={"path": "native", "preset": preset, "device": device,
                                "config": {"batch": batch}}, end={"median_ms": median})
    runs = [native("a", "ci", "cpu", 256, 40), native("b", "densedemo", "cpu", 256, 180),
            native("c", "ci", "gpu", 256, 5), native("d", "ci", "cpu", 512, 70)]
    plugin = Run("p", start={"path": "plugin", "preset": "ci", "device": "cpu",
                             "config": {"batch": 256}})
    assert native_baseline(runs, plugin) == 40
    other = Run("q", start={"path": "plugin", "preset": "ci", "device": "gpu",
                            "config": {"batch": 1024}})
    assert native_baseline(runs, other) is None


def test_parser_validates_types_and_required_fields() -> None:
    good = {"event": "iteration", "run_id": "r", "time": 1.0, "ms": 2.0, "loss": 0.5}
    assert parse_event(json.dumps(good))["ms"] == 2.0
    for bad in ({**good, "time": "x"}, {**good, "ms": None}, {**good, "ms": "fast"},
                {**good, "ms": -1}, {**good, "run_id": 5}, {**good, "event": "other"},
                {**good, "iteration": True}, {k: v for k, v in good.items() if k != "ms"}):
        assert parse_event(json.dumps(bad)) is None, bad
    assert parse_event("[1, 2]") is None and parse_event("nope") is None
    assert parse_event("[" * 100_000) is None  # nesting deep enough to overflow json
    assert parse_event(json.dumps({**good, "pad": "x" * MAX_LINE_BYTES})) is None
    start = parse_event(json.dumps({"event": "start", "run_id": "r", "time": 1.0,
                                    "gpu": {"uuid": "GPU-1", "index": 2}, "extra": [1]}))
    assert start["gpu"] == {"uuid": "GPU-1", "index": 2, "visible": None} and "extra" not in start


def test_watcher_counts_bad_lines_and_drops_huge_ones_unkept(tmp_path: Path) -> None:
    watcher = RunsWatcher(tmp_path)
    run_file = tmp_path / "r7.jsonl"
    write(run_file, {"event": "start", "run_id": "r7", "time": 10.0},
          {"event": "iteration", "run_id": "r7", "time": "x", "ms": 1.0},
          {"event": "iteration", "run_id": "r7", "time": 11.0})
    write(run_file, partial="z" * (3 * MAX_LINE_BYTES))  # a line with no end in sight
    watcher.poll()
    watcher.poll()
    write(run_file, partial="tail of the huge line\n")
    write(run_file, {"event": "iteration", "run_id": "r7", "time": 12.0, "ms": 3.0})
    for _ in range(3):
        watcher.poll()
    [run] = watcher.runs()
    assert run.bad_lines == 3 and [e["ms"] for e in run.iterations] == [3.0]
    assert all(len(tail.partial) <= MAX_LINE_BYTES for tail in watcher._tails.values())


def test_watcher_follows_at_most_the_newest_files(tmp_path: Path) -> None:
    for i in range(MAX_RUNS + 5):
        write(tmp_path / f"r{i:03}.jsonl", {"event": "start", "run_id": f"r{i:03}",
                                            "time": float(i)})
    watcher = RunsWatcher(tmp_path)
    watcher.poll()
    assert len(watcher.runs()) == MAX_RUNS


def test_service_prunes_old_runs_and_disables_on_an_unusable_directory(tmp_path: Path) -> None:
    # Only this project's run files count (a run-id name and its own start event).
    for i in range(7):
        run_id = f"20260101-00000{i}-0000000{i}"
        write(tmp_path / f"{run_id}.jsonl", {"event": "start", "run_id": run_id, "time": 1.0})
        os.utime(tmp_path / f"{run_id}.jsonl", (1000.0 + i, 1000.0 + i))
    service = WorkloadService(tmp_path, keep_runs=4)
    assert service.prune() == 3 and len(list(tmp_path.glob("*.jsonl"))) == 4
    blocker = tmp_path / "file"
    blocker.write_text("")
    broken = WorkloadService(blocker / "runs")
    broken.start()
    try:
        assert broken.disabled_reason and "\n" not in broken.disabled_reason
        with pytest.raises(ValueError, match="run panel is disabled"):
            broken.launch({"path": "numpy", "preset": "ci", "iterations": 5, "device": "cpu"})
    finally:
        broken.stop()


def test_stop_escalates_to_sigkill_for_a_run_that_ignores_signals() -> None:
    stubborn = subprocess.Popen([sys.executable, "-c", (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)")], stdout=subprocess.PIPE, start_new_session=True)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
    os.killpg(stubborn.pid, signal.SIGINT)
    _escalate(stubborn, 0.2, 0.2)
    assert stubborn.returncode == -signal.SIGKILL


def test_devices_offered_follow_the_path_and_what_is_installed() -> None:
    assert devices_for("numpy", real_gpus=True).offered == ("cpu",)
    assert devices_for("plugin", real_gpus=False).offered in (("cpu",), ())
    cupy = devices_for("cupy-plugin", real_gpus=False)
    assert cupy.offered == () and "no real GPU" in cupy.hint
    plugin = devices_for("plugin", real_gpus=True)
    if "gpu" not in plugin.offered:  # this machine's TensorFlow is CPU-only, or missing
        assert GPU_EXTRA in plugin.hint


def test_presets_needing_gigabytes_say_so() -> None:
    assert memory_note("ci") == ""
    assert "GB of memory" in memory_note("large-vocab")


def test_metrics_import_nothing_of_the_workload() -> None:
    # A lower layer never imports a higher one: not directly, and not through config.py.
    code = ("import sys, jupyterlab_nvdashboard.metrics, jupyterlab_nvdashboard.config; "
            "print(sorted(m for m in sys.modules if m.startswith("
            "('jupyterlab_nvdashboard.workload', 'jupyterlab_nvdashboard.runs'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_stopping_the_service_stops_its_run_and_the_run_still_ends(tmp_path: Path) -> None:
    service = WorkloadService(tmp_path, poll_s=0.1)
    service.start()
    service.launch({"path": "numpy", "preset": "ci", "iterations": 100000, "device": "cpu"})
    child = psutil.Process(service.launcher.pid)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(r.iterations for r in service.watcher.runs()):
        time.sleep(0.1)
    service.stop()  # what the server does when it stops
    assert not service.launcher.running and not child.is_running()
    service.watcher.poll()
    [run] = service.watcher.runs()
    assert run.end is not None and run.end["interrupted"] is True


def test_the_watcher_thread_survives_any_exception(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    watcher = RunsWatcher(tmp_path, poll_s=0.01)
    real_poll, calls = watcher.poll, []

    def flaky_poll() -> None:
        calls.append(1)
        if len(calls) <= 3:
            raise MemoryError("injected")
        real_poll()

    watcher.poll = flaky_poll  # type: ignore[method-assign]
    write(tmp_path / "r8.jsonl", {"event": "start", "run_id": "r8", "time": 1.0})
    watcher.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not watcher.runs():
            time.sleep(0.05)
    finally:
        watcher.stop()
    assert watcher.errors == 3 and [r.run_id for r in watcher.runs()] == ["r8"]
    logged = [r.getMessage() for r in caplog.records if "runs watcher" in r.getMessage()]
    assert logged == ["runs watcher: MemoryError: injected"] * 3


def test_the_run_names_its_gpu_pinned_first_then_cuda_visible_devices() -> None:
    from jupyterlab_nvdashboard.workload.gpu_identity import run_gpu

    pinned = {"NVDASHBOARD_RUN_GPU": "3:GPU-abc", "CUDA_VISIBLE_DEVICES": "GPU-abc"}
    assert run_gpu("gpu", pinned) == {"uuid": "GPU-abc", "index": 3, "visible": "GPU-abc"}
    assert run_gpu("cpu", {**pinned, "CUDA_VISIBLE_DEVICES": ""}) == {"uuid": "GPU-abc",
                                                                      "index": 3, "visible": ""}
    # The entry is recorded as it was set; the server resolves it (metrics/cuda_visibility).
    assert run_gpu("cpu", {"CUDA_VISIBLE_DEVICES": "GPU-def,1"}) == {
        "uuid": None, "index": None, "visible": "GPU-def,1"}
    assert run_gpu("cpu", {"NVDASHBOARD_RUN_GPU": "x:"}) == {"uuid": None, "index": None,
                                                             "visible": None}


def test_a_panel_launched_run_is_pinned_and_says_so(tmp_path: Path) -> None:
    from jupyterlab_nvdashboard.runs.launcher import PinnedGpu

    service = WorkloadService(tmp_path, poll_s=0.1)
    service.start()
    try:
        status = service.launch({"path": "numpy", "preset": "ci", "iterations": 3,
                                 "device": "cpu"}, PinnedGpu(1, "GPU-sim-1"))
        assert status == "started numpy on preset ci on the CPU, watching GPU 1"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(r.end for r in service.watcher.runs()):
            time.sleep(0.1)
    finally:
        service.stop()
    [run] = service.watcher.runs()
    assert (run.gpu_uuid, run.gpu_index, run.end["error"]) == ("GPU-sim-1", 1, None)


def test_a_killed_run_still_ends_with_an_end_event(tmp_path: Path) -> None:
    service = WorkloadService(tmp_path, poll_s=0.1)
    service.start()
    try:
        service.launch({"path": "numpy", "preset": "ci", "iterations": 100000, "device": "cpu"})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(r.iterations for r in service.watcher.runs()):
            time.sleep(0.1)
        os.killpg(service.launcher.pid, signal.SIGKILL)  # no chance to write its own end
        while time.monotonic() < deadline and not any(r.end for r in service.watcher.runs()):
            time.sleep(0.1)
    finally:
        service.stop()
    [run] = service.watcher.runs()
    assert run.end is not None and run.end["error"] == "killed by SIGKILL"
    assert run.bad_lines <= 1  # at most the line the kill tore
