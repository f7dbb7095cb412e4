"""The diagnosis over synthetic histories: one case per cause and per signal level, mixed and
borderline cases, missing metrics, too few samples and MIG.

Each case builds a history of one machine (facts from the simulated driver's profiles) and
states the first finding it must read, the signal it must name, and words its line must hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pytest

from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.diagnosis import (
    CAUSES,
    MIN_SAMPLES,
    PcieLink,
    Step,
    diagnose,
    mean,
    process_presence,
    window,
)
from jupyterlab_nvdashboard.diagnosis.rules import DiagnosisWindow
from jupyterlab_nvdashboard.metrics import GpuFacts, GpuReading, HostReading, Sample
from jupyterlab_nvdashboard.metrics.families import (
    GPM_FAMILY,
    HEALTH_FAMILY,
    PROCESS_FAMILY,
    GpmReading,
    HealthReading,
    ProcessReading,
)

PID, OTHER = 4242, 777
TICK = 0.2


@cache
def facts(profile: str) -> tuple[GpuFacts, ...]:
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=2, profile=profile)),
                             environ={})
    metrics.nvml.ensure_initialized()
    return tuple(metrics.facts)


def gpm(sm: float | None = None, dram: float | None = None,
        tensor: float | None = None) -> GpmReading:
    return GpmReading(sm, None, tensor, dram, *([None] * 7))


def health(mask: int | None) -> HealthReading:
    values: list[Any] = [None] * len(HealthReading._fields)
    values[HealthReading._fields.index("clock_event_reasons")] = mask
    values[HealthReading._fields.index("xid_events")] = ()
    return HealthReading(*values)


@dataclass
class History:
    """A synthetic history: what each tick of one device row read.

    Functions of the tick number ``i`` (or constants) for each reading; GPM is refreshed
    every ``gpm_every`` ticks (the same reading object rides in the ticks between, as the
    sampler stores it)."""

    profile: str = "h200"
    row: int = 0
    n: int = 100
    util: Any = None
    sm: Any = None
    dram: Any = None
    tensor: Any = None
    gpm_every: int = 5
    gpm_readings: int | None = None  # stop refreshing GPM after this many readings
    mask: Any = None
    pcie_rx: Any = None
    nvlink_tx: Any = None
    cpu: Any = None
    own_sm: Any = None  # the run's own per-process SM %
    processes: bool = False  # lists read (empty unless own_sm)
    extra_rows: dict[int, float] = field(default_factory=dict)  # other rows' utilization

    def value(self, spec: Any, i: int) -> Any:
        return spec(i) if callable(spec) else spec

    def samples(self) -> list[Sample]:
        all_facts = facts(self.profile)
        out: list[Sample] = []
        gpm_family: dict[int, GpmReading] | None = None
        readings_made = 0
        for i in range(self.n):
            gpus = []
            for fact in all_facts:
                reading = GpuReading.unavailable(fact.index, lost=False)
                if fact.index == self.row:
                    reading = reading._replace(
                        utilization_pct=self.value(self.util, i),
                        pcie_rx_bytes_per_s=self.value(self.pcie_rx, i),
                        nvlink_tx_bytes_per_s=self.value(self.nvlink_tx, i))
                elif fact.index in self.extra_rows:
                    reading = reading._replace(utilization_pct=self.extra_rows[fact.index])
                gpus.append(reading)
            extra: dict[str, object] = {}
            wants_gpm = any(v is not None for v in (self.sm, self.dram, self.tensor))
            if wants_gpm and i % self.gpm_every == 0 and (
                    self.gpm_readings is None or readings_made < self.gpm_readings):
                gpm_family = {self.row: gpm(self.value(self.sm, i), self.value(self.dram, i),
                                            self.value(self.tensor, i))}
                readings_made += 1
            if gpm_family is not None:
                extra[GPM_FAMILY] = gpm_family
            if self.mask is not None:
                physical = all_facts[self.row].parent
                extra[HEALTH_FAMILY] = {self.row if physical is None else physical:
                                        health(self.value(self.mask, i))}
            if (self.processes or self.own_sm is not None) and i % 5 == 0:
                # As the sampler stores them: only in the samples of their (1 s) pass.
                own = () if self.own_sm is None else (
                    ProcessReading(self.row, PID, "compute", 1e9, self.value(self.own_sm, i),
                                   None),)
                extra[PROCESS_FAMILY] = own + (ProcessReading(self.row, OTHER, "compute", 1e9,
                                                              90.0, None),)
            host = HostReading(self.value(self.cpu, i), *([None] * 6))
            out.append(Sample(i, 1000.0 + i * TICK, tuple(gpus), host, extra=extra))
        return out


@dataclass
class Case:
    name: str
    history: History
    first: str  # the first finding's cause
    signal: str
    words: tuple[str, ...] = ()  # in the verdict line
    also: tuple[str, ...] = ()  # other causes that must be present
    absent: tuple[str, ...] = ()  # causes that must not be present
    kwargs: dict[str, Any] = field(default_factory=dict)


H200_PCIE = facts("h200")[0].pcie_max_bytes_per_s or 0.0
H200_NVLINK = facts("h200")[0].nvlink_max_bytes_per_s or 0.0


def steps(n: int, ms: float, input_ms: float | None = None,
          cpu_ms: float | None = None) -> list[Step]:
    return [Step(1000.0 + i * ms / 1000, ms, input_ms, cpu_ms) for i in range(n)]


CASES = [
    # ----- one case per cause, GPM level -----
    Case("idle-gpm", History(util=0.0, sm=0.5, dram=0.2), "idle", "gpm",
         ("GPU 0 idle", "SM activity 0%", "over", "GPM")),
    Case("launch-bound", History(util=98.0, sm=20.0, dram=8.0, tensor=1.0), "launch-bound",
         "gpm", ("launch- or latency-bound", "utilization 98%", "SM activity 20%",
                 "DRAM bandwidth 8%")),
    Case("memory-bound", History(util=100.0, sm=45.0, dram=88.0), "memory-bound", "gpm",
         ("memory-bandwidth-bound", "DRAM bandwidth 88%", "practical peak")),
    Case("compute-bound", History(util=100.0, sm=93.0, dram=30.0, tensor=72.0),
         "compute-bound", "gpm", ("good news", "SM activity 93%", "tensor activity 72%")),
    Case("tensor-heavy", History(util=100.0, sm=65.0, dram=20.0, tensor=60.0),
         "compute-bound", "gpm"),
    Case("underused-gpm", History(util=60.0, sm=35.0, dram=10.0), "underused", "gpm",
         ("likely ineffective",)),
    Case("pcie-bound", History(util=60.0, sm=10.0, dram=5.0, pcie_rx=0.9 * H200_PCIE),
         "pcie-bound", "link-counters", ("PCIe-bound", "share of its 63 GB/s 90%")),
    Case("nvlink-bound", History(util=70.0, sm=12.0, dram=5.0, nvlink_tx=0.85 * H200_NVLINK),
         "nvlink-bound", "link-counters", ("NVLink-bound",)),
    Case("pcie-downtrained", History(util=100.0, sm=90.0, dram=20.0), "pcie-downtrained",
         "link-counters", ("below its maximum generation", "maximum Gen5 x16"),
         also=("compute-bound",), kwargs={"pcie_link": PcieLink(3, 16)}),
    Case("throttled-thermal", History(util=100.0, sm=92.0, dram=30.0,
                                      mask=lambda i: 0x40 if i % 2 else 0x0),
         "throttled", "clock-events", ("hardware thermal slowdown", "50%"),
         also=("compute-bound",)),
    Case("throttled-power", History(util=100.0, sm=90.0, mask=0x4), "throttled",
         "clock-events", ("software power cap",)),
    Case("idle-bit-is-not-throttling", History(util=0.0, sm=0.0, mask=0x1), "idle", "gpm",
         absent=("throttled",)),
    Case("host-cpu-bound-machine", History(profile="a100-535", util=3.0, cpu=97.0),
         "host-cpu-bound", "host", ("machine's CPUs are full",), also=("idle",)),
    Case("host-cpu-bound-steps", History(util=2.0), "host-cpu-bound", "steps",
         ("its own process", "% of a core"), kwargs={"steps": steps(20, 50.0, 0.0, 49.0)}),
    Case("input-bound-high", History(util=30.0), "input-bound", "steps",
         ("highly input-bound", "step time waiting on input 40%", "20 steps"),
         kwargs={"steps": steps(20, 50.0, 20.0, 10.0)}),
    Case("input-bound-moderate", History(util=30.0), "input-bound", "steps",
         ("moderately input-bound",), kwargs={"steps": steps(20, 50.0, 5.0, 10.0)}),
    Case("starved", History(util=lambda i: 100.0 if (i // 10) % 2 else 0.0),
         "starved", "utilization-gaps", ("idle gaps", "time in gaps", "longest gap 2.0 s")),
    # ----- per-process and utilization-only levels -----
    Case("per-process-underused", History(profile="a100-535", util=100.0, own_sm=20.0),
         "underused", "per-process", ("its own SM utilization 20%", "per-process"),
         kwargs={"pid": PID}),
    Case("per-process-idle", History(profile="a100-535", util=100.0, own_sm=0.0),
         "idle", "per-process", kwargs={"pid": PID}),
    Case("utilization-busy", History(profile="a100-535", util=95.0), "busy", "utilization",
         ("utilization 95%", "utilization only")),
    Case("utilization-idle", History(profile="a100-535", util=0.0), "idle", "utilization"),
    Case("utilization-underused", History(profile="a100-535", util=30.0), "underused",
         "utilization"),
    # ----- missing metrics, too few readings -----
    Case("gpm-sm-missing-is-not-zero", History(util=100.0, sm=None, dram=70.0),
         "busy", "utilization", ("utilization 100%",), absent=("idle", "launch-bound")),
    Case("too-few-gpm-readings", History(util=100.0, sm=10.0, dram=2.0, gpm_readings=4),
         "busy", "utilization", absent=("launch-bound",)),
    Case("no-utilization-no-gpm", History(profile="a100-mig", row=1), "unknown", "none",
         ("no activity signal",)),
    # ----- MIG -----
    Case("mig-memory-bound", History(profile="h100-mig", row=1, sm=30.0, dram=85.0),
         "memory-bound", "gpm", ("GPU 0 · MIG 1 memory-bandwidth-bound",)),
    Case("mig-idle", History(profile="h100-mig", row=2, sm=0.0, dram=0.0), "idle", "gpm"),
    Case("mig-throttled-on-parent", History(profile="h100-mig", row=1, sm=90.0, mask=0x20),
         "throttled", "clock-events",
         ("GPU 0 · MIG 1 on its GPU (GPU 0, shared by its MIG instances): throttled: "
          "software thermal slowdown",)),
    # ----- borderline -----
    Case("sm-at-50-is-not-launch-bound", History(util=100.0, sm=50.0, dram=10.0),
         "underused", "gpm", absent=("launch-bound",)),
    Case("sm-just-under-50-is-launch-bound", History(util=100.0, sm=49.9, dram=10.0),
         "launch-bound", "gpm"),
    Case("util-just-under-80-is-not-launch-bound", History(util=79.9, sm=20.0, dram=10.0),
         "underused", "gpm", absent=("launch-bound",)),
    Case("dram-at-80-is-memory-bound", History(util=100.0, sm=70.0, dram=80.0),
         "memory-bound", "gpm"),
    Case("streaming-kernel-sms-full-dram-at-peak", History(util=100.0, sm=96.0, dram=88.0),
         "memory-bound", "gpm", absent=("compute-bound",)),
    Case("dram-79-with-sm-70-is-not", History(util=100.0, sm=70.0, dram=79.0), "underused",
         "gpm", absent=("memory-bound",)),
    Case("throttled-at-10-pct", History(util=100.0, sm=90.0,
                                        mask=lambda i: 0x8 if i % 10 == 0 else 0),
         "throttled", "clock-events", ("hardware slowdown",)),
    Case("throttled-under-10-pct", History(util=100.0, sm=90.0,
                                           mask=lambda i: 0x8 if i % 20 == 0 else 0),
         "compute-bound", "gpm", absent=("throttled",)),
    Case("pcie-79-pct-not-bound", History(util=60.0, sm=10.0, pcie_rx=0.79 * H200_PCIE),
         "underused", "gpm", absent=("pcie-bound",)),
    Case("pcie-full-but-sms-busy", History(util=100.0, sm=90.0, pcie_rx=0.9 * H200_PCIE),
         "compute-bound", "gpm", absent=("pcie-bound",)),
    Case("host-cpu-half-of-samples-is-not", History(profile="a100-535", util=3.0,
                                                    cpu=lambda i: 97.0 if i % 2 else 10.0),
         "idle", "utilization", absent=("host-cpu-bound",)),
    # ----- mixed -----
    Case("launch-bound-and-power-capped", History(util=99.0, sm=15.0, dram=5.0, mask=0x4),
         "launch-bound", "gpm", also=("throttled",)),
    Case("input-bound-with-gaps", History(util=lambda i: 100.0 if (i // 10) % 2 else 0.0),
         "input-bound", "steps", also=("starved",),
         kwargs={"steps": steps(20, 50.0, 25.0, 5.0)}),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_diagnosis_table(case: Case) -> None:
    samples = case.history.samples()
    result = diagnose(samples, facts(case.history.profile), case.history.row, **case.kwargs)
    causes = [finding.cause for finding in result.findings]
    line = result.line()
    assert result.cause == case.first, (causes, line)
    assert result.first.signal == case.signal, line
    for words in case.words:
        assert words in line, (words, line)
    for cause in case.also:
        assert cause in causes, (cause, causes)
    for cause in case.absent:
        assert cause not in causes, (cause, causes)
    assert result.samples == case.history.n
    # The short line for the sidebar and the overview: the device, the cause in words and
    # at most its first known figure, never the counts or the signal (those are a click away).
    brief = result.brief()
    cause = result.first.title.replace(";", ":").split(":")[0]
    assert brief.startswith(f"{result.label}: {cause}") and ";" not in brief, brief
    assert result.first.confidence not in brief and " over " not in brief, brief
    assert len(brief) < len(line), brief
    for finding in result.findings:  # every finding says how sure it is and what to try
        assert finding.confidence and (finding.advice or finding.needs or finding.good or
                                       finding.cause == "busy"), finding
        # A figure with no readings says "not available", never 0.
        assert all(figure.count > 0 or figure.value is None for figure in finding.figures)


def test_figures_state_units_and_counts() -> None:
    result = diagnose(History(util=98.0, sm=20.0, dram=8.0).samples(), facts("h200"), 0)
    figures = {figure.name: figure for figure in result.first.figures}
    # 100 ticks, GPM refreshed every 5: 20 GPM readings of its own, not 100.
    assert figures["SM activity"].count == 20 and figures["SM activity"].of == "GPM readings"
    assert figures["utilization"].count == 100 and figures["utilization"].unit == "%"
    assert "over 100 samples and 20 GPM readings" in result.line()
    as_json = result.to_json()
    assert as_json["cause"] == "launch-bound" and as_json["samples"] == 100
    assert as_json["findings"][0]["figures"][1] == {"name": "SM activity", "value": 20.0,
                                                    "unit": "%", "count": 20,
                                                    "of": "GPM readings"}


def test_utilization_only_says_what_it_would_need() -> None:
    result = diagnose(History(profile="a100-535", util=95.0).samples(), facts("a100-535"), 0)
    assert result.first.needs is not None
    assert result.first.needs.startswith("SM activity needs GPM: GPM needs a Hopper or later")


def test_too_few_gpm_readings_says_how_many() -> None:
    result = diagnose(History(util=100.0, sm=10.0, gpm_readings=MIN_SAMPLES - 1).samples(),
                      facts("h200"), 0)
    assert result.first.needs == f"SM activity needs {MIN_SAMPLES} GPM readings " \
        f"({MIN_SAMPLES - 1} so far)"


def test_first_gpm_reading_of_a_run_can_be_dropped() -> None:
    # Exactly MIN_SAMPLES readings: enough, unless the first (derived across warm-up) is dropped.
    history = History(util=100.0, sm=10.0, dram=2.0, gpm_readings=MIN_SAMPLES)
    assert diagnose(history.samples(), facts("h200"), 0).cause == "launch-bound"
    dropped = diagnose(history.samples(), facts("h200"), 0, skip_first_gpm=True)
    assert dropped.cause == "busy"


@pytest.mark.parametrize("count", [0, 1, MIN_SAMPLES - 1])
def test_too_few_samples(count: int) -> None:
    result = diagnose(History(n=count, util=100.0, sm=90.0).samples(), facts("h200"), 0)
    assert result.cause == "not-enough-samples" and result.samples == count
    assert len(result.findings) == 1
    assert f"not enough samples: {count} of {MIN_SAMPLES} needed" in result.line()


def test_lost_gpu_readings_are_not_zero() -> None:
    samples = History(profile="a100-535", util=95.0).samples()
    # A lost GPU's readings are all "not available", as the reader makes them.
    lost = [s if i % 2 else Sample(s.seq, s.time_s, tuple(
        GpuReading.unavailable(0, lost=True) if g.index == 0 else g for g in s.gpus),
        s.host) for i, s in enumerate(samples)]
    result = diagnose(lost, facts("a100-535"), 0)
    assert result.cause == "busy"
    assert result.first.figures[0].count == 50


def test_a_gpu_lost_now_is_said_lost_not_judged() -> None:
    samples = History(profile="a100-535", util=95.0).samples()
    # The last 20 samples: the GPU stopped answering, and the reader marks it lost.
    lost = [s if i < 80 else Sample(s.seq, s.time_s, tuple(
        GpuReading.unavailable(0, lost=True) if g.index == 0 else g for g in s.gpus),
        s.host) for i, s in enumerate(samples)]
    result = diagnose(lost, facts("a100-535"), 0)
    assert result.cause == "lost" and len(result.findings) == 1 and "lost" in CAUSES
    lost_for_s = samples[-1].time_s - samples[80].time_s
    assert result.first.figures[0].value == pytest.approx(lost_for_s)
    assert result.first.figures[0].count == 20
    assert f"GPU lost: it stopped answering NVML {lost_for_s:.0f} s ago" in result.line()
    assert "XID" in result.first.advice


def test_a_device_missing_from_some_samples_is_judged_on_the_others() -> None:
    samples = History(profile="a100-535", util=95.0).samples()
    gone = [s if i % 4 else Sample(s.seq, s.time_s, s.gpus[1:], s.host)
            for i, s in enumerate(samples)]
    result = diagnose(gone, facts("a100-535"), 0)
    assert result.samples == 75 and result.first.figures[0].count == 75


def test_one_window_diagnoses_each_device_as_if_alone() -> None:
    """``DiagnosisWindow`` reads what every device's diagnosis shares once (a cell's report
    diagnoses each GPU over one span): each device, asked in any order through one window,
    gets what it gets over the samples alone. Across the cases: the machine's CPU over 90%
    and not, MIG instances (their GPU's links and clocks), a device missing from some
    samples, a lost one, and a run's own PID."""
    histories = [case.history for case in CASES] + [
        History(util=50.0, sm=40.0, mask=0x4, cpu=95.0, extra_rows={1: 3.0})]
    for history in histories:
        samples = history.samples()
        all_facts = facts(history.profile)
        rows = [fact.index for fact in all_facts]
        variants = [samples,  # the second device gone from every third sample
                    [s if i % 3 else Sample(s.seq, s.time_s, s.gpus[:1], s.host, extra=s.extra)
                     for i, s in enumerate(samples)],
                    [s if i < len(samples) - 5 else Sample(s.seq, s.time_s, tuple(  # lost
                        GpuReading.unavailable(g.index, lost=True) for g in s.gpus), s.host)
                     for i, s in enumerate(samples)]]
        for variant in variants:
            for kwargs in ({}, {"pid": PID}):
                alone = {row: diagnose(variant, all_facts, row, **kwargs) for row in rows}
                for order in (rows, rows[::-1]):
                    shared = DiagnosisWindow(variant, all_facts)
                    assert {row: shared.diagnose(row, **kwargs) for row in order} == alone


def test_simulated_label_and_window_cut() -> None:
    samples = History(util=0.0, sm=0.0).samples()
    cut = window(samples, 1002.0, 1004.0)
    assert [s.time_s for s in cut][0] == 1002.0 and len(cut) == 11
    result = diagnose(cut, facts("h200"), 0, simulated=True)
    assert result.label == "SIMULATED GPU 0" and result.window_s == pytest.approx(2.2)


def test_process_lists_as_the_sampler_stores_them_count_once_per_pass() -> None:
    # The reader returns None between its 1 s passes and may hand back the same (unchanged)
    # tuple object at the next pass: each pass still counts once.
    same = (ProcessReading(0, PID, "compute", 1e9, 40.0, None),)
    samples = [Sample(i, 1000.0 + i * TICK, History(util=100.0).samples()[0].gpus,
                      HostReading(*([None] * 7)),
                      extra={PROCESS_FAMILY: same} if i % 5 == 0 else {}) for i in range(50)]
    assert process_presence(samples, PID) == (10, {0})
    result = diagnose(samples, facts("h200"), 0, pid=PID)
    assert result.cause == "underused" and result.first.signal == "per-process"
    assert result.first.figures[0].count == 10


def test_mean_of_nothing_is_not_available() -> None:
    assert mean([]) is None and mean([None, None]) is None
    assert mean([None, 4.0, 2.0]) == 3.0


def test_process_presence_across_all_gpus() -> None:
    samples = History(profile="a100-535", util=100.0, own_sm=50.0, row=1).samples()
    assert process_presence(samples, PID) == (20, {1})
    assert process_presence(samples, 99) == (20, set())
    assert process_presence(History(util=1.0).samples(), PID) == (0, set())


def test_the_cost_benchmark_prints_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "diagnosis_cost.py"
    spec = importlib.util.spec_from_file_location("diagnosis_cost", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--minutes", "1", "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    assert "diagnosis of one GPU over 1 min (300 samples" in out and "CPU time median" in out
    with pytest.raises(SystemExit) as stop:
        module.main(["--repeats", "0"])
    assert stop.value.code == 2


def test_live_diagnoses_are_shared_and_redone_at_most_once_per_refresh() -> None:
    from jupyterlab_nvdashboard.composition import create_metrics
    from jupyterlab_nvdashboard.config import Config, SimulationConfig
    from jupyterlab_nvdashboard.diagnosis.live import DeviceDiagnoses

    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=2, profile="h200")),
                             environ={})
    metrics.nvml.ensure_initialized()
    now = [0.0]
    live = DeviceDiagnoses(metrics, clock=lambda: now[0])
    for _ in range(6):
        metrics.sampler.tick()
    first = live.current(120)
    assert [d.label for d in first] == ["SIMULATED GPU 0", "SIMULATED GPU 1"]
    metrics.sampler.tick()
    assert live.current(120) is first and live.computed == 1  # within 2 s: shared
    now[0] = 2.5
    assert live.current(120) is not first and live.computed == 2
    assert len(live.compute(1800)) == 2 and live.computed == 3
    metrics.sampler.tick()
    now[0] = 20.0  # a 30-minute window is redone every 30 s
    live.current(1800)
    assert live.computed == 3
    data = live.as_json(120)
    assert data["window_s"] == 120 and len(data["devices"]) == 2


