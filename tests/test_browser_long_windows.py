"""The long windows of /GPU-Resources in Chromium, from a scripted store: a week of two GPUs
(GPU 0 follows the day, GPU 1 trains six hours on, six off) with two stretches the server was
off (6 hours three days ago, 2 hours ten hours ago). The 24-hour and 7-day windows draw the
stored history up to the live samples, with the time off as a gap."""

from __future__ import annotations

import math
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.metrics import GpuReading, History, HostReading
from jupyterlab_nvdashboard.store import HistoryStore
from tests.support.browser import PAGE_WAIT_MS, TIMELINE_VIEWS_JS, chromium, screenshot, watch
from tests.support.servers import cli_server, with_token
from tests.support.simulated_devices import simulated_device_uuids
from tests.support.store_clock import ScriptedClock

pytestmark = pytest.mark.browser

DAY_S = 86400.0
LIVE = "window.nvdashboardLive"
# Rows of GPU 0's utilization the page holds: finite ones, and gaps (NaN).
COLUMN_JS = """(key) => {
  const source = Array.from(Bokeh.documents[0].all_models).find(
    (m) => m.type === 'ColumnDataSource' && m.data.time && m.data[key]);
  const values = Array.from(source.data[key]);
  const times = Array.from(source.data.time);
  return {finite: values.filter(Number.isFinite).length,
          gaps: times.filter((t, i) => !Number.isFinite(values[i])),
          first: Math.min(...times)};
}"""


def off(time_s: float, now: float) -> bool:
    return (now - 3 * DAY_S <= time_s < now - 3 * DAY_S + 6 * 3600
            or now - 10 * 3600 <= time_s < now - 8 * 3600)


