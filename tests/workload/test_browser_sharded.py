"""A sharded run started from the /Workload panel in a real browser: its row shows the bytes
it must move ("expected X GB/s, measured 0" and why, on the CPU), and its verdict names
every shard."""

from __future__ import annotations

import pytest

from tests.support.browser import chromium, screenshot, watch
from tests.support.servers import cli_server, with_token

pytestmark = pytest.mark.browser

COLUMN_JS = """(column) => {
  for (const model of Bokeh.documents[0]._all_models.values()) {
    if (model.data && 'verdict' in model.data) return model.data[column];
  }
  return [];
}"""


def test_a_sharded_run_from_the_panel_shows_its_shards_bytes_and_figures() -> None:
    pytest.importorskip("torch", reason="the gloo backend needs torch (the CPU build)")
    with cli_server(["--simulate", "2"]) as (url, _), chromium() as browser:
        page = browser.new_page(viewport={"width": 1600, "height": 1100})
        watched = watch(page)
        page.goto(with_token(url + "/Workload"))
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0",
                               timeout=20_000)
        selects = page.locator("select")
        selects.nth(0).select_option("numpy")
        selects.nth(1).select_option("ci")
        iterations, shards = page.locator("input").nth(0), page.locator("input").nth(1)
        iterations.fill("300")
        iterations.press("Enter")
        shards.fill("2")
        shards.press("Enter")
        page.wait_for_timeout(300)
        page.get_by_role("button", name="Start").click()
        page.wait_for_function(
            "() => Bokeh.documents[0].get_model_by_name('workload-status').text"
            ".includes('over 2 shards')", timeout=10_000)
        page.wait_for_function(
            f"() => {{ const s = ({COLUMN_JS})('status'); return s.length && s[0] === 'done'; }}",
            timeout=180_000)
        exchange = page.evaluate(COLUMN_JS, "exchange")[0]
        verdict = page.evaluate(COLUMN_JS, "verdict")[0]
        assert exchange.startswith("2 shards (gloo, key): ") and "MB/step, expected " in exchange
        assert "measured 0 GB/s: CPU shards exchange through host memory" in exchange
        assert "shards 0-1 pids " in verdict, verdict
        # What the user sees: the drawn row carries the figures, not only the data behind it.
        page.wait_for_function("""() => {
          const rows = []; const walk = (root) => { for (const el of root.querySelectorAll('*')) {
            if (el.classList && el.classList.contains('slick-row')) rows.push(el.textContent);
            if (el.shadowRoot) walk(el.shadowRoot); } };
          walk(document);
          return rows.length === 1 && rows[0].includes('2 shards (gloo, key)')
            && rows[0].includes('expected') && rows[0].includes('shards 0-1');
        }""", timeout=10_000)
        screenshot(page, "workload-sharded-run")
        watched.assert_clean()
