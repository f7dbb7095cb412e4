"""The bundled workload judged as a user would: launched from the run panel's service,
sampled by the real sampler over the simulated driver, judged by the verdict.

- On the CPU, a native-path run with a GPU pinned reads "not using GPU N": its process holds
  no context on any GPU, whatever that GPU shows.
- A run whose input is made slow on purpose (``input_delay_ms``) reads input-bound, with its
  figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.runs.launcher import PinnedGpu
from jupyterlab_nvdashboard.runs.service import WorkloadService
from jupyterlab_nvdashboard.runs.verdict import Verdict, judge


def launch_and_judge(tmp_path: Path, params: dict, row: int = 1, timeout_s: float = 240.0,  # noqa: ANN201
                     stop_when: Callable[[Verdict], bool] | None = None):
    """Run ``params`` to its end and judge it. With ``stop_when``, the run is stopped (Ctrl-C,
    as the run panel's Stop does) as soon as its live verdict satisfies it: how long a run
    needs depends on how fast the machine is, not on an iteration count."""
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=2, profile="h200")),
                             environ={})
    metrics.start()
    service = WorkloadService(tmp_path, poll_s=0.1)
    service.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not metrics.facts:
            time.sleep(0.05)
        facts = metrics.facts
        service.launch(params, PinnedGpu(row, facts[row].uuid))
        deadline = time.monotonic() + timeout_s
        stopping = False
        while time.monotonic() < deadline and not any(r.end for r in service.watcher.runs()):
            runs = service.watcher.runs()
            if stop_when and not stopping and runs and stop_when(
                    judge(runs[0], metrics.history.window(metrics.history_s), facts)):
                service.launcher.stop()
                stopping = True
            time.sleep(0.2)
        time.sleep(0.5)  # the samples of the last step
        [run] = service.watcher.runs()
        assert run.end is not None and run.end["error"] is None, run.end
        return judge(run, metrics.history.window(metrics.history_s), facts, simulated=True), run
    finally:
        service.stop()
        metrics.stop()


def _not_using_gpu_over_five_lists(verdict: Verdict) -> bool:
    return verdict.cause == "not-using-gpu" and verdict.findings[0].figures[0].count >= 5


def test_a_native_cpu_run_pinned_to_a_gpu_reads_not_using_that_gpu(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    verdict, run = launch_and_judge(tmp_path, {"path": "native", "preset": "ci",
                                               "iterations": 100000, "device": "cpu"},
                                    stop_when=_not_using_gpu_over_five_lists)
    assert verdict.cause == "not-using-gpu", verdict
    assert verdict.text.startswith("CPU run: not using SIMULATED GPU 1: its process held no "
                                   "context on any GPU, over ")
    assert verdict.findings[0].figures[0].count >= 5  # the samples it rests on
    assert verdict.samples >= 5
    assert all(event.get("cpu_ms") is not None for event in run.iterations)


def test_a_run_with_a_slow_input_reads_input_bound(tmp_path: Path) -> None:
    verdict, run = launch_and_judge(tmp_path, {"path": "numpy", "preset": "ci",
                                               "iterations": 30, "device": "cpu",
                                               "input_delay_ms": 200})
    assert verdict.cause == "input-bound", verdict
    assert verdict.text.startswith("CPU run: highly input-bound: step time waiting on input ")
    figures = {figure.name: figure for figure in verdict.findings[0].figures}
    share = figures["step time waiting on input"]
    assert share.unit == "%" and share.count == 30 and share.value is not None
    assert share.value >= 20  # 200 ms of sleep in steps of a few ms of numpy
    assert all(event["input_ms"] >= 200 for event in run.iterations)
    assert "not using SIMULATED GPU 1" in verdict.rest


def test_the_input_delay_is_checked_in_one_line() -> None:
    import subprocess
    import sys

    from jupyterlab_nvdashboard.workload import build_command
    from jupyterlab_nvdashboard.workload.config import make_config

    argv = build_command({"path": "numpy", "preset": "ci", "iterations": 2,
                          "input_delay_ms": 50})
    assert argv[-2:] == ["--input-delay-ms", "50"]
    for bad in (-1, 10_001, True, "50", 1.5):
        with pytest.raises(ValueError, match="input_delay_ms must be"):
            build_command({"path": "numpy", "preset": "ci", "iterations": 2,
                           "input_delay_ms": bad})
    with pytest.raises(ValueError, match=r"input_delay_ms=-5 is out of range"):
        make_config("ci", input_delay_ms=-5)
    done = subprocess.run([sys.executable, "-m", "jupyterlab_nvdashboard.workload",
                           "--input-delay-ms", "-1"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "out of range" in done.stderr and "Traceback" not in done.stderr
