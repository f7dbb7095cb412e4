"""benchmarks/monitor_gpu_cost.py over the simulated driver, with its CPU stand-in: the script
runs, reports every NVML function the reader calls with a median and a p99, and a slowdown
ratio per interval and workload. Its figures are measurements and are not judged here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import load_config
from jupyterlab_nvdashboard.simnvml import SimulatedNvml

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "monitor_gpu_cost.py"
GPUS = 2
PROFILE = "mixed"  # the default simulated machine: H200 (GPM) and A100 side by side


def functions_the_reader_calls() -> set[str]:
    """What the server's sampler asks of the driver, counted by the simulated driver itself
    (not by the session the script listens to): start-up, then a few passes of every
    family, the once-a-second and once-in-five-seconds readings included (a first pass
    takes them all)."""
    simulator = SimulatedNvml(GPUS, profile=PROFILE)
    metrics = create_metrics(load_config(["--simulate", str(GPUS)]), simulator=simulator)
    metrics.nvml.ensure_initialized()
    for _ in range(3):
        metrics.sampler.tick()  # without threads, a tick reads the GPUs and the slow path
    # nvmlInit is the binding's start, called once outside the session's choke point.
    return set(simulator.calls) - {"nvmlInit"}


def run_script(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_it_reports_every_function_the_reader_calls_and_a_ratio_per_interval(
        tmp_path: Path) -> None:
    out = tmp_path / "gpu_cost.json"
    done = run_script("--simulate", str(GPUS), "--simulate-profile", PROFILE, "--rounds", "2",
                      "--seconds", "0.05", "--latency-seconds", "3", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["driver"] == "simulated"
    assert report["workload_on_gpu"] is False
    assert report["workload_backend"].startswith("cpu stand-in")
    assert len(report["devices"]) == GPUS

    expected = functions_the_reader_calls()
    assert {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetFieldValues"} <= expected
    functions = report["nvml_functions"]
    assert expected - set(functions) == set(), "functions the reader calls are missing"
    for function in expected:
        figures = functions[function]
        # A once-a-second reading can miss a short idle window on a busy machine; the runs
        # under load time it too.
        latency = (figures["idle"] or figures["under_load"]) \
            if figures["when"] == "recurring" else figures["startup"]
        assert latency is not None, function
        assert latency["n"] >= 1 and latency["median_us"] <= latency["p99_us"], function
        assert f"| {function} |" in done.stdout
    # Read every pass: never only at start-up.
    for function in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo"):
        assert functions[function]["when"] == "recurring"

    intervals = ["1", "0.2", "0.05"]
    assert set(report["monitor"]) == set(intervals)
    for workload in ("launch_bound", "matmul"):
        figures = report["slowdown"][workload]
        assert set(figures["ratios"]) == set(intervals)
        for ratio in figures["ratios"].values():
            assert ratio["n"] == 2 and ratio["min"] <= ratio["median"] <= ratio["max"]
    for interval in intervals:
        monitor = report["monitor"][interval]
        assert set(monitor["calls_per_s_by_function"]) <= set(functions)
        assert monitor["calls_per_s"] == sum(monitor["calls_per_s_by_function"].values())
    schedule = report["schedule"]
    assert set(schedule["within_budget"]) == set(intervals)
    assert schedule["default_interval_s"] == 0.2
    assert f"schedule: {schedule['verdict']}" in done.stdout


def test_a_simulated_machine_that_cannot_be_built_is_one_line_and_status_2() -> None:
    done = run_script("--simulate", "2", "--simulate-profile", "no-such-machine",
                      "--intervals", "0.2", "--latency-seconds", "0.1")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr, done.stderr
    # Progress goes to stderr as well; the reason is its last line, and one line.
    assert done.stderr.strip().splitlines()[-1].startswith(
        "monitor_gpu_cost: cannot run: unknown simulated profile 'no-such-machine'")
