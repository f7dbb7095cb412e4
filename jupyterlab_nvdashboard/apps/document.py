"""Turns a dashboard component into a Bokeh document: header, theme, page, live updates.

Live samples do not go through the document: its page script subscribes to the
broadcaster (``apps/live.py``), so a document has no periodic callback for data. Only a
component with server-side state to show (the workload's run panel) refreshes on its own,
at ``refresh_ms``, and under Jupyter the timelines' cell marks (``cell_marks.py``). A page
opened on a span of its URL shows it (``shown_span.py``). No document reads hardware.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from bokeh.document import Document
from bokeh.layouts import column
from bokeh.models import Column, CustomJS, Div
from bokeh.themes import Theme
from bokeh.themes._dark_minimal import json as _dark_minimal_json
from jinja2 import Template

from ..metrics import Metrics
from .cell_marks import CellMarks
from .live import LiveView, attach
from .shown_span import (
    GPUS_ARGUMENT,
    SPAN_ARGUMENTS,
    ShownSpan,
    gpus_from_query,
    show_span,
    span_from_query,
)
from .sources import DashboardSources

# BokehJS must load from this server with URLs relative to the page, so the page works
# behind a path-stripping proxy (jupyter-server-proxy) and with no internet.
PAGE = Template("""\
{% extends base %}
{% block css_resources %}
{{ bokeh_css | replace('"/static/', '"static/') if bokeh_css }}
{% endblock %}
{% block js_resources %}
{{ bokeh_js | replace('"/static/', '"static/') if bokeh_js }}
{% endblock %}
{% block postamble %}
<style>
  html, body { background: {{ page_background }}; color: {{ page_foreground }};
               font-family: system-ui, sans-serif; }
  .nvdashboard-notice { padding: 1em; }
</style>
{% endblock %}
""")

# Bokeh's widgets (buttons, the window picker and GPU filter, inputs) draw in their own
# shadow DOM from CSS variables that dark_minimal leaves light: dark values for them.
DARK_WIDGET_CSS = """
:host {
  color-scheme: dark;
  --color: #e0e0e0; --background-color: #2b3339; --hover-color: #343d44;
  --border-color: #56616a; --divider-color: #3f484f; --surface-background-color: #343d44;
  --disabled-background-color: #30383e; --disabled-color: #9aa3aa;
  --placeholder-color: #8a949b; --inactive-bg: #343d44; --inactive-fg: #9aa3aa;
  --default: #2b3339; --default-border: #56616a; --default-hover: #363f47;
  --default-hover-border: #6b757d; --default-active: #4f6272; --default-active-border: #8196a6;
  --default-disabled: #30383e; --default-disabled-border: #444d54;
}
"""
# Bokeh's dark_minimal, plus the widgets' colours (a widget given stylesheets of its own,
# such as a themed table, keeps them).
_DARK = Theme(json={"attrs": {**_dark_minimal_json["attrs"],
                              "Widget": {"stylesheets": [DARK_WIDGET_CSS]}}})
THEMES = {
    "light": {"bokeh": None, "page_background": "#ffffff", "page_foreground": "#1f1f1f"},
    "dark": {"bokeh": _DARK, "page_background": "#20262b", "page_foreground": "#e0e0e0"},
}


class Component(Protocol):
    root: object
    live: LiveView | None  # what the page streams, if anything


@runtime_checkable
class StreamsMore(Protocol):
    """A component that streams further views beside ``live`` (each its own socket)."""

    also_live: tuple[LiveView, ...]


@runtime_checkable
class Refreshing(Protocol):
    """A component with server-side state beyond the samples (e.g. the run panel)."""

    refresh_ms: int

    def refresh(self) -> None: ...


@runtime_checkable
class ShowsCell(Protocol):
    """The page a cell's footer opens (/GPU-Activity): it shows the GPUs its URL names
    (``?gpus=``) alone, and while it shows the span its URL names, its legends read the
    span (``shown_span.py``)."""

    def show_cell(self, doc: Document, span: ShownSpan | None,
                  rows: tuple[int, ...] | None) -> None: ...


# The request arguments a document reads; the server passes these alone to the document
# (page_handler.py's PageHandler: every other one, a token among them, stays out of the page).
PAGE_ARGUMENTS = ("theme", *SPAN_ARGUMENTS, GPUS_ARGUMENT)


def query_argument(doc: Document, name: str) -> str | None:
    """The first ``?name=`` query argument of the page's request, or None."""
    context = doc.session_context
    request = getattr(context, "request", None) if context is not None else None
    arguments = getattr(request, "arguments", None) or {}
    values = arguments.get(name)
    if not values:
        return None
    return values[0].decode(errors="replace") if isinstance(values[0], bytes) else str(values[0])


def requested_theme(doc: Document) -> str:
    """The ``?theme=`` query argument, or 'light' when absent or unknown."""
    value = query_argument(doc, "theme")
    return value if value in THEMES else "light"


