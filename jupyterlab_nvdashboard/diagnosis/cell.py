"""What one notebook cell did on the GPU: a kernel's process tree judged over a time span.

Pure functions over plain values (issue 45, item 2). ``apps/cells.py`` gathers the span's
samples and, for each process pass, the kernel's ``DeviceEvidence`` (the same evidence the
idle judgment reads: its memory, its own SM samples, whether it was the device's only
process); this module says, for each device the kernel held, what its memory did, which
signal speaks for the kernel and what it says, the share of the span that device worked,
and the diagnosis findings over exactly the span. It says it in figures and classes; the
page's words (GiB, seconds) are ``apps/cells.py``'s.

**Signals** are those of ``idle.py`` (``device_evidence``): per-process SM samples; else the
device's activity when the kernel was its only process, or when nobody on it worked; else
"cannot tell".

**Memory** at the start is the kernel's in the last pass before the span (within ``gap_s``),
at the end in the first pass after it: a cell's change is what it allocated or freed, even
when no pass falls inside a short cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..metrics import GpuFacts, GpuReading, Sample
from ..metrics.families import GPM_FAMILY, GpmReading
from .findings import Finding, mean
from .idle import UNKNOWN, WORK_PCT, DeviceEvidence, device_evidence
from .rules import device_readings, diagnose
from .thresholds import LOW_UTILIZATION_PCT

# The signals, as /cell.json names them.
PER_PROCESS, DEVICE, CANNOT_TELL = "per-process", "device", "cannot-tell"
# What a device's part of a cell was.
BUSY, HELD_IDLE, LOST = "busy", "held-idle", "lost"
# The cell's verdict class, beside its GPUs' (the first of LOST, CANNOT_TELL, HELD_IDLE
# that any of them is, else BUSY: a GPU held idle beside a busy one is worth saying).
NO_GPU_WORK, TOO_SHORT = "no-gpu-work", "too-short"
# A device that worked less than this share of the cell held memory idle. Nsight's
# gpu_time_util and the PyTorch profiler call a GPU in use less than half the time
# underused (thresholds.LOW_UTILIZATION_PCT); a cell is judged by the same line.
BUSY_SHARE = LOW_UTILIZATION_PCT / 100.0
# A span needs this many samples to be judged (issue 45: "shorter than two samples").
MIN_SPAN_SAMPLES = 2
STORE, MEMORY = "store", "memory"


@dataclass(frozen=True)
class KernelPass:
    """One process pass, and the kernel's evidence on each device row it held then (none:
    it held no GPU memory in that pass)."""

    time_s: float
    devices: tuple[DeviceEvidence, ...]


@dataclass(frozen=True)
class MemoryChange:
    start_bytes: float | None
    end_bytes: float | None
    peak_bytes: float | None
    change_bytes: float | None


@dataclass(frozen=True)
class DeviceCell:
    """One device's part of a cell."""

    row: int
    label: str
    uuid: str
    mig: str | None  # the MIG device's label, for a MIG device
    lost: bool
    memory: MemoryChange
    signal: str  # PER_PROCESS, DEVICE or CANNOT_TELL
    signal_words: str  # which reading spoke, or why none could
    sm_pct: float | None
    working_share: float | None  # 0..1
    findings: tuple[Finding, ...]
    state: str  # BUSY, HELD_IDLE, CANNOT_TELL or LOST


@dataclass(frozen=True)
class CellJudgment:
    start_s: float
    end_s: float
    judged_from: str  # MEMORY or STORE
    resolution_s: float
    samples: int  # samples in the span
    devices: tuple[DeviceCell, ...]

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def too_short(self) -> bool:
        return self.samples < MIN_SPAN_SAMPLES

    @property
    def touched_gpu(self) -> bool:
        return bool(self.devices)

    @property
    def state(self) -> str:
        if not self.devices:
            return NO_GPU_WORK
        if self.too_short:
            return TOO_SHORT
        for state in (LOST, CANNOT_TELL, HELD_IDLE):
            if any(device.state == state for device in self.devices):
                return state
        return BUSY


def _gpm_passes(samples: Sequence[Sample]) -> list[dict[int, GpmReading]]:
    """Each sample's GPM readings by row (the family rides in the samples of its pass)."""
    found = [s.extra.get(GPM_FAMILY) for s in samples]
    return [readings if isinstance(readings, dict) else {} for readings in found]


def _activity(readings: Sequence[GpuReading | None], gpm: Sequence[dict[int, GpmReading]],
              row: int) -> list[float | None]:
    """The device's activity in each sample: GPM SM activity where the span has it, else
    utilization; None where a sample has none. ``readings``: the row's reading in each
    sample; ``gpm``: ``_gpm_passes`` of the same samples."""
    sm = [reading.sm_activity_pct if reading is not None else None
          for reading in (readings.get(row) for readings in gpm)]
    if any(value is not None for value in sm):
        return sm
    return [r.utilization_pct if r is not None else None for r in readings]