def _with_clocks(samples: list[Sample], wall_step_after: int, step_s: float) -> list[Sample]:
    """The samples as the sampler stamps them (monotonic, one tick apart), with the wall
    clock stepped by ``step_s`` (NTP) after sample ``wall_step_after``."""
    from dataclasses import replace

    return [replace(s, time_s=s.time_s + (step_s if i > wall_step_after else 0.0),
                    monotonic_s=50_000.0 + i * TICK) for i, s in enumerate(samples)]


def test_a_wall_clock_step_is_no_gap_and_no_longer_window() -> None:
    """One 0.2 s dip, then NTP steps the wall clock 20 s forward: spans, gaps and the window
    come from the monotonic stamps (12 s), so no 20.2 s gap reads as starved."""
    samples = _with_clocks(History(util=lambda i: 0.0 if i == 30 else 100.0, n=60).samples(),
                           30, 20.0)
    result = diagnose(samples, facts("h200"), 0)
    assert "starved" not in {f.cause for f in result.findings}, result.line()
    assert result.window_s == pytest.approx(60 * TICK)


def test_a_backward_wall_clock_step_cuts_a_runs_window_by_its_wall_times() -> None:
    """The wall clock steps 10 s back: its stamps are no longer sorted, and a run's events
    (wall clock) still find exactly the samples stamped inside their span."""
    samples = _with_clocks(History(util=100.0, n=60).samples(), 29, -10.0)
    cut = window(samples, 996.0, 997.0)
    assert [s.seq for s in cut] == [s.seq for s in samples if 996.0 <= s.time_s <= 997.0]
    assert len(cut) == 6


