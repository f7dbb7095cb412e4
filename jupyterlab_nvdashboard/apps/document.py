"""Turns a dashboard component into a Bokeh document: header, theme, page, live updates.

Every document gets one periodic callback that asks the shared history for samples newer
than the last one it drew and hands them to the component. No document reads hardware.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Protocol

from bokeh.document import Document
from bokeh.layouts import column
from bokeh.models import Column, Div
from bokeh.themes import Theme
from bokeh.themes._dark_minimal import json as _dark_minimal_json
from jinja2 import Template

from ..metrics import Metrics, Sample
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

# Bokeh's dark_minimal, plus light text for the value labels it does not cover.
_DARK = Theme(json={"attrs": {**_dark_minimal_json["attrs"],
                              "LabelSet": {"text_color": "#e0e0e0"}}})
THEMES = {
    "light": {"bokeh": None, "page_background": "#ffffff", "page_foreground": "#1f1f1f"},
    "dark": {"bokeh": _DARK, "page_background": "#20262b", "page_foreground": "#e0e0e0"},
}


class Component(Protocol):
    root: object
    window_s: float  # how much history a new page draws at once (0: just the latest)

    def update(self, samples: list[Sample]) -> None: ...


def requested_theme(doc: Document) -> str:
    """The ``?theme=`` query argument, or 'light' when absent or unknown."""
    context = doc.session_context
    request = getattr(context, "request", None) if context is not None else None
    arguments = getattr(request, "arguments", None) or {}
    values = arguments.get("theme") or [b"light"]
    value = values[0].decode(errors="replace") if isinstance(values[0], bytes) else str(values[0])
    return value if value in THEMES else "light"


def title_text(title: str, metrics: Metrics, shows_gpu: bool) -> str:
    return f"{title} (SIMULATED)" if metrics.simulated and shows_gpu else title


def no_gpu_notice(metrics: Metrics) -> str:
    return f"No NVIDIA GPU or driver was found. {metrics.nvml.message}"


def build_document(
    doc: Document,
    sources: DashboardSources,
    title: str,
    needs_gpu: bool,
    shows_gpu: bool,
    make_component: Callable[[DashboardSources], Component],
) -> None:
    """Fill ``doc`` with a header and the component, and keep it updated from the history."""
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
        # NVML may start later (driver loaded after the server): then this page fills itself.
        waiting = None

        def fill_when_gpus_appear() -> None:
            if metrics.facts:
                doc.remove_periodic_callback(waiting)
                page.children.remove(notice)
                _show_component(doc, page, sources, make_component)

        waiting = doc.add_periodic_callback(fill_when_gpus_appear, GPU_WAIT_CHECK_MS)
        return
    _show_component(doc, page, sources, make_component)


GPU_WAIT_CHECK_MS = 1000


def _show_component(doc: Document, page: Column, sources: DashboardSources,
                    make_component: Callable[[DashboardSources], Component]) -> None:
    component = make_component(sources)
    metrics, history = sources.metrics, sources.metrics.history
    component.update(history.window(component.window_s))
    last_seq = history.last_seq

    def push_new_samples() -> None:
        nonlocal last_seq
        new = history.since(last_seq)
        if new:
            last_seq = new[-1].seq
            component.update(new)

    # One periodic callback per page, at the sampling interval. Pushing every page the moment
    # a sample lands was measured too (benchmarks/README.md): it lowers median latency but
    # wakes all pages in one burst, which at 64 pages delays everything else on the event
    # loop (p99 654 ms vs 207 ms). Independent callbacks spread the work over the tick.
    doc.add_periodic_callback(push_new_samples, max(50, int(metrics.interval_s * 1000)))
    page.children.append(component.root)
