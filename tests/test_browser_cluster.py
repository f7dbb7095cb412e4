"""/Cluster-GPUs in Chromium at 1280x760, light and dark, over 15 minutes of a made-up
cluster (one real host, two simulated ones, one of which left for a minute): the title and
the simulated hosts' totals say SIMULATED, and the window picker's 10 minutes show the
older columns, each as wide as the seconds it covers."""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")

from jupyterlab_nvdashboard.cluster.view import ClusterView  # noqa: E402
from tests.support.browser import chromium, drawn_canvas, screenshot, watch  # noqa: E402
from tests.support.cluster_page import fill_cluster_history  # noqa: E402
from tests.support.servers import in_process_server, with_token  # noqa: E402

pytestmark = pytest.mark.browser

HOSTS = {"node-a": (2, False), "node-b": (4, True), "node-c": (8, True)}
# The heat map's source and its rect glyph, as the page holds them.
HEAT_JS = """() => {
  const models = Bokeh.documents[0].all_models;
  const source = [...models].find((m) => m.type === 'ColumnDataSource' && m.data.heat);
  const cells = [...models].find((m) => m.type === 'GlyphRenderer' && m.glyph.type === 'Rect');
  const time = source.data.time;
  const width = cells.glyph.width;
  return {rows: time.length, oldest: Math.min(...time), newest: Math.max(...time),
          width: typeof width === 'number' ? width : width.value};
}"""


def busy_then_idle(host: str, gpu: int, age: float) -> float:
    """Busy until 5 minutes ago, each GPU a little differently; then idle."""
    return 85.0 - 6 * gpu if age >= 300 else 10.0 + 3 * gpu


def test_cluster_page_says_simulated_and_its_long_window_shows_older_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    views: list[ClusterView] = []
    monkeypatch.setattr(ClusterView, "start", lambda self: views.append(self))  # no scheduler
    with in_process_server(gpus=1, dask_scheduler="tcp://127.0.0.1:9") as server, \
            chromium() as browser:
        (cluster,) = views
        fill_cluster_history(cluster, HOSTS, 900, busy_then_idle,
                             away=lambda host, age: host == "node-b" and 400 <= age < 460)
        for theme in ("light", "dark"):
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            watched = watch(page)
            page.goto(with_token(f"{server.url}/Cluster-GPUs?theme={theme}"))
            page.wait_for_function("() => window.nvdashboardLive && nvdashboardLive.draws > 0",
                                   timeout=30_000)
            assert page.title() == "NVDashboard: Cluster GPUs (some SIMULATED)"
            page.get_by_text("node-c SIMULATED").first.wait_for(timeout=10_000)
            assert page.get_by_text("node-b SIMULATED").count() == 1
            assert page.get_by_text("node-a SIMULATED").count() == 0  # the real host
            short = page.evaluate(HEAT_JS)
            assert short["newest"] - short["oldest"] <= 120_000 and short["width"] == 1000
            assert short["rows"] == 14 * 121  # a column a second, a row per GPU
            page.wait_for_timeout(300)
            screenshot(page, f"cluster-gpus-simulated-2min-{theme}")
            page.get_by_text("10 min").first.click()
            page.wait_for_function(f"() => ({HEAT_JS})().oldest < {short['newest']} - 590000",
                                   timeout=10_000)
            long = page.evaluate(HEAT_JS)
            # 240 columns of 2.5 s, each as wide as what it covers.
            assert long["width"] == 2500 and long["rows"] <= 14 * 241
            assert page.evaluate("() => nvdashboardLive.window") == 600
            # Drawn on the next animation frame.
            assert drawn_canvas(page, 1000)["ink"] > 1000
            screenshot(page, f"cluster-gpus-simulated-10min-{theme}")
            watched.assert_clean()
            page.close()
