"""A timeline page opened with a range in its URL (``?start=&end=&label=``, issue 45), in
Chromium at 1280x800, light and dark: its time axis is set to the span, it stays there while
newer samples arrive (it does not follow now), and the span is shaded and labelled inside the
axis. Each timeline page takes it. A malformed range opens the page as usual, following now,
with one line saying why the range was ignored. /GPU-Activity opened as a cell's footer opens
it (``&gpus=``, issue 53) draws the cell's GPUs alone, and its legends read the span."""

from __future__ import annotations

import csv
import io
import json
import re
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from PIL import Image

from tests.support.browser import (
    PAGE_WAIT_MS,
    TIMELINE_VIEWS_JS,
    PageWatch,
    chromium,
    screenshot,
    watch,
)
from tests.support.servers import TEST_TOKEN, cli_server, with_token
from tests.support.waiting import until

pytestmark = pytest.mark.browser

# The timeline's time axis, the span's shading in page pixels and the drawn frame's edges,
# and the newest sample the page holds (epoch ms).
SPAN_JS = "() => {" + TIMELINE_VIEWS_JS + """
  const x_range = plot.model.x_range;
  const shade = plot.model.center.find((m) => m.name === 'shown-span');
  const label = plot.model.above.find((m) => m.name === 'shown-span-label');
  const box = plot.el.getBoundingClientRect();
  const frame = plot.frame.bbox;
  const xs = plot.frame.x_scale;
  const times = nvdashboardLive.source.data.time;
  return {start: x_range.start, end: x_range.end, following: nvdashboardLive.following,
          draws: nvdashboardLive.draws, newest: times.length ? times[times.length - 1] : null,
          shade: shade ? {left: shade.left, right: shade.right,
                          x0: box.left + xs.compute(shade.left),
                          x1: box.left + xs.compute(shade.right)} : null,
          label: !label ? null : label.major_label_overrides instanceof Map
            ? [...label.major_label_overrides.values()][0]
            : Object.values(label.major_label_overrides)[0],
          frame: {left: box.left + frame.left, right: box.left + frame.right,
                  top: box.top + frame.top, bottom: box.top + frame.bottom},
          window: nvdashboardLive.window};
}"""
NOTICE_JS = """() => {
  const texts = [];
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    if (el.shadowRoot) walk(el.shadowRoot);
    if (el.classList && el.classList.contains('nvdashboard-notice')) texts.push(el.textContent);
  } };
  walk(document);
  return texts;
}"""


def span_url(url: str, path: str, start_s: float, end_s: float, theme: str,
             label: str = "cell [3]") -> str:
    return f"{url}{path}?" + urlencode({"start": f"{start_s:.3f}", "end": f"{end_s:.3f}",
                                        "label": label, "theme": theme})


def commonest_colour(image: Image.Image, x: int, top: int, bottom: int) -> tuple[int, ...]:
    """The colour most of a column of the picture has between two heights: the background
    it is drawn on (a line or a heading crosses it here and there)."""
    return Counter(image.getpixel((x, y))[:3] for y in range(top, bottom)).most_common(1)[0][0]


def open_on_span(page, url: str) -> dict:  # noqa: ANN001 - playwright Page
    page.goto(url)
    page.wait_for_function("() => window.nvdashboardLive && nvdashboardLive.draws > 2",
                           timeout=PAGE_WAIT_MS)
    return page.evaluate(SPAN_JS)


def assert_set_on_the_span(shown: dict, start_s: float, end_s: float) -> None:
    margin_ms = 1000 * max(2.0, 0.1 * (end_s - start_s))
    assert shown["following"] is False, shown
    assert abs(shown["start"] - (1000 * start_s - margin_ms)) < 2, shown
    assert abs(shown["end"] - (1000 * end_s + margin_ms)) < 2, shown
    shade = shown["shade"]
    assert shade is not None, shown
    assert shown["start"] < shade["left"] < shade["right"] < shown["end"], shown
    # Drawn inside the frame, a stripe of its own between the margins.
    assert shown["frame"]["left"] < shade["x0"] < shade["x1"] < shown["frame"]["right"], shown


