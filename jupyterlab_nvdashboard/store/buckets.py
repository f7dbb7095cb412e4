"""Buckets of samples: the mean, minimum and maximum of every reading over a span of time.

Pure functions and small value types, no I/O: the writer (``service.py``) folds samples into
5-second buckets and those into 1-minute buckets (the roll-up), and the reader folds stored
buckets into the coarser buckets a long window draws. Time is the samples' wall clock
(``Sample.time_s``), the clock the charts show and the only one that means anything after a
restart; buckets are aligned to the epoch, so a restart inside a bucket, or a wall-clock step
back, adds to the bucket that is already stored instead of starting a second one.

Means are weighted by time, not by sample count: the sampler reads ten times as often while a
page is open (200 ms) as when nobody watches (2 s), so a minute at 100% unwatched and a minute
at 0% watched average 50%, not 9%. A sample stands for the time until the next one (on the
monotonic clock, capped where the sampler was not running), and a bucket's ``covered_s``, the
time its samples stand for, weighs it when buckets are merged or rolled up.

A bucket's columns are, for each device of its ``layout`` (device keys, in the order of the
rows they had), ``GPU_FIELDS`` then whether the GPU was lost (0 or 1), then ``HOST_FIELDS``.
"Not available" is NaN, never 0: a bucket whose samples never had a reading has NaN there.

A device key is the device's UUID (``device_key``), like every other piece of per-device
state: after a GPU swap or a re-enumeration, a stored series is drawn under the row its GPU
has now, and a GPU that is gone has its past drawn under no other.
"""

from __future__ import annotations

import math
import operator
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..metrics import GpuReading, HostReading, Sample

# The gauges of a GPU reading worth keeping. The cumulative counters (pcie_*_total,
# nvlink_bytes_total) are left out: a mean of a counter means nothing, and their rates are
# already here. Changing this list changes the stored format: it needs a schema migration.
GPU_FIELDS = ("utilization_pct", "memory_utilization_pct", "memory_used_bytes",
              "memory_total_bytes", "memory_reserved_bytes", "pcie_tx_bytes_per_s",
              "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s",
              "temperature_c", "power_w")
HOST_FIELDS = HostReading._fields
PER_GPU = len(GPU_FIELDS) + 1  # and the "lost" flag


def column_count(layout: Sequence[str]) -> int:
    return len(layout) * PER_GPU + len(HOST_FIELDS)


# What NVML's nvmlDeviceGetUUID answers ("GPU-<uuid>"; "MIG-<uuid>", or "MIG-GPU-<uuid>/gi/ci"
# before R470, for a MIG device); "index:N" for a row whose UUID was not known, which is
# kept but drawn under no device of today (``rows_before_upgrade``). Nothing else is a
# device key the writer makes.
ROW_KEY_PREFIX = "index:"
_DEVICE_KEY = re.compile(r"(?:GPU|MIG)-[0-9A-Za-z/_.-]+|index:[0-9]+")


def device_key(index: int, uuid: str | None) -> str:
    """How the store names device row ``index`` whose UUID is ``uuid``."""
    return uuid if uuid and _DEVICE_KEY.fullmatch(uuid) else f"{ROW_KEY_PREFIX}{index}"


def layout_text(layout: Sequence[str]) -> str:
    """A layout as the ``layouts`` table holds it."""
    return ",".join(layout)


def parse_layout(text: object) -> tuple[str, ...] | None:
    """The device keys of a stored layout; None when it is not one the writer makes (a
    damaged or edited row)."""
    if not isinstance(text, str):
        return None
    keys = tuple(text.split(",")) if text else ()
    return keys if all(_DEVICE_KEY.fullmatch(key) for key in keys) else None


def rows_now(layout: Sequence[str], uuids: Mapping[int, str]) -> list[int | None]:
    """For each device of ``layout``, the row it has now (``uuids``: each row's UUID); None
    for a device not shown now."""
    row_of = {device_key(index, uuid): index for index, uuid in uuids.items()}
    return [None if key.startswith(ROW_KEY_PREFIX) else row_of.get(key) for key in layout]


