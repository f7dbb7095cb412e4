"""The workload verdict: the diagnosis of the run's own GPU over its timed part, by its PID."""

from __future__ import annotations

from functools import cache

import pytest

from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.diagnosis import MIN_SAMPLES
from jupyterlab_nvdashboard.metrics import GpuFacts, GpuReading, HostReading, Sample
from jupyterlab_nvdashboard.metrics.families import GpmReading, ProcessReading
from jupyterlab_nvdashboard.runs.verdict import gpu_row, judge
from jupyterlab_nvdashboard.runs.watcher import Run

HOST = HostReading(*([None] * len(HostReading._fields)))
RUN_PID, OTHER_PID = 4242, 777


@cache
def facts(count: int = 8, profile: str = "h200") -> tuple[GpuFacts, ...]:
    """Device facts as the reader builds them from the simulated NVML (an 8-GPU H200 box)."""
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=count,
                                                                profile=profile)), environ={})
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


def run_on(row: int | None, device: str = "gpu", warmup_end_s: float = 100.0,
           iteration_times: tuple[float, ...] = (101.0, 102.0, 103.0, 104.0, 105.0, 106.0),
           visible: str | None = None, profile: str = "h200", path: str = "plugin",
           **step: float) -> Run:
    uuid = facts(profile=profile)[row].uuid if row is not None else None
    return Run("r", start={"time": 90.0, "device": device, "path": path, "pid": RUN_PID,
                           "gpu": {"uuid": uuid, "index": None, "visible": visible}},
               iterations=[{"time": t, "ms": 50.0, **step} for t in iteration_times],
               warmup_end_s=warmup_end_s)


def timeline(start: float, stop: float, step: float = 0.5, gpm_of: object = None,
             processes: object = None, **kwargs: object) -> list[Sample]:
    """Samples every ``step`` s; ``gpm_of``/``processes``: a fresh reading each sample (as
    a reader pass would give), from a dict or tuple given once."""
    times = [start + i * step for i in range(int((stop - start) / step) + 1)]
    shared = kwargs.pop("extra", {})
    out = []
    for i, t in enumerate(times):
        extra = dict(shared)  # type: ignore[call-overload]
        if gpm_of is not None:
            extra["gpm"] = {row: GpmReading(*reading) for row, reading in gpm_of.items()}  # type: ignore[attr-defined]
        if processes is not None:
            extra["processes"] = tuple(ProcessReading(*p) for p in processes)  # type: ignore[attr-defined]
        out.append(sample(i, t, **kwargs, **extra))  # type: ignore[arg-type]
    return out


def test_one_busy_gpu_of_eight_reads_busy_on_utilization_only() -> None:
    samples = timeline(99.0, 107.0, utilization={3: 98.0})  # the other seven idle
    verdict = judge(run_on(3), samples, facts())
    assert verdict.cause == "busy" and verdict.gpu_row == 3 and verdict.signal == "utilization"
    assert verdict.text.startswith("GPU 3 busy; whether the SMs are full cannot be told: "
                                   "utilization 98% over 13 samples (utilization only")
    assert verdict.samples == 13  # 100.0 .. 106.0 every 0.5 s
    assert verdict.level_pct == 98.0
    idle = judge(run_on(5), samples, facts())
    assert idle.cause == "idle" and idle.text.startswith("GPU 5 idle")
    assert idle.advice  # one thing to try
    assert judge(run_on(3), samples, facts(), simulated=True).text.startswith(
        "SIMULATED GPU 3 busy")


def test_gpm_tells_launch_bound_from_memory_bound() -> None:
    launch = timeline(99.0, 107.0, utilization={2: 100.0}, gpm_of={2: gpm(12.0, 5.0)})
    verdict = judge(run_on(2), launch, facts())
    assert verdict.cause == "launch-bound" and verdict.signal == "gpm"
    # 13 samples with a fresh GPM reading each; the first is dropped (it may straddle warm-up).
    assert "over 13 samples and 12 GPM readings" in verdict.text
    assert "CUDA Graphs" in verdict.advice
    memory = timeline(99.0, 107.0, utilization={2: 100.0}, gpm_of={2: gpm(20.0, 85.0)})
    assert judge(run_on(2), memory, facts()).cause == "memory-bound"


def test_one_gpm_reading_among_many_samples_is_not_a_gpm_verdict() -> None:
    # The same GPM reading rides in every sample (one reader pass): it counts once.
    once = {2: gpm(3.0, 2.0)}
    samples = timeline(99.0, 107.0, utilization={2: 100.0}, extra={"gpm": once})
    verdict = judge(run_on(2), samples, facts())
    assert verdict.signal == "utilization" and verdict.cause == "busy"
    assert verdict.findings[0].needs == f"SM activity needs {MIN_SAMPLES} GPM readings (0 so far)"


