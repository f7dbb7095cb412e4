"""Smoke test in a real browser: every dashboard of the standalone server draws and updates,
with no request leaving 127.0.0.1 and no console error."""

from __future__ import annotations

import json

import pytest

from tests.support.browser import canvas_ink, chromium, screenshot, watch
from tests.support.servers import cli_server, get

pytestmark = pytest.mark.browser


def test_every_dashboard_renders_offline_and_updates() -> None:
    with cli_server(["--simulate", "4", "--interval", "0.1"]) as (url, _), chromium() as browser:
        routes = json.loads(get(url + "/index.json")[1])
        assert len(routes) == 7
        page = browser.new_page(viewport={"width": 1000, "height": 800})
        watched = watch(page)
        page.goto(url + "/")
        assert "SIMULATED" in page.content()
        for route in routes:
            page.goto(url + route)
            page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0",
                                   timeout=20_000)
            page.wait_for_timeout(800)
            first = canvas_ink(page)
            assert first["canvases"] > 0 and first["ink"] > 500, (route, first)
            page.wait_for_timeout(1500)
            second = canvas_ink(page)
            assert second["checksum"] != first["checksum"], f"{route} did not update"
            screenshot(page, "standalone" + route.replace("/", "-").lower())
        watched.assert_clean()
