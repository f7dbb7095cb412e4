"""A long window's frames (issue 44): each bucket carries its mean beside its minimum and
maximum, the stored part's mean is the store's own (not the middle of its range), and every
frame carries the bucket still open and the newest sample, which the page draws until the
next frame so the chart reaches now and its legend reads the current value."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest

from jupyterlab_nvdashboard.apps.components import Panel, Series, TimelineFeed, gpu_value
from jupyterlab_nvdashboard.metrics import GpuReading, History, HostReading, Sample
from jupyterlab_nvdashboard.stream.broadcaster import Family
from jupyterlab_nvdashboard.stream.downsample import MEAN_SUFFIX, bucket_means, min_max
from jupyterlab_nvdashboard.stream.frames import Rows, decode
from tests.support.store_clock import ScriptedClock
from tests.support.store_feed import START_S, Feeder, open_writer

HOST = HostReading(20.0, 8e9, 6.4e10, 0.0, 0.0, 0.0, 0.0)
FEED = TimelineFeed((Panel("GPU utilization", "Utilization (%)", [
    Series("utilization0", "GPU 0", "#1f77b4", gpu_value(0, lambda r: r.utilization_pct),
           gpu=0)], y_max=100, unit="%"),))
WINDOW_S, BUCKET_S = 600.0, 60.0


def reading(utilization: float | None) -> tuple[GpuReading, ...]:
    return (GpuReading(0, False, utilization, None, 1e9, 8e10, None, None, None, False, None,
                       None, None, None),)


def test_bucket_means_count_samples_not_bounds() -> None:
    clocks = np.array([0.0, 1.0, 2.0, 10.0, 11.0, 20.0, 21.0])
    values = np.array([10.0, 20.0, 90.0, np.nan, np.nan, 5.0, 7.0])
    rows = Rows({"time": clocks * 1000, "v": values})
    weights = np.array([1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # 90: a bound, not a sample
    means = bucket_means(rows, "time", 10.0, clocks, weights)["v" + MEAN_SUFFIX]
    assert len(means) == len(min_max(rows, "time", 10.0, clocks).numeric["time"])
    assert means[0] == means[1] == 15.0
    assert np.isnan(means[2]) and np.isnan(means[3])  # nothing known: not available
    assert means[4] == means[5] == 6.0


def test_a_bucket_is_drawn_from_its_first_sample_to_its_end() -> None:
    """Issue 51: a server started 7 s into a 10 s bucket has nothing before then, and its
    7-day window drew a line over the bucket's first 7 s (ten minutes, at 7 days). The
    first row stands at the first sample; the middle row halfway from it to the bucket's
    end, so a page still finds the end (``2 * middle - first``). The next bucket starts
    where the first ends, whenever its own first sample came."""
    clocks = np.array([7.0, 8.0, 9.0, 11.0, 15.0, 19.0])
    rows = Rows({"time": 1_000_000 + clocks * 1000, "v": np.arange(6.0)})
    times = min_max(rows, "time", 10.0, clocks).numeric["time"]
    assert list(times[::2]) == [1_007_000, 1_010_000]
    assert list(2 * times[1::2] - times[::2]) == [1_010_000, 1_020_000]


class StoredMinute:
    """A store that kept one minute at 40% on average, between 0% and 100%: its "minmax"
    rows (minima at the start, maxima at the middle) and its "mean" row, as store.past reads
    them."""

    def __init__(self, start_s: float) -> None:
        self.start_s = start_s

    def past_samples(self, start_s: float, end_s: float, resolution_s: float,
                     rows: str = "minmax", monotonic_grid: bool = False
                     ) -> tuple[list[Sample], float]:
        def sample(at_s: float, value: float) -> Sample:
            return Sample(-1, at_s, reading(value), HOST, 0.0, {}, at_s)

        middle = self.start_s + BUCKET_S / 2
        if rows == "mean":
            return [sample(middle, 40.0)], BUCKET_S
        return [sample(self.start_s, 0.0), sample(middle, 100.0)], BUCKET_S


def test_long_window_frame_has_means_and_reaches_the_newest_sample() -> None:
    now_s = 1_800_000_000.0
    history = History(1000)
    # Live samples over the last 90 s, one a second: the newest at 77%. The monotonic clock
    # reads as the wall clock, so a stored minute is one bucket of the page's.
    for step in range(90):
        value = 77.0 if step == 89 else 50.0 + step % 7
        history.append(now_s - 89 + step, reading(value), HOST, monotonic_s=now_s - 89 + step)
    stored_start_s = BUCKET_S * (int(now_s - 300) // int(BUCKET_S))
    family = Family("/GPU-Utilization-Timeline", WINDOW_S, FEED, BUCKET_S,
                    past=StoredMinute(stored_start_s), interval_s=1.0)
    family.start(history)
    header, rows = decode(family.catch_up(history, -1))
    times = rows.numeric["time"] / 1000
    means = rows.numeric["utilization0" + MEAN_SUFFIX]
    stored = np.flatnonzero(times < stored_start_s + BUCKET_S)
    # The stored minute: its range 0 to 100, and its mean the store's 40, not 50.
    assert list(rows.numeric["utilization0"][stored]) == [0.0, 100.0]
    assert list(means[stored]) == [40.0, 40.0]
    # Live buckets: the mean of their samples, between their minimum and maximum.
    live = np.flatnonzero(times >= stored_start_s + BUCKET_S)
    assert np.all(rows.numeric["utilization0"][live[::2]] <= means[live[::2]])
    assert np.all(means[live[1::2]] <= rows.numeric["utilization0"][live[1::2]])
    # The bucket still open, and the newest sample last: drawn up to now, never ahead.
    open_rows = header["open"]
    assert open_rows["time"][-1] == now_s * 1000
    assert open_rows["utilization0"][-1] == 77.0
    assert max(open_rows["time"]) <= now_s * 1000
    assert min(open_rows["time"]) > times[-1]


def test_each_stored_span_falls_in_one_of_the_windows_buckets() -> None:
    """A long window reads the store's minutes folded into spans of its bucket's width, and
    cuts its buckets on the monotonic clock (``stream/downsample.py``). The spans lay on the
    wall clock's multiples, so where the two clocks' difference is not a multiple of the
    width, a span's minimum and its maximum fell in two of the page's buckets: a bucket's
    band and mean spoke for parts of two spans, and the 7-day window's "N min recorded"
    moved by minutes with the time of day (issue 51). Each bucket now holds the stored
    minutes whose time lies in it."""
    width_s = 600.0
    start_s = START_S + 420  # a multiple of 600 on the wall clock
    clock = ScriptedClock(start_s, 5_000.0)  # 400 s past a multiple of 600 on the other
    offset_s = clock.mono - clock.wall
    with tempfile.TemporaryDirectory(prefix="nvdashboard-store-") as folder:
        store = open_writer(Path(folder) / "history.sqlite", clock)
        feeder = Feeder(store, clock, interval_s=5.0)
        # Two hours, each minute's utilization its number: 0, 1, 2, ...
        feeder.run(7200, value=lambda t: float((t - start_s) // 60))
        store.step(final=True)
        # Then a server's history: the last minute, after a minute with nothing.
        clock.advance(60)
        history = History(1000)
        for _ in range(60):
            history.append(clock.wall, reading(50.0), HOST, monotonic_s=clock.mono)
            clock.advance(1)
        family = Family("/GPU-Utilization-Timeline", 3 * 3600.0, FEED, width_s, past=store,
                        interval_s=1.0)
        family.start(history)
        _, rows = decode(family.catch_up(history, -1))
        store.close()
    times_s = rows.numeric["time"] / 1000
    values, means = rows.numeric["utilization0"], rows.numeric["utilization0" + MEAN_SUFFIX]
    stored = np.flatnonzero(times_s < start_s + 7200)
    assert len(stored) >= 20, times_s
    minute_starts = start_s + 60 * np.arange(120)
    for low_row in stored[::2]:
        bucket = math.floor((times_s[low_row] + offset_s) / width_s)
        assert math.floor((times_s[low_row + 1] + offset_s) / width_s) == bucket
        held = np.flatnonzero(np.floor((minute_starts + offset_s) / width_s) == bucket)
        # The bucket's band and mean are those of the minutes in it, and only those.
        assert (values[low_row], values[low_row + 1]) == (held[0], held[-1]), (
            times_s[low_row] - start_s, values[low_row:low_row + 2], held)
        assert means[low_row] == pytest.approx(held.mean())
