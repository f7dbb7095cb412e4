"""Timelines a reader can use, in Chromium at 1280x800 with 4 GPUs, light and dark: a time
axis on screen, a legend click that hides a GPU on every chart (the GPU filter follows),
x-zoom that stops following the newest sample and a reset that follows again, one colour per
GPU, and PCIe per GPU with the all-GPU sum as an option."""

from __future__ import annotations

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.support.browser import (
    PAGE_WAIT_MS,
    TIMELINE_VIEWS_JS,
    TOOLTIP_JS,
    chromium,
    screenshot,
    watch,
)
from tests.support.servers import cli_server, in_process_server, with_token

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


# Each band of the timelines' one figure: whether it is shown, where its HTML leaves room for
# its lines (screen pixels), and where the canvas draws them (its sub-coordinates' target).
BANDS_JS = "() => {" + TIMELINE_VIEWS_JS + """
  const top = plot.el.getBoundingClientRect().top;
  const targets = plot.model.renderers.filter((r) => r.glyph.type === 'MultiLine')
    .map((r) => r.coordinates.y_target);
  return [...bands.querySelectorAll('[data-band]')].map((band, i) => {
    const box = band.querySelector('[data-band-lines]').getBoundingClientRect();
    const heading = band.querySelector('[data-series]');
    return {shown: band.style.display !== 'none', top: box.top, bottom: box.bottom,
            title: band.querySelector('b').textContent,
            heading_top: band.firstElementChild.getBoundingClientRect().top,
            heading_bottom: band.firstElementChild.getBoundingClientRect().bottom,
            drawn_top: top + plot.frame.y_scale.compute(targets[i].end),
            drawn_bottom: top + plot.frame.y_scale.compute(targets[i].start),
            entry: heading ? heading.dataset.series : null};
  });
}"""


def assert_lines_where_their_bands_are(bands: list[dict]) -> None:
    shown = [band for band in bands if band["shown"]]
    assert shown, bands
    for band in shown:
        assert band["heading_bottom"] <= band["top"] + 1, band  # the heading above its lines
        assert abs(band["drawn_top"] - band["top"]) <= 2, band
        assert abs(band["drawn_bottom"] - band["bottom"]) <= 2, band
    for upper, lower in zip(shown, shown[1:], strict=False):
        assert upper["bottom"] < lower["top"], (upper, lower)


def test_activity_bands_follow_their_headings_on_a_narrow_page() -> None:
    """The timelines are bands of one canvas under HTML headings: on a page too narrow for a
    heading's legend on one line, each band's lines are drawn below its wrapped heading, not
    under it; hiding GPU 0 folds its own band away and the others close up; the hover names
    what the band under the pointer shows, and nothing of the other bands."""
    with in_process_server(gpus=4, profile="mixed", interval_s=0.2,
                           idle_interval_s=0.2) as server, chromium() as browser:
        page = browser.new_page(viewport={"width": 640, "height": 1600})
        watched = watch(page)
        page.goto(with_token(server.url + "/"))
        page.goto(f"{server.url}/GPU-Activity")
        page.wait_for_function("() => window.nvdashboardLive && nvdashboardLive.draws > 1",
                               timeout=40_000)
        bands = page.evaluate(BANDS_JS)
        assert any(band["bottom"] - band["top"] > 0 for band in bands)
        assert_lines_where_their_bands_are(bands)
        gpu0 = [band for band in bands if band["title"].startswith("GPU 0 ")]
        assert len(gpu0) == 1 and gpu0[0]["entry"].startswith("gpm0_"), bands
        # The GPM band's legend wraps at 640 px onto more than one line (12 px text).
        assert gpu0[0]["heading_bottom"] - gpu0[0]["heading_top"] > 30, gpu0
        page.locator(f"[data-series='{gpu0[0]['entry']}']").first.click()
        page.wait_for_function(f"() => !({BANDS_JS})()[0].shown", timeout=15_000)
        page.wait_for_function(
            f"() => {{ const b = ({BANDS_JS})().filter((x) => x.shown);"
            f" return Math.abs(b[0].drawn_top - b[0].top) <= 2; }}", timeout=15_000)
        folded = page.evaluate(BANDS_JS)
        assert_lines_where_their_bands_are(folded)
        shown = [band for band in folded if band["shown"]]
        assert len(shown) == len(bands) - 1
        assert shown[0]["top"] < gpu0[0]["top"] + 5  # the next band moved up into its place
        screenshot(page, "timeline-bands-gpu-activity-640-gpu0-hidden")
        # The hover over the PCIe band names its series, and nothing of the GPM bands.
        pcie = next(band for band in shown if band["title"].startswith("PCIe"))
        page.mouse.move(400, (pcie["top"] + pcie["bottom"]) / 2)
        page.wait_for_function(f"() => ({TOOLTIP_JS})().includes('GPU 2 TX')", timeout=10_000)
        tooltip = page.evaluate(TOOLTIP_JS)
        assert "GB/s" in tooltip and "SM activity" not in tooltip, tooltip
        assert "GPU 0 TX" not in tooltip, tooltip  # GPU 0 is hidden
        watched.assert_clean()


