"""Every page and the overview in Chromium at 1280x800, in each state a user meets: 4 GPUs
with a process of theirs, MIG, a consumer card, a lost GPU, and no process at all.

Each page, in each state, is loaded in one theme and the next page in the other, so every
page is seen in both themes across the states. On every page: no console error, no clipped
table cell, no "NaN"/"undefined"/"null" text, no Bokeh message sent back to the server
while live rows arrive, and a time axis on screen where the page has one. Each state then
asserts what the user must see where it shows: how many GPUs are free and who holds one, the MIG
devices, the reasons on unsupported rows, "GPU lost", "No process holds a GPU context".
The screenshots are in ``test-artifacts/states-*.png``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from jupyterlab_nvdashboard.apps.overview import NO_PROCESSES
from jupyterlab_nvdashboard.apps.processes import current_user
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from tests.support.browser import PAGE_WAIT_MS, chromium, screenshot, watch
from tests.support.servers import RunningServer, get, in_process_server, with_token
from tests.support.waiting import until

pytestmark = pytest.mark.browser
THEMES = ("light", "dark")
BACKGROUND = {"light": "rgb(255, 255, 255)", "dark": "rgb(32, 38, 43)"}
NOT_SHOWN = ("NaN", "undefined", "null")

# What the page shows as a user reads it: its text (inside Bokeh's shadow roots too), the
# table cells whose text does not fit, and where the time axis is drawn, if there is one.
PAGE_JS = """() => {
  const texts = [], clipped = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot);
      if ((el.tagName === 'TD' || el.tagName === 'TH') && el.offsetParent !== null &&
          el.scrollWidth > el.clientWidth + 1) clipped.push(el.textContent.trim());
    }
    for (const node of root.childNodes)  // what is rendered: no script or style text
      if (node.nodeType === 1 && 'innerText' in node && !['STYLE', 'SCRIPT'].includes(
          node.tagName)) texts.push(node.innerText);
  };
  walk(document);
  let axis = null;
  if (window.Bokeh && Bokeh.index) {
    const views = [];
    const visit = (view) => { views.push(view);
      for (const child of (view.child_views || [])) visit(child); };
    for (const view of Object.values(Bokeh.index)) visit(view);
    const plot = views.find((v) => v.model.type === 'Figure' &&
      [...v.model.above, ...v.model.below].some((a) => a.type === 'DatetimeAxis'));
    if (plot) { const box = plot.el.getBoundingClientRect();
                axis = {top: box.top, bottom: box.bottom}; }
  }
  return {text: texts.join('\\n'), clipped, axis};
}"""


@dataclass
class State:
    name: str
    gpus: int
    profile: str
    prepare: Callable[[RunningServer], None]
    # route -> texts the user must see on it in this state
    must_see: Callable[[str], dict[str, list[str]]]


def _own_process_on_gpu(index: int) -> Callable[[RunningServer], None]:
    def prepare(server: RunningServer) -> None:
        server.simulator.set_processes([SimulatedProcess(index, os.getpid(), 6 * 2**30)])
    return prepare


def _lose_gpu(server: RunningServer) -> None:
    server.simulator.lose_gpu(1)
    until(lambda: any(gpu.lost for gpu in server.metrics.history.latest().gpus),
          "a sample with the GPU lost")


def _no_processes(server: RunningServer) -> None:
    server.simulator.set_processes([])


STATES = (
    State("4-gpus", 4, "mixed", _own_process_on_gpu(2), lambda user: {
        "/": ["of 4 free", user, "1 process"], "/GPU-Processes": [user]}),
    State("mig", 2, "a100-mig", lambda server: None, lambda user: {
        "/": ["GPU 0 · MIG 1", "3g.40gb", "GPU 0 · MIG 2", "4g.40gb"],
        "/GPU-Health": ["MIG enabled: 3g.40gb, 4g.40gb"]}),
    State("consumer", 1, "consumer", lambda server: None, lambda user: {
        "/": ["not supported by this GPU or driver"],
        "/GPU-Health": ["not supported"]}),
    State("lost", 4, "mixed", _lose_gpu, lambda user: {
        "/": ["GPU lost"], "/GPU-Health": ["GPU lost"],
        "/GPU-Resources": ["GPU 1 lost"],
        "/GPU-Activity": ["GPU 1 lost", "GPU 1 GPU lost: it stopped answering NVML"]}),
    State("no-processes", 4, "mixed", _no_processes, lambda user: {
        "/": [NO_PROCESSES], "/GPU-Processes": [NO_PROCESSES]}),
)


@contextmanager
def _state_server(state: State) -> Iterator[RunningServer]:
    with in_process_server(gpus=state.gpus, profile=state.profile) as server:
        server.wait_until_gpus_read()
        state.prepare(server)
        yield server


def _count_bokeh_messages_sent(page) -> list[int]:  # noqa: ANN001
    """A one-item list counting the frames the page sends on Bokeh's ``/ws`` socket."""
    sent = [0]

    def on_socket(socket) -> None:  # noqa: ANN001
        if socket.url.split("?")[0].endswith("/ws"):
            socket.on("framesent", lambda payload: sent.__setitem__(0, sent[0] + 1))
    page.on("websocket", on_socket)
    return sent


