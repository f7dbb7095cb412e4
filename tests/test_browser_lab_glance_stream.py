"""The status bar reads the glance over its socket, in Chromium at 1280x800 under a real
``jupyter lab`` (token, base_url /user/alice/, 4 simulated GPUs with nothing running on
them, the ``idle`` scenario, so the glance changes only when the test changes the GPUs):

- it shows the glance, and follows the GPUs when a process of this user takes memory;
- while nothing changes, the page asks nothing of ``glance.json`` (it polled it every 2 s)
  and the socket sends no more than its keepalive (one message each 10 s unchanged);
- light and dark, screenshots in test-artifacts/.

Counts, not timings: the window is measured by the page's own clock, and the bound is the
server's rule (a message per change, or per 10 s unchanged) with one message of slack.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.browser import PAGE_WAIT_MS, chromium, screenshot, watch
from tests.support.idle_lab import place
from tests.support.jupyter import lab_with_processes
from tests.test_browser_lab import open_lab
from tests.test_browser_lab_keyboard import STATUS_ITEM

pytestmark = [pytest.mark.browser, pytest.mark.lab]
GIB = 2**30
KEEPALIVE_S = 10.0  # stream/changes.py


@pytest.fixture(scope="module")
def lab(processes_file: Path) -> Iterator[object]:
    with lab_with_processes(processes_file, simulate=4,
                            extra_env={"NVDASHBOARD_SIMULATE_SCENARIO": "idle"},
                            extra_args=["--LabApp.expose_app_in_browser=True"]) as running:
        yield running


class GlanceTraffic:
    """What reaches the page for the glance: ``glance.json`` requests, socket messages."""

    def __init__(self, page) -> None:  # noqa: ANN001 - playwright Page
        self.requests: list[str] = []
        self.messages: list[dict] = []
        page.on("request", lambda r: self.requests.append(r.url)
                if "nvdashboard/glance.json" in r.url else None)
        page.on("websocket", self._socket)

    def _socket(self, socket) -> None:  # noqa: ANN001
        if "nvdashboard/glance/stream" in socket.url:
            # An empty message is the server's heartbeat (a tick with nothing new).
            socket.on("framereceived", lambda payload: self.messages.append(json.loads(payload))
                      if payload else None)


def content(message: dict) -> str:
    return json.dumps({k: v for k, v in message.items() if k != "time"}, sort_keys=True)


def test_the_status_bar_follows_the_gpus_over_one_socket(lab, processes_file) -> None:  # noqa: ANN001
    place(processes_file, [])
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        traffic = GlanceTraffic(page)
        open_lab(page, lab)
        page.wait_for_function(f"() => /4 of 4 GPUs free/.test("
                               f"document.querySelector('{STATUS_ITEM}')?.textContent ?? '')",
                               timeout=PAGE_WAIT_MS)
        # glance.json answers first; the socket takes over once it is open.
        deadline = time.monotonic() + PAGE_WAIT_MS / 1000
        while not traffic.messages and time.monotonic() < deadline:
            page.wait_for_timeout(100)  # Playwright delivers the socket's events meanwhile
        assert traffic.messages, "the glance came by glance.json alone: no socket message"
        screenshot(page, "lab-status-glance-stream-light")

        # A window with nothing changing: no poll, and messages only at the keepalive.
        requests, messages = len(traffic.requests), len(traffic.messages)
        started_ms = page.evaluate("performance.now()")
        page.wait_for_timeout(20_000)
        elapsed_s = (page.evaluate("performance.now()") - started_ms) / 1000
        received = list(traffic.messages)
        window = received[messages:]
        assert traffic.requests[requests:] == [], "glance.json was polled beside the socket"
        changes = sum(content(a) != content(b)
                      for a, b in zip(received[messages - 1:-1], window, strict=True))
        assert len(window) <= changes + elapsed_s / KEEPALIVE_S + 1, \
            (len(window), changes, elapsed_s)
        assert elapsed_s / 2 > changes + elapsed_s / KEEPALIVE_S + 1  # what a 2 s poll took

        # A process of this user takes 6 GiB of GPU 2: the status bar shows that GPU.
        place(processes_file, [{"gpu": 2, "pid": os.getpid(),
                                "used_memory_bytes": 6 * GIB}])
        page.wait_for_function(f"() => /^GPU 2 .*6\\.0 GiB of/.test("
                               f"document.querySelector('{STATUS_ITEM}')?.textContent ?? '')",
                               timeout=PAGE_WAIT_MS)
        changed = traffic.messages[-1]
        mine = [d for d in changed["devices"] if d["mine"]]
        assert [d["index"] for d in mine] == [2]
        assert traffic.requests[requests:] == [], "glance.json was polled beside the socket"

        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', "
                      "{theme: 'JupyterLab Dark'})")
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'",
                               timeout=PAGE_WAIT_MS)
        # The theme change shows JupyterLab's splash while the new styles load.
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=PAGE_WAIT_MS)
        screenshot(page, "lab-status-glance-stream-dark")
        watched.assert_clean()
