"""The workload verdict, fed simulated samples: the run's own GPU, its timed part, its PID."""

from __future__ import annotations

from functools import cache

import pytest

from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.metrics import GpuFacts, GpuReading, HostReading, Sample
from jupyterlab_nvdashboard.metrics.families import (
    GpmReading,
    ProcessReading,
)
from jupyterlab_nvdashboard.runs.verdict import MIN_SAMPLES, judge
from jupyterlab_nvdashboard.runs.watcher import Run

HOST = HostReading(*([None] * len(HostReading._fields)))
RUN_PID, OTHER_PID = 4242, 777


@cache
def facts(count: int = 8) -> tuple[GpuFacts, ...]:
    """Device facts as the reader builds them from the simulated NVML (an 8-GPU H200 box)."""
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=count,
                                                                profile="h200")), environ={})
    metrics.nvml.ensure_initialized()
    return tuple(metrics.facts)


def sample(seq: int, time_s: float, utilization: dict[int, float], count: int = 8,
           **extra: object) -> Sample:
    gpus = tuple(GpuReading.unavailable(i, lost=False)._replace(
        utilization_pct=utilization.get(i, 0.0)) for i in range(count))
    return Sample(seq, time_s, gpus, HOST, extra=dict(extra))


def gpm(sm: float | None, dram: float | None) -> GpmReading:
    return GpmReading(sm, *([None] * 2), dram, *([None] * 7))


def process(device: int, pid: int, sm: float | None) -> ProcessReading:
    return ProcessReading(device, pid, "compute", 1e9, sm, None)


def run_on(row: int, device: str = "gpu", warmup_end_s: float = 100.0,
           iteration_times: tuple[float, ...] = (101.0, 102.0, 103.0, 104.0, 105.0, 106.0),
           ) -> Run:
    uuid = facts()[row].uuid
    return Run("r", start={"time": 90.0, "device": device, "path": "plugin", "pid": RUN_PID,
                           "gpu": {"uuid": uuid, "index": None}},
               iterations=[{"time": t, "ms": 50.0} for t in iteration_times],
               warmup_end_s=warmup_end_s)


def timeline(start: float, stop: float, step: float = 0.5, **kwargs: object) -> list[Sample]:
    times = [start + i * step for i in range(int((stop - start) / step) + 1)]
    return [sample(i, t, **kwargs) for i, t in enumerate(times)]  # type: ignore[arg-type]


def test_one_busy_gpu_of_eight_reads_busy_without_gpm() -> None:
    samples = timeline(99.0, 107.0, utilization={3: 98.0})  # the other seven idle
    verdict = judge(run_on(3), samples, facts())
    assert verdict.busy is True and verdict.gpu_row == 3 and verdict.signal == "utilization"
    assert verdict.text.startswith("GPU 3 busy: utilization 98%")
    assert "weaker signal" in verdict.text and f"over {verdict.samples} samples" in verdict.text
    assert verdict.samples == 13  # 100.0 .. 106.0 every 0.5 s
    idle = judge(run_on(5), samples, facts())
    assert idle.busy is False and idle.text.startswith("GPU 5 idle")


def test_gpm_judges_by_sm_activity_and_dram_bandwidth() -> None:
    # A memory-bound step: SMs at 20%, DRAM at 70% of peak; utilization would say 100%.
    samples = timeline(99.0, 107.0, utilization={2: 100.0}, gpm={2: gpm(20.0, 70.0)})
    verdict = judge(run_on(2), samples, facts())
    assert verdict.signal == "gpm" and verdict.busy is True
    assert "SM activity 20%, DRAM bandwidth 70% (GPM)" in verdict.text
    quiet = timeline(99.0, 107.0, utilization={2: 100.0}, gpm={2: gpm(3.0, 2.0)})
    assert judge(run_on(2), quiet, facts()).busy is False  # resident, but doing nothing


def test_foreign_process_does_not_make_a_cpu_run_busy() -> None:
    # Someone else's job saturates the GPU the CPU run is judged against.
    samples = timeline(99.0, 107.0, utilization={0: 100.0}, gpm={0: gpm(95.0, 80.0)},
                       processes=(process(0, OTHER_PID, 99.0),))
    verdict = judge(run_on(0, device="cpu"), samples, facts())
    assert verdict.busy is False and verdict.signal == "cpu"
    assert verdict.text.startswith("CPU run: not using GPU 0")
    assert f"other processes on GPU 0: pid {OTHER_PID}" in verdict.text
    # Without per-process readings it is still not credited with someone else's work.
    bare = timeline(99.0, 107.0, utilization={0: 100.0})
    assert judge(run_on(0, device="cpu"), bare, facts()).busy is False


def test_per_process_utilization_counts_only_the_runs_own_pid() -> None:
    # A GPU run sharing its GPU: the device is 100% busy, the run itself only 10%.
    samples = timeline(99.0, 107.0, utilization={1: 100.0}, gpm={1: gpm(95.0, 90.0)},
                       processes=(process(1, RUN_PID, 10.0), process(1, OTHER_PID, 90.0)))
    verdict = judge(run_on(1), samples, facts())
    assert verdict.signal == "process" and verdict.busy is False
    assert "its own SM utilization 10% (per process)" in verdict.text
    assert verdict.other_pids == (OTHER_PID,)


def test_long_start_up_short_timed_part_is_judged_on_the_timed_part() -> None:
    # 60 s of start-up with the GPU idle, then 3 s of timed steps with it saturated.
    run = run_on(4, warmup_end_s=160.0, iteration_times=(161.0, 162.0, 163.0))
    startup = timeline(100.0, 159.5, utilization={})
    timed = [sample(1000 + i, 160.0 + i * 0.5, {4: 100.0}) for i in range(7)]
    verdict = judge(run, startup + timed, facts())
    assert verdict.busy is True and verdict.samples == 7 and verdict.level_pct == 100.0
    # Over the whole run the same GPU would average under 6% and read idle.


@pytest.mark.parametrize("count", [0, 1, MIN_SAMPLES - 1])
def test_fewer_than_five_samples_gives_not_enough_samples(count: int) -> None:
    samples = [sample(i, 100.5 + i, {0: 100.0}) for i in range(count)]
    verdict = judge(run_on(0), samples, facts())
    assert verdict.busy is None and verdict.samples == count
    assert f"not enough samples ({count} of {MIN_SAMPLES} needed)" in verdict.text


def test_unknown_gpu_and_no_timed_iterations_are_not_judged() -> None:
    samples = timeline(99.0, 107.0, utilization={0: 100.0})
    nameless = Run("x", start={"device": "gpu"}, iterations=[{"time": 101.0, "ms": 1.0}])
    assert judge(nameless, samples, facts()).busy is None
    assert judge(run_on(0, iteration_times=()), samples, facts()).text == "no timed iterations yet"
