"""What one notebook cell did on the GPU: a kernel's process tree judged over a time span.

Pure functions over plain values (issue 45, item 2; issue 53). ``apps/cells.py`` gathers the
span's samples and, for each process pass, the kernel's ``DeviceEvidence`` (the same
evidence the idle judgment reads: its memory, its own SM samples, whether it was the
device's only process) and who else held each device; this module says, for each device
the kernel held, what its memory did, which signal speaks for the kernel and what it says,
and the diagnosis findings over the span where they are the kernel's. It says it in figures
and classes; the page's words (GiB, seconds) are ``apps/cells.py``'s.

**Whose** (issue 53, item 1): a cell's verdict rests only on its kernel's own signals, pass
by pass: its per-process SM samples where the driver gives them; the device's activity
where the kernel was the device's only process, or where nobody on the device worked;
otherwise the cell "cannot tell", naming who shares the device. Another kernel's activity
is never counted as this cell's work. The diagnosis findings (and their advice about code)
are the kernel's only by ``whose.py``'s rule: alone on the device and this cell did work.

**Memory** (issue 53, item 2): a change between two passes happened somewhere between them.
It is this cell's when that interval lies in the span, or reaches out of it only into time
when the kernel ran no other cell; where it reaches into another cell of the kernel's (Run
All's back-to-back cells between two passes), it is charged to neither, and named as
spanning those cells. A cell's start is the kernel's memory in the last pass at or before
it (within ``gap_s``); its end, the start plus the changes charged to it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..metrics import GpuFacts, GpuReading, Sample
from ..metrics.families import GPM_FAMILY, GpmReading
from .findings import Finding, mean
from .idle import WORK_PCT, DeviceEvidence
from .rules import DiagnosisWindow
from .thresholds import LOW_UTILIZATION_PCT
from .whose import YOURS, whose_finding

# The signals, as /cell.json names them.
PER_PROCESS, DEVICE, CANNOT_TELL = "per-process", "device", "cannot-tell"
# What a device's part of a cell was: busy; held memory and worked the device a little;
# held memory and did no GPU work at all (a CPU-only cell in a kernel with a CUDA context);
# lost.
BUSY, HELD_IDLE, HELD_NO_WORK, LOST = "busy", "held-idle", "held-no-work", "lost"
# The cell's verdict class, beside its GPUs' (the first of LOST, CANNOT_TELL, HELD_IDLE,
# HELD_NO_WORK that any of them is, else BUSY: a GPU held idle beside a busy one is worth
# saying).
NO_GPU_WORK, TOO_SHORT = "no-gpu-work", "too-short"
# A device that worked less than this share of the cell held memory idle. Nsight's
# gpu_time_util and the PyTorch profiler call a GPU in use less than half the time
# underused (thresholds.LOW_UTILIZATION_PCT); a cell is judged by the same line.
BUSY_SHARE = LOW_UTILIZATION_PCT / 100.0
# A span from the store needs this many of its buckets to be judged (issue 45: "shorter
# than two samples").
MIN_SPAN_SAMPLES = 2
# A span from memory shorter than this is too short to judge, whatever the samples: while a
# kernel with GPU memory runs a cell, the server reads a pass and a sample a second
# (``metrics/demand.py``'s CELL_RUNNING), and faster only while some page asks. Counting
# samples made a 1.5 s cell "too short" with no page open and "busy" with a timeline open
# (issue 53); a second is the pace every cell gets.
SHORTEST_JUDGED_S = 1.0
STORE, MEMORY = "store", "memory"
# A kernel that worked its GPU less than this share of a cell did not make the GPU's
# findings its own: a pass's sample of the second before the cell (its neighbour's last
# work) read "worked it 0% of 12 s: starved" under a cell that slept (the cells lab test),
# the device's finding named as the sleeping cell's cause. Under it the share is said as
# "under 1%". Our choice: the verdict's own resolution (whole percents).
WORKED_SHARE = 0.01
# The causes a running cell is worth a notice for (issue 55): the kernel holds a GPU and
# leaves it waiting (held idle, or starved between bursts of its work), or its work waits
# on the GPU's memory. ``notice_cause`` names which; a GPU shared with others is none.
NOTICE_CAUSES = ("held-idle", "starved", "memory-bound")


@dataclass(frozen=True)
class BucketEvidence:
    """What a bucket of the history store keeps of the kernel on one device row
    (``store/holders.py``): its own SM samples' mean and the share of them at or above
    ``WORK_PCT`` with the time they stand for, the device's activity (mean and working
    share of its samples) over the time the kernel's passes stand for, and the most memory
    it held. A stored bucket's ``KernelPass`` carries one per row beside its
    ``DeviceEvidence`` (the memory at the bucket's last pass): the same rules judge it."""

    row: int
    sm_pct: float | None
    sm_share: float | None
    sampled_s: float
    device_pct: float | None
    device_share: float | None
    covered_s: float
    held_max: float | None


@dataclass(frozen=True)
class KernelPass:
    """One process pass, and the kernel's evidence on each device row it held then (none:
    it held no GPU memory in that pass). ``others``: on each row the kernel held, the other
    holders listed there, in words ("user bob's process"); a row the kernel shared with a
    process whose owner is not known has ``another process`` among them. From the store, a
    pass stands for a bucket's passes (``buckets``: their summary per row), at its last."""

    time_s: float
    devices: tuple[DeviceEvidence, ...]
    others: tuple[tuple[int, tuple[str, ...]], ...] = ()
    buckets: tuple[BucketEvidence, ...] = ()

    def others_on(self, row: int) -> tuple[str, ...]:
        return next((names for where, names in self.others if where == row), ())

    def bucket_on(self, row: int) -> BucketEvidence | None:
        if not self.buckets:  # a pass from memory: most of a span's, asked once per row
            return None
        return next((bucket for bucket in self.buckets if bucket.row == row), None)


@dataclass(frozen=True)
class OtherCell:
    """Another cell of the same kernel, on the kernel's clock: ``end_s`` None while it
    runs."""

    count: int | None
    start_s: float
    end_s: float | None

    def overlaps(self, start_s: float, end_s: float) -> bool:
        return self.start_s < end_s and (self.end_s is None or self.end_s > start_s)


@dataclass(frozen=True)
class MemoryChange:
    start_bytes: float | None
    end_bytes: float | None  # the start with the changes charged to this cell
    peak_bytes: float | None  # the highest the kernel held in the span
    change_bytes: float | None  # the changes charged to this cell
    # Changes the passes cannot place in this cell or its neighbours (their net), and the
    # execution counts of the cells they span (this one's too; None where a cell has none):
    # named whenever the passes cannot separate this cell's memory from a neighbour's.
    spanning_bytes: float = 0.0
    spanning_cells: tuple[int | None, ...] = ()


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
    sm_pct: float | None  # the kernel's own SM %, where its signal tells it
    working_share: float | None  # 0..1: the share of the span the kernel worked the device
    findings: tuple[Finding, ...]  # the device's diagnosis, where it is the kernel's
    state: str  # BUSY, HELD_IDLE, HELD_NO_WORK, CANNOT_TELL or LOST
    shared_with: tuple[str, ...] = ()  # who else held the device during the span
    whose: str = YOURS  # whose.py's word on the findings


@dataclass(frozen=True)
class CellJudgment:
    start_s: float
    end_s: float
    judged_from: str  # MEMORY or STORE
    resolution_s: float
    samples: int  # samples in the span
    devices: tuple[DeviceCell, ...]
    count: int | None = None  # the cell's execution count, where known
    # The kernel's passes (from the store: buckets) around the span, and those that speak
    # for it: from the store, a span that holds no whole bucket of passes is too short.
    passes: int = 0
    judged_passes: int = 0
    # When the kernel first held GPU memory in or around the span (its start where it held
    # some then); None where it held none.
    held_from_s: float | None = None

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def too_short(self) -> bool:
        if self.judged_from == STORE:
            return self.samples < MIN_SPAN_SAMPLES or (self.passes > 0
                                                       and not self.judged_passes)
        return self.duration_s < SHORTEST_JUDGED_S or self.samples == 0

    @property
    def touched_gpu(self) -> bool:
        return bool(self.devices)

    @property
    def state(self) -> str:
        if not self.devices:
            return NO_GPU_WORK
        if self.too_short:
            return TOO_SHORT
        for state in (LOST, CANNOT_TELL, HELD_IDLE, HELD_NO_WORK):
            if any(device.state == state for device in self.devices):
                return state
        return BUSY

    @property
    def held_s(self) -> float:
        """How long of the span the kernel held GPU memory."""
        if self.held_from_s is None:
            return 0.0
        return max(0.0, self.end_s - max(self.start_s, self.held_from_s))


def notice_cause(judgment: CellJudgment) -> str | None:
    """What a running cell is worth a notice for (one of ``NOTICE_CAUSES``), or None: only
    where every GPU it holds is its own to judge (a shared GPU, a lost one, or one whose
    signal cannot tell says nothing), by the verdict's own state and its own findings
    (``whose.py``: a finding of a GPU the kernel did not work is not the kernel's)."""
    if judgment.too_short or not judgment.devices or any(
            device.shared_with or device.state in (LOST, CANNOT_TELL)
            for device in judgment.devices):
        return None
    if any(device.state in (HELD_IDLE, HELD_NO_WORK) for device in judgment.devices):
        return "held-idle"
    for cause in NOTICE_CAUSES[1:]:
        if any(finding.cause == cause and not finding.good
               for device in judgment.devices if device.whose == YOURS
               for finding in device.findings):
            return cause
    return None


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


def charge_memory(times: Sequence[float], held: Sequence[float | None], start_s: float,
                  end_s: float, gap_s: float, others: Sequence[OtherCell] = (),
                  count: int | None = None) -> MemoryChange:
    """The kernel's memory on one device charged to the cell from ``start_s`` to ``end_s``.

    ``times``: the kernel's passes around the span, oldest first; ``held``: its memory on
    the device in each (0 where it held none, None where its share is not known on its
    own). ``others``: the kernel's other cells near the span (a change that may fall in one
    of them is not this cell's); ``count``: this cell's execution count, to name the cells a
    change spans. Costs a few steps per interval at the span's edges and one sum over the
    passes inside it."""
    low, high = bisect_left(times, start_s - gap_s), bisect_right(times, end_s + gap_s)
    if low >= high:
        return MemoryChange(None, None, None, None)
    # The pass at or before the start, and the one at or after the end (as near as any).
    before_start = bisect_right(times, start_s, low, high) - 1
    after_end = bisect_left(times, end_s, low, high)
    # No pass at or before the start (one was missed), or none at or after the end: what
    # the kernel held when the cell began or ended, and so what it changed, is not known.
    start = held[before_start] if before_start >= low else None
    first = max(before_start, low)
    last = max(min(after_end, high - 1), first)
    charged: float | None = 0.0 if after_end < high else None
    spanning, spanned = 0.0, dict.fromkeys([count])
    moved = dict.fromkeys([count])  # the cells of the intervals whose memory changed
    seen = [held[first]]  # what the kernel held during the span, as the passes show it
    # Intervals wholly inside the span, [inner_from, inner_to): no other cell reaches them,
    # and their changes sum to the difference of their ends.
    inner_from = first if times[first] >= start_s else first + 1
    inner_to = max(inner_from, bisect_right(times, end_s, low, high) - 1)
    for k in range(first, last):
        if k == inner_from and inner_from < inner_to:
            block = held[inner_from:inner_to + 1]
            seen.extend(block[1:])
            if None in block:
                charged = None
            elif charged is not None:
                charged += block[-1] - block[0]  # type: ignore[operator]
            continue
        if inner_from < k < inner_to:
            continue
        t0, t1, v0, v1 = times[k], times[k + 1], held[k], held[k + 1]
        outside = [(a, b) for a, b in ((t0, min(t1, start_s)), (max(t0, end_s), t1)) if a < b]
        neighbours = [cell for cell in others for a, b in outside if cell.overlaps(a, b)]
        if t1 <= end_s or not neighbours:
            seen.append(v1)
        if v0 is None or v1 is None:
            if not neighbours:
                charged = None
            continue
        if neighbours:
            spanning += v1 - v0
            spanned.update(dict.fromkeys(cell.count for cell in neighbours))
            if v1 != v0:
                moved.update(dict.fromkeys(cell.count for cell in neighbours))
        elif charged is not None:
            charged += v1 - v0
    peak = None if None in seen else max(seen)  # type: ignore[type-var]
    end = None if start is None or charged is None else start + charged
    change = None if start is None else charged
    # Cells named even where the net change between their passes is nothing: a cell that
    # freed what the next one took shows no change there, and neither did nothing. Where
    # the memory did change between passes, the change is named over the cells those
    # intervals reach, and no others: a change between a pass in this cell and one in the
    # next is "over cells [3]–[4]", though an unchanged interval also reaches the cell
    # before (Run All's release after a CPU-only cell named [2]–[4]).
    named = moved if len(moved) > 1 else spanned
    cells = tuple(sorted(named, key=lambda c: -1 if c is None else c)) \
        if len(named) > 1 else ()
    return MemoryChange(start, end, peak, change, spanning, cells)


# A reading of the kernel's activity: (its mean %, the share of it at or above WORK_PCT,
# the time it stands for). A pass from memory is one reading of its own (its share 0 or 1,
# standing for the time since the previous pass); a stored bucket's summary is one reading
# of its passes together: one weighted mean judges both.
Reading = tuple[float, float, float]


def _reading(pct: float, weight_s: float) -> Reading:
    return (pct, 1.0 if pct >= WORK_PCT else 0.0, weight_s)


def _weighted(readings: Sequence[Reading]) -> tuple[float | None, float | None]:
    """The readings' mean % and working share, each weighted by the time it stands for."""
    total = sum(weight for _, _, weight in readings)
    if not readings or total <= 0:
        return None, None
    return (sum(pct * weight for pct, _, weight in readings) / total,
            sum(share * weight for _, share, weight in readings) / total)


@dataclass(frozen=True)
class _Own:
    """What the kernel's own signals say of one device over the span's passes."""

    signal: str
    words: str
    readings: tuple[Reading, ...]  # its own activity, pass by pass (CANNOT_TELL: none)
    alone: bool  # its processes were the device's only ones in every pass
    shared_with: tuple[str, ...]


# The least time a judged pass stands for (two passes stamped alike both count).
MIN_PASS_S = 1e-3


def _own(label: str, evidence: Sequence[tuple[DeviceEvidence, float, BucketEvidence | None]],
         others: Sequence[str], judged: Sequence[float]) -> _Own:
    """The kernel's own activity on one device, pass by pass, from its signals only: its
    per-process SM samples; else the device's activity where it was the only process, or
    where nobody worked (then the kernel did not either); else nothing can be told.
    ``judged``: the time each pass that speaks for the span stands for; ``evidence``: the
    kernel's on the device in those passes, each with that time and, from the store, its
    bucket's summary. In a judged pass without it, the driver listed none of its processes
    there: no context, so no work on that device (a cell that freed it at its start)."""
    shared_with = tuple(dict.fromkeys(others))
    alone = bool(evidence) and all(device.only_holder for device, _, _ in evidence)
    if not evidence:
        if judged:
            return _Own(PER_PROCESS, f"the driver listed none of the kernel's processes on "
                        f"{label} in the span", tuple((0.0, 0.0, w) for w in judged), alone,
                        shared_with)
        return _Own(CANNOT_TELL, "no process pass fell in the span", (), alone, shared_with)
    sampled = tuple(
        (bucket.sm_pct, bucket.sm_share or 0.0, bucket.sampled_s) if bucket is not None
        else _reading(device.process_sm_pct, weight)  # type: ignore[arg-type]
        for device, weight, bucket in evidence
        if (device.process_sm_pct is not None if bucket is None
            else bucket.sm_pct is not None and bucket.sampled_s > 0))
    if sampled:
        # The driver samples each process's SM share; a pass between two of its samples
        # has none (nvmlDeviceGetProcessUtilization: NOT_FOUND, nothing newer than the last
        # pass), which tells nothing. The device's figure there is not the kernel's, so the
        # cell rests on the passes that carry its own samples (a loaded machine's passes
        # slip and miss some).
        return _Own(PER_PROCESS, "per-process SM samples", sampled,  # type: ignore[arg-type]
                    alone, shared_with)
    pcts: list[Reading] = []
    device_words = ""
    for device, weight, bucket in evidence:  # none carries the kernel's own samples
        if bucket is not None:
            # A stored bucket: the device's samples over its passes, their mean and
            # working share; nobody worked where none of them was at WORK_PCT.
            pct, nobody = bucket.device_pct, bucket.device_share == 0.0
            reading = None if pct is None else (pct, bucket.device_share or 0.0,
                                                bucket.covered_s)
        else:
            pct = device.device_pct
            nobody = pct is not None and pct < WORK_PCT
            reading = None if pct is None else _reading(pct, weight)
        if reading is not None and (device.only_holder or nobody):
            pcts.append(reading)
            device_words = device_words or (
                f"{label}'s {device.device_signal}: " + (
                    "the kernel is its only process" if device.only_holder
                    else "no process on it worked"))
        else:
            if pct is None:
                why = (f"{label} gives neither per-process SM samples nor SM activity or "
                       "utilization")
            else:
                who = ", ".join(shared_with) or "another process"
                why = (f"cannot tell what this cell did; {label} is shared with {who}, and "
                       "the driver gives no per-process SM samples")
            return _Own(CANNOT_TELL, why, (), alone, shared_with)
    return _Own(DEVICE, device_words, tuple(pcts), alone, shared_with)


def _judged(passes: Sequence[KernelPass], start_s: float, end_s: float,
            others: Sequence[OtherCell], wholly_only: bool = False
            ) -> list[tuple[float, KernelPass]]:
    """The passes that speak for the span, each with the time its activity starts from. A
    pass's own SM samples and its device's highest activity are those since the previous
    pass (``diagnosis/idle.py``), so a pass tells of the time since the previous one: the
    passes whose time lies wholly in the span, where there are such; else (a cell shorter
    than a pass) those whose time overlaps the span and no other cell of the kernel's (the
    kernel runs nothing between cells, and another cell's work is not this one's).
    ``wholly_only``: the wholly ones only (a stored bucket that reaches out of the span
    tells of time that is not the cell's: the span is then too short for the store)."""
    timed = list(zip((p.time_s for p in passes), passes[1:], strict=False))
    wholly = [(since, p) for since, p in timed if since >= start_s and p.time_s <= end_s]
    if wholly or wholly_only:
        return wholly
    return [(since, p) for since, p in timed
            if since < end_s and p.time_s > start_s
            and not any(cell.overlaps(since, p.time_s) for cell in others)]


def _held_by_row(passes: Sequence[KernelPass]) -> dict[int, list[float | None]]:
    """The kernel's memory on each row it held in any of ``passes``, in each pass: 0 where
    it held none there."""
    rows = dict.fromkeys(d.row for p in passes for d in p.devices)
    series: dict[int, list[float | None]] = {row: [0.0] * len(passes) for row in rows}
    for i, kernel_pass in enumerate(passes):
        for device in kernel_pass.devices:
            series[device.row][i] = device.held_bytes
    return series


def _state(lost: bool, signal: str, share: float | None) -> str:
    if lost:
        return LOST
    if signal == CANNOT_TELL:
        return CANNOT_TELL
    if share is None or share == 0.0:
        return HELD_NO_WORK
    return BUSY if share >= BUSY_SHARE else HELD_IDLE


def judge_cell(start_s: float, end_s: float, passes: Sequence[KernelPass],
               samples: Sequence[Sample], facts: Sequence[GpuFacts], *,
               judged_from: str = MEMORY, resolution_s: float = 0.0,
               gap_s: float = 2.5, rows_held: Sequence[int] = (), lost_rows: Sequence[int] = (),
               simulated: bool = False, others: Sequence[OtherCell] = (),
               count: int | None = None) -> CellJudgment:
    """The cell from ``start_s`` to ``end_s`` (wall time).

    ``passes``: the kernel's process passes around the span, oldest first (the pass before
    it and the one after it count within ``gap_s``). ``samples``: every sample of the span,
    oldest first (from the store: its bucket means, at ``resolution_s``). ``rows_held``:
    device rows the kernel held during the span beyond what the passes show (a span
    reaching into the store, which keeps no process). ``lost_rows``: rows lost since (the
    newest readings say so). ``others``: the kernel's other cells around the span, and
    ``count`` this one's execution count: a memory change the passes cannot place in this
    cell is named as spanning them."""
    inside = [p for p in passes if start_s <= p.time_s <= end_s]
    before = next((p for p in reversed(passes)
                   if start_s - gap_s <= p.time_s < start_s), None)
    after = next((p for p in passes if end_s < p.time_s <= end_s + gap_s), None)
    around = [p for p in (before, *inside, after) if p is not None]
    store = judged_from == STORE
    judged_since = _judged(around, start_s, end_s, others, wholly_only=store)
    judged = [p for _, p in judged_since]
    # The time each judged pass stands for: since the previous one.
    weights = [max(p.time_s - since, MIN_PASS_S) for since, p in judged_since]
    # One walk over the passes, by row: what a span's read costs grows with the span.
    series = _held_by_row(around)
    held_inside = {d.row for p in inside for d in p.devices if d.held_bytes != 0.0}
    held_around = {d.row for p in around for d in p.devices if d.held_bytes != 0.0}
    evidence_of: dict[int, list[tuple[DeviceEvidence, float, BucketEvidence | None]]] = {}
    names_of: dict[int, list[str]] = {}
    for kernel_pass, weight in zip(judged, weights, strict=True):
        for device in kernel_pass.devices:
            evidence_of.setdefault(device.row, []).append(
                (device, weight, kernel_pass.bucket_on(device.row)))
            if not device.only_holder:
                names_of.setdefault(device.row, []).extend(kernel_pass.others_on(device.row))
    # The rows the kernel held during the span: in its passes in it, and where the memory
    # charged to the cell (its start, its end, or a change it cannot be told from its
    # neighbours) is not nothing.
    times = [p.time_s for p in around]
    memory_of = {row: charge_memory(times, held, start_s, end_s, gap_s, others, count)
                 for row, held in series.items()}
    for row, memory in memory_of.items():
        # A stored bucket keeps the most its passes saw held, not only its last pass's.
        tops = [bucket.held_max for p in inside for bucket in p.buckets
                if bucket.row == row and bucket.held_max is not None]
        if tops and memory.peak_bytes is not None:
            memory_of[row] = replace(memory, peak_bytes=max(memory.peak_bytes, *tops))
    # A row held only around the span, with what the cell did to it unknown (a pass
    # missed), is the cell's too: "memory change unknown" rather than nothing.
    rows = dict.fromkeys(row for row, memory in memory_of.items() if row in (
        held_inside if memory.change_bytes is not None else held_around)
        or memory.spanning_bytes != 0.0
        or any(value not in (None, 0.0) for value in (memory.start_bytes, memory.end_bytes)))
    rows.update(dict.fromkeys(rows_held))
    span = [s for s in samples if start_s <= s.time_s <= end_s]
    by_row = {fact.index: fact for fact in facts}
    # Every device's readings and diagnosis over the span read it once (rules.DiagnosisWindow).
    window = DiagnosisWindow(span, facts, simulated=simulated)
    gpm = _gpm_passes(span) if not store and any(
        device.process_sm_pct is None for found in evidence_of.values() for device, _, _ in found
    ) else []
    # The samples the judged passes vouch for (a stretch of the span's): the device's finer
    # pace, where it speaks for the kernel.
    if judged:
        since, until = judged_since[0][0], judged[-1].time_s
        covered = [i for i, sample in enumerate(span) if since < sample.time_s <= until]
    else:
        covered = []
    devices = []
    for row in sorted(rows):
        fact = by_row.get(row)
        label = fact.label if fact else f"GPU row {row}"
        evidence = evidence_of.get(row, [])
        own = _own(label, evidence, names_of.get(row, []), weights)
        signal, words = own.signal, own.words
        # A lost GPU stays lost until the devices are enumerated again (which ends the
        # span's rows): the span's newest reading of the row says whether it was lost.
        newest = next((r for sample in reversed(span) for r in sample.gpus if r.index == row),
                      None)
        lost = row in lost_rows or fact is None or (newest is not None and newest.lost)
        memory = memory_of.get(row, MemoryChange(None, None, None, None))
        if not store and signal == DEVICE and covered and len(evidence) == len(judged) and all(
                d.only_holder or (d.device_pct is not None and d.device_pct < WORK_PCT)
                for d, _, _ in evidence):
            # On the device, and alone there (or nobody worked), in every pass: the
            # device's samples are the kernel's, at the samples' finer pace, over the
            # time the passes vouch for. (A pass without the kernel on the device
            # leaves the device's samples there to whoever else held it.) The store's
            # buckets keep the same samples' mean and working share (``BucketEvidence``).
            # The device's readings and activity are read only here: a span's cost is
            # mostly these, and the diagnosis's.
            activity = _activity(window.readings(row)[0], gpm, row)
            covered_activity = activity[covered[0]:covered[-1] + 1]
            sm, share = mean(covered_activity), _share(covered_activity)
        else:
            sm, share = _weighted(own.readings)
        alone = own.alone
        state = _state(lost, signal, share)
        worked = share is not None and share >= WORKED_SHARE
        whose = whose_finding(alone, worked)
        findings = window.diagnose(row).findings \
            if len(span) >= MIN_SPAN_SAMPLES and (whose == YOURS or lost) else ()
        devices.append(DeviceCell(
            row, label, fact.uuid if fact else "",
            fact.label if fact is not None and fact.kind == "mig" else None, lost, memory,
            signal, words, sm if signal != CANNOT_TELL else None,
            share if signal != CANNOT_TELL else None, findings, state, own.shared_with,
            whose))
    held_from = next((p.time_s for p in around
                      if any(d.held_bytes != 0.0 for d in p.devices)), None)
    return CellJudgment(start_s, end_s, judged_from, resolution_s, len(span), tuple(devices),
                        count, len(around), len(judged), held_from)
