"""Which GPU can I use? The one rule that calls a device *free* (issue 44, item 2.1).

A pure function over a window of samples; the overview marks what it says, and
``/glance.json`` carries it to the JupyterLab status bar, which only counts it. The rule, as
the README states it: a device is free when it is not lost and

1. no process holds a context on it (its MIG devices' included), and right now its
   utilization (SM activity for a MIG device) and its memory in use are low; or
2. whatever holds it has kept it low for the last ``FREE_WINDOW_S`` (or since the server
   started, when that is shorter): utilization and memory in use low at every reading.

"Low" is under ``QUIET_PCT`` percent utilization and under ``QUIET_MEMORY_SHARE`` of its
memory. A device whose utilization and memory cannot be read is never called free: the
rule says "cannot tell" rather than send a user to a GPU that may be full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..metrics import GpuFacts, GpuReading, Sample
from ..metrics.families import GPM_FAMILY, GpmReading, device_reading
from .thresholds import IDLE_PCT

# How long a held device must have stayed quiet: the issue asks for "the last minutes". Our
# choice: two minutes, the dashboards' default timeline window, so the quiet stretch the
# rule saw is the one a user sees drawn.
FREE_WINDOW_S = 120.0
# Under this utilization a device is doing next to nothing: the diagnosis's idle line
# (thresholds.IDLE_PCT, KempnerPulse's class "idle").
QUIET_PCT = IDLE_PCT
# Under this share of its memory a device has room for a new job. Our choice: the CUDA
# context of an idle notebook (a few hundred MiB to about 1 GiB) stays under it on a data
# centre GPU (40 GiB and more), while a job's tensors do not.
QUIET_MEMORY_SHARE = 0.05
# The rule in words, as the overview states it under its table.
FREE_RULE = (f"A device is free when nothing holds it and its utilization is under "
             f"{QUIET_PCT:.0f}% and its memory in use under {100 * QUIET_MEMORY_SHARE:.0f}% "
             f"now, or whatever holds it kept both that low for the last "
             f"{FREE_WINDOW_S / 60:.0f} minutes.")


@dataclass(frozen=True)
class FreeJudgment:
    """Whether a device is free, and why, in words (the overview's tooltip)."""

    free: bool
    why: str


def _activity(sample: Sample, reading: GpuReading) -> float | None:
    """Utilization, else GPM's SM activity (a MIG device reports only that)."""
    if reading.utilization_pct is not None:
        return reading.utilization_pct
    gpm = device_reading(sample.extra, GPM_FAMILY, reading.index, GpmReading)
    return None if gpm is None else gpm.sm_activity_pct


def _memory_share(reading: GpuReading, facts: GpuFacts) -> float | None:
    total = reading.memory_total_bytes or facts.memory_total_bytes
    if reading.memory_used_bytes is None or not total:
        return None
    return reading.memory_used_bytes / total


def _quiet(sample: Sample, reading: GpuReading, facts: GpuFacts) -> tuple[bool | None, str]:
    """Whether one reading is quiet (None: it cannot be told), and what it showed."""
    activity, share = _activity(sample, reading), _memory_share(reading, facts)
    if activity is None or share is None:
        return None, "its utilization or memory cannot be read"
    if activity >= QUIET_PCT:
        return False, f"utilization {activity:.0f}%"
    if share >= QUIET_MEMORY_SHARE:
        return False, f"{100 * share:.0f}% of its memory in use"
    return True, f"utilization {activity:.0f}%, {100 * share:.0f}% of its memory in use"


# A device's readings over a window, oldest first, each with the sample it came in.
DeviceReadings = Sequence[tuple[Sample, GpuReading]]


def by_device(window: Sequence[Sample]) -> dict[int, list[tuple[Sample, GpuReading]]]:
    """Each device row's readings in ``window``, in one pass over it."""
    readings: dict[int, list[tuple[Sample, GpuReading]]] = {}
    for sample in window:
        for reading in sample.gpus:
            readings.setdefault(reading.index, []).append((sample, reading))
    return readings


def judge_free(readings: DeviceReadings, facts: GpuFacts, processes: int) -> FreeJudgment:
    """The rule over the device ``facts``'s ``readings`` of the last ``FREE_WINDOW_S`` (the
    newest last; ``by_device``), which ``processes`` processes hold now (its MIG devices'
    counted for a GPU)."""
    if not readings:
        return FreeJudgment(False, "not read yet")
    newest_sample, newest = readings[-1]
    if newest.lost:
        return FreeJudgment(False, "lost")
    quiet, shown = _quiet(newest_sample, newest, facts)
    if quiet is None:
        return FreeJudgment(False, f"cannot tell: {shown}")
    if not quiet:
        return FreeJudgment(False, f"in use: {shown}")
    if processes == 0:
        return FreeJudgment(True, f"free: no process holds it; {shown}")
    for sample, reading in readings:
        quiet, shown = _quiet(sample, reading, facts)
        # A reading that could not be taken (the first after start, a lost tick) says
        # nothing either way: only the newest one must be read, above.
        if quiet is False:
            return FreeJudgment(False, f"held by {processes} process"
                                f"{'es' if processes != 1 else ''}, which showed {shown} in "
                                f"the last {FREE_WINDOW_S / 60:.0f} min")
    seconds = readings[-1][0].time_s - readings[0][0].time_s
    return FreeJudgment(True, f"free: held by {processes} process"
                        f"{'es' if processes != 1 else ''} but quiet for {seconds:.0f} s "
                        f"(utilization under {QUIET_PCT:.0f}%, memory under "
                        f"{100 * QUIET_MEMORY_SHARE:.0f}%)")
