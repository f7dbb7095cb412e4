"""Debian's Chromium driven by Playwright for Python, with loopback-only network checks.

Never runs ``playwright install``: it launches /usr/bin/chromium. Every page records its
console errors and any request to a host other than 127.0.0.1/localhost, so a test can
fail on either.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest

CHROMIUM = "/usr/bin/chromium"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
ARTIFACTS = Path(os.environ.get("NVDASHBOARD_TEST_ARTIFACTS", "test-artifacts")).resolve()
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]

# A page's waits are on conditions, with this deadline: it holds on a loaded two-core machine
# (a CPU hog and two other test workers beside the server and Chromium).
PAGE_WAIT_MS = 90_000
# Sums the drawn pixels of every canvas on the page, looking inside Bokeh's shadow roots.
CANVAS_INK_JS = """() => {
  const canvases = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.tagName === 'CANVAS') canvases.push(el);
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  let ink = 0, checksum = 0;
  for (const canvas of canvases) {
    if (!canvas.width || !canvas.height) continue;
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    const [r0, g0, b0] = [data[0], data[1], data[2]];
    for (let i = 0; i < data.length; i += 4) {
      if (data[i+3] && (data[i] !== r0 || data[i+1] !== g0 || data[i+2] !== b0)) {
        ink++;
        checksum = (checksum * 31 + data[i] + 7 * data[i+1] + 13 * data[i+2] + i) % 1000000007;
      }
    }
  }
  return {canvases: canvases.length, ink, checksum};
}"""


# JupyterLab's own console errors that say nothing about this extension, each with why. One
# is ignored only when its source is JupyterLab's own bundle (JUPYTERLAB_CODE), never ours.
JUPYTERLAB_OWN_CONSOLE_ERRORS = (
    # A widget or signal torn down while a pending promise still held it, at page unload or
    # when a tab closes: JupyterLab's own lifecycle, now and then.
    "Disposed",
    # The debugger asks each new kernel for its state; a kernel shut down before it answers
    # (what Shut down tests do) cancels the request, and the debugger logs that it could not.
    "Could not restore the debugger state",
)
JUPYTERLAB_CODE = "/static/lab/"  # where JupyterLab serves its core bundles
OUR_CODE = ("jupyterlab-nvdashboard", "jupyterlab_nvdashboard", "/nvdashboard/")


def jupyterlab_own_error(text: str, source: str) -> bool:
    """True for an error named in ``JUPYTERLAB_OWN_CONSOLE_ERRORS`` that comes from
    JupyterLab's own code (``source``: a URL, or a stack trace of URLs)."""
    if not any(known in text for known in JUPYTERLAB_OWN_CONSOLE_ERRORS):
        return False
    return JUPYTERLAB_CODE in source and not any(ours in source for ours in OUR_CODE)


@dataclass
class PageWatch:
    console_errors: list[str] = field(default_factory=list)
    foreign_requests: list[str] = field(default_factory=list)

    def assert_clean(self) -> None:
        assert not self.foreign_requests, f"requests left loopback: {self.foreign_requests}"
        assert not self.console_errors, f"browser console errors: {self.console_errors}"


def watch(page) -> PageWatch:  # noqa: ANN001 - playwright Page
    watched = PageWatch()

    def on_request(request) -> None:  # noqa: ANN001
        host = urlparse(request.url).hostname or ""
        if request.url.startswith(("http", "ws")) and host not in LOCAL_HOSTS:
            watched.foreign_requests.append(request.url)

    def on_console(message) -> None:  # noqa: ANN001
        if message.type != "error":
            return
        source = (message.location or {}).get("url", "")
        if not jupyterlab_own_error(message.text, source):
            watched.console_errors.append(message.text)

    def on_page_error(error) -> None:  # noqa: ANN001
        if not jupyterlab_own_error(str(error), getattr(error, "stack", "") or ""):
            watched.console_errors.append(str(error))

    page.on("request", on_request)
    page.on("console", on_console)
    page.on("pageerror", on_page_error)
    return watched


@contextmanager
def chromium() -> Iterator[object]:
    """A headless Debian Chromium, or a skip where it is not installed."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (bash .ci/install installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def canvas_ink(page) -> dict:  # noqa: ANN001
    return page.evaluate(CANVAS_INK_JS)


def drawn_canvas(page, least_ink: int) -> dict:  # noqa: ANN001
    """``canvas_ink`` of a page or frame once its canvases hold more than ``least_ink`` inked
    pixels: waited for, since a loaded machine draws late."""
    page.wait_for_function(f"() => ({CANVAS_INK_JS})().ink > {least_ink}", timeout=PAGE_WAIT_MS)
    return canvas_ink(page)


def next_frames(page) -> None:  # noqa: ANN001
    """Returns after the page's next two animation frames: a layout begun by the last change
    is done."""
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def screenshot(page, name: str) -> Path:  # noqa: ANN001
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    print(f"screenshot: {path}")
    return path


# The text of every hover tooltip on the page, in Bokeh's shadow roots.
TOOLTIP_JS = """() => {
  const texts = [];
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    if (el.shadowRoot) { walk(el.shadowRoot); }
    if (el.classList && el.classList.contains('bk-tooltip-content')) texts.push(el.textContent);
  } };
  walk(document);
  return texts.join(' | ');
}"""


# The start of a function that looks at a page's Bokeh views: `views`, every one of them (a
# plot's elements included).
BOKEH_VIEWS_JS = """
  const views = [];
  const walk = (view) => { views.push(view);
    const children = typeof view.children_views === 'function' ? view.children_views()
      : (view.child_views || []);
    for (const child of children) walk(child); };
  for (const view of Object.values(Bokeh.index)) walk(view);
"""
# The start of a function that looks at a page's timelines: every Bokeh view, the
# timelines' one figure (`plot`, the view with the time axis) and the root of the HTML over
# it (`bands`: each band's heading, scale and lines' place).
TIMELINE_VIEWS_JS = BOKEH_VIEWS_JS + """
  const plot = views.find((v) => v.model.type === 'Figure' &&
                          v.model.above.some((a) => a.type === 'DatetimeAxis'));
  const bands = views.find((v) => v.model === plot.model.elements[0]).shadow_el;
"""
