"""Timelines a reader can use, in Chromium at 1280x800 with 4 GPUs, light and dark: a time
axis on screen, a legend click that hides a GPU on every chart (the GPU filter follows),
x-zoom that stops following the newest sample and a reset that follows again, one colour per
GPU, and PCIe per GPU with the all-GPU sum as an option."""

from __future__ import annotations

import pytest

from tests.support.browser import PAGE_WAIT_MS, chromium, screenshot, watch
from tests.support.servers import cli_server, with_token

pytestmark = pytest.mark.browser

# Every series the page draws: its key, whether it is drawn, its colour and dash. A panel's
# series are the rows of one MultiLine (apps/components.py); a row is drawn when it is marked
# visible and holds the streamed points.
LINES_JS = """() => {
  const doc = Bokeh.documents[0];
  const out = {};
  for (const model of doc.all_models) {
    if (model.type !== 'GlyphRenderer' || model.glyph.type !== 'MultiLine') continue;
    const data = model.data_source.data;
    data.key.forEach((key, i) => {
      out[key] = {visible: model.visible && Boolean(data.visible[i]) && data.ys[i].length > 0,
                  color: data.color[i], dash: data.dash[i]};
    });
  }
  return out;
}"""
# Where the time axis is drawn: the plot that has a DatetimeAxis above it, on screen.
AXIS_JS = """() => {
  const views = [];
  const walk = (view) => { views.push(view);
    for (const child of (view.child_views || [])) walk(child); };
  for (const view of Object.values(Bokeh.index)) walk(view);
  const plot = views.find((v) => v.model.type === 'Figure' &&
                          v.model.above.some((a) => a.type === 'DatetimeAxis'));
  const box = plot.el.getBoundingClientRect();
  return {top: box.top, bottom: box.bottom};
}"""

# The window picker's and the GPU filter's buttons, in their shadow roots: each one's
# background and text colour as [r, g, b], and whether it is the active one.
BUTTONS_JS = """() => {
  const out = []; const rgb = (c) => c.match(/\\d+/g).slice(0, 3).map(Number);
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    if (el.matches('.bk-btn-group .bk-btn')) {
      const style = getComputedStyle(el);
      out.push({text: el.textContent, background: rgb(style.backgroundColor),
                color: rgb(style.color), active: el.classList.contains('bk-active')});
    }
    if (el.shadowRoot) walk(el.shadowRoot); } };
  walk(document);
  return out;
}"""


def luminance(rgb: list[int]) -> float:
    return sum(rgb) / (3 * 255)


def assert_buttons_follow_the_theme(page, theme: str) -> None:  # noqa: ANN001
    buttons = page.evaluate(BUTTONS_JS)
    assert {"2 min", "10 min", "30 min", "GPU 0"} <= {b["text"] for b in buttons}, buttons
    inactive = [b for b in buttons if not b["active"]]
    active = [b for b in buttons if b["active"]]
    assert inactive and active, buttons
    for button in buttons:  # readable: text well apart from its background
        assert abs(luminance(button["color"]) - luminance(button["background"])) > 0.45, button
    if theme == "dark":  # no light buttons on the dark page, and the chosen one stands out
        assert all(luminance(b["background"]) < 0.45 for b in buttons), buttons
        assert {tuple(b["background"]) for b in active}.isdisjoint(
            tuple(b["background"]) for b in inactive), buttons
    else:
        assert all(luminance(b["background"]) > 0.85 for b in buttons), buttons


def test_resources_timeline_tools_at_1280x800() -> None:
    with cli_server(["--simulate", "4", "--interval", "0.2"]) as (url, _), \
            chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        page.goto(with_token(url + "/"))
        for theme in ("light", "dark"):
            page.goto(f"{url}/GPU-Resources?theme={theme}")
            page.wait_for_function("() => window.nvdashboardLive && nvdashboardLive.draws > 3",
                                   timeout=20_000)
            assert_buttons_follow_the_theme(page, theme)
            axis = page.evaluate(AXIS_JS)
            assert 0 <= axis["top"] and axis["top"] + 40 <= 800, axis
            lines = page.evaluate(LINES_JS)
            # One colour per GPU across the page; PCIe per GPU, the sum hidden at first.
            assert lines["utilization1"]["color"] == lines["memory1"]["color"] \
                == lines["pcie_tx1"]["color"] == lines["pcie_rx1"]["color"]
            assert lines["pcie_rx1"]["dash"] != lines["pcie_tx1"]["dash"]
            assert lines["pcie_tx"]["visible"] is False and lines["pcie_tx1"]["visible"]
            # A click on GPU 1's utilization entry hides GPU 1 on every chart.
            page.locator("[data-series='utilization1']").first.click()
            page.wait_for_function(f"() => !({LINES_JS})().memory1.visible", timeout=15_000)
            lines = page.evaluate(LINES_JS)
            assert not lines["utilization1"]["visible"] and not lines["pcie_rx1"]["visible"]
            assert lines["utilization0"]["visible"] and lines["memory2"]["visible"]
            active = page.evaluate("() => Bokeh.documents[0].get_model_by_name("
                                   "'gpu-filter').active")
            assert active == [0, 2, 3]
            screenshot(page, f"timeline-gpu-resources-gpu1-hidden-{theme}")
            # The sum is one click away.
            page.locator("[data-series='pcie_tx']").first.click()
            page.wait_for_function(f"() => ({LINES_JS})().pcie_tx.visible", timeout=15_000)
            # Zoom time with the wheel: the charts stop following; reset follows again.
            box = page.locator("[data-series='utilization0']").first.bounding_box()
            page.mouse.move(box["x"] + 600, box["y"] + 60)
            page.mouse.wheel(0, -400)
            page.wait_for_function("() => !nvdashboardLive.following", timeout=15_000)
            end, frames = page.evaluate("() => [nvdashboardLive.xEnd, nvdashboardLive.frames]")
            # Five more frames applied (a second of ticks): an event to wait for, where a
            # fixed time means less on a loaded machine.
            page.wait_for_function(f"() => nvdashboardLive.frames >= {frames + 5}",
                                   timeout=PAGE_WAIT_MS)
            assert page.evaluate("() => nvdashboardLive.xEnd") == end
            page.locator(".bk-tool-icon-reset").first.click(force=True)
            page.wait_for_function("() => nvdashboardLive.following", timeout=15_000)
            page.wait_for_function(f"() => nvdashboardLive.xEnd > {end}", timeout=15_000)
            page.locator("[data-series='utilization1']").first.click()  # GPU 1 again
            page.wait_for_function(f"() => ({LINES_JS})().memory1.visible", timeout=15_000)
            screenshot(page, f"timeline-gpu-resources-{theme}")
        watched.assert_clean()