def requested_span(doc: Document) -> tuple[ShownSpan | None, str]:
    """The span the page's URL asks it to show (``?start=&end=&label=``), or None and the one
    line that says why a malformed one is ignored ('' when none was asked for)."""
    try:
        return span_from_query(*(query_argument(doc, name) for name in SPAN_ARGUMENTS)), ""
    except ValueError as error:
        return None, f"The time range in the address was ignored: {error}."


def requested_gpus(doc: Document, metrics: Metrics) -> tuple[tuple[int, ...] | None, str]:
    """The device rows the page's URL names (``?gpus=``, UUIDs), or None and the one line
    that says why a malformed list is ignored ('' when none was named)."""
    try:
        return gpus_from_query(query_argument(doc, GPUS_ARGUMENT), metrics.facts), ""
    except ValueError as error:
        return None, f"The GPUs in the address were ignored: {error}."


def title_text(title: str, metrics: Metrics, shows_gpu: bool) -> str:
    return f"{title} (SIMULATED)" if metrics.simulated and shows_gpu else title


READING_GPUS = "reading GPUs…"


def gpus_being_read(metrics: Metrics) -> bool:
    """True until the sampler's first GPU read is done (NVML may take minutes to start)."""
    return metrics.sampler.gpu_reads == 0


def no_gpu_notice(metrics: Metrics) -> str:
    if gpus_being_read(metrics):
        return READING_GPUS
    return f"No NVIDIA GPU or driver was found. {metrics.nvml.message}"


def build_document(
    doc: Document,
    sources: DashboardSources,
    title: str,
    needs_gpu: bool,
    shows_gpu: bool,
    make_component: Callable[[], Component],
) -> None:
    """Fill ``doc`` with a header and the component; its page streams the live samples."""
    metrics = sources.metrics
    theme = THEMES[requested_theme(doc)]
    full_title = title_text(title, metrics, shows_gpu)
    doc.title = f"NVDashboard: {full_title}"
    doc.template = PAGE
    doc.template_variables.update(page_background=theme["page_background"],
                                  page_foreground=theme["page_foreground"])
    if theme["bokeh"] is not None:
        doc.theme = theme["bokeh"]
    header = Div(text=f"<h3 style='margin:0.3em 0.5em'>{html.escape(full_title)}</h3>",
                 styles={"color": theme["page_foreground"]}, sizing_mode="stretch_width")

    page = column(header, sizing_mode="stretch_both")
    doc.add_root(page)
    if needs_gpu and not metrics.facts:
        notice = Div(text=f"<p class='nvdashboard-notice'>{html.escape(no_gpu_notice(metrics))}"
                     "</p>", styles={"color": theme["page_foreground"]})
        page.children.append(notice)
        # NVML may start later (driver loaded after the server): the page then reloads
        # itself, and the new page has its live script (which runs only at page load).
        notice.js_on_change("tags", CustomJS(code="window.location.reload()"))
        waiting = None

        def reload_when_gpus_appear() -> None:
            if metrics.facts:
                doc.remove_periodic_callback(waiting)
                notice.tags = ["gpus-appeared"]

        waiting = doc.add_periodic_callback(reload_when_gpus_appear, GPU_WAIT_CHECK_MS)
        return
    _show_component(doc, page, make_component, theme["page_foreground"], sources)


GPU_WAIT_CHECK_MS = 1000


def span_notice(text: str, color: str) -> Div:
    """The one line that says what of a requested span the page cannot show, and why."""
    return Div(text=f"<p class='nvdashboard-notice' style='margin:0;padding:0.2em 1em'>"
                    f"{html.escape(text)}</p>", styles={"color": color},
               sizing_mode="stretch_width", name="span-notice")


def _show_component(doc: Document, page: Column, make_component: Callable[[], Component],
                    text_color: str, sources: DashboardSources) -> None:
    component = make_component()
    views = ([component.live] if component.live is not None else []) + \
        (list(component.also_live) if isinstance(component, StreamsMore) else [])
    span, refusal = requested_span(doc)
    notes = [refusal] if refusal else []
    timelines = [view for view in views if view.x_range is not None]
    if span is not None and timelines:
        now_s = time.time()
        notes += [note for note in (show_span(view, span, now_s) for view in timelines) if note]
    if isinstance(component, ShowsCell):
        rows, refusal = requested_gpus(doc, sources.metrics)
        notes += [refusal] if refusal else []
        component.show_cell(doc, span if timelines else None, rows)
    for note in dict.fromkeys(notes):  # a page of two timelines says a thing once
        page.children.append(span_notice(note, text_color))
    # Under Jupyter, the last cells of its kernels are marked on every timeline.
    jupyter = sources.jupyter
    if jupyter is not None and jupyter.server is not None:
        for view in timelines:
            if view.bands.plot is not None:
                marks = CellMarks(jupyter, view.bands.plot)
                marks.refresh()
                doc.add_periodic_callback(marks.refresh, marks.refresh_ms)
    for view in views:
        attach(doc, view)
    if isinstance(component, Refreshing):
        component.refresh()
        doc.add_periodic_callback(component.refresh, component.refresh_ms)
    page.children.append(component.root)