def wait_until_newer_samples_than_the_axis(page, shown: dict) -> dict:  # noqa: ANN001
    """The page's state once it holds samples newer than its axis's end: a page that
    followed now would have moved its axis to them."""
    page.wait_for_function(
        f"() => {{ const t = nvdashboardLive.source.data.time;"
        f" return nvdashboardLive.draws > {shown['draws']} && t.length &&"
        f" t[t.length - 1] > {shown['end']}; }}", timeout=PAGE_WAIT_MS)
    return page.evaluate(SPAN_JS)


def assert_opens_and_stays_on_a_span(page, url: str, path: str, start_s: float,  # noqa: ANN001
                                     theme: str) -> tuple[dict, dict]:
    """Opens ``path`` on the span from ``start_s`` to now: its state when first drawn, and
    once newer samples than its axis's end have arrived (the axis has not moved)."""
    end_s = time.time()
    shown = open_on_span(page, span_url(url, path, start_s, end_s, theme))
    assert_set_on_the_span(shown, start_s, end_s)
    later = wait_until_newer_samples_than_the_axis(page, shown)
    assert (later["start"], later["end"], later["following"]) == \
        (shown["start"], shown["end"], False), path
    return shown, later


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, object, float]]:
    """A server of two simulated GPUs, Chromium, and when the server started (epoch s)."""
    with cli_server(["--simulate", "2", "--interval", "0.2"]) as (url, _), \
            chromium() as browser:
        yield url, browser, time.time()


