"""The GPU overview (``/`` and ``/GPU-Overview``) in Chromium at 1280x800, light and dark:
8 GPUs fit without scrolling, the busiest GPU is marked and shows who is on it, no value is
clipped, and the page follows the stream."""

from __future__ import annotations

import os
import re

import pytest

from jupyterlab_nvdashboard.apps.processes import current_user
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from tests.support.browser import chromium, screenshot, watch
from tests.support.servers import in_process_server, with_token

pytestmark = pytest.mark.browser
BACKGROUND = {"light": "rgb(255, 255, 255)", "dark": "rgb(32, 38, 43)"}

# The overview's rows as the user sees them (inside Bokeh's shadow roots too).
ROWS_JS = """() => {
  const found = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.matches('tr.main')) found.push(el);
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  const clipped = [];
  for (const row of found) for (const cell of row.children)
    if (cell.scrollWidth > cell.clientWidth + 1) clipped.push(cell.textContent.trim());
  return {rows: found.map((row) => ({text: row.innerText, busiest: row.hasAttribute(
            'data-busiest'), bottom: row.getBoundingClientRect().bottom})),
          clipped, scroll: document.documentElement.scrollHeight};
}"""


def _util(text: str) -> int:
    found = re.search(r"util (\d+)%", text)
    return int(found.group(1)) if found else -1


def test_overview_names_the_busiest_gpu_and_its_user_at_1280x800() -> None:
    user = current_user()
    assert user
    with in_process_server(gpus=8, profile="mixed") as server, chromium() as browser:
        # This test's own process holds GPU 3 and GPU 6: its owner is the user.
        server.simulator.set_processes([
            SimulatedProcess(3, os.getpid(), 6 * 2**30), SimulatedProcess(6, os.getpid(), 2**30),
        ])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        page.goto(with_token(server.url + "/"))
        for theme in ("light", "dark"):
            for path in ("/", "/GPU-Overview"):
                page.goto(f"{server.url}{path}?theme={theme}")
                page.wait_for_function("() => getComputedStyle(document.body)"
                                       f".backgroundColor === '{BACKGROUND[theme]}'",
                                       timeout=20_000)
                page.wait_for_function(f"() => ({ROWS_JS})().rows.length === 8",
                                       timeout=20_000)
                # A streamed table replaces the first one: processes and their owners read.
                page.wait_for_function(
                    f"() => ({ROWS_JS})().rows.some((r) => r.text.includes({user!r}))",
                    timeout=20_000)
                seen = page.evaluate(ROWS_JS)
                screenshot(page, f"overview{path.replace('/', '-').rstrip('-')}-{theme}")
                busiest = [row for row in seen["rows"] if row["busiest"]]
                assert len(busiest) == 1, seen["rows"]
                assert "busiest" in busiest[0]["text"]
                assert _util(busiest[0]["text"]) == max(_util(r["text"]) for r in seen["rows"])
                owned = [row for row in seen["rows"] if user in row["text"]]
                assert len(owned) == 2 and all("1 process" in row["text"] for row in owned)
                assert not seen["clipped"], seen["clipped"]
                # Readable at 1280x800 without scrolling: every row is on screen.
                assert max(row["bottom"] for row in seen["rows"]) <= 800, seen
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
