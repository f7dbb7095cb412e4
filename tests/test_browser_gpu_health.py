"""/GPU-Activity and /GPU-Health in Chromium, light and dark: they draw, say what they must
(the "cannot report" notice, an XID event, marked readings) and save screenshots."""

from __future__ import annotations

import pytest

from tests.support.browser import canvas_ink, chromium, screenshot, watch
from tests.support.servers import cli_server, with_token

pytestmark = pytest.mark.browser

# Text and marked cells of the page, inside Bokeh's shadow roots.
PAGE_TEXT_JS = """() => {
  const texts = [document.body.textContent || ''];
  let marked = 0;
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) {
        texts.push(el.shadowRoot.textContent || '');
        marked += el.shadowRoot.querySelectorAll('td.marked').length;
        walk(el.shadowRoot);
      }
    }
  };
  walk(document);
  return {text: texts.join(' '), marked};
}"""
BACKGROUND = {"light": "rgb(255, 255, 255)", "dark": "rgb(32, 38, 43)"}


def test_activity_and_health_render_in_both_themes() -> None:
    faults = {"NVDASHBOARD_SIMULATE_FAULTS": "xid=0:79@1"}
    with cli_server(["--simulate", "4", "--interval", "0.1"], env=faults) as (url, _), \
            chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        watched = watch(page)
        page.goto(with_token(url + "/"))
        for theme in ("light", "dark"):
            page.goto(f"{url}/GPU-Activity?theme={theme}")
            page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0",
                                   timeout=20_000)
            page.wait_for_function("() => getComputedStyle(document.body).backgroundColor"
                                   f" === '{BACKGROUND[theme]}'", timeout=10_000)
            page.wait_for_timeout(2500)  # two GPM passes: activity lines are drawn
            assert canvas_ink(page)["ink"] > 500
            content = page.evaluate(PAGE_TEXT_JS)["text"]
            assert "GPU 1 (CUDA 2): NVIDIA A100-SXM4-80GB cannot report SM activity" in content
            assert "GPU utilization (/GPU-Utilization) comes closest" in content
            assert "SM activity" in content and "tensor pipes" in content
            screenshot(page, f"gpu-activity-{theme}")

            page.goto(f"{url}/GPU-Health?theme={theme}")
            page.wait_for_function(f"() => ({PAGE_TEXT_JS})().text.includes('XID 79')",
                                   timeout=20_000)
            found = page.evaluate(PAGE_TEXT_JS)
            assert "GPU has fallen off the bus" in found["text"]
            assert "software power cap" in found["text"]  # GPU 1 throttles: words, not bits
            assert found["marked"] >= 3  # ECC, remapped rows and XID on GPU 0; power cap on 1
            assert canvas_ink(page)["ink"] > 500
            screenshot(page, f"gpu-health-{theme}")
        watched.assert_clean()