def a_page(url: str, browser) -> tuple[object, PageWatch]:  # noqa: ANN001
    """A 1280x800 page, signed in to the server."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    watched = watch(page)
    page.goto(with_token(url + "/"))
    return page, watched


def test_gpu_activity_opened_on_a_span_shows_it_shaded_and_stays_there(
        server: tuple[str, object, float]) -> None:
    url, browser, started_s = server
    page, watched = a_page(url, browser)
    for theme in ("light", "dark"):
        shown, later = assert_opens_and_stays_on_a_span(page, url, "/GPU-Activity",
                                                        started_s, theme)
        assert shown["window"] == 120  # the smallest window that reaches back to it
        assert shown["label"].startswith("cell [3] ") and shown["label"].endswith(" UTC")
        picture = Image.open(io.BytesIO(page.screenshot()))
        path = screenshot(page, f"timeline-range-gpu-activity-{theme}")
        frame = later["frame"]
        # The frame's part on screen (the page scrolls below 800 px).
        top, bottom = int(frame["top"]) + 30, min(int(frame["bottom"]), 800) - 5
        inside = commonest_colour(picture, int((later["shade"]["x0"] +
                                                later["shade"]["x1"]) / 2), top, bottom)
        outside = commonest_colour(picture, int(frame["right"]) - 3, top, bottom)
        assert inside != outside, (inside, outside, path)  # the span is shaded
        # The reset tool follows now again.
        page.locator(".bk-tool-icon-reset").first.click(force=True)
        page.wait_for_function("() => nvdashboardLive.following", timeout=15_000)
        page.wait_for_function(f"() => nvdashboardLive.xEnd > {later['end']}",
                               timeout=15_000)
    watched.assert_clean()


OTHER_TIMELINES = ("/GPU-Resources", "/GPU-Health", "/Machine-Resources", "/NVLink-Timeline",
                   "/Workload")


def test_every_timeline_page_takes_a_range_and_a_bad_one_is_one_line(
        server: tuple[str, object, float]) -> None:
    url, browser, started_s = server
    page, watched = a_page(url, browser)
    for number, path in enumerate(OTHER_TIMELINES):
        theme = ("light", "dark")[number % 2]
        assert_opens_and_stays_on_a_span(page, url, path, started_s, theme)
        screenshot(page, f"timeline-range-{path.strip('/').lower()}-{theme}")
    # A malformed range: the page opens as it would without one, and says why.
    for theme in ("light", "dark"):
        page.goto(f"{url}/GPU-Activity?start=yesterday&end=20&label=x&theme={theme}")
        page.wait_for_function("() => window.nvdashboardLive && nvdashboardLive.draws > 2",
                               timeout=PAGE_WAIT_MS)
        assert page.evaluate(NOTICE_JS) == [
            "The time range in the address was ignored: start 'yesterday' is neither an "
            "ISO 8601 time nor Unix seconds."]
        shown = page.evaluate(SPAN_JS)
        assert shown["following"] is True and shown["shade"] is None, shown
        page.wait_for_function(f"() => nvdashboardLive.xEnd > {shown['end']}",
                               timeout=PAGE_WAIT_MS)
        screenshot(page, f"timeline-range-ignored-{theme}")
    watched.assert_clean()


# What /GPU-Activity draws: each band's lines that have points, each band's title and whether
# it is folded away, each legend entry's value, and the words that say they read a span.
DRAWN_JS = "() => {" + TIMELINE_VIEWS_JS + """
  const drawn = [];
  for (const r of plot.model.renderers) {
    if (!r.glyph || r.glyph.type !== 'MultiLine') continue;
    const data = r.data_source.data;
    data.key.forEach((key, i) => { if (data.xs[i].length) drawn.push(key); });
  }
  const blocks = [...bands.querySelectorAll('[data-band]')].map((block) => ({
    title: block.querySelector('b').textContent, folded: block.style.display === 'none'}));
  const legend = {};
  for (const entry of bands.querySelectorAll('[data-series]')) {
    const value = entry.querySelector('b');
    legend[entry.dataset.series] = value ? value.textContent : null;
  }
  const notes = [...bands.querySelectorAll('[data-span-note]')].map((note) => ({
    text: note.textContent, shown: getComputedStyle(note).display !== 'none'}));
  const times = nvdashboardLive.source.data.time;
  const newest = (key) => { const c = nvdashboardLive.source.data[key];
                            return c && c.length ? c[c.length - 1] : null; };
  const whole = bands.querySelector('[data-bands]').getBoundingClientRect();
  return {drawn, blocks, legend, notes, following: nvdashboardLive.following,
          frame: plot.model.y_range.end, height: Math.round(whole.height),
          draws: nvdashboardLive.draws, newest: times.length ? times[times.length - 1] : null,
          now: {closest1: newest('closest1'), gpm2_utilization: newest('gpm2_utilization')}};
}"""


def gpu_of(key: str) -> int:
    """The GPU row of a /GPU-Activity series key (``gpm2_sm_activity_pct``, ``closest1``)."""
    found = re.match(r"(?:gpm|closest)(\d+)", key)
    assert found, key
    return int(found.group(1))


def history_csv(url: str, seconds: float) -> list[dict[str, str]]:
    request = urllib.request.Request(f"{url}/history.csv?seconds={seconds:g}",
                                     headers={"Authorization": f"token {TEST_TOKEN}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return list(csv.DictReader(io.StringIO(response.read().decode())))


def paced_rows(url: str, count: int) -> list[dict[str, str]]:
    """The newest ``count`` rows of the history, each 0.2 s after the one before (the pace
    of a page open): the samples a span in the last minute is drawn from."""
    def rows() -> list[dict[str, str]] | None:
        newest = history_csv(url, 60)
        times = [float(row["time_unix_s"]) for row in newest]
        run = len(times) - 1
        while run > 0 and times[run] - times[run - 1] < 0.5:
            run -= 1
        return newest[-count:] if len(newest) - run >= count else None
    return until(rows, f"{count} samples at the 0.2 s pace", seconds=120, every_s=0.5)


@pytest.fixture(scope="module")
def four_gpus(server: tuple[str, object, float]) -> Iterator[tuple[str, object, list[dict]]]:
    """A server of four simulated GPUs that differ (the mixed machine: GPUs 0 and 2 report
    GPM, 1 and 3 do not; each GPU's load is a wave of its own phase), the module's
    Chromium, and the GPUs as /info.json lists them."""
    browser = server[1]
    with cli_server(["--simulate", "4", "--interval", "0.2"]) as (url, _):
        request = urllib.request.Request(f"{url}/info.json",
                                         headers={"Authorization": f"token {TEST_TOKEN}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            devices = json.loads(response.read())["devices"]
        yield url, browser, devices


def test_gpu_activity_as_a_cells_footer_opens_it_draws_the_cells_gpus_and_the_spans_means(
        four_gpus: tuple[str, object, list[dict]]) -> None:
    url, browser, devices = four_gpus
    assert [(d["index"], d["gpm_supported"]) for d in devices] == \
        [(0, True), (1, False), (2, True), (3, False)]
    page, watched = a_page(url, browser)  # a page open: the sampler reads at 0.2 s
    # A cell that ran on GPUs 1 and 2 over 30 samples, a few seconds ago; the span's edges
    # half-way between two samples.
    rows = paced_rows(url, 60)
    times = [float(row["time_unix_s"]) for row in rows]
    start_s, end_s = (times[9] + times[10]) / 2, (times[39] + times[40]) / 2
    inside = rows[10:40]
    means = {f"gpu{gpu}": sum(float(row[f"gpu{gpu}_utilization_pct"]) for row in inside)
             / len(inside) for gpu in (1, 2)}
    cell_gpus = f"{devices[1]['uuid']},{devices[2]['uuid']}"
    for theme in ("light", "dark"):
        page.goto(f"{url}/GPU-Activity?" + urlencode({
            "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "label": "cell [5]",
            "gpus": cell_gpus, "theme": theme}))
        page.wait_for_function("() => window.nvdashboardLive && nvdashboardLive.draws > 2",
                               timeout=PAGE_WAIT_MS)
        # The span's means are read on a thread of the server's: '…' until they land.
        shown = until(lambda: (lambda drawn: drawn if drawn["legend"]["closest1"] != "…"
                               else None)(page.evaluate(DRAWN_JS)),
                      "the span's means in the legends", seconds=PAGE_WAIT_MS / 1000)
        # Only the cell's GPUs' lines: GPU 2's band, and GPU 1's line in the closest
        # metric's band; GPU 0's band is folded away, no line of GPU 0 or 3 drawn.
        assert {gpu_of(key) for key in shown["drawn"]} == {1, 2}, shown["drawn"]
        assert {"closest1", "gpm2_utilization", "gpm2_pcie_tx"} <= set(shown["drawn"])
        folded = [block["title"] for block in shown["blocks"] if block["folded"]]
        assert folded == ["GPU 0 (CUDA 0): NVIDIA H200: activity (GPM)"], shown["blocks"]
        # The legends read the span, and say so: its means, as /history.csv has them.
        assert shown["notes"] and all(note == {"text": "mean over cell [5]:", "shown": True}
                                      for note in shown["notes"]), shown["notes"]
        for key, gpu in (("closest1", "gpu1"), ("gpm2_utilization", "gpu2")):
            text = shown["legend"][key]
            assert text.endswith("%") and abs(float(text[:-1]) - means[gpu]) <= 0.5 + 1e-9, \
                (key, text, means, shown["now"])
        path = screenshot(page, f"cell-view-gpu-activity-{theme}")
        # ... and keep reading it while newer samples are drawn (now's values move).
        later = wait_until_newer_samples_than_the_axis(page, {
            "draws": shown["draws"], "end": shown["newest"]})
        again = page.evaluate(DRAWN_JS)
        assert later["following"] is False
        assert {k: again["legend"][k] for k in ("closest1", "gpm2_utilization")} == \
            {k: shown["legend"][k] for k in ("closest1", "gpm2_utilization")}, path
    # The reset tool follows now again: the words go, the legends read the newest sample.
    page.locator(".bk-tool-icon-reset").first.click(force=True)
    page.wait_for_function("() => nvdashboardLive.following", timeout=15_000)

    def reads_now() -> dict | None:
        now = page.evaluate(DRAWN_JS)
        newest = now["now"]["closest1"]
        return now if newest is not None and \
            now["legend"]["closest1"] == f"{newest:.0f}%" else None

    following = until(reads_now, "the legends read the newest sample again", seconds=60)
    assert following["notes"] and not any(note["shown"] for note in following["notes"])
    assert {gpu_of(key) for key in following["drawn"]} == {1, 2}  # the filter keeps them
    # The reset put the canvas's y-range back to the server's guess; the bands were fitted
    # again, so each band's lines are under its heading.
    assert following["frame"] == following["height"], following
    screenshot(page, "cell-view-gpu-activity-following-dark")
    watched.assert_clean()