def _live(gpus: int = 2):  # noqa: ANN202
    from jupyterlab_nvdashboard.diagnosis.live import DeviceDiagnoses

    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=gpus,
                                                                profile="h200")), environ={})
    metrics.nvml.ensure_initialized()
    for _ in range(6):
        metrics.sampler.tick()
    return DeviceDiagnoses(metrics)


def test_a_long_window_is_diagnosed_off_the_callers_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """current() runs on the event loop: a 30-minute window is diagnosed on a thread of its
    own, and current() answers at once (nothing yet, then the result)."""
    import threading
    import time

    from jupyterlab_nvdashboard.diagnosis import live as live_module

    live, threads = _live(), set()

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        threads.add(threading.current_thread())
        return diagnose(*args, **kwargs)

    monkeypatch.setattr(live_module, "diagnose", recording)
    first = live.current(1800)
    deadline = time.monotonic() + 60
    while live.computed < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.current_thread() not in threads and threads
    assert first == [] and [d.row for d in live.current(1800)] == [0, 1]
    live.current(120)  # a short window: diagnosed where asked
    assert threading.current_thread() in threads


def test_one_device_whose_diagnosis_raises_leaves_the_others_and_is_logged_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from jupyterlab_nvdashboard.diagnosis import live as live_module

    live = _live()

    def broken_on_row_0(samples, facts, row, **kwargs):  # noqa: ANN001, ANN003, ANN202
        if row == 0:
            raise ZeroDivisionError("float division by zero")
        return diagnose(samples, facts, row, **kwargs)

    monkeypatch.setattr(live_module, "diagnose", broken_on_row_0)
    with caplog.at_level(logging.WARNING, logger="jupyterlab_nvdashboard.diagnosis.live"):
        assert [d.row for d in live.current(120)] == [1]
        assert [d.row for d in live.current(60)] == [1]
    assert len(caplog.records) == 1 and "GPU 0" in caplog.records[0].getMessage()
    assert not caplog.records[0].exc_info


