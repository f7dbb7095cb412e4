"""The GPU overview (``/`` and ``/GPU-Overview``) in Chromium at 1280x800, light and dark:
8 GPUs fit without scrolling, idle and throttled, the free GPUs are marked (and can be shown
alone), who is on a GPU is said, no bar's words sit across its fill, nothing wraps or is
clipped, and the page follows the stream."""

from __future__ import annotations

import os

import pytest

from jupyterlab_nvdashboard.apps.processes import current_user
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from tests.support.bar_rows import BAR_ROWS_JS, assert_readable_rows
from tests.support.browser import (
    PAGE_WAIT_MS,
    chromium,
    next_frames,
    screenshot,
    watch,
)
from tests.support.servers import in_process_server, with_token

pytestmark = pytest.mark.browser
BACKGROUND = {"light": "rgb(255, 255, 255)", "dark": "rgb(32, 38, 43)"}
GIB = 2**30
# A bar's colour says good, warn or bad, nothing else (the overview's CSS classes).
LEVEL_COLOURS = {"good": "rgb(118, 185, 0)", "warn": "rgb(232, 161, 0)",
                 "bad": "rgb(214, 39, 40)"}

# The overview's rows as the user sees them (inside Bokeh's shadow roots too): for each,
# its text, whether it is marked free (and shown), each bar's words against its fill, and
# every run of text that wraps onto a second line or is clipped.
ROWS_JS = """() => {
  const found = [], all = [];
  let box = null;
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.matches('tr.main')) found.push(el);
      if (el.matches('tr.main, tr.diag')) all.push(el);
      if (el.matches('input.free-only')) box = el;
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  const clipped = [], wrapped = [], straddled = [], bars = [];
  for (const row of all) {
    for (const cell of row.children) {
      if (cell.scrollWidth > cell.clientWidth + 1) clipped.push(cell.textContent.trim());
      for (const el of cell.querySelectorAll('*'))
        if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflow === 'hidden')
          clipped.push(el.textContent.trim());
      const texts = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for (let node = texts.nextNode(); node; node = texts.nextNode()) {
        if (!node.textContent.trim()) continue;
        // A finding's whole text, under its one-line summary, is prose: it may wrap.
        const parent = node.parentElement;
        if (parent.closest('details') && !parent.closest('summary')) continue;
        const range = document.createRange();
        range.selectNodeContents(node);
        const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (lines.size > 1) wrapped.push(node.textContent.trim());
      }
      // Badges side by side stay on one line.
      for (const held of cell.querySelectorAll('.held')) {
        const tops = new Set([...held.children].map((b) => Math.round(
          b.getBoundingClientRect().top)));
        if (tops.size > 1) wrapped.push(held.textContent);
      }
    }
  }
  for (const row of found) {
    for (const bar of row.querySelectorAll('.bar')) {
      const words = bar.querySelector('b').getBoundingClientRect();
      const fill = bar.querySelector('i');
      const f = fill.getBoundingClientRect();
      const across = Math.min(words.right, f.right) - Math.max(words.left, f.left);
      const down = Math.min(words.bottom, f.bottom) - Math.max(words.top, f.top);
      const inside = words.left >= f.left && words.right <= f.right &&
                     words.top >= f.top && words.bottom <= f.bottom;
      // Words partly on the fill and partly off it: half of them change contrast.
      if (across > 0 && down > 0 && !inside) straddled.push(bar.textContent);
      bars.push({text: bar.textContent, width: f.width,
                 colour: getComputedStyle(fill).backgroundColor});
    }
  }
  return {rows: found.map((row) => ({
            text: row.innerText, index: Number(row.dataset.row),
            free: row.hasAttribute('data-free'), shown: row.getBoundingClientRect().height > 0,
            bottom: row.getBoundingClientRect().bottom})),
          clipped, wrapped, straddled, bars, box: box !== null,
          reading: (found[0] && found[0].closest('.nvo').textContent.match(
            /Reading of [0-9:]+/) || [''])[0],
          bottom: Math.max(...all.map((row) => row.getBoundingClientRect().bottom))};
}"""
CLICK_FREE_ONLY_JS = """() => {
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.matches('input.free-only')) return el;
      const inside = el.shadowRoot && walk(el.shadowRoot);
      if (inside) return inside;
    }
    return null;
  };
  walk(document).click();
}"""


