"""Min/max downsampling, so a long window draws about as many points as a short one.

Time is cut into buckets of ``bucket_s`` of the samples' monotonic clock
(``Sample.clock_s``), so every page and every reconnect cuts the same history into the same
buckets, and a step of the wall clock neither splits nor merges one. A bucket is drawn at
its start on the wall clock (as the rows' time says it), so while the wall clock keeps time
the buckets are aligned to the epoch. Each bucket becomes two rows, the
smallest value of every column (at the bucket's start, or at its first sample in a frame's
first bucket, where the history may begin) and the largest (halfway from there to the
bucket's end):
the line still reaches every peak and every trough of the raw samples. NaN is ignored
unless the whole bucket is NaN (then the bucket is "not available"). ``bucket_means`` adds
each column's mean over the bucket (``<column>:mean``, the same on both rows), so a page
draws a bucket as its mean inside its min-max band.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from .frames import Rows

# About this many points per line: a browser redraws that five times a second cheaply.
MAX_POINTS_PER_LINE = 2000
MEAN_SUFFIX = ":mean"  # a column's bucket means, beside its minima and maxima


def bucket_seconds(window_s: float, interval_s: float) -> float:
    """0 (draw every sample) when the window holds few enough samples, else the bucket width."""
    if window_s / interval_s <= MAX_POINTS_PER_LINE:
        return 0.0
    return window_s / (MAX_POINTS_PER_LINE // 2)


def complete_buckets(clocks_s: list[float], bucket_s: float) -> int:
    """How many of these samples (oldest first, by ``Sample.clock_s``) fall in buckets that
    later samples closed."""
    if not clocks_s:
        return 0
    open_bucket = math.floor(clocks_s[-1] / bucket_s)
    count = len(clocks_s)
    while count and math.floor(clocks_s[count - 1] / bucket_s) == open_bucket:
        count -= 1
    return count


def bucket_starts(clocks_s: np.ndarray, times_ms: np.ndarray,
                  bucket_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(index of each bucket's first sample, the bucket's start in epoch ms) for samples
    oldest first: ``clocks_s`` their monotonic stamps, ``times_ms`` their wall-clock ones."""
    buckets = np.floor(clocks_s / bucket_s)
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    into_bucket_s = clocks_s[starts] - buckets[starts] * bucket_s
    return starts, times_ms[starts] - into_bucket_s * 1000


def min_max(rows: Rows, time_key: str, bucket_s: float, clocks_s: np.ndarray) -> Rows:
    """Two rows per bucket (its minimum, then its maximum); ``time_key`` holds epoch ms, and
    ``clocks_s`` each row's monotonic stamp (one row per sample)."""
    times_ms = rows.numeric[time_key]
    if len(times_ms) == 0:
        return Rows({key: np.empty(0) for key in rows.numeric})
    starts, bucket_start_ms = bucket_starts(clocks_s, times_ms, bucket_s)
    out: dict[str, np.ndarray] = {}
    for key, column in rows.numeric.items():
        if key == time_key:
            # The first bucket is drawn from its first sample: the one the history begins
            # in (a window's first frame) holds nothing before it, and must not be drawn
            # there (issue 51). The others start where the one before ends, so the line
            # has no holes. The middle row is halfway to the end, so a page finds the end
            # from the two (``2 * middle - start``).
            first_ms = bucket_start_ms.copy()
            first_ms[0] = times_ms[0]
            pair = (first_ms, (first_ms + bucket_start_ms + bucket_s * 1000) / 2)
        else:
            with warnings.catch_warnings():  # an all-NaN bucket stays NaN, which is the point
                warnings.simplefilter("ignore", RuntimeWarning)
                pair = (np.fmin.reduceat(column, starts), np.fmax.reduceat(column, starts))
        out[key] = np.column_stack(pair).ravel()
    return Rows(out)


def bucket_means(rows: Rows, time_key: str, bucket_s: float, clocks_s: np.ndarray,
                 weights: np.ndarray) -> dict[str, np.ndarray]:
    """Each column's mean over each bucket of ``min_max``, twice (one per row of the
    bucket), as ``<column>:mean``. ``weights`` says what each row counts for in a mean: 1
    for a sample, 0 for a row that only bounds the bucket (a stored bucket's minima or
    maxima, whose mean comes on a row of its own)."""
    times_ms = rows.numeric[time_key]
    if len(times_ms) == 0:
        return {key + MEAN_SUFFIX: np.empty(0) for key in rows.numeric if key != time_key}
    starts, _ = bucket_starts(clocks_s, times_ms, bucket_s)
    out = {}
    for key, column in rows.numeric.items():
        if key == time_key:
            continue
        counted = np.where(np.isfinite(column), weights, 0.0)
        total = np.add.reduceat(np.where(counted > 0, column * counted, 0.0), starts)
        count = np.add.reduceat(counted, starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, total / count, np.nan)
        out[key + MEAN_SUFFIX] = np.repeat(mean, 2)
    return out
