"""The verdict on a workload run: did it use its GPU, judged on that GPU over its timed part.

A pure function of the run's events and the history samples, so tests feed it samples.

- **Which GPU:** the one the run's ``start`` event names (by UUID, else by the server's row
  index), never an average over all GPUs.
- **Which window:** from the end of warm-up (the ``warmup_end`` event; for an older run, the
  start of its first timed iteration) to its last timed iteration. Start-up is not judged.
- **Which signal,** best first: GPM's SM activity plus DRAM bandwidth (an embedding step is
  memory-bound, so DRAM counts as much as the SMs) when no other process shares the GPU;
  the run's own per-process SM utilization (NVML process samples, keyed by its PID), so
  another user's job does not count; GPM even with others present, said so; and last the
  device's utilization, which only means "a kernel was resident", said so too.
- **How sure:** it states the samples used and refuses to judge from fewer than
  ``MIN_SAMPLES``. A CPU run is never called busy by someone else's work: only its own PID
  counts, and without per-process data it is judged as not using the GPU by construction.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from ..metrics import GpuFacts, Sample
from ..metrics.families import (
    GPM_FAMILY,
    PROCESS_FAMILY,
    GpmReading,
    ProcessReading,
    device_reading,
)
from .watcher import Run

MIN_SAMPLES = 5
BUSY_SM_PCT = 50.0  # SM activity (GPM) or SM utilization at or above this: busy
BUSY_DRAM_PCT = 30.0  # DRAM bandwidth (GPM) at or above this: busy (memory-bound step)
OTHERS_NAMED = 5  # other PIDs named in a verdict, at most


@dataclass(frozen=True)
class Verdict:
    text: str  # the one line the table shows
    busy: bool | None  # None: not judged
    samples: int  # samples of the run's GPU inside its timed part
    signal: str  # "gpm", "process", "gpm-shared", "utilization", "cpu" or "none"
    gpu_row: int | None
    level_pct: float | None  # the judged level: max(SM, DRAM) for GPM, SM % otherwise
    other_pids: tuple[int, ...] = ()


def timed_window(run: Run) -> tuple[float, float] | None:
    """(first timed instant, last timed iteration) or None before the first timed step."""
    if not run.iterations:
        return None
    first = run.iterations[0]
    begin = run.warmup_end_s
    if begin is None:  # an older event file: step back from the first iteration's end
        begin = first["time"] - first["ms"] / 1000.0
    return begin, run.iterations[-1]["time"]


def gpu_row(run: Run, facts: Sequence[GpuFacts]) -> int | None:
    """The server's device row of the run's GPU, or None when it cannot be told."""
    if run.gpu_uuid:
        for fact in facts:
            if fact.uuid == run.gpu_uuid:
                return fact.index
    if run.gpu_index is not None and any(f.index == run.gpu_index for f in facts):
        return run.gpu_index
    if run.device == "gpu" and len(facts) == 1:
        return facts[0].index  # only one GPU: it can only be that one
    return None


def samples_in(samples: Sequence[Sample], window: tuple[float, float]) -> Sequence[Sample]:
    """The samples (sorted by time, as the history keeps them) inside ``window``."""
    times = [sample.time_s for sample in samples]
    return samples[bisect_left(times, window[0]):bisect_right(times, window[1])]


def judge(run: Run, samples: Sequence[Sample], facts: Sequence[GpuFacts],
          simulated: bool = False) -> Verdict:
    """The verdict on ``run`` from ``samples`` (any span; only the timed part is used)."""
    prefix = "SIMULATED " if simulated else ""
    window = timed_window(run)
    row = gpu_row(run, facts)
    name = f"{prefix}GPU {row}" if row is not None else f"{prefix}GPU ?"
    if window is None:
        return Verdict("no timed iterations yet", None, 0, "none", row, None)
    if row is None:
        where = "it ran on the CPU; " if run.device == "cpu" else ""
        return Verdict(f"{where}not judged: the run does not say which GPU it used",
                       None, 0, "none", None, None)
    timed = [s for s in samples_in(samples, window) if any(g.index == row for g in s.gpus)]
    count = len(timed)
    if count < MIN_SAMPLES:
        return Verdict(f"{name}: not enough samples ({count} of {MIN_SAMPLES} needed) in "
                       "the timed part", None, count, "none", row, None)
    own, others = _processes(timed, row, run.pid)
    gpm = [_gpm(s, row) for s in timed]
    gpm_known = [g for g in gpm if g is not None]
    named = _name_others(others, name)
    if run.device == "cpu":
        level = _mean(own) if own else None
        busy = level is not None and level >= BUSY_SM_PCT
        state = ("uses" if busy else "not using") + f" {name}"
        measured = f" (its own SM {level:.0f}%)" if level is not None else ""
        return Verdict(f"CPU run: {state}{measured} over {count} samples{named}", busy, count,
                       "cpu", row, level, tuple(others))
    if gpm_known and not others:
        return _gpm_verdict(name, gpm_known, count, named, row, shared=False)
    if own:
        level = _mean(own)
        return Verdict(f"{name} {_state(level >= BUSY_SM_PCT)}: its own SM utilization "
                       f"{level:.0f}% (per process) over {count} samples{named}",
                       level >= BUSY_SM_PCT, count, "process", row, level, tuple(others))
    if gpm_known:
        return _gpm_verdict(name, gpm_known, count, named, row, shared=True,
                            others=tuple(others))
    utilization = [u for s in timed for g in s.gpus if g.index == row
                   and (u := g.utilization_pct) is not None]
    if len(utilization) < MIN_SAMPLES:
        return Verdict(f"{name}: not enough samples ({len(utilization)} of {MIN_SAMPLES} "
                       "with a reading) in the timed part", None, len(utilization), "none",
                       row, None)
    level = _mean(utilization)
    shared = ", other processes' work included" if others else ""
    return Verdict(f"{name} {_state(level >= BUSY_SM_PCT)}: utilization {level:.0f}% over "
                   f"{len(utilization)} samples (the weaker signal: it only means a kernel was "
                   f"resident; no GPM{shared}){named}", level >= BUSY_SM_PCT, len(utilization),
                   "utilization", row, level, tuple(others))


def _gpm_verdict(name: str, readings: list[tuple[float | None, float | None]], count: int,
                 named: str, row: int, shared: bool, others: tuple[int, ...] = ()) -> Verdict:
    sm = _mean([r[0] for r in readings if r[0] is not None])
    dram = _mean([r[1] for r in readings if r[1] is not None])
    busy = (sm or 0.0) >= BUSY_SM_PCT or (dram or 0.0) >= BUSY_DRAM_PCT
    parts = [f"SM activity {sm:.0f}%" if sm is not None else "SM activity n/a",
             f"DRAM bandwidth {dram:.0f}%" if dram is not None else "DRAM bandwidth n/a"]
    note = " (GPM, other processes included)" if shared else " (GPM)"
    return Verdict(f"{name} {_state(busy)}: {', '.join(parts)}{note} over {count} samples"
                   f"{named}", busy, count, "gpm-shared" if shared else "gpm", row,
                   max(v for v in (sm, dram, 0.0) if v is not None), others)


def _state(busy: bool) -> str:
    return "busy" if busy else "idle: this embedding path is not using it"


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _gpm(sample: Sample, row: int) -> tuple[float | None, float | None] | None:
    reading = device_reading(sample.extra, GPM_FAMILY, row, GpmReading)
    if reading is None:
        return None
    if reading.sm_activity_pct is None and reading.dram_bandwidth_pct is None:
        return None
    return reading.sm_activity_pct, reading.dram_bandwidth_pct


def _processes(samples: Sequence[Sample], row: int,
               pid: int | None) -> tuple[list[float], list[int]]:
    """The run's own per-process SM % samples on ``row``, and the other PIDs seen there."""
    own: list[float] = []
    others: dict[int, None] = {}
    for sample in samples:
        readings = sample.extra.get(PROCESS_FAMILY) or ()
        for reading in readings:
            if not isinstance(reading, ProcessReading) or reading.device != row:
                continue
            if pid is not None and reading.pid == pid:
                if reading.sm_pct is not None:
                    own.append(reading.sm_pct)
            else:
                others.setdefault(reading.pid)
    return own, list(others)


def _name_others(others: list[int], name: str) -> str:
    if not others:
        return ""
    shown = ", ".join(str(pid) for pid in others[:OTHERS_NAMED])
    more = f" and {len(others) - OTHERS_NAMED} more" if len(others) > OTHERS_NAMED else ""
    return f"; other processes on {name}: pid {shown}{more}"