# A GPU of a version 1 store whose UUID could not be known at the upgrade
# (``upgraded_rows.py``) is known by the row it had then, and only by that: its stored
# readings ride in ``Sample.extra[BEFORE_UPGRADE]`` (a tuple of ``GpuReading`` whose index
# is that old row), never in ``Sample.gpus``, so no reader takes them for today's GPU of
# that row. Every page and file names such a GPU by ``before_upgrade_label`` (the CSV's
# columns by ``before_upgrade_column``): one phrase, here only.
BEFORE_UPGRADE = "before_upgrade"
_BEFORE_UPGRADE_WORDS = "before upgrade"


def before_upgrade_label(row: int) -> str:
    """A GPU known only by its row before the upgrade, as pages name it."""
    return f"GPU {row} ({_BEFORE_UPGRADE_WORDS})"


def before_upgrade_column(row: int) -> str:
    """The same GPU as ``/history.csv`` names its columns (``gpu0_`` for today's GPU 0)."""
    return f"gpu{row}_{_BEFORE_UPGRADE_WORDS.replace(' ', '_')}"


def rows_before_upgrade(layout: Sequence[str], upgraded: bool) -> list[int | None]:
    """For each device of ``layout``, the row it had before the upgrade when it is known by
    that row only (``upgraded``: the layout is one the upgrade from version 1 rewrote);
    None otherwise. A row-numbered key the writer made itself (a GPU whose UUID NVML did
    not answer) is no GPU from before an upgrade: drawn under none."""
    return [int(key[len(ROW_KEY_PREFIX):]) if upgraded and key.startswith(ROW_KEY_PREFIX)
            else None for key in layout]


def before_upgrade_readings(sample: Sample) -> tuple[GpuReading, ...]:
    """The stored readings of ``sample``'s GPUs known only by their row before the upgrade
    (none for a sample of the in-memory history)."""
    readings = sample.extra.get(BEFORE_UPGRADE, ())
    return readings if isinstance(readings, tuple) else ()


class IdentifiedSample(NamedTuple):
    """A sample and the UUID of each device row when it was taken (``Sample.gpus`` carry
    rows only): the writer keys the sample's columns by these."""

    sample: Sample
    uuids: Mapping[int, str]


_gpu_values = operator.attrgetter(*GPU_FIELDS)


def sample_vector(sample: IdentifiedSample) -> tuple[tuple[str, ...], np.ndarray]:
    """A sample's layout and its values in column order (NaN: not available)."""
    readings = sorted(sample.sample.gpus, key=lambda reading: reading.index)
    values: list[object] = []
    for reading in readings:
        values += _gpu_values(reading)
        values.append(1.0 if reading.lost else 0.0)
    values += sample.sample.host
    return (tuple(device_key(r.index, sample.uuids.get(r.index)) for r in readings),
            np.array([math.nan if v is None else v for v in values], dtype=float))


