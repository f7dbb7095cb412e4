"""/GPU-Processes in Chromium at 1280x800 and at the width JupyterLab leaves it with the
sidebar open, light and dark: no heading is cut, the columns keep their widths, and a
script run by an interpreter shows the script's name first, whole (issue 44, item 2.3)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from tests.support.browser import PAGE_WAIT_MS, chromium, next_frames, screenshot, watch
from tests.support.servers import get, in_process_server, with_token
from tests.support.waiting import until, until_ended

pytestmark = pytest.mark.browser
GIB = 2**30
SCRIPT = "train_embeddings_on_the_shared_gpu.py"
# A dashboard tab's width at 1280 px with JupyterLab's sidebar open.
WITH_SIDEBAR = 950

# The table's headings and the cell that names the script, inside Bokeh's shadow roots:
# each heading's width and whether its words fit it; the script name's right edge against
# its cell's.
TABLE_JS = """(script) => {
  const headings = [], cells = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.matches('.slick-header-column')) headings.push(el);
      if (el.matches('.slick-cell') && el.textContent.includes(script)) cells.push(el);
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  const named = cells.map((cell) => {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const at = node.textContent.indexOf(script);
      if (at < 0) continue;
      const range = document.createRange();
      range.setStart(node, at);
      range.setEnd(node, at + script.length);
      return {text: cell.textContent.trim(), nameRight: range.getBoundingClientRect().right,
              cellRight: cell.getBoundingClientRect().right};
    }
    return null;
  });
  return {headings: headings.map((h) => {
            const name = h.querySelector('.slick-column-name') || h;
            return {text: h.textContent.trim(), width: Math.round(h.getBoundingClientRect().width),
                    cut: name.scrollWidth > h.clientWidth + 1};
          }), named};
}"""


def test_process_table_headings_and_script_names_are_whole() -> None:
    # In a folder of a short name: the reader keeps the first 160 characters of a command
    # line (metrics/attribution.py), and pytest's own folders are longer than that.
    folder = Path(tempfile.mkdtemp(prefix="nvd-"))
    script = folder / SCRIPT
    script.write_text("import time\ntime.sleep(600)\n")
    # A Python process of this test's, listed by the simulated driver on GPU 0.
    child = subprocess.Popen([sys.executable, str(script), "--epochs", "3"])
    try:
        with in_process_server(gpus=2, profile="h200") as server, chromium() as browser:
            server.simulator.set_processes([SimulatedProcess(0, child.pid, 4 * GIB)])

            def rows() -> list[str]:
                return [row["what"] for row in
                        json.loads(get(server.url + "/processes.json")[1])["rows"]]

            until(lambda: any(SCRIPT in what for what in rows()), f"{SCRIPT} listed")
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            watched = watch(page)
            page.goto(with_token(server.url + "/"))
            widths = {}
            for theme, width in (("light", 1280), ("dark", 1280), ("light", WITH_SIDEBAR),
                                 ("dark", WITH_SIDEBAR)):
                page.set_viewport_size({"width": width, "height": 800})
                page.goto(f"{server.url}/GPU-Processes?theme={theme}")
                page.wait_for_function(f"(s) => ({TABLE_JS})(s).named.length === 1",
                                       arg=SCRIPT, timeout=PAGE_WAIT_MS)
                next_frames(page)
                seen = page.evaluate(TABLE_JS, SCRIPT)
                screenshot(page, f"gpu-processes-{width}-{theme}")
                cut = [h["text"] for h in seen["headings"] if h["cut"]]
                assert not cut, (width, cut)
                widths[width] = [h["width"] for h in seen["headings"]]
                (named,) = seen["named"]
                # The script first, with its arguments; the interpreter's path after.
                assert named["text"].startswith(f"{SCRIPT} --epochs 3 · "), named
                assert sys.executable in named["text"], named
                assert named["nameRight"] <= named["cellRight"], ("script name cut", named)
            assert widths[1280] == widths[WITH_SIDEBAR], widths  # stable column widths
            watched.assert_clean()
    finally:
        child.kill()
        until_ended(child.pid)
        child.wait()
        shutil.rmtree(folder)
