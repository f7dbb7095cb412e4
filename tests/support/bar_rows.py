"""The rows of a bar page's HTML (``apps/components.py`` ``bars_html``), as a reader sees
them: what each row says, its fill and how it is labelled for hover and screen readers."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from jupyterlab_nvdashboard.apps.components import LEVEL_COLORS, NOT_AVAILABLE


class _Rows(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict] = []
        self.canvases = 0
        self._spans: list[str] = []  # the cell each open span is in ("" outside the cells)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        classes = attributes.get("class", "").split()
        if tag == "canvas":
            self.canvases += 1
        if "row" in classes and "data-key" in attributes:
            self.rows.append({"key": attributes["data-key"], "classes": set(classes),
                              "label": attributes.get("aria-label", ""),
                              "title": attributes.get("title", ""),
                              "tabindex": attributes.get("tabindex"),
                              "role": attributes.get("role"), "fill": None, "value": "",
                              "gpu": "", "metric": ""})
        elif self.rows and tag == "i":
            width = re.search(r"width:\s*([0-9.]+)%", attributes.get("style", ""))
            self.rows[-1]["fill"] = {"level": attributes.get("class", ""),
                                     "width_pct": float(width.group(1)) if width else None}
        if tag == "span":
            cell = classes[0] if classes and classes[0] in ("value", "gpu", "metric") else ""
            self._spans.append(cell or (self._spans[-1] if self._spans else ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._spans:
            self._spans.pop()

    def handle_data(self, data: str) -> None:
        if self._spans and self._spans[-1] and self.rows:
            self.rows[-1][self._spans[-1]] += data


def bar_rows(html: str) -> tuple[list[dict], int]:
    """Each bar row of ``html`` (key, classes, aria-label, title, fill, value text, the
    device's and metric's names), and how many canvases the HTML holds."""
    parser = _Rows()
    parser.feed(html)
    return parser.rows, parser.canvases


# Whether the page's Bokeh document is a bar page (``components.BarsView`` names its Div).
BAR_PAGE_JS = "() => Bokeh.documents[0].get_model_by_name('bars') !== null"
# The bar rows as the browser laid them out (inside Bokeh's shadow roots), every canvas on
# the page, and the repaint and frame counters of the page's stream.
BAR_ROWS_JS = """() => {
  const rows = [];
  let canvases = document.querySelectorAll('canvas').length;
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) {
        canvases += el.shadowRoot.querySelectorAll('canvas').length;
        rows.push(...el.shadowRoot.querySelectorAll('.nvb .row[data-key]'));
        walk(el.shadowRoot);
      }
    }
  };
  walk(document);
  const box = (el) => { const r = el.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  // The lines an element's words take (its swatch, a box of its own, is not a line).
  const lines = (el) => { const tops = new Set();
    const words = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    while (words.nextNode()) { const range = document.createRange();
      range.selectNodeContents(words.currentNode);
      for (const r of range.getClientRects()) tops.add(Math.round(r.top)); }
    return tops.size; };
  const live = (window.nvdashboardStreams || {})[''] || {draws: 0, frames: 0};
  return {canvases, draws: live.draws, frames: live.frames, rows: rows.map((row) => {
    const value = row.querySelector('.value'), gpu = row.querySelector('.gpu');
    const fill = row.querySelector('.track i');
    return {key: row.dataset.key, label: row.getAttribute('aria-label'), title: row.title,
            tabindex: row.tabIndex, text: value.textContent, row: box(row),
            value: box(value), valueLines: lines(value), valueCut: value.scrollWidth >
            value.clientWidth, gpu: box(gpu), gpuLines: gpu.textContent ? lines(gpu) : 1,
            gpuText: gpu.textContent, gpuIndent: parseFloat(getComputedStyle(gpu).paddingLeft),
            track: box(row.querySelector('.track')),
            fill: fill ? {width: fill.style.width,
                          colour: getComputedStyle(fill).backgroundColor} : null};
  })};
}"""


def _rgb(colour: str) -> str:
    value = int(colour.lstrip("#"), 16)
    return f"rgb({value >> 16}, {(value >> 8) & 255}, {value & 255})"


def assert_readable_rows(seen: dict, route: str, width: int) -> None:
    """Every row of ``BAR_ROWS_JS``'s ``seen``, in a window ``width`` px wide: its value
    whole, on one line, inside the window, right of its bar (never on the fill); its bar
    a third of the window wide at least, filled in a level's colour or, not available, not at
    all; its hover and screen-reader label ending in the reading's time; rows apart."""
    rows = seen["rows"]
    for row in rows:
        where = (route, row["key"], row["text"])
        # The value is whole, on one line, inside the window, right of its bar.
        assert row["valueLines"] == 1 and not row["valueCut"], where
        assert 0 <= row["value"]["left"] and row["value"]["right"] <= width, where
        assert row["track"]["right"] <= row["value"]["left"], where
        # The bars take the width the words leave them: a third of the window at least.
        assert row["track"]["right"] - row["track"]["left"] >= width / 3, where
        assert row["gpu"]["right"] <= row["track"]["left"] and row["gpuLines"] == 1, where
        # Not available (a MIG device's utilization): no fill, never a bar at 0.
        if row["text"].startswith(NOT_AVAILABLE) or row["text"] == "GPU lost":
            assert row["fill"] is None, where
        else:
            assert row["fill"] is not None and row["fill"]["colour"] in {
                _rgb(colour) for colour in LEVEL_COLORS.values()}, where
        assert re.search(r"reading of \d\d:\d\d:\d\d$", row["label"]), where
        assert row["title"] == row["label"] and row["tabindex"] == 0, where
    for above, below in zip(rows, rows[1:], strict=False):
        assert above["row"]["bottom"] <= below["row"]["top"], (route, above, below)