@dataclass
class Bucket:
    """One bucket: ``start_s`` (epoch seconds, a multiple of ``width_s``), how many samples it
    holds and the seconds they stand for (``covered_s``), and per column their time-weighted
    mean, minimum and maximum."""

    start_s: float
    width_s: float
    layout: tuple[str, ...]
    samples: int
    covered_s: float
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray

    def merged(self, other: Bucket) -> Bucket:
        """This bucket and another of the same span and layout, as one (means weighted by
        the time each covers; a column NaN in one of them takes the other's)."""
        run = BucketRun.of([self, other]).folded(self.width_s)
        return run.buckets()[0]

    def encode(self) -> bytes:
        """The stored form: mean, minimum and maximum rows as little-endian float32,
        compressed (what a bucket of a constant reading repeats costs next to nothing)."""
        packed = np.stack([self.mean, self.low, self.high]).astype("<f4").tobytes()
        return zlib.compress(packed, 1)

    @classmethod
    def decode(cls, start_s: float, width_s: float, layout: tuple[str, ...], samples: int,
               covered_s: float, blob: bytes) -> Bucket:
        """Raises ValueError when the blob does not hold this layout's columns."""
        try:
            values = np.frombuffer(zlib.decompress(blob), dtype="<f4").astype(float)
        except zlib.error as error:
            raise ValueError(f"bucket at {start_s:.0f}: {error}") from None
        columns = column_count(layout)
        if values.size != 3 * columns:
            raise ValueError(f"bucket at {start_s:.0f}: {values.size} values, expected "
                             f"{3 * columns}")
        mean, low, high = values.reshape(3, columns)
        return cls(start_s, width_s, layout, samples, covered_s, mean, low, high)


def bucket_start(time_s: float, width_s: float) -> float:
    return math.floor(time_s / width_s) * width_s


# The least time a sample stands for: two samples stamped alike still both count.
MIN_COVER_S = 1e-3


def sample_cover_s(samples: Sequence[Sample], longest_s: float,
                   before: Sample | None = None) -> np.ndarray:
    """The seconds each sample stands for: until the next sample, on the monotonic clock (a
    wall-clock step changes nothing), at most ``longest_s`` (beyond it the sampler was not
    running: a suspend, a stop); the last one as long as the one before it (``before``:
    the sample before the first, when there is only one)."""
    clock = np.array([sample.clock_s for sample in samples], dtype=float)
    until_next = np.diff(clock)
    if len(samples) > 1:
        last = until_next[-1]
    elif samples and before is not None:
        last = clock[0] - before.clock_s
    else:
        last = longest_s
    return np.clip(np.r_[until_next, last][:len(samples)], MIN_COVER_S, longest_s)


def fold_samples(samples: Sequence[IdentifiedSample], width_s: float, longest_s: float,
                 before: Sample | None = None) -> list[Bucket]:
    """Consecutive samples grouped into buckets of ``width_s``; a sample in another bucket
    than the one before it (later, or earlier after a wall-clock step back), or with other
    GPUs, starts a new bucket. Buckets come out in the order their samples came. Each
    sample weighs the time it stands for (``sample_cover_s``, at most ``longest_s``;
    ``before``: the sample before these, if any)."""
    buckets: list[Bucket] = []
    group: list[np.ndarray] = []
    weights: list[float] = []
    key: tuple[float, tuple[str, ...]] | None = None

    def close() -> None:
        if key is None or not group:
            return
        stack = np.stack(group)
        weight = np.array(weights)[:, None]
        known = ~np.isnan(stack)
        counted = np.where(known, weight, 0.0).sum(axis=0)
        # An all-NaN column stays NaN (not available): fmin/fmax skip NaN, and the mean of
        # no values is left NaN.
        mean = np.divide(np.where(known, stack * weight, 0.0).sum(axis=0), counted,
                         out=np.full(stack.shape[1], math.nan), where=counted > 0)
        buckets.append(Bucket(key[0], width_s, key[1], len(group), float(weight.sum()), mean,
                              np.fmin.reduce(stack, axis=0), np.fmax.reduce(stack, axis=0)))

    covers = sample_cover_s([each.sample for each in samples], longest_s, before)
    for sample, cover in zip(samples, covers, strict=True):
        layout, vector = sample_vector(sample)
        this = (bucket_start(sample.sample.time_s, width_s), layout)
        if this != key:
            close()
            key, group, weights = this, [], []
        group.append(vector)
        weights.append(float(cover))
    close()
    return buckets