def test_missing_gpm_metric_is_not_zero() -> None:
    samples = timeline(99.0, 107.0, utilization={2: 100.0}, gpm_of={2: gpm(None, None)})
    verdict = judge(run_on(2), samples, facts())
    assert verdict.cause == "busy" and verdict.signal == "utilization"  # never "idle" from a 0


def test_cpu_run_holding_no_gpu_context_reads_not_using_and_ignores_others_work() -> None:
    # Someone else's job saturates the GPU the CPU run is judged against.
    samples = timeline(99.0, 107.0, utilization={0: 100.0}, gpm_of={0: gpm(95.0, 80.0)},
                       processes=[process(0, OTHER_PID, 99.0)])
    verdict = judge(run_on(0, device="cpu"), samples, facts())
    assert verdict.cause == "not-using-gpu" and verdict.signal == "process-lists"
    assert verdict.text.startswith("CPU run: not using GPU 0: its process held no context "
                                   "on any GPU, over 13 process-list readings")
    # What a CPU run is compared with, said under its verdict (issue 44).
    assert verdict.rest.startswith("a CPU run is judged by its own steps, and checked against "
                                   "GPU 0, the GPU picked for it, only to tell that it left "
                                   "that GPU alone"), verdict.rest
    # A CPU run's busy core is its own work on its own device, not a host starving a GPU.
    busy_cpu = judge(run_on(0, device="cpu", cpu_ms=49.0), samples, facts())
    assert busy_cpu.cause == "not-using-gpu" and "host-CPU-bound" not in busy_cpu.rest


def test_the_advice_for_a_run_without_a_gpu_context_fits_how_it_was_started() -> None:
    samples = timeline(99.0, 107.0, utilization={0: 0.0}, processes=[])
    # A run that could have used a GPU: whether the framework sees one.
    assert "tf.config.list_physical_devices('GPU')" in judge(run_on(0), samples, facts()).advice
    # Started on the CPU: what to start instead, not TensorFlow's device check.
    on_cpu = judge(run_on(0, device="cpu"), samples, facts()).advice
    assert on_cpu.startswith("it ran with device cpu: start it with device gpu"), on_cpu
    numpy = judge(run_on(0, device="cpu", path="numpy"), samples, facts()).advice
    assert numpy.startswith("the numpy path computes on the CPU only"), numpy
    assert "TensorFlow" not in on_cpu + numpy


def test_gpu_run_that_holds_no_context_reads_not_using_its_gpu_first() -> None:
    samples = timeline(99.0, 107.0, utilization={2: 100.0}, processes=[])
    verdict = judge(run_on(2, cpu_ms=49.0), samples, facts())
    assert verdict.cause == "not-using-gpu" and verdict.text.startswith("not using GPU 2")
    assert "host-CPU-bound" in verdict.rest


def test_cpu_run_without_process_lists_is_never_credited_with_the_gpus_work() -> None:
    bare = timeline(99.0, 107.0, utilization={0: 100.0})
    verdict = judge(run_on(0, device="cpu"), bare, facts())
    assert verdict.cause == "not-judged" and verdict.level_pct is None
    assert "not judged without the driver's per-GPU process lists" in verdict.text


def test_input_bound_cpu_run_reads_input_bound_with_its_figures() -> None:
    samples = timeline(99.0, 107.0, utilization={}, processes=[])
    verdict = judge(run_on(0, device="cpu", input_ms=30.0, cpu_ms=15.0), samples, facts())
    assert verdict.cause == "input-bound" and verdict.signal == "steps"
    assert verdict.text.startswith("CPU run: highly input-bound: step time waiting on input 60%, "
                                   "median step 50.0 ms over 6 steps")
    assert "not using GPU 0" in verdict.rest


def test_per_process_utilization_counts_only_the_runs_own_pid() -> None:
    # A GPU run sharing its GPU: the device is 100% busy, the run itself only 10%.
    samples = timeline(99.0, 107.0, utilization={1: 100.0},
                       processes=[process(1, RUN_PID, 10.0), process(1, OTHER_PID, 90.0)])
    verdict = judge(run_on(1), samples, facts())
    assert verdict.signal == "per-process" and verdict.cause == "underused"
    assert "its own SM utilization 10% over 13 process readings" in verdict.text
    assert verdict.other_pids == (OTHER_PID,)


