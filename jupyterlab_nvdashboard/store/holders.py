"""What the history store keeps of who held each GPU: each holder's evidence per device,
per bucket (issue 53, item 4: the same span gets the same cell verdict from memory and from
the store).

Pure functions and small value types, no I/O, like ``buckets.py``. A process pass says, of
each holder (a user's kernel, or that user's processes outside any kernel) on each device
it held memory on: its memory, its own per-process SM sample (the highest of its
processes'), whether its processes were the device's only ones, who else held the device,
and the device's activity since the previous pass. The writer (``service.py``) folds the
passes into the same 5-second and 1-minute buckets as the device readings:

- a **pass mark** per bucket (``device`` and holder empty): how many passes the bucket
  holds, the time they stand for, and when its first and last were. A bucket with a mark
  and no row of a holder is one where that holder held nothing; a bucket without a mark
  was not recorded (the server was off, or the store was upgraded after it);
- a **holder row** per holder and device: its memory (at the bucket's first and last pass,
  0 where it held none then; mean and highest), its own SM samples (mean, the share at or
  above ``WORK_PCT``, how many passes carried one and the time they stand for), the
  device's activity while it held it (mean and working share of the samples), whether it
  was the only holder in every pass, and up to ``MAX_OTHERS`` other holders.

Each pass stands for the time since the previous one (at most ``longest_s``), as a sample
does in ``buckets.py``; means and shares are weighted by it, and the roll-up into minutes
weighs each 5-second bucket by the time its passes stand for, as the device buckets are.
A holder that holds nothing adds nothing, and a bucket keeps at most ``MAX_HOLDER_ROWS``
holder rows (those holding the most memory).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ..diagnosis.idle import WORK_PCT
from .buckets import bucket_start

# Holder rows kept per bucket: a shared server's GPUs rarely carry more than a few dozen
# processes' holders at once; beyond this, the ones holding least are left out. Our choice:
# bounds a bucket's rows whatever the machine runs.
MAX_HOLDER_ROWS = 64
# Other holders named per holder row ("shared with …"); how many there were is kept too.
MAX_OTHERS = 8
# The least time a pass stands for (two passes stamped alike both count).
MIN_COVER_S = 1e-3

Holder = tuple[str, str]  # (user, kernel id; "" outside any kernel)


@dataclass(frozen=True, slots=True)
class HolderReading:
    """One holder on one device (by its store key, ``buckets.device_key``) in one pass."""

    user: str
    kernel: str
    device: str
    held_bytes: float | None  # None: its share of a shared entry is not known on its own
    sm_pct: float | None  # its processes' highest per-process SM sample; None: no sample
    only_holder: bool
    others: tuple[Holder, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceActivity:
    """A device's activity since the previous pass: the mean of its best signal (GPM SM
    activity, else utilization) and the share of its samples at or above ``WORK_PCT``."""

    device: str
    mean_pct: float | None
    working_share: float | None
    signal: str


@dataclass(frozen=True, slots=True)
class PassRecord:
    """One process pass, as the store hears it."""

    time_s: float
    holders: tuple[HolderReading, ...]
    devices: tuple[DeviceActivity, ...] = ()


MARK = ("", "", "")  # (device, user, kernel) of a bucket's pass mark


@dataclass(frozen=True)
class HolderBucket:
    """A bucket's summary of one holder on one device; or, with ``device``, ``user`` and
    ``kernel`` empty, the bucket's pass mark."""

    start_s: float
    width_s: float
    device: str
    user: str
    kernel: str
    passes: int
    covered_s: float  # the time its passes stand for
    first_s: float  # its first and last pass
    last_s: float
    held_first: float | None = 0.0  # at the bucket's first and last pass (0: none held then)
    held_last: float | None = 0.0
    held_mean: float | None = None
    held_max: float | None = None
    sampled: int = 0  # passes with its own SM sample, and the time they stand for
    sampled_s: float = 0.0
    sm_mean: float | None = None
    sm_share: float | None = None
    device_mean: float | None = None
    device_share: float | None = None
    device_signal: str = ""
    alone: bool = True  # the only holder of the device in every one of its passes
    others: tuple[Holder, ...] = ()
    others_count: int = 0  # other holders seen, named or not

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.device, self.user, self.kernel)

    @property
    def is_mark(self) -> bool:
        return self.key == MARK


def _weighted(pairs: Iterable[tuple[float | None, float]]) -> float | None:
    """The weighted mean of the known values; None where none is known."""
    known = [(value, weight) for value, weight in pairs if value is not None]
    total = math.fsum(weight for _, weight in known)
    return math.fsum(value * weight for value, weight in known) / total if total > 0 \
        else None