@dataclass
class BucketRun:
    """Consecutive buckets of one layout and width as arrays, one row per bucket: what a
    long window reads (10,080 minutes for 7 days) is folded without a Python object each."""

    layout: tuple[str, ...]
    width_s: float
    starts: np.ndarray  # (n,) epoch seconds
    samples: np.ndarray  # (n,)
    covered: np.ndarray  # (n,) seconds each bucket's samples stand for: its weight
    mean: np.ndarray  # (n, columns), and low and high the same
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def of(cls, buckets: Sequence[Bucket]) -> BucketRun:
        return cls(buckets[0].layout, buckets[0].width_s,
                   np.array([b.start_s for b in buckets], dtype=float),
                   np.array([b.samples for b in buckets], dtype=float),
                   np.array([b.covered_s for b in buckets], dtype=float),
                   np.stack([b.mean for b in buckets]), np.stack([b.low for b in buckets]),
                   np.stack([b.high for b in buckets]))

    @classmethod
    def decode(cls, layout: tuple[str, ...], width_s: float, starts: Sequence[float],
               samples: Sequence[int], covered_s: Sequence[float], blobs: Sequence[bytes]
               ) -> BucketRun:
        """Stored buckets of one layout, decoded at once; a bucket that is damaged (a blob
        that does not decompress or is of another size, a value that is not a number) costs
        itself only (dropped)."""
        columns = column_count(layout)
        size = 3 * columns * 4
        kept, raw = [], []
        numbers = (int, float)
        for position, blob in enumerate(blobs):
            if not (isinstance(starts[position], numbers)
                    and isinstance(samples[position], numbers)
                    and isinstance(covered_s[position], numbers)):
                continue
            try:
                data = zlib.decompress(blob)
            except (zlib.error, TypeError):
                continue
            if len(data) == size:
                kept.append(position)
                raw.append(data)
        values = np.frombuffer(b"".join(raw), dtype="<f4").astype(float)
        values = values.reshape(len(raw), 3, columns)
        return cls(layout, width_s, np.asarray(starts, dtype=float)[kept],
                   np.asarray(samples, dtype=float)[kept],
                   np.asarray(covered_s, dtype=float)[kept], values[:, 0], values[:, 1],
                   values[:, 2])

    def __len__(self) -> int:
        return len(self.starts)

    def buckets(self) -> list[Bucket]:
        return [Bucket(float(self.starts[i]), self.width_s, self.layout, int(self.samples[i]),
                       float(self.covered[i]), self.mean[i], self.low[i], self.high[i])
                for i in range(len(self))]

    def folded(self, width_s: float, origin_s: float = 0.0) -> BucketRun:
        """Rolled up into buckets of ``width_s`` (spans from ``origin_s`` plus a multiple of
        it): consecutive rows of one span become one (minimum of minima, maximum of maxima,
        means weighted by the time each covers)."""
        if not len(self):
            return self
        starts = np.floor((self.starts - origin_s) / width_s) * width_s + origin_s
        breaks = np.flatnonzero(np.r_[True, starts[1:] != starts[:-1]])
        known = ~np.isnan(self.mean)
        weights = np.where(known, self.covered[:, None], 0.0)
        sums = np.add.reduceat(np.where(known, self.mean, 0.0) * weights, breaks, axis=0)
        weight = np.add.reduceat(weights, breaks, axis=0)
        # A column never known in a span stays NaN: not available.
        mean = np.divide(sums, weight, out=np.full(sums.shape, math.nan), where=weight > 0)
        return BucketRun(self.layout, width_s, starts[breaks],
                         np.add.reduceat(self.samples, breaks),
                         np.add.reduceat(self.covered, breaks), mean,
                         np.fmin.reduceat(self.low, breaks, axis=0),
                         np.fmax.reduceat(self.high, breaks, axis=0))


def runs_of(buckets: Sequence[Bucket]) -> list[BucketRun]:
    """Buckets cut into runs of one layout, in order."""
    runs, position = [], 0
    while position < len(buckets):
        end = position
        while end < len(buckets) and buckets[end].layout == buckets[position].layout:
            end += 1
        runs.append(BucketRun.of(buckets[position:end]))
        position = end
    return runs


