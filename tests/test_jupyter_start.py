"""The server extension starts the dashboard server when Jupyter starts, through
jupyter-server-proxy's own launcher: it samples before any Lab page is opened, and the first
page reaches that same process."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import time
from pathlib import Path

import pytest

from jupyterlab_nvdashboard import jupyter_extension
from jupyterlab_nvdashboard.config import ConfigError, start_with_jupyter
from tests.support.jupyter import dashboard_servers, jupyter_lab

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[1]


def stored_buckets(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return db.execute("SELECT count(*) FROM buckets").fetchone()[0]
    except sqlite3.Error:
        return 0  # not made yet


def test_the_dashboard_server_samples_before_the_first_lab_page() -> None:
    with tempfile.TemporaryDirectory(prefix="nvdashboard-store-") as folder:
        store = Path(folder) / "history.sqlite"
        env = {
            # This checkout's package (the installed one may predate the extension), and
            # the config file the wheel installs, which enables it.
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])),
            "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter-config"),
            "NVDASHBOARD_STORE": str(store),
        }
        with jupyter_lab(simulate=2, extra_env=env) as lab:
            # Nothing has asked the proxy for a dashboard: no page, no index.json.
            deadline = time.monotonic() + 120
            while not (dashboard_servers(lab.process.pid) and stored_buckets(store) > 0):
                assert time.monotonic() < deadline, "no dashboard server sampling"
                time.sleep(0.5)
            [started] = dashboard_servers(lab.process.pid)
            assert "--jupyter-proxy" in started.cmdline()
            # The first page reaches that very process: the proxy launched it.
            assert "/GPU-Resources" in lab.dashboard_index()
            assert [p.pid for p in dashboard_servers(lab.process.pid)] == [started.pid]


def test_a_setting_turns_the_start_with_jupyter_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert start_with_jupyter({}) is True
    assert start_with_jupyter({"NVDASHBOARD_START_WITH_JUPYTER": "0"}) is False
    with pytest.raises(ConfigError):
        start_with_jupyter({"NVDASHBOARD_START_WITH_JUPYTER": "maybe"})

    class Log:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def warning(self, text: str, *args: object) -> None:
            self.lines.append(text % args)

    class App:
        log = Log()

    scheduled: list[object] = []

    class Loop:
        def call_later(self, *args: object) -> None:
            scheduled.append(args)

    monkeypatch.setattr("tornado.ioloop.IOLoop.current", lambda: Loop())
    # The idle notice's routes are added whatever this setting says (test_lab_idle_cull.py).
    monkeypatch.setattr(jupyter_extension, "add_idle_cull", lambda *args: None)
    monkeypatch.setenv("NVDASHBOARD_START_WITH_JUPYTER", "off")
    jupyter_extension._load_jupyter_server_extension(App())
    assert scheduled == []
    monkeypatch.setenv("NVDASHBOARD_START_WITH_JUPYTER", "sometimes")
    jupyter_extension._load_jupyter_server_extension(App())
    assert scheduled == [] and len(App.log.lines) == 1  # one line, Jupyter carries on
    monkeypatch.delenv("NVDASHBOARD_START_WITH_JUPYTER")
    jupyter_extension._load_jupyter_server_extension(App())
    assert len(scheduled) == 1  # after start-up, on the loop: never waited on


def test_the_start_request_goes_to_this_jupyter_on_loopback() -> None:
    class App:
        sock, ip, port, base_url, certfile = "", "0.0.0.0", 8888, "/user/alice/", ""

    assert jupyter_extension.start_url(App()) == \
        "http://127.0.0.1:8888/user/alice/nvdashboard/info.json"
    App.sock = "/tmp/jupyter.sock"
    assert jupyter_extension.start_url(App()) is None
