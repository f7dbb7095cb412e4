"""HTML that changes in place: a table renewed once a second costs a page next to nothing.

Setting a Bokeh Div's ``text`` makes BokehJS build the Div again and lay out the whole page,
plots included; setting ``innerHTML`` rebuilds every element of a table. Both were most of
what an open overview or Health tab cost (``benchmarks/dashboard_overhead.py``). The
scripts here change only the text, attributes and elements that differ from what is shown:
``morphInto(element, html)`` for plain pages, ``setDivHtml(div, html)`` for a Bokeh Div.
``IN_PLACE_JS`` is pasted in front of each page script that uses them.

``StreamedHtml`` is a Div whose whole HTML a stream replaces (a "replace" feed whose rows
are one text cell, ``html``): the overview's table, the bar pages' rows.
"""

from __future__ import annotations

from pathlib import Path

from bokeh.models import ColumnDataSource, CustomJS, Div

IN_PLACE_JS = (Path(__file__).with_name("in_place.js")).read_text()

# A Div as wide as the page: BokehJS sets a Div's content box inline, as wide as its text,
# and a bar's width in % would be a share of that.
FULL_WIDTH_CSS = ".bk-clearfix { display: block !important; }"

SET_HTML_JS = IN_PLACE_JS + """
const text = (source.data.html || [])[0];
if (text !== undefined) setDivHtml(div, text);
"""


class StreamedHtml:
    """A Div that shows ``html`` at first, then each ``html`` the page's script puts in
    ``source`` (``live.LiveView``), set in place."""

    def __init__(self, html: str, name: str) -> None:
        self.source = ColumnDataSource({"html": []}, syncable=False)
        self.div = Div(text=html, sizing_mode="stretch_width", syncable=False, name=name,
                       stylesheets=[FULL_WIDTH_CSS])
        self.source.js_on_change("data", CustomJS(args={"source": self.source, "div": self.div},
                                                  code=SET_HTML_JS))