def scripted_store(path: Path, now: float, span_s: float = 8 * DAY_S) -> None:
    """``span_s`` (eight days) ending at ``now``, one sample a minute (every 1-minute
    bucket, which the 24-hour and 7-day windows read)."""
    clock = ScriptedClock(now - span_s)
    uuids = simulated_device_uuids(2)  # the GPUs of the server that reads it
    store = HistoryStore(path, clock=clock, device_uuids=lambda: uuids)
    store.open()
    history = History(10)
    store.attach(history)
    host = HostReading(20.0, 8e9, 6.4e10, 0.0, 0.0, 0.0, 0.0)
    count = 0
    while clock.wall < now - 120:
        if not off(clock.wall, now):
            day = 50 + 45 * math.sin(2 * math.pi * clock.wall / DAY_S)
            training = 92.0 if int(clock.wall // (6 * 3600)) % 2 else 3.0
            gpus = tuple(GpuReading(i, False, value, value * 0.4, 1.4e11 * value / 100 + 1e9,
                                    1.4e11, None, 1e9 * value / 100, 5e8, False, None, None,
                                    40 + value / 3, 100 + 5 * value)
                         for i, value in ((0, day), (1, training)))
            history.append(clock.wall, gpus, host, monotonic_s=clock.mono)
            count += 1
        clock.advance(60)
        if count % 1000 == 0:
            store.step()
    store.stop()


@contextmanager
def page_over_a_store(now: float, span_s: float = 8 * DAY_S) -> Iterator[tuple[str, object]]:
    """A server of two simulated GPUs over a scripted store of ``span_s`` ending at
    ``now``, and a Chromium page at 1280x800 let in; the page's console stays clean."""
    with tempfile.TemporaryDirectory(prefix="nvdashboard-store-") as folder:
        store = Path(folder) / "history.sqlite"
        scripted_store(store, now, span_s)
        with cli_server(["--simulate", "2", "--interval", "0.2"],
                        env={"NVDASHBOARD_STORE": str(store)}) as (url, _), \
                chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            watched = watch(page)
            page.goto(with_token(url + "/"))
            yield url, page
            watched.assert_clean()


def test_24_hour_and_7_day_windows_from_the_store() -> None:
    now = time.time()
    with page_over_a_store(now) as (url, page):
        page.goto(f"{url}/GPU-Resources")
        page.wait_for_function(f"() => {LIVE} && {LIVE}.draws > 2", timeout=30_000)
        for label, window_s, gap_start, gap_end in (
                ("24 h", DAY_S, now - 10 * 3600, now - 8 * 3600),
                ("7 d", 7 * DAY_S, now - 3 * DAY_S, now - 3 * DAY_S + 6 * 3600)):
            resets = page.evaluate(f"() => {LIVE}.resets")
            page.get_by_text(label, exact=True).click()
            page.wait_for_function(f"() => {LIVE}.window === {window_s:g} && "
                                   f"{LIVE}.resets > {resets} && {LIVE}.draws > 0",
                                   timeout=30_000)
            # The stored window after the reset: waited for, since a loaded machine
            # draws late.
            page.wait_for_function(f"() => ({COLUMN_JS})('utilization1').finite > 600",
                                   timeout=PAGE_WAIT_MS)
            rows = page.evaluate(f"({COLUMN_JS})('utilization1')")
            # The stored week (or day), about 1000 buckets of two rows each ...
            assert rows["finite"] > 600, rows["finite"]
            assert rows["first"] / 1000 < now - window_s + 0.05 * window_s
            # ... and the time the server was off, drawn as a gap.
            gaps = [t / 1000 for t in rows["gaps"]]
            assert any(gap_start <= t <= gap_end for t in gaps), (label, gaps[:10])
            screenshot(page, f"long-window-{label.replace(' ', '')}-gpu-resources")


# What the 7-day window shows of GPU 0's utilization: its line's newest point (epoch ms and
# value), the legend's value, the time axis's end, the browser's now, and the words beside
# the window picker.
NEWEST_JS = "() => {" + TIMELINE_VIEWS_JS + """
  const line = plot.model.renderers.map((r) => r.data_source.data)
    .find((data) => data.key && data.key.includes('utilization0'));
  const i = line.key.indexOf('utilization0');
  const xs = line.xs[i], ys = line.ys[i];
  const entry = bands.querySelector("[data-series='utilization0'] b");
  const coverage = Bokeh.documents[0].get_model_by_name('window-coverage');
  const areas = plot.model.renderers.map((r) => r.data_source.data)
    .find((data) => data.ys && data.color && !data.key && data.ys.length === line.key.length);
  return {time: xs[xs.length - 1], value: ys[ys.length - 1], legend: entry.textContent,
          first: xs.find((x, j) => Number.isFinite(ys[j])),
          steps: ys.slice(0, -2).every((y, j) => j % 2 === 1 || Object.is(y, ys[j + 1])),
          points: xs.length, band: areas.ys[i].filter(Number.isFinite).length,
          end: plot.model.x_range.end, now: Date.now(), coverage: coverage ? coverage.text : ''};
}"""


def test_7_day_window_with_25_minutes_of_history_reaches_now() -> None:
    """Issue 44: after 25 minutes of history the 7-day window showed 07:14-07:29 at 07:41
    (its ten-minute bucket still open was not drawn, nor the newest sample) and its legends
    read a bucket's maximum. It reaches now, its legend reads the newest value drawn, and it
    says how much of the 7 days it holds."""
    now = time.time()
    with page_over_a_store(now, span_s=25 * 60) as (url, page):
        for theme in ("light", "dark"):
            page.goto(f"{url}/GPU-Resources?theme={theme}")
            page.wait_for_function(f"() => {LIVE} && {LIVE}.draws > 0", timeout=30_000)
            resets, draws = page.evaluate(f"() => [{LIVE}.resets, {LIVE}.draws]")
            page.get_by_text("7 d", exact=True).click()
            # The stored window drawn (a reset draws at once).
            page.wait_for_function(f"() => {LIVE}.window === {7 * DAY_S:g} && "
                                   f"{LIVE}.resets > {resets} && {LIVE}.draws > {draws} "
                                   f"&& ({NEWEST_JS})().time > 0", timeout=PAGE_WAIT_MS)
            shown = page.evaluate(NEWEST_JS)
            # The line reaches the newest sample, never ahead of now, and so does the
            # time axis.
            assert -1000 < shown["now"] - shown["time"] < 30_000, shown
            assert shown["end"] >= shown["time"], shown
            # Each bucket is drawn as its mean, a step across it, inside its min-max
            # band; the legend reads the newest sample, not a bucket's maximum.
            assert shown["points"] >= 4 and shown["steps"], shown
            assert shown["band"] >= 4, shown
            newest = page.evaluate(f"() => {LIVE}.open.utilization0.at(-1)")
            assert shown["legend"] == f"{newest:.0f}%", shown
            minutes = int(re.fullmatch(r"(\d+) min of 7 d recorded",
                                       shown["coverage"]).group(1))
            # What the samples cover, from the first stored minute, not from the start of
            # the bucket it falls in (issue 51: "16 min recorded" for 5): the truth is 23
            # stored minutes and the seconds the server has run (the 2 minutes between
            # them were not recorded: the store marks a gap past its 10 s slack); and no
            # line before the first stored minute. The page counts a 10-minute bucket that
            # holds a reading from its first reading to its end, and a stored minute falls
            # in the bucket its start does; where the buckets fall moves with the time of
            # day. Measured over every phase (a run every 19 s for 10 minutes), it read 22
            # to 26 minutes: 26 where the gap shares a bucket with the last stored
            # minutes, 22 where a bucket begins inside the last stored minute and so holds
            # the gap alone.
            assert 22 <= minutes <= 26, shown
            assert shown["first"] >= (now - 25 * 60 - 60) * 1000, (shown, now)
            screenshot(page, f"long-window-7d-25min-gpu-resources-{theme}")
