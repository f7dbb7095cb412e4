"""A dashboard server launched by jupyter-server-proxy in a real ``jupyter lab`` never
outlives it (issue 57): Jupyter shut down or killed while the request that launches the
server is in flight, or killed with ``-9`` once the server is up. The server exits within a
few seconds and the store's writer lock is free for the next server.
(``test_jupyter_gone.py`` places the end exactly with a fake Jupyter.)
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from tests.support.jupyter import dashboard_servers, jupyter_lab
from tests.support.jupyter_gone import (
    lock_is_free,
    lock_is_held,
    seconds_to_end,
    stored_buckets,
)
from tests.support.waiting import until

pytestmark = pytest.mark.lab


def lab_env(store: Path) -> dict[str, str]:
    # One launch, by the test's own request: not the server extension's at start-up.
    return {"NVDASHBOARD_STORE": str(store), "NVDASHBOARD_START_WITH_JUPYTER": "0"}


@pytest.mark.parametrize("how", ["shut-down", "killed"])
def test_jupyter_ends_while_the_request_that_launches_the_server_is_in_flight(
        tmp_path: Path, how: str) -> None:
    store = tmp_path / "history.sqlite"
    with jupyter_lab(simulate=1, extra_env=lab_env(store)) as lab:
        threading.Thread(target=lab.get, args=("nvdashboard/info.json",), daemon=True).start()
        [server] = until(lambda: dashboard_servers(lab.process.pid),
                         "jupyter-server-proxy launches the dashboard server", every_s=0.01)
        # Held still from its first moments until its Jupyter has gone, as a machine too busy
        # to run it would: the request is in flight, the server not yet started.
        server.suspend()
        try:
            if how == "shut-down":
                lab.shut_down()  # its File menu's "Shut Down"
            else:
                lab.process.send_signal(signal.SIGKILL)  # a hub's cull, the OOM killer
            lab.process.wait(60)
        finally:
            server.resume()
        seconds_to_end(server.pid)
    assert lock_is_free(store)


def test_jupyter_killed_with_minus_9_after_the_server_is_up(tmp_path: Path) -> None:
    store = tmp_path / "history.sqlite"
    with jupyter_lab(simulate=1, extra_env=lab_env(store)) as lab:
        assert "/GPU-Resources" in lab.dashboard_index()  # it has read its GPUs
        [server] = dashboard_servers(lab.process.pid)
        until(lambda: lock_is_held(store), "the dashboard server writes the store")
        lab.process.send_signal(signal.SIGKILL)
        lab.process.wait(30)
        seconds_to_end(server.pid)
    assert lock_is_free(store)
    assert stored_buckets(store) > 0