# Where the hover's box is drawn, in screen pixels (in Bokeh's shadow roots), or null.
TOOLTIP_BOX_JS = """() => {
  let found = null;
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    if (el.shadowRoot) walk(el.shadowRoot);
    if (el.classList && el.classList.contains('bk-tooltip-content')) {
      const box = el.getBoundingClientRect();
      if (box.height) found = {top: box.top, bottom: box.bottom};
    }
  } };
  walk(document);
  return found;
}"""


def settled_bands(page) -> list[dict]:  # noqa: ANN001
    """The bands once each one's lines are drawn in its HTML's place, or as they stand
    after the deadline (the assertion then says how far off they are)."""
    aligned = (f"() => ({BANDS_JS})().filter((b) => b.shown).every((b) => "
               f"Math.abs(b.drawn_top - b.top) <= 2 && Math.abs(b.drawn_bottom - b.bottom) <= 2)")
    try:
        page.wait_for_function(aligned, timeout=20_000)
    except PlaywrightTimeoutError:
        pass
    return page.evaluate(BANDS_JS)


@pytest.mark.parametrize(("gpus", "profile"), [(4, "mixed"), (2, "h200")])
def test_activity_bands_line_up_under_notices_at_1280x800(gpus: int, profile: str) -> None:
    """Issue 44: with the mixed profile the notices above the canvas made the page taller
    than the window, BokehJS squeezed the figure to what was left, and the lines were drawn
    up to 70 px away from their headings. Every band lines up with its HTML, within 2 px, in
    both themes, at the full 1280 px and at 960 px (JupyterLab with its sidebar open); the
    hover over a band names that band's series, and is drawn in that band."""
    with in_process_server(gpus=gpus, profile=profile, interval_s=0.2,
                           idle_interval_s=0.2) as server, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        page.goto(with_token(server.url + "/"))
        for theme in ("light", "dark"):
            page.set_viewport_size({"width": 1280, "height": 800})
            page.goto(f"{server.url}/GPU-Activity?theme={theme}")
            page.wait_for_function("() => window.nvdashboardLive && nvdashboardLive.draws > 1",
                                   timeout=PAGE_WAIT_MS)
            if profile == "mixed":  # the notices this is about are there
                assert page.locator(".nvdashboard-gpm-notice").count() == 1
            for width in (1280, 960):
                page.set_viewport_size({"width": width, "height": 800})
                bands = settled_bands(page)
                assert len([band for band in bands if band["shown"]]) >= 3, bands
                assert_lines_where_their_bands_are(bands)
                screenshot(page, f"timeline-bands-gpu-activity-{profile}-{width}-{theme}")
            # The hover over the first GPU's activity band: its series, drawn in its band.
            gpu0 = next(band for band in bands if band["title"].startswith("GPU 0 "))
            page.evaluate("(y) => window.scrollTo(0, y)", gpu0["top"] - 200)
            gpu0 = next(band for band in page.evaluate(BANDS_JS)
                        if band["title"].startswith("GPU 0 "))
            page.mouse.move(500, (gpu0["top"] + gpu0["bottom"]) / 2)
            page.wait_for_function(f"() => ({TOOLTIP_JS})().includes('SM activity')",
                                   timeout=15_000)
            tooltip = page.evaluate(TOOLTIP_JS)
            assert "GB/s" not in tooltip and "TX" not in tooltip, tooltip
            box = page.evaluate(TOOLTIP_BOX_JS)
            assert box is not None
            middle = (box["top"] + box["bottom"]) / 2
            assert gpu0["top"] <= middle <= gpu0["bottom"], (box, gpu0)
            screenshot(page, f"timeline-hover-gpu-activity-{profile}-{theme}")
            page.mouse.move(5, 5)
        watched.assert_clean()


