"""A timeline page's document holds few models (issue 47, item 5): each costs the server
about 5 kB per viewer, and /GPU-Resources held 124. A band's min-max areas are columns of
its lines' source, the sources share their selection policy and the renderers' views their
filter (BokehJS keeps no state in either), and the time ticker carries no month or year
tickers. Under every simulated profile, on every timeline page; the browser tests
(test_browser_long_windows.py, test_browser_timelines.py) check that the areas and lines
still draw."""

from __future__ import annotations

import collections

import pytest
from bokeh.document import Document
from bokeh.models import (
    AllIndices,
    ColumnDataSource,
    GlyphRenderer,
    MonthsTicker,
    MultiLine,
    Patches,
    UnionRenderers,
    YearsTicker,
)

from jupyterlab_nvdashboard.apps.components import AREA_XS, AREA_YS
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
        for renderer in renderers:
            if isinstance(renderer.glyph, Patches):  # a band's areas, over its lines' rows
                data = renderer.data_source.data
                assert (renderer.glyph.xs, renderer.glyph.ys) == (AREA_XS, AREA_YS), path
                assert len(data[AREA_XS]) == len(data["key"]) == len(data["xs"]), path
                lines = [other for other in renderers if other.data_source is
                         renderer.data_source and isinstance(other.glyph, MultiLine)]
                assert len(lines) == 1 and lines[0].coordinates is renderer.coordinates, path


def test_gpu_resources_document_holds_at_most_90_models() -> None:
    """124 before item 5 (4 GPUs, mixed): 9 sources with a selection and a policy each, a
    renderer's filter each, a scale pair per band, and 12 time tickers."""
    doc = dict(_timeline_documents("mixed", 4))["/GPU-Resources"]
    assert len(doc.models) <= 90, collections.Counter(type(m).__name__ for m in doc.models)
    feeds = [model for model in doc.models if isinstance(model, ColumnDataSource)]
    panels = [r for r in doc.select({"type": GlyphRenderer}) if isinstance(r.glyph, MultiLine)]
    assert len(feeds) == len(panels) + 1  # the streamed columns, and a source per band
