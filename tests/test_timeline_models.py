"""A timeline page's document holds few models (issue 47, item 5): each costs the server
about 5 kB per viewer, and /GPU-Resources held 124. The sources share their selection policy
and the renderers' views their filter (BokehJS keeps no state in either), the bands' mappings
one scale, and the time ticker carries no month or year tickers. Under every simulated
profile, on every timeline page; the browser tests (test_browser_long_windows.py,
test_browser_timelines.py) check that the areas and lines still draw."""

from __future__ import annotations

import collections

import pytest
from bokeh.document import Document
from bokeh.models import (
    AllIndices,
    ColumnDataSource,
    CoordinateMapping,
    GlyphRenderer,
    LinearScale,
    MonthsTicker,
    MultiLine,
    Patches,
    UnionRenderers,
    YearsTicker,
)

from jupyterlab_nvdashboard.apps.document import build_document
from jupyterlab_nvdashboard.apps.registry import ROUTES, RouteFeeds
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.simnvml.profiles import PROFILES


def _timeline_documents(profile: str, gpus: int) -> list[tuple[str, Document]]:
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=gpus,
                                                                profile=profile)), environ={})
    metrics.nvml.ensure_initialized()
    metrics.sampler.tick()
    metrics.sampler.tick()
    sources = DashboardSources(metrics)
    feeds = RouteFeeds(metrics, sources)
    documents = []
    for route in ROUTES:
        if not route.available(sources):
            continue
        doc = Document()
        build_document(doc, sources, route.title, route.needs_gpu, route.shows_gpu,
                       lambda route=route: route.make_view(sources, feeds(route.path)))
        if any(isinstance(r.glyph, MultiLine) for r in doc.select({"type": GlyphRenderer})):
            documents.append((route.path, doc))
    return documents


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_timeline_documents_share_what_holds_no_state(profile: str) -> None:
    documents = _timeline_documents(profile, 4)
    paths = {path for path, _ in documents}
    assert {"/GPU-Resources", "/GPU-Activity"} <= paths, paths
    for path, doc in documents:
        kinds = collections.Counter(type(model) for model in doc.models)
        assert kinds[MonthsTicker] == kinds[YearsTicker] == 0, path
        sources = list(doc.select({"type": ColumnDataSource}))
        assert len({id(s.selection_policy) for s in sources}) <= kinds[UnionRenderers], path
        assert kinds[UnionRenderers] < len(sources), (path, kinds[UnionRenderers])
        renderers = list(doc.select({"type": GlyphRenderer}))
        assert kinds[AllIndices] < len(renderers), (path, kinds[AllIndices])
        mappings = list(doc.select({"type": CoordinateMapping}))
        assert len({id(m.y_scale) for m in mappings} | {id(m.x_scale) for m in mappings}) \
            <= 1, path
        for renderer in renderers:
            if isinstance(renderer.glyph, Patches):  # a band's areas, beside its lines
                lines = [other for other in renderers if isinstance(other.glyph, MultiLine)
                         and other.coordinates is renderer.coordinates]
                assert len(lines) == 1, path
                assert len(renderer.data_source.data["xs"]) == \
                    len(lines[0].data_source.data["key"]), path


def test_gpu_resources_document_holds_at_most_96_models() -> None:
    """124 before item 5 (4 GPUs, mixed): a policy per source, a filter per renderer, a
    scale pair per band, and 12 time tickers."""
    doc = dict(_timeline_documents("mixed", 4))["/GPU-Resources"]
    assert len(doc.models) <= 96, collections.Counter(type(m).__name__ for m in doc.models)
    kinds = collections.Counter(type(model) for model in doc.models)
    assert kinds[LinearScale] == 3  # the figure's two, and the one every band's mapping takes