def test_a_window_diagnosed_inline_never_reads_the_store() -> None:
    """Issue 52's rule (no store read on an event loop) met a race: ``current`` diagnoses a
    2-minute window on the caller's thread once memory holds it, but it checked that on the
    history's oldest sample and then read the window, which a dropped or missing sample can
    leave short; it then read the store there, and on an event loop that raised (a 500 on
    /glance.json under load). Here the history holds a sample 130 s old, then nothing until
    110 s ago: the inline diagnosis reads memory alone."""
    from jupyterlab_nvdashboard.diagnosis.live import DeviceDiagnoses

    class RecordingPast:
        calls: list[tuple[float, float]] = []

        def past_samples(self, start_s: float, end_s: float, resolution_s: float,
                         rows: str = "minmax", monotonic_grid: bool = False
                         ) -> tuple[list[Sample], float]:
            self.calls.append((start_s, end_s))
            return [], 0.0

    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=1, profile="h200")),
                             environ={})
    now = 1_800_000_000.0
    host = HostReading(10.0, 8e9, 6.4e10, 0.0, 0.0, 0.0, 0.0)
    for t in [now - 130, *(now - 110 + i for i in range(111))]:
        gpus = (GpuReading.unavailable(0, False)._replace(utilization_pct=50.0),)
        metrics.history.append(t, gpus, host, monotonic_s=t - now + 1000.0)
    past = RecordingPast()
    live = DeviceDiagnoses(metrics, past=past)
    live.current(120)
    assert past.calls == []