def fold_buckets(buckets: Sequence[Bucket], width_s: float) -> list[Bucket]:
    """Finer buckets rolled up into buckets of ``width_s`` (``BucketRun.folded``), run by
    run of one layout."""
    return [bucket for run in runs_of(buckets) for bucket in run.folded(width_s).buckets()]


# Where pcie_is_snapshot sits among GpuReading's fields after index and lost: the stored
# fields are GpuReading's own in its order, with that flag (never stored) between them.
_SNAPSHOT_AT = GpuReading._fields.index("pcie_is_snapshot") - 2
assert GpuReading._fields[2:2 + len(GPU_FIELDS) + 1] == (
    *GPU_FIELDS[:_SNAPSHOT_AT], "pcie_is_snapshot", *GPU_FIELDS[_SNAPSHOT_AT:])


def bucket_samples(rows_shown: Sequence[int | None], rows: np.ndarray, highs: np.ndarray,
                   times_s: Sequence[float], monotonic_s: Sequence[float | None],
                   rows_before: Sequence[int | None] = ()) -> list[Sample]:
    """Rows of buckets of one layout (their means, minima or maxima) as ``Sample``s at
    ``times_s``, so every reader of samples (feeds, diagnosis, the CSV) reads stored history
    unchanged; ``highs``, each row's bucket's maxima, say which GPUs were lost;
    ``rows_shown``, the row each of the layout's devices has now (``rows_now``; None: left
    out); ``rows_before``, the row a device had before the upgrade where it is known by
    that only (``rows_before_upgrade``): its readings go to ``extra[BEFORE_UPGRADE]``.
    Their sequence number is -1: they are not in the in-memory history. NaN becomes
    None in one pass over the whole array (a 7-day window makes 2,000 samples at once)."""
    cells = rows.astype(object)
    cells[np.isnan(rows)] = None
    lost_columns = [p * PER_GPU + PER_GPU - 1 for p in range(len(rows_shown))]
    lost = (highs[:, lost_columns] >= 0.5).tolist()
    host_at = len(rows_shown) * PER_GPU
    shown = sorted((index, position) for position, index in enumerate(rows_shown)
                   if index is not None)
    before = sorted((index, position) for position, index in enumerate(rows_before)
                    if index is not None)

    def readings(row: list, gone: list[bool], devices: list[tuple[int, int]]
                 ) -> tuple[GpuReading, ...]:
        found = []
        for index, position in devices:
            part = row[position * PER_GPU:position * PER_GPU + PER_GPU - 1]
            found.append(GpuReading(index, gone[position], *part[:_SNAPSHOT_AT], False,
                                    *part[_SNAPSHOT_AT:]))
        return tuple(found)

    samples = []
    for row, gone, time_s, monotonic in zip(cells.tolist(), lost, times_s, monotonic_s,
                                            strict=True):
        extra = {BEFORE_UPGRADE: readings(row, gone, before)} if before else {}
        samples.append(Sample(-1, time_s, readings(row, gone, shown),
                              HostReading(*row[host_at:]), gpu_age_s=None, extra=extra,
                              monotonic_s=monotonic))
    return samples


def gap_sample(rows: Sequence[int], time_s: float, monotonic_s: float | None) -> Sample:
    """A sample where nothing is available for device ``rows``: a chart's line breaks
    there."""
    return Sample(-1, time_s, tuple(GpuReading.unavailable(index, False) for index in rows),
                  HostReading(*([None] * len(HOST_FIELDS))), gpu_age_s=None, extra={},
                  monotonic_s=monotonic_s)


def is_gap(sample: Sample) -> bool:
    """Whether ``sample`` is a gap marker (``gap_sample``): nothing in it is available."""
    return (all(value is None for value in sample.host)
            and all(reading.utilization_pct is None and reading.memory_used_bytes is None
                    for reading in sample.gpus))
