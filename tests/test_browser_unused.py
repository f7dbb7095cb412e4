"""Held but unused GPUs on the overview (issue 28 item 4), in Chromium at 1280x800, light
and dark: with ``--unused-after 2`` and every simulated GPU idle, GPU 1 (held by this test's
process, 6 GiB) reads "held, unused", GPU 0 (no process) "unused", and a line under the
table names both and why; the rows are not clipped and fit without scrolling."""

from __future__ import annotations

import os

import pytest

from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from tests.support.browser import chromium, screenshot, watch
from tests.support.servers import in_process_server, with_token
from tests.test_browser_overview import BACKGROUND, FIND_JS, ROWS_JS

pytestmark = pytest.mark.browser


def test_held_but_unused_gpus_on_the_overview() -> None:
    with in_process_server(gpus=2, profile="h200", scenario="idle",
                           unused_after_s=2.0) as server, chromium() as browser:
        assert server.simulator is not None
        server.simulator.set_processes([SimulatedProcess(1, os.getpid(), 6 * 2**30)])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        page.goto(with_token(server.url + "/"))
        for theme in ("light", "dark"):
            page.goto(f"{server.url}/?theme={theme}")
            page.wait_for_function("() => getComputedStyle(document.body).backgroundColor"
                                   f" === '{BACKGROUND[theme]}'", timeout=20_000)
            page.wait_for_function(f"""() => {{
                const rows = ({ROWS_JS})().rows;
                return rows.length === 2 && rows.every((r) => r.text.includes('unused'))
                    && rows[1].text.includes('held, unused');
            }}""", timeout=30_000)
            seen = page.evaluate(ROWS_JS)
            screenshot(page, f"overview-unused-{theme}")
            assert "held, unused" not in seen["rows"][0]["text"], seen["rows"]
            assert not seen["clipped"], seen["clipped"]
            assert max(row["bottom"] for row in seen["rows"]) <= 800, seen
            summary = page.evaluate(f"() => ({FIND_JS})('.unused-summary').innerText")
            assert summary.startswith("Unused for 2 s or more:"), summary
            assert "GPU 0: no process holds it; no GPU work for " in summary, summary
            assert "s (since this server started)" in summary, summary
            assert "GPU 1: held by 1 process (6.0 GiB); no GPU work" in summary, summary
            title = page.evaluate(f"() => ({FIND_JS})('[data-unused]').title")
            assert title.startswith("GPU 0: no process holds it"), title
        watched.assert_clean()
