"""The bar pages in Chromium at 1280x800, light and dark, under two profiles (the default
"mixed" and "a100-mig", whose MIG devices report no utilization or PCIe rate): HTML rows,
one per device and metric, that change as frames arrive, one repaint per frame or so;
every value whole, on one line, inside the window and clear of its neighbours; hover and
the keyboard give the reading's time; no canvas at all."""

from __future__ import annotations

import json
import re

import pytest

from jupyterlab_nvdashboard.apps.components import BarsFeed
from jupyterlab_nvdashboard.apps.registry import RouteFeeds
from tests.support.bar_rows import BAR_ROWS_JS, assert_readable_rows
from tests.support.browser import PAGE_WAIT_MS, chromium, next_frames, screenshot, watch
from tests.support.servers import get, in_process_server, with_token

pytestmark = pytest.mark.browser

BACKGROUND = {"light": "rgb(255, 255, 255)", "dark": "rgb(32, 38, 43)"}
WIDTH, HEIGHT = 1280, 800

# The element that has the keyboard's focus, inside shadow roots.
FOCUSED_JS = """() => {
  let el = document.activeElement;
  while (el && el.shadowRoot && el.shadowRoot.activeElement) el = el.shadowRoot.activeElement;
  return el ? {key: el.dataset ? el.dataset.key : null,
               label: el.getAttribute('aria-label')} : null;
}"""


def _bar_routes(server) -> dict[str, BarsFeed]:  # noqa: ANN001
    index = json.loads(get(server.url + "/index.json")[1])
    feeds = RouteFeeds(server.metrics)
    return {path: feed for path in index if isinstance(feed := feeds(path), BarsFeed)}


@pytest.mark.parametrize(("profile", "gpus"), [("mixed", 8), ("a100-mig", 2)])
def test_bar_pages_are_live_readable_html_rows(profile: str, gpus: int) -> None:
    with in_process_server(gpus=gpus, profile=profile) as server, chromium() as browser:
        routes = _bar_routes(server)
        assert {"/GPU-Utilization", "/GPU-Memory", "/PCIe-Throughput"} <= set(routes)
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        watched = watch(page)
        page.goto(with_token(server.url + "/"))
        devices = len(server.metrics.facts)
        for route, feed in routes.items():
            for theme in ("light", "dark"):
                page.goto(f"{server.url}{route}?theme={theme}")
                page.wait_for_function("() => getComputedStyle(document.body)"
                                       f".backgroundColor === '{BACKGROUND[theme]}'",
                                       timeout=PAGE_WAIT_MS)
                wanted = devices * len(feed.metrics)
                page.wait_for_function(f"() => ({BAR_ROWS_JS})().rows.length === {wanted}",
                                       timeout=PAGE_WAIT_MS)
                first = page.evaluate(BAR_ROWS_JS)
                # Frames arrive and are shown: the repaint counter grows, about one per
                # frame (the page repaints once a second at most, the frames come as
                # often), and the readings shown change.
                page.wait_for_function(
                    f"(first) => {{ const now = ({BAR_ROWS_JS})(); return now.frames >= "
                    "first.frames + 6 && now.draws >= first.draws + 2 && now.rows.some("
                    "(row, i) => row.label !== first.rows[i].label); }",
                    arg=first, timeout=PAGE_WAIT_MS)
                next_frames(page)
                seen = page.evaluate(BAR_ROWS_JS)
                frames, draws = (seen["frames"] - first["frames"],
                                 seen["draws"] - first["draws"])
                assert 1.5 * draws >= frames, (route, theme, frames, draws)
                assert seen["canvases"] == 0, route
                assert [row["key"] for row in seen["rows"]] == [
                    f"{facts.index}-{metric.label}" for facts in server.metrics.facts
                    for metric in feed.metrics]
                assert_readable_rows(seen, route, WIDTH)
                screenshot(page, f"bars-{profile}{route.replace('/', '-').lower()}-{theme}")
            # The keyboard reaches every row in turn; each says its value and its time.
            page.evaluate("() => document.activeElement && document.activeElement.blur()")
            keys = []
            for _ in seen["rows"]:
                page.keyboard.press("Tab")
                focused = page.evaluate(FOCUSED_JS)
                assert focused and re.search(r"reading of \d\d:\d\d:\d\d$",
                                             focused["label"]), focused
                keys.append(focused["key"])
            assert keys == [row["key"] for row in seen["rows"]], keys
        watched.assert_clean()