def test_overview_marks_the_free_gpus_with_readable_bars_at_1280x800() -> None:
    """8 idle GPUs (the ``idle`` scenario); this test's processes hold most of GPUs 3 and 6
    and a little of GPU 5: every GPU but 3 and 6 is free. The memory bars run from 1% to
    over 95%, so words on a fill would show, and no bar is in its GPU's colour."""
    user = current_user()
    assert user
    with in_process_server(gpus=8, profile="mixed", scenario="idle") as server, \
            chromium() as browser:
        totals = {f.index: f.memory_total_bytes for f in server.metrics.facts}
        server.simulator.set_processes([
            SimulatedProcess(3, os.getpid(), int(0.6 * totals[3])),
            SimulatedProcess(6, os.getpid(), int(0.97 * totals[6])),
            SimulatedProcess(5, os.getpid(), GIB)])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        page.goto(with_token(server.url + "/"))
        for theme in ("light", "dark"):
            for path in ("/", "/GPU-Overview"):
                page.goto(f"{server.url}{path}?theme={theme}")
                page.wait_for_function("() => getComputedStyle(document.body)"
                                       f".backgroundColor === '{BACKGROUND[theme]}'",
                                       timeout=PAGE_WAIT_MS)
                # A streamed table replaces the first one: processes and their owners read.
                page.wait_for_function(
                    f"() => {{ const rows = ({ROWS_JS})().rows; return rows.length === 8 && "
                    f"rows.filter((r) => r.text.includes({user!r})).length === 3; }}",
                    timeout=PAGE_WAIT_MS)
                next_frames(page)
                seen = page.evaluate(ROWS_JS)
                screenshot(page, f"overview{path.replace('/', '-').rstrip('-')}-{theme}")
                rows = seen["rows"]
                assert [row["index"] for row in rows if row["free"]] == [0, 1, 2, 4, 5, 7], rows
                for row in rows:
                    assert ("free" in row["text"].split()) is row["free"], row["text"]
                assert not seen["straddled"], seen["straddled"]
                assert not seen["wrapped"], seen["wrapped"]
                assert not seen["clipped"], seen["clipped"]
                colours = {bar["colour"] for bar in seen["bars"]}
                assert colours <= set(LEVEL_COLOURS.values()), colours
                # GPU 6's memory, 97% in use, is bad; its utilization, ~0%, is good.
                full = [bar for bar in seen["bars"] if bar["width"] > 0 and " GiB of " in
                        bar["text"] and bar["colour"] == LEVEL_COLOURS["bad"]]
                assert len(full) == 1, seen["bars"]
                # Readable at 1280x800 without scrolling: every row is on screen.
                assert seen["bottom"] <= 800, seen
                if theme == "light":
                    # Only the free ones, at a click; all of them at the next.
                    page.evaluate(CLICK_FREE_ONLY_JS)
                    page.wait_for_function(
                        f"() => ({ROWS_JS})().rows.every((r) => r.shown === r.free)",
                        timeout=PAGE_WAIT_MS)
                    # The box stays checked as new tables stream in (a new reading's time).
                    reading = page.evaluate(f"() => ({ROWS_JS})().reading")
                    page.wait_for_function(f"(before) => ({ROWS_JS})().reading !== before",
                                           arg=reading, timeout=PAGE_WAIT_MS)
                    assert all(r["shown"] is r["free"] for r in page.evaluate(ROWS_JS)["rows"])
                    screenshot(page, f"overview{path.replace('/', '-').rstrip('-')}-free-only")
                    page.evaluate(CLICK_FREE_ONLY_JS)
                    page.wait_for_function(f"() => ({ROWS_JS})().rows.every((r) => r.shown)",
                                           timeout=PAGE_WAIT_MS)
        watched.assert_clean()
    # Busy and held down by the heat from the start: two reasons per clock, bars filled.
    with in_process_server(gpus=8, profile="mixed", scenario="throttled-thermal") as server, \
            chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        page.goto(with_token(server.url + "/"))
        for theme in ("light", "dark"):
            page.goto(f"{server.url}/?theme={theme}")
            page.wait_for_function(f"() => ({ROWS_JS})().rows.filter((r) => "
                                   "r.text.includes('thermal (HW)')).length >= 2",
                                   timeout=PAGE_WAIT_MS)
            next_frames(page)
            seen = page.evaluate(ROWS_JS)
            screenshot(page, f"overview-throttled-thermal-{theme}")
            assert not seen["straddled"], seen["straddled"]
            assert not seen["wrapped"], seen["wrapped"]
            assert not seen["clipped"], seen["clipped"]
            assert seen["bottom"] <= 800, seen
        watched.assert_clean()