def _share(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(1 for value in known if value >= WORK_PCT) / len(known) if known else None


def _held(passes: Sequence[KernelPass], rows: Sequence[int]) -> dict[int, list[float | None]]:
    """The kernel's memory on each row in each pass: 0 where it held none there."""
    series: dict[int, list[float | None]] = {row: [] for row in rows}
    for kernel_pass in passes:
        held = {device.row: device.held_bytes for device in kernel_pass.devices}
        for row, values in series.items():
            values.append(held.get(row, 0.0))
    return series


def _memory(held: Sequence[float | None]) -> MemoryChange:
    """``held``: the kernel's memory in the pass before the span, those in it and the one
    after it (as far as there are such)."""
    if not held:
        return MemoryChange(None, None, None, None)
    start, end = held[0], held[-1]
    peak = None if None in held else max(held)  # type: ignore[type-var]
    change = end - start if start is not None and end is not None else None
    return MemoryChange(start, end, peak, change)


def _device_memory(readings: Sequence[GpuReading | None]) -> MemoryChange:
    """The device's own memory over the span (the store keeps no process's)."""
    known = [r.memory_used_bytes for r in readings
             if r is not None and r.memory_used_bytes is not None]
    if not known:
        return MemoryChange(None, None, None, None)
    return MemoryChange(known[0], known[-1], max(known), known[-1] - known[0])


def _signal(evidence: Sequence[DeviceEvidence]) -> tuple[str, str]:
    """The signal that speaks for the kernel on one device over the span's passes, and
    which reading it was, or why none could."""
    if not evidence:
        return CANNOT_TELL, "no process pass fell in the span"
    if all(device.process_sm_pct is not None for device in evidence):
        return PER_PROCESS, device_evidence(evidence[0]).signal
    verdicts = [device_evidence(device) for device in evidence
                if device.process_sm_pct is None]
    unknown = next((v for v in verdicts if v.kind == UNKNOWN), None)
    if unknown is not None:
        return CANNOT_TELL, unknown.why
    return DEVICE, verdicts[0].signal


def _covering(passes: Sequence[KernelPass], start_s: float, end_s: float
              ) -> list[KernelPass]:
    """The passes whose activity is the span's alone. A pass's own SM samples and its
    device's highest activity are those since the previous pass (``diagnosis/idle.py``), so
    the first pass inside a span also tells of what ran before it: a pass counts where the
    time since the previous pass lies wholly in the span."""
    return [current for previous, current in zip(passes, passes[1:], strict=False)
            if previous.time_s >= start_s and current.time_s <= end_s]


def judge_cell(start_s: float, end_s: float, passes: Sequence[KernelPass],
               samples: Sequence[Sample], facts: Sequence[GpuFacts], *,
               judged_from: str = MEMORY, resolution_s: float = 0.0,
               gap_s: float = 2.5, rows_held: Sequence[int] = (), lost_rows: Sequence[int] = (),
               simulated: bool = False) -> CellJudgment:
    """The cell from ``start_s`` to ``end_s`` (wall time).

    ``passes``: the kernel's process passes around the span, oldest first (the pass before
    it and the one after it count within ``gap_s``). ``samples``: every sample of the span,
    oldest first (from the store: its bucket means, at ``resolution_s``). ``rows_held``:
    device rows the kernel is known to have held in the span beyond what the passes show
    (a span reaching into the store, which keeps no process). ``lost_rows``: rows lost
    since (the newest readings say so)."""
    inside = [p for p in passes if start_s <= p.time_s <= end_s]
    before = next((p for p in reversed(passes)
                   if start_s - gap_s <= p.time_s < start_s), None)
    after = next((p for p in passes if end_s < p.time_s <= end_s + gap_s), None)
    judged = _covering(passes, start_s, end_s) or inside or \
        [p for p in (before, after) if p is not None]
    # What the kernel held during the span: in its passes, and in the one just after it,
    # which shows what a cell allocated in its last second (a cell with no pass of its
    # own: the passes on either side).
    held_in = [p for p in ([*inside, after] if inside else [before, after]) if p is not None]
    rows = dict.fromkeys([d.row for p in held_in for d in p.devices if d.held_bytes != 0.0])
    rows.update(dict.fromkeys(rows_held))
    span = [s for s in samples if start_s <= s.time_s <= end_s]
    by_row = {fact.index: fact for fact in facts}
    gpm = _gpm_passes(span)
    held = _held([p for p in (before, *inside, after) if p is not None], list(rows))
    evidence_of: dict[int, list[DeviceEvidence]] = {row: [] for row in rows}
    for kernel_pass in judged:
        for device in kernel_pass.devices:
            if device.row in evidence_of:
                evidence_of[device.row].append(device)
    devices = []
    for row in sorted(rows):
        fact = by_row.get(row)
        label = fact.label if fact else f"GPU row {row}"
        evidence = evidence_of[row]
        signal, words = _signal(evidence)
        readings = device_readings(span, row)[0]
        activity = _activity(readings, gpm, row)
        lost = row in lost_rows or fact is None or any(
            r is not None and r.lost for r in readings)
        if judged_from == STORE:
            # The store keeps each device's readings, no process's: its memory is the
            # device's, and its activity speaks for the kernel only where nobody worked.
            memory = _device_memory(readings)
            if _share(activity) == 0.0:
                signal, words = DEVICE, f"{label}'s stored activity: no process on it worked"
            else:
                signal, words = CANNOT_TELL, (f"the history store keeps no process's "
                                              f"readings, and {label} worked")
        else:
            memory = _memory(held[row])
        if signal == PER_PROCESS:
            own = [d.process_sm_pct for d in evidence]
            sm, share = mean(own), _share(own)
        else:
            sm = mean(activity) if signal == DEVICE else None
            share = _share(activity)
        findings = diagnose(span, facts, row, simulated=simulated).findings \
            if len(span) >= MIN_SPAN_SAMPLES else ()
        if lost:
            state = LOST
        elif signal == CANNOT_TELL:
            state = CANNOT_TELL
        else:
            state = BUSY if share is not None and share >= BUSY_SHARE else HELD_IDLE
        devices.append(DeviceCell(
            row, label, fact.uuid if fact else "",
            fact.label if fact is not None and fact.kind == "mig" else None, lost, memory,
            signal, words, sm, share, findings, state))
    return CellJudgment(start_s, end_s, judged_from, resolution_s, len(span), tuple(devices))