def test_device_wide_signal_names_the_other_processes() -> None:
    samples = timeline(99.0, 107.0, utilization={1: 100.0}, gpm_of={1: gpm(95.0, 20.0)},
                       processes=[process(1, RUN_PID, None), process(1, OTHER_PID, None)])
    verdict = judge(run_on(1), samples, facts())
    assert verdict.cause == "compute-bound" and verdict.signal == "gpm"
    assert f"other processes on GPU 1, whose work these figures include: pid {OTHER_PID}" \
        in verdict.text


def test_a_run_is_judged_where_its_process_holds_a_context() -> None:
    samples = timeline(99.0, 107.0, utilization={4: 97.0},
                       processes=[process(4, RUN_PID, None)])
    verdict = judge(run_on(None), samples, facts())
    assert verdict.gpu_row == 4 and verdict.text.startswith("GPU 4 busy")


@pytest.mark.parametrize("visible, row", [
    ("uuid-prefix", 3), ("index", 2), ("mig-old-form", 1), ("mig-uuid", 2), ("nothing", None),
])
def test_cuda_visible_devices_is_resolved_by_the_one_parser(visible: str, row: int | None
                                                             ) -> None:
    h100 = facts(2, "h100-mig")
    mig = h100[1]
    token = {"uuid-prefix": facts()[3].uuid[:12], "index": "2",
             "mig-old-form": f"MIG-{h100[0].uuid}/{mig.mig['gpu_instance_id']}/"  # type: ignore[index]
                             f"{mig.mig['compute_instance_id']}",  # type: ignore[index]
             "mig-uuid": h100[2].uuid, "nothing": "GPU-nope"}[visible]
    table = h100 if visible.startswith("mig") else facts()
    run = Run("r", start={"device": "cpu", "gpu": {"uuid": None, "index": None,
                                                   "visible": token}})
    assert gpu_row(run, table) == row


def test_an_older_run_that_kept_its_first_entry_as_uuid_is_resolved_too() -> None:
    prefix = facts()[6].uuid[:-3]  # the simulated UUIDs share their first characters
    run = Run("r", start={"device": "gpu", "gpu": {"uuid": prefix, "index": None}})
    assert gpu_row(run, facts()) == 6


def test_long_start_up_short_timed_part_is_judged_on_the_timed_part() -> None:
    # 60 s of start-up with the GPU idle, then 3 s of timed steps with it saturated.
    run = run_on(4, warmup_end_s=160.0, iteration_times=(161.0, 162.0, 163.0))
    startup = timeline(100.0, 159.5, utilization={})
    timed = [sample(1000 + i, 160.0 + i * 0.5, {4: 100.0}) for i in range(7)]
    verdict = judge(run, startup + timed, facts())
    assert verdict.cause == "busy" and verdict.samples == 7 and verdict.level_pct == 100.0


@pytest.mark.parametrize("count", [0, 1, MIN_SAMPLES - 1])
def test_fewer_than_five_samples_gives_not_enough_samples(count: int) -> None:
    samples = [sample(i, 100.5 + i, {0: 100.0}) for i in range(count)]
    verdict = judge(run_on(0), samples, facts())
    assert verdict.cause == "not-judged" and verdict.samples == count
    assert f"not enough samples: {count} of {MIN_SAMPLES} needed" in verdict.text


def test_a_run_too_short_to_judge_says_how_long_and_how_many_iterations_would_be() -> None:
    """The default run's 200 iterations of the ci preset timed 0.2 s: "not enough samples:
    3 of 5" told nobody what to change (issue 44). The verdict says how long the timed part
    lasted, how long one must last at the sampler's interval, and the iterations that
    takes at the run's own pace."""
    times = tuple(101.0 + i * 0.001 for i in range(200))  # 200 iterations in 0.2 s
    run = run_on(0, iteration_times=times, warmup_end_s=100.9)
    samples = timeline(95.0, 105.0, step=0.2, utilization={0: 100.0})
    verdict = judge(run, samples, facts())
    assert verdict.cause == "not-judged"
    # Warm-up ended at 100.9 and the last step at 101.199: 0.3 s for 200 steps, 1.5 ms
    # each; 5 samples 0.2 s apart need 1 s, about 670 steps, said in hundreds.
    assert ("not enough samples: 1 of 5 needed in the timed part, which lasted 0.3 s; at one "
            "sample every 0.2 s a timed part of 1 s is judged: about 700 timed iterations at "
            "this run's pace") in verdict.text, verdict.text


def test_unknown_gpu_and_no_timed_iterations_are_not_judged() -> None:
    samples = timeline(99.0, 107.0, utilization={0: 100.0})
    nameless = Run("x", start={"device": "gpu"}, iterations=[{"time": 101.0, "ms": 1.0}])
    assert judge(nameless, samples, facts()).cause == "not-judged"
    assert judge(run_on(0, iteration_times=()), samples, facts()).text == \
        "no timed iterations yet"