def test_gpu_memory_values_are_whole_and_never_on_their_fill() -> None:
    """/GPU-Memory with 8 GPUs, one nearly full, at 1280 px and with JupyterLab's sidebar
    open (about 950 px), light and dark: every value is whole, on one line, inside the
    window and beside its bar, never on its fill, and the bars' colours are good/warn/bad
    only (tests/support/bar_rows.py)."""
    with in_process_server(gpus=8, profile="mixed", scenario="idle") as server, \
            chromium() as browser:
        totals = {f.index: f.memory_total_bytes for f in server.metrics.facts}
        server.simulator.set_processes([
            SimulatedProcess(3, os.getpid(), int(0.6 * totals[3])),
            SimulatedProcess(6, os.getpid(), int(0.99 * totals[6]))])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        page.goto(with_token(server.url + "/"))
        for theme, width in (("light", 1280), ("dark", 1280), ("light", 950), ("dark", 950)):
            page.set_viewport_size({"width": width, "height": 800})
            page.goto(f"{server.url}/GPU-Memory?theme={theme}")
            # Drawn from a frame in which GPU 6 is held (its bar past 90% of its scale).
            page.wait_for_function(
                f"() => ({BAR_ROWS_JS})().rows.some((row) => row.key === '6-memory' && "
                "row.fill && parseFloat(row.fill.width) > 90)", timeout=PAGE_WAIT_MS)
            next_frames(page)
            seen = page.evaluate(BAR_ROWS_JS)
            screenshot(page, f"gpu-memory-{width}-{theme}")
            assert len(seen["rows"]) == 8, seen
            assert_readable_rows(seen, "/GPU-Memory", width)
            levels = {row["key"]: row["fill"]["colour"] for row in seen["rows"]}
            assert levels["6-memory"] != levels["0-memory"]  # held: warn or bad, not good
        watched.assert_clean()


# The first element matching a selector, inside Bokeh's shadow roots too.
FIND_JS = """(selector) => {
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.matches(selector)) return el;
      const inside = el.shadowRoot && walk(el.shadowRoot);
      if (inside) return inside;
    }
    return null;
  };
  return walk(document);
}"""


def test_a_renewed_table_changes_in_place() -> None:
    """A table (or diagnosis line) renewed keeps its elements and changes only their text:
    a new ``innerHTML`` or Div text rebuilt it, and BokehJS laid out the page again."""
    with in_process_server(gpus=2, profile="h200") as server, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        page.goto(with_token(server.url + "/"))
        for path, selector in (("/", ".nvo table"), ("/GPU-Overview", ".nvo table"),
                               ("/GPU-Health", "table.health"),
                               ("/GPU-Activity", ".nvdashboard-diagnosis")):
            page.goto(server.url + path)
            page.wait_for_function(f"() => ({FIND_JS})({selector!r}) !== null",
                                   timeout=20_000)
            before = page.evaluate(f"""() => {{
                const table = ({FIND_JS})({selector!r});
                table.nvdashboardKept = "yes";  // a property: the morph owns attributes
                return table.innerText;
            }}""")
            # /GPU-Health sends its table every 5 s, /GPU-Activity its diagnosis lines; the
            # overview's says when, each second.
            page.wait_for_function(
                f"(before) => ({FIND_JS})({selector!r}).innerText !== before", arg=before,
                timeout=20_000)
            kept = page.evaluate(f"() => ({FIND_JS})({selector!r}).nvdashboardKept")
            assert kept == "yes", f"{path}: the table was built again, not changed in place"
        watched.assert_clean()
