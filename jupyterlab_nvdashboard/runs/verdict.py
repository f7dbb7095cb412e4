"""The verdict on a workload run: the diagnosis (``diagnosis/``) of its own GPU over its timed
part. The first finding is the verdict; the others make its second line.

A pure function of the run's events and the history samples, so tests feed it samples.

- **Which window:** from the end of warm-up (the ``warmup_end`` event; for an older run, the
  start of its first timed iteration) to its last timed iteration. Start-up is not judged,
  and the first GPM reading of the window (it may straddle warm-up) is dropped.
- **Which GPU:** where the driver's process lists show the run's own PID holding a context;
  else the GPU the run names: the one the launcher pinned it to, or its
  ``CUDA_VISIBLE_DEVICES`` resolved by the one parser of that variable
  (``metrics/cuda_visibility.py``), or CUDA device 0's UUID.
- **A run whose process holds no context on any GPU** (over ``MIN_LIST_READINGS``
  process-list readings or more) is "not using GPU N", on every GPU at once: someone
  else's work on the GPU it was pinned to never counts for it. A CPU run says first a slow
  input where its steps show one, then that it held no GPU (its busy CPU is its own work).
- **In a container** the driver may name the run's process by a host PID
  (``metrics/identity.py``). The run's process tree is this server's own, so its holding a
  GPU's device node (``metrics/device_nodes.py``) is ground truth that it reached that GPU;
  where NVML's entries cannot be tied to it for certain, the verdict judges on that GPU's
  own signals and says so. It is never "not using" a GPU while the lists hold entries
  this server cannot tell apart (``identity_hidden``).
- **A CPU run** says so first, and what it is compared with: its own steps (a slow input),
  and the GPU picked for it, watched only to tell that the run left it alone.
- **Too short to judge:** fewer than ``MIN_SAMPLES`` samples in the timed part. The verdict
  says how long the timed part lasted, how long one must last at the server's sampling
  interval, and about how many iterations that is at the run's own pace.
- **Which signal, how sure:** the diagnosis says (GPM, the run's own per-process SM
  utilization, or utilization only) and counts the readings each figure rests on. Where other
  processes share the GPU and the signal is device-wide, the verdict names them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from ..diagnosis import (
    MIN_LIST_READINGS,
    MIN_SAMPLES,
    Finding,
    Step,
    diagnose,
    host_findings,
    identity_hidden,
    list_passes,
    node_presence,
    not_using_gpu,
    process_presence,
    window,
)
from ..metrics import GpuFacts, Sample
from ..metrics.cuda_visibility import MigEntry, PhysicalGpu, cuda_indices
from ..metrics.families import ProcessReading
from ..metrics.identity import NO_PID, runs_as
from ..metrics.processes import PROCESS_EVERY_S
from .watcher import Run

OTHERS_NAMED = 5  # other PIDs named in a verdict, at most
IDENTITY_NOT_VISIBLE = ("process identity not visible from this container; judged on "
                        "{gpu}'s activity")
LEVEL_FIGURES = ("SM activity", "its own SM utilization", "utilization")
DEVICE_WIDE = ("gpm", "utilization", "utilization-gaps", "link-counters", "clock-events",
               "host")


@dataclass(frozen=True)
class Verdict:
    text: str  # the first line: the first finding, naming the GPU
    cause: str  # the first finding's cause ("not-judged" when there is none)
    samples: int  # samples of the run's GPU inside its timed part
    signal: str  # the first finding's signal ("none" when not judged)
    gpu_row: int | None
    level_pct: float | None  # SM activity (GPM), its own SM %, or utilization; None: unknown
    other_pids: tuple[int, ...] = ()
    rest: str = ""  # the second line: the other findings
    advice: str = ""  # the first finding's one thing to try
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def needs(self) -> str:
        """What the first finding would need to tell more ("" when nothing)."""
        return (self.findings[0].needs or "") if self.findings else ""

    def second_line(self) -> str:
        """What to try, what it would need, and the other findings."""
        parts = (f"try: {self.advice}" if self.advice else "", self.needs, self.rest)
        return " · ".join(part for part in parts if part)


def timed_window(run: Run) -> tuple[float, float] | None:
    """(first timed instant, last timed iteration) or None before the first timed step."""
    if not run.iterations:
        return None
    first = run.iterations[0]
    begin = run.warmup_end_s
    if begin is None:  # an older event file: step back from the first iteration's end
        begin = first["time"] - first["ms"] / 1000.0
    return begin, run.iterations[-1]["time"]


def physical_gpus(facts: Sequence[GpuFacts]) -> list[PhysicalGpu]:
    """The server's devices as ``cuda_visibility`` takes them, in the server's CUDA order
    (an integer entry of a run's ``CUDA_VISIBLE_DEVICES`` is read in that order)."""
    children: dict[int, list[GpuFacts]] = {}
    for fact in facts:
        if fact.kind == "mig" and fact.parent is not None:
            children.setdefault(fact.parent, []).append(fact)
    gpus = []
    for fact in facts:
        if fact.kind == "mig":
            continue
        migs = children.get(fact.index, [])
        positions = [f.cuda_index for f in [fact, *migs] if f.cuda_index is not None]
        speed = (0, 0, -min(positions)) if positions else (0, 0, -(1 << 30))
        gpus.append(PhysicalGpu(fact.nvml_index, fact.uuid, speed, tuple(
            MigEntry(mig.uuid, (mig.mig or {}).get("gpu_instance_id"),
                     (mig.mig or {}).get("compute_instance_id")) for mig in migs)))
    return gpus


def gpu_row(run: Run, facts: Sequence[GpuFacts]) -> int | None:
    """The server's device row of the GPU the run names, or None when it cannot be told."""
    if run.gpu_uuid:
        for fact in facts:
            if fact.uuid == run.gpu_uuid:
                return fact.index
    if run.gpu_index is not None and any(f.index == run.gpu_index for f in facts):
        return run.gpu_index
    visible = run.gpu_visible
    if visible is None and run.gpu_uuid:  # an older run recorded its first entry as "uuid"
        visible = run.gpu_uuid
    if visible:
        positions = cuda_indices(physical_gpus(facts), visible)
        first = min(positions, key=positions.__getitem__) if positions else None
        for fact in facts:
            if fact.uuid == first:
                return fact.index
    if run.device == "gpu" and len(facts) == 1:
        return facts[0].index  # only one GPU: it can only be that one
    return None


def samples_in(samples: Sequence[Sample], span: tuple[float, float]) -> Sequence[Sample]:
    """The samples inside ``span``, a run's wall-clock times (``diagnosis.window``)."""
    return window(samples, span[0], span[1])


def run_steps(run: Run) -> list[Step]:
    return [Step(event["time"], event["ms"], event.get("input_ms"), event.get("cpu_ms"))
            for event in run.iterations]


def _label(row: int | None, facts: Sequence[GpuFacts], prefix: str) -> str:
    for fact in facts:
        if fact.index == row:
            return f"{prefix}{fact.label}"
    return f"{prefix}its GPU" if row is None else f"{prefix}GPU row {row}"


def _level(findings: Sequence[Finding]) -> float | None:
    for name in LEVEL_FIGURES:
        for finding in findings:
            for figure in finding.figures:
                if figure.name == name and figure.value is not None:
                    return figure.value
    return None


def _others(samples: Sequence[Sample], row: int, pid: int | None) -> list[int]:
    others: dict[int, None] = {}
    for readings in list_passes(samples):
        for reading in readings:  # type: ignore[attr-defined]
            if isinstance(reading, ProcessReading) and reading.device == row \
                    and reading.pid != NO_PID and not runs_as(reading, (pid,)):
                others.setdefault(reading.pid)
    return list(others)


def _name_others(others: Sequence[int], name: str) -> str:
    if not others:
        return ""
    shown = ", ".join(str(pid) for pid in others[:OTHERS_NAMED])
    more = f" and {len(others) - OTHERS_NAMED} more" if len(others) > OTHERS_NAMED else ""
    return f"; other processes on {name}, whose work these figures include: pid {shown}{more}"


def _rest(findings: Sequence[Finding]) -> str:
    return "also: " + "; ".join(f.summary() for f in findings[1:]) if len(findings) > 1 else ""


def _host(steps: Sequence[Step], device: str) -> list[Finding]:
    """What the run's own steps say. A CPU run computes on the CPU, so a busy core is its
    work, not a host starving a GPU: only a slow input counts against it."""
    findings = host_findings(steps)
    return [f for f in findings if f.cause != "host-cpu-bound"] if device == "cpu" else findings


def _gpu_advice(run: Run) -> str | None:
    """What to try for a run that used no GPU, where its path or device says more than the
    framework check does (None: the diagnosis' own advice)."""
    if run.path == "numpy":
        return ("the numpy path computes on the CPU only: the cupy-plugin path runs the same "
                "step on a GPU")
    if run.device == "cpu":
        return ("it ran with device cpu: start it with device gpu (the run then says why, "
                "if the framework sees no GPU)")
    return None


def _not_judged(text: str, row: int | None, samples: int = 0) -> Verdict:
    return Verdict(text, "not-judged", samples, "none", row, None)


CPU_RUN = "CPU run: "
NEAR_RUN_S = 30.0  # the samples around a run that say what interval it was sampled at


def cpu_run_comparison(name: str) -> str:
    """What a CPU run is compared with, said under its verdict."""
    return (f"a CPU run is judged by its own steps, and checked against {name}, the GPU "
            "picked for it, only to tell that it left that GPU alone; its speed is compared "
            "with native runs of its preset on the CPU (vs native)")


def sample_interval_s(samples: Sequence[Sample]) -> float | None:
    """The sampler's interval as the samples show it: the median gap between neighbours."""
    gaps = [b.time_s - a.time_s for a, b in pairwise(samples) if b.time_s > a.time_s]
    return statistics.median(gaps) if gaps else None


def judged_duration_s(interval_s: float, device: str = "gpu") -> float:
    """How long a timed part must last to be judged: ``MIN_SAMPLES`` samples at
    ``interval_s``; for a CPU run also ``MIN_LIST_READINGS`` readings of the driver's process
    lists (one a second), which tell whether it used a GPU."""
    samples = MIN_SAMPLES * interval_s
    return max(samples, MIN_LIST_READINGS * PROCESS_EVERY_S) if device == "cpu" else samples


def judged_duration_why(interval_s: float, device: str = "gpu") -> str:
    """What ``judged_duration_s`` counts, in words."""
    samples = f"{MIN_SAMPLES} GPU samples, one every {interval_s:g} s"
    return (f"{samples}, and {MIN_LIST_READINGS} readings of the driver's process lists, one "
            f"every {PROCESS_EVERY_S:g} s" if device == "cpu" else samples)


def run_pace_s(run: Run) -> float | None:
    """Wall-clock seconds per timed iteration over the run's timed part (its own pace, with
    whatever slowed it down), or None before it timed two iterations."""
    span = timed_window(run)
    if span is None or span[1] <= span[0]:
        return None
    return (span[1] - span[0]) / len(run.iterations)


def iterations_judged(pace_s: float, interval_s: float, device: str = "gpu") -> int:
    """About how many iterations at ``pace_s`` make a timed part long enough to be judged,
    rounded up to a hundred."""
    return math.ceil(round(judged_duration_s(interval_s, device) / pace_s) / 100) * 100


def too_short(run: Run, span: tuple[float, float], count: int,
              interval_s: float | None) -> str:
    """Why a run has too few samples, and about how many iterations would be judged."""
    lasted = span[1] - span[0]
    text = (f"not enough samples: {count} of {MIN_SAMPLES} needed in the timed part, which "
            f"lasted {lasted:.1f} s")
    if interval_s is None:
        return text
    text += (f"; at one sample every {interval_s:g} s a timed part of "
             f"{judged_duration_s(interval_s, run.device):g} s is judged")
    pace = run_pace_s(run)
    if pace:
        text += (f": about {iterations_judged(pace, interval_s, run.device):,} timed "
                 "iterations at this run's pace")
    return text


def judge(run: Run, samples: Sequence[Sample], facts: Sequence[GpuFacts],
          simulated: bool = False) -> Verdict:
    """The verdict on ``run`` from ``samples`` (any span; only the timed part is used)."""
    prefix = "SIMULATED " if simulated else ""
    span = timed_window(run)
    row = gpu_row(run, facts)
    if span is None:
        return _not_judged("no timed iterations yet", row)
    timed = samples_in(samples, span)
    if len(timed) < MIN_SAMPLES:
        # The interval the samples around the run were taken at (the store's buckets, for
        # a run older than the in-memory history).
        near = samples_in(samples, (span[0] - NEAR_RUN_S, span[1] + NEAR_RUN_S))
        why = too_short(run, span, len(timed), sample_interval_s(near))
        return _not_judged(f"{_label(row, facts, prefix)}: {why}", row, len(timed))
    steps = run_steps(run)
    pid = run.pid
    lists, held = process_presence(timed, pid) if pid is not None else (0, set())
    # Its own tree's device-node holding: what this server knows without the driver's PIDs.
    nodes = node_presence(timed, pid) if pid is not None else set()
    if nodes and not held:
        held = nodes
    if pid is not None and lists >= MIN_LIST_READINGS and not held \
            and not identity_hidden(timed):
        name = _label(row, facts, prefix) if row is not None else f"{prefix}any GPU"
        own = _host(steps, run.device)
        missing = not_using_gpu(name, lists, _gpu_advice(run))
        if run.device != "cpu":
            findings = [missing] + own
            return Verdict(findings[0].summary(), findings[0].cause, len(timed),
                           findings[0].signal, row, None, (), _rest(findings),
                           findings[0].advice, tuple(findings))
        findings = own + [missing]
        rest = "; ".join(part for part in (cpu_run_comparison(name), _rest(findings)) if part)
        return Verdict(CPU_RUN + findings[0].summary(), findings[0].cause, len(timed),
                       findings[0].signal, row, None, (), rest, findings[0].advice,
                       tuple(findings))
    if held:
        row = row if row in held else min(held)
    elif run.device == "cpu":
        # No process lists to tell whether it used a GPU: never credit it with the GPU's work.
        own = _host(steps, run.device)
        why = ("CPU run: its GPU use is not judged without the driver's per-GPU process "
               f"lists ({lists} of {MIN_LIST_READINGS} readings)")
        if not own:
            return _not_judged(why, row, len(timed))
        return Verdict(CPU_RUN + own[0].summary(), own[0].cause, len(timed), own[0].signal,
                       row, None, (), "; ".join([f.summary() for f in own[1:]] + [why]),
                       own[0].advice, tuple(own))
    if row is None:
        return _not_judged("not judged: the run does not say which GPU it used", None)
    result = diagnose(timed, facts, row, pid=pid, steps=steps, simulated=simulated,
                      skip_first_gpm=True)
    name = _label(row, facts, prefix)
    # The run's process was not confirmed in NVML's entries (found by its device node,
    # paired by elimination, or among entries this server cannot tell apart): its own
    # per-process samples are not used, and the verdict says so.
    confirmed = process_presence(timed, pid, certain_only=True)[1] if pid is not None \
        else set()
    hidden = f"; {IDENTITY_NOT_VISIBLE.format(gpu=name)}" \
        if pid is not None and row not in confirmed and (held or identity_hidden(timed)) \
        else ""
    others = _others(timed, row, pid)
    first = result.first
    shared = _name_others(others, name) if first.signal in DEVICE_WIDE else ""
    if others and not shared:
        shared = f"; {len(others)} other process{'es' if len(others) != 1 else ''} on {name}"
    return Verdict(f"{result.line()}{shared}{hidden}", first.cause, result.samples,
                   first.signal, row, _level(result.findings), tuple(others),
                   _rest(result.findings), first.advice, result.findings)