def _show(page, url: str, route: str, theme: str, sent: list[int]) -> dict:  # noqa: ANN001
    page.goto(f"{url}{route}?theme={theme}")
    page.wait_for_function("() => getComputedStyle(document.body).backgroundColor === "
                           f"'{BACKGROUND[theme]}'", timeout=PAGE_WAIT_MS)
    if route != "/":
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0",
                               timeout=PAGE_WAIT_MS)
        # The first live frame is drawn (a page without a stream has none to wait for).
        page.wait_for_function("() => !window.nvdashboardLive || nvdashboardLive.draws > 0 "
                               "|| nvdashboardLive.frames > 0", timeout=PAGE_WAIT_MS)
    before = sent[0]
    page.wait_for_timeout(1200)  # a second of live updates, and one repaint after them
    seen = page.evaluate(PAGE_JS)
    seen["bokeh_messages_sent"] = sent[0] - before
    return seen


@pytest.mark.parametrize("state", STATES, ids=[state.name for state in STATES])
def test_every_page_says_what_the_state_is(state: State) -> None:
    user = current_user()
    with _state_server(state) as server, chromium() as browser:
        routes = ["/", *json.loads(get(server.url + "/index.json")[1])]
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        sent = _count_bokeh_messages_sent(page)
        page.goto(with_token(server.url + "/"))
        must_see = state.must_see(user)
        for position, route in enumerate(routes):
            theme = THEMES[(position + STATES.index(state)) % 2]
            seen = _show(page, server.url, route, theme, sent)
            assert not seen["clipped"], (route, seen["clipped"])
            # Live rows are drawn in the page: nothing goes back to the server.
            assert seen["bokeh_messages_sent"] == 0, route
            words = seen["text"].split()
            assert not [word for word in NOT_SHOWN if word in words], (route, seen["text"])
            if seen["axis"] is not None:  # a timeline: its time axis is on screen
                assert 0 <= seen["axis"]["top"] and seen["axis"]["top"] + 40 <= 800, \
                    (route, seen["axis"])
            # Some readings come with slower passes (process owners, diagnosis lines).
            deadline = time.monotonic() + 90  # on a loaded machine too
            while (missing := [text for text in must_see.get(route, [])
                               if text not in seen["text"]]) and time.monotonic() < deadline:
                page.wait_for_timeout(500)
                seen = page.evaluate(PAGE_JS)
            assert not missing, (route, missing, seen["text"][:3000])
            name = route.strip("/").lower() or "index"
            screenshot(page, f"states-{state.name}-{name}-{theme}")
        assert set(must_see) <= set(routes)
        watched.assert_clean()
