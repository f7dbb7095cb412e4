"""HTML that changes in place: a table renewed once a second costs a page next to nothing.

Setting a Bokeh Div's ``text`` makes BokehJS build the Div again and lay out the whole page,
plots included; setting ``innerHTML`` rebuilds every element of a table. Both were most of
what an open overview or Health tab cost (``benchmarks/dashboard_overhead.py``). The
scripts here change only the text, attributes and elements that differ from what is shown:
``morphInto(element, html)`` for plain pages, ``setDivHtml(div, html)`` for a Bokeh Div.
``IN_PLACE_JS`` is pasted in front of each page script that uses them.
"""

from __future__ import annotations

from pathlib import Path

IN_PLACE_JS = (Path(__file__).with_name("in_place.js")).read_text()
