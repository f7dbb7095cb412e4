"""Open /Cluster-GPUs in Chromium, check it draws, and save a screenshot in both themes."""

from __future__ import annotations

from tests.support.browser import canvas_ink, chromium, screenshot, watch
from tests.support.servers import with_token


def screenshot_cluster_page(url: str, name: str) -> None:
    with chromium() as browser:
        for theme in ("light", "dark"):
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            watched = watch(page)
            page.goto(with_token(f"{url}/Cluster-GPUs?theme={theme}"))
            page.wait_for_function("window.nvdashboardLive && window.nvdashboardLive.frames > 1",
                                   timeout=30_000)
            page.wait_for_timeout(500)  # the bars are drawn on the next animation frame
            assert canvas_ink(page)["ink"] > 1000
            # The totals name each node and its lost GPUs (Bokeh's Divs are in shadow roots,
            # which Playwright's text locators pierce).
            page.get_by_text("4 lost").first.wait_for(timeout=10_000)
            assert page.get_by_text("node-c").count() >= 1
            screenshot(page, f"{name}-{theme}")
            watched.assert_clean()
            page.close()
