"""Min/max downsampling, so a long window draws about as many points as a short one.

Time is cut into buckets of ``bucket_s`` aligned to the epoch, so every page and every
reconnect cuts the same history into the same buckets. Each bucket becomes two rows, the
smallest value of every column (at the bucket's start) and the largest (at its middle):
the line still reaches every peak and every trough of the raw samples. NaN is ignored
unless the whole bucket is NaN (then the bucket is "not available").
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from .frames import Rows

# About this many points per line: a browser redraws that five times a second cheaply.
MAX_POINTS_PER_LINE = 2000


def bucket_seconds(window_s: float, interval_s: float) -> float:
    """0 (draw every sample) when the window holds few enough samples, else the bucket width."""
    if window_s / interval_s <= MAX_POINTS_PER_LINE:
        return 0.0
    return window_s / (MAX_POINTS_PER_LINE // 2)


def complete_buckets(times_s: list[float], bucket_s: float) -> int:
    """How many of these samples (oldest first) fall in buckets that later samples closed."""
    if not times_s:
        return 0
    open_bucket = math.floor(times_s[-1] / bucket_s)
    count = len(times_s)
    while count and math.floor(times_s[count - 1] / bucket_s) == open_bucket:
        count -= 1
    return count


def min_max(rows: Rows, time_key: str, bucket_s: float) -> Rows:
    """Two rows per bucket (its minimum, then its maximum); ``time_key`` holds epoch ms."""
    times_ms = rows.numeric[time_key]
    if len(times_ms) == 0:
        return Rows({key: np.empty(0) for key in rows.numeric})
    buckets = np.floor(times_ms / (bucket_s * 1000))
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    bucket_start_ms = buckets[starts] * bucket_s * 1000
    out: dict[str, np.ndarray] = {}
    for key, column in rows.numeric.items():
        if key == time_key:
            pair = (bucket_start_ms, bucket_start_ms + bucket_s * 500)
        else:
            with warnings.catch_warnings():  # an all-NaN bucket stays NaN, which is the point
                warnings.simplefilter("ignore", RuntimeWarning)
                pair = (np.fmin.reduceat(column, starts), np.fmax.reduceat(column, starts))
        out[key] = np.column_stack(pair).ravel()
    return Rows(out)