def _max(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return max(known) if known else None


def _others(groups: Iterable[Sequence[Holder]]) -> tuple[tuple[Holder, ...], int]:
    seen = dict.fromkeys(holder for group in groups for holder in group)
    return tuple(seen)[:MAX_OTHERS], len(seen)


def pass_covers(times: Sequence[float], longest_s: float, before_s: float | None
                ) -> list[float]:
    """The time each pass stands for: since the previous one (``before_s``: the pass before
    the first, if any), at most ``longest_s``."""
    covers, previous = [], before_s
    for time_s in times:
        since = MIN_COVER_S if previous is None else time_s - previous
        covers.append(min(max(since, MIN_COVER_S), longest_s))
        previous = time_s
    return covers


def fold_passes(passes: Sequence[PassRecord], width_s: float, longest_s: float,
                before_s: float | None = None) -> list[HolderBucket]:
    """Passes (oldest first) as buckets of ``width_s``: each bucket's pass mark, then its
    holder rows. ``before_s``: the pass before the first, if any."""
    out: list[HolderBucket] = []
    covers = pass_covers([p.time_s for p in passes], longest_s, before_s)
    position = 0
    while position < len(passes):
        start = bucket_start(passes[position].time_s, width_s)
        end = position
        while end < len(passes) and bucket_start(passes[end].time_s, width_s) == start:
            end += 1
        out += _fold_bucket(start, width_s, passes[position:end], covers[position:end])
        position = end
    return out


def _fold_bucket(start: float, width_s: float, passes: Sequence[PassRecord],
                 covers: Sequence[float]) -> list[HolderBucket]:
    first_s, last_s = passes[0].time_s, passes[-1].time_s
    mark = HolderBucket(start, width_s, *MARK, len(passes), math.fsum(covers), first_s, last_s)
    found: dict[tuple[str, str, str], list[tuple[int, HolderReading]]] = {}
    for at, record in enumerate(passes):
        for reading in record.holders:
            found.setdefault((reading.device, reading.user, reading.kernel), []).append(
                (at, reading))
    activity = [{a.device: a for a in record.devices} for record in passes]
    rows = []
    for (device, user, kernel), seen in found.items():
        weights = [covers[at] for at, _ in seen]
        held = [reading.held_bytes for _, reading in seen]
        sampled = [(reading.sm_pct, covers[at]) for at, reading in seen
                   if reading.sm_pct is not None]
        on_device = [activity[at].get(device) for at, _ in seen]
        others, count = _others(reading.others for _, reading in seen)
        rows.append(HolderBucket(
            start, width_s, device, user, kernel, len(seen), math.fsum(weights),
            passes[seen[0][0]].time_s, passes[seen[-1][0]].time_s,
            held[0] if seen[0][0] == 0 else 0.0,
            held[-1] if seen[-1][0] == len(passes) - 1 else 0.0,
            None if None in held else _weighted(zip(held, weights, strict=True)),
            _max(held), len(sampled), math.fsum(w for _, w in sampled),
            _weighted(sampled),
            _weighted(((1.0 if pct >= WORK_PCT else 0.0), w) for pct, w in sampled),
            _weighted((a.mean_pct if a else None, w)
                      for a, w in zip(on_device, weights, strict=True)),
            _weighted((a.working_share if a else None, w)
                      for a, w in zip(on_device, weights, strict=True)),
            next((a.signal for a in on_device if a is not None), ""),
            all(reading.only_holder for _, reading in seen), others, count))
    return [mark, *_kept(rows)]


def _kept(rows: list[HolderBucket]) -> list[HolderBucket]:
    """At most ``MAX_HOLDER_ROWS`` of a bucket's holder rows: those holding the most."""
    if len(rows) <= MAX_HOLDER_ROWS:
        return rows
    return sorted(rows, key=lambda r: -(r.held_max or 0.0))[:MAX_HOLDER_ROWS]


def fold_holder_buckets(buckets: Sequence[HolderBucket], width_s: float
                        ) -> list[HolderBucket]:
    """Finer buckets (marks and holder rows) rolled up into buckets of ``width_s``, or two
    of one span merged (a restart inside it): each weighted by the time its passes stand
    for. A holder's memory at the wider bucket's first (last) pass is its value in the
    finer bucket that holds that pass, 0 where it has no row there."""
    spans: dict[float, list[HolderBucket]] = {}
    for bucket in buckets:
        spans.setdefault(bucket_start(bucket.start_s, width_s), []).append(bucket)
    out: list[HolderBucket] = []
    for start, inside in sorted(spans.items()):
        marks = [b for b in inside if b.is_mark]
        if not marks:
            continue  # holder rows without their mark: not a bucket the writer makes
        first_s = min(b.first_s for b in marks)
        last_s = max(b.last_s for b in marks)
        out.append(replace(_merge(marks, start, width_s), first_s=first_s, last_s=last_s))
        rows: dict[tuple[str, str, str], list[HolderBucket]] = {}
        for bucket in inside:
            if not bucket.is_mark:
                rows.setdefault(bucket.key, []).append(bucket)
        merged = []
        for group in rows.values():
            group.sort(key=lambda b: b.first_s)
            row = _merge(group, start, width_s)
            merged.append(replace(
                row, held_first=group[0].held_first if group[0].first_s == first_s else 0.0,
                held_last=group[-1].held_last if group[-1].last_s == last_s else 0.0))
        out += _kept(merged)
    return out


def merged(stored: HolderBucket, new: HolderBucket) -> HolderBucket:
    """Two buckets of one span and key as one (a restart inside the span, a wall-clock step
    back): the earlier's memory at the first pass, the later's at the last."""
    group = sorted((stored, new), key=lambda b: b.first_s)
    return _merge(group, stored.start_s, stored.width_s)


def _merge(group: Sequence[HolderBucket], start: float, width_s: float) -> HolderBucket:
    covers = [b.covered_s for b in group]
    sampled = [b.sampled_s for b in group]
    others, _ = _others(b.others for b in group)
    head = group[0]
    return HolderBucket(
        start, width_s, head.device, head.user, head.kernel, sum(b.passes for b in group),
        math.fsum(covers), min(b.first_s for b in group), max(b.last_s for b in group),
        head.held_first, group[-1].held_last,
        None if any(b.held_mean is None for b in group)
        else _weighted(zip([b.held_mean for b in group], covers, strict=True)),
        _max(b.held_max for b in group), sum(b.sampled for b in group), math.fsum(sampled),
        _weighted(zip([b.sm_mean for b in group], sampled, strict=True)),
        _weighted(zip([b.sm_share for b in group], sampled, strict=True)),
        _weighted(zip([b.device_mean for b in group], covers, strict=True)),
        _weighted(zip([b.device_share for b in group], covers, strict=True)),
        next((b.device_signal for b in group if b.device_signal), ""),
        all(b.alone for b in group), others,
        max(len(others), max(b.others_count for b in group)))


# The ``holder_buckets`` table's columns after (tier, start_s), in HolderBucket's order
# from ``device``: what the writer stores and the reader reads back.
COLUMNS = ("device", "user", "kernel", "passes", "covered_s", "first_s", "last_s",
           "held_first", "held_last", "held_mean", "held_max", "sampled", "sampled_s",
           "sm_mean", "sm_share", "device_mean", "device_share", "device_signal", "alone",
           "others", "others_count")


def others_text(others: Sequence[Holder]) -> str:
    """Other holders as stored: ``user<TAB>kernel`` lines."""
    return "\n".join(f"{user}\t{kernel}" for user, kernel in others)


def parse_others(text: object) -> tuple[Holder, ...]:
    if not isinstance(text, str) or not text:
        return ()
    pairs = [line.split("\t", 1) for line in text.split("\n")]
    return tuple((pair[0], pair[1]) for pair in pairs if len(pair) == 2)[:MAX_OTHERS]


def to_row(tier: int, bucket: HolderBucket) -> tuple[object, ...]:
    """A bucket as the ``holder_buckets`` table holds it."""
    values = [getattr(bucket, name) for name in COLUMNS]
    values[COLUMNS.index("alone")] = int(bucket.alone)
    values[COLUMNS.index("others")] = others_text(bucket.others)
    return (tier, int(bucket.start_s), *values)


def from_row(width_s: float, row: Sequence[object]) -> HolderBucket | None:
    """A stored row back as a bucket; None for a row the writer would not have made (an
    edited or damaged file costs that row only)."""
    start, *values = row
    named = dict(zip(COLUMNS, values, strict=True))
    numbers = (int, float)
    try:
        if not isinstance(start, numbers) or not all(
                isinstance(named[n], str) for n in ("device", "user", "kernel",
                                                    "device_signal")):
            return None
        for name in ("passes", "covered_s", "first_s", "last_s", "sampled", "sampled_s",
                     "alone", "others_count"):
            if not isinstance(named[name], numbers):
                return None
        for name in ("held_first", "held_last", "held_mean", "held_max", "sm_mean",
                     "sm_share", "device_mean", "device_share"):
            if named[name] is not None and not isinstance(named[name], numbers):
                return None
        return HolderBucket(
            float(start), width_s, named["device"], named["user"], named["kernel"],
            int(named["passes"]), float(named["covered_s"]), float(named["first_s"]),
            float(named["last_s"]), *(None if named[n] is None else float(named[n])
                                      for n in ("held_first", "held_last", "held_mean",
                                                "held_max")),
            int(named["sampled"]), float(named["sampled_s"]),
            *(None if named[n] is None else float(named[n])
              for n in ("sm_mean", "sm_share", "device_mean", "device_share")),
            named["device_signal"], bool(named["alone"]), parse_others(named["others"]),
            int(named["others_count"]))
    except (TypeError, ValueError):
        return None