# The element that has the keyboard's focus, inside Bokeh's shadow roots: its legend key (or
# its text), role and aria-pressed.
FOCUSED_JS = """() => {
  let el = document.activeElement;
  while (el && el.shadowRoot && el.shadowRoot.activeElement) el = el.shadowRoot.activeElement;
  if (!el || el === document.body) return null;
  return {series: el.dataset ? el.dataset.series || null : null, text: el.textContent,
          role: el.getAttribute('role'), pressed: el.getAttribute('aria-pressed')};
}"""
# The GPU filter's buttons: text, aria-pressed, the check drawn before a pressed one, and
# whether the text is struck through.
GPU_BUTTONS_JS = """() => {
  const out = [];
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    if (el.shadowRoot) walk(el.shadowRoot);
    if (el.matches('.bk-btn') && /^GPU /.test(el.textContent)) {
      out.push({text: el.textContent, pressed: el.getAttribute('aria-pressed'),
                active: el.classList.contains('bk-active'),
                before: getComputedStyle(el, '::before').content,
                struck: getComputedStyle(el).textDecorationLine.includes('line-through')});
    }
  } };
  walk(document);
  return out;
}"""
ENTRY_PRESSED_JS = """(key) => {
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    if (el.dataset && el.dataset.series === key) return el.getAttribute('aria-pressed');
    if (el.shadowRoot) { const found = walk(el.shadowRoot); if (found) return found; }
  } return null; };
  return walk(document);
}"""


def assert_gpu_buttons_say_what_is_shown(page, shown: list[str]) -> None:  # noqa: ANN001
    buttons = page.evaluate(GPU_BUTTONS_JS)
    assert [b["text"] for b in buttons] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"], buttons
    for button in buttons:
        on = button["text"] in shown
        assert button["active"] is on and button["pressed"] == str(on).lower(), button
        assert ("✓" in button["before"]) is on and button["struck"] is not on, button


def tab_to(page, key: str) -> dict:  # noqa: ANN001
    """Presses Tab until the legend entry of ``key`` has the focus; what is focused then."""
    for _ in range(60):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED_JS)
        if focused and focused["series"] == key:
            return focused
    raise AssertionError(f"Tab never reached the legend entry {key}: last {focused}")


def test_legend_entries_and_gpu_buttons_by_keyboard() -> None:
    """Issue 43 (keyboard) and 44 (which GPU buttons are on): a legend entry that hides a
    series is reached with Tab, is a button with aria-pressed, and answers Enter and Space;
    the GPU buttons show a check when pressed, are struck through when not, and carry
    aria-pressed, in both themes."""
    with in_process_server(gpus=4, profile="mixed", interval_s=0.2,
                           idle_interval_s=0.2) as server, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        page.goto(with_token(server.url + "/"))
        everyone = ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
        for theme in ("light", "dark"):
            page.goto(f"{server.url}/GPU-Resources?theme={theme}")
            page.wait_for_function("() => window.nvdashboardLive && nvdashboardLive.draws > 1",
                                   timeout=PAGE_WAIT_MS)
            assert_gpu_buttons_say_what_is_shown(page, everyone)
            focused = tab_to(page, "utilization1")
            assert focused["role"] == "button" and focused["pressed"] == "true", focused
            page.keyboard.press("Enter")  # GPU 1 hidden on every chart
            page.wait_for_function(f"() => !({LINES_JS})().memory1.visible", timeout=15_000)
            assert page.evaluate(FOCUSED_JS)["pressed"] == "false"
            assert_gpu_buttons_say_what_is_shown(page, ["GPU 0", "GPU 2", "GPU 3"])
            screenshot(page, f"timeline-gpu-buttons-gpu1-hidden-{theme}")
            page.keyboard.press(" ")  # and shown again
            page.wait_for_function(f"() => ({LINES_JS})().memory1.visible", timeout=15_000)
            assert page.evaluate(FOCUSED_JS)["pressed"] == "true"
            assert_gpu_buttons_say_what_is_shown(page, everyone)
            # An entry that is not a GPU's (the all-GPU sum, hidden at first) answers too.
            assert page.evaluate(ENTRY_PRESSED_JS, "pcie_tx") == "false"
            tab_to(page, "pcie_tx")
            page.keyboard.press(" ")
            page.wait_for_function(f"() => ({LINES_JS})().pcie_tx.visible", timeout=15_000)
            assert page.evaluate(ENTRY_PRESSED_JS, "pcie_tx") == "true"
        watched.assert_clean()
