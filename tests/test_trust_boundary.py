"""The closed trust boundary, against real servers over HTTP and websockets.

Standalone servers ask for their launch token on every route (query, cookie or
``Authorization`` header); ``--no-token`` serves views but refuses run control; Bokeh
sessions are signed, so a session id the server never issued gets no document, in token
mode and behind the proxy alike. Bad settings (a ``*`` origin, every malformed
``NVDASHBOARD_*`` value) are one line on stderr and exit code 2.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import subprocess
import sys
import time
from contextlib import redirect_stderr
from typing import Any
from unittest import mock

import psutil
import pytest
from bokeh.util.token import generate_jwt_token, generate_session_id
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from jupyterlab_nvdashboard import config as config_module
from jupyterlab_nvdashboard.apps.registry import ROUTES
from jupyterlab_nvdashboard.auth import COOKIE_PREFIX, VIEW_ONLY_REASON, Access
from jupyterlab_nvdashboard.config import ConfigError, load_config
from jupyterlab_nvdashboard.preflight import exit_on_bad_settings
from tests.support.bokeh_client import TEST_TOKEN, BokehSession, document_models, open_session
from tests.support.servers import cli_server, free_port, get, in_process_server, server_output

WRONG = "not-the-token-0123456789"


def _http_routes() -> list[str]:
    routes = ["/", "/index.json", "/info.json", "/static/js/bokeh.min.js", "/processes.json",
              "/glance.json", "/diagnosis.json"]
    for route in ROUTES:
        routes += [route.path, route.path + "/metadata", route.path + "/static/js/bokeh.min.js",
                   route.path + "/autoload.js?bokeh-autoload-element=x"]
    return routes


async def _fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    response = await AsyncHTTPClient().fetch(url, headers=headers or {}, raise_error=False,
                                             request_timeout=30)
    return response.code, response.headers


async def _ws_status(url: str, route: str, headers: dict[str, str], query: str = "") -> int:
    """101 when ``<route>/ws`` upgrades, else the HTTP status it answered with."""
    request = HTTPRequest("ws" + url[len("http"):] + route + "/ws" + query,
                          headers={"Origin": url, **headers})
    try:
        connection = await websocket_connect(request, subprotocols=["bokeh", "x"])
    except HTTPClientError as error:
        return error.code
    connection.close()
    return 101


def _cookie(port: int, value: str = TEST_TOKEN) -> dict[str, str]:
    return {"Cookie": f"{COOKIE_PREFIX}{port}={value}"}


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_every_route_needs_the_token_and_accepts_each_form_of_it() -> None:
    with cli_server(["--simulate", "2"]) as (url, process):
        port = _port(url)
        refused = [{}, {"Authorization": f"token {WRONG}"}, _cookie(port, WRONG),
                   _cookie(port + 1)]  # another server's cookie name

        async def check() -> None:
            for route in _http_routes():
                for headers in refused:
                    assert (await _fetch(url + route, headers))[0] == 403, (route, headers)
                sep = "&" if "?" in route else "?"
                assert (await _fetch(f"{url}{route}{sep}token={WRONG}"))[0] == 403, route
                code, reply = await _fetch(f"{url}{route}{sep}token={TEST_TOKEN}")
                assert code == 200, route
                cookie = reply.get("Set-Cookie", "")
                assert cookie.startswith(f"{COOKIE_PREFIX}{port}={TEST_TOKEN};"), cookie
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie, cookie
                assert "Path=/" in cookie, cookie
                for headers in (_cookie(port), {"Authorization": f"token {TEST_TOKEN}"}):
                    assert (await _fetch(url + route, headers))[0] == 200, (route, headers)
            for route in ROUTES:
                for headers in refused:
                    assert await _ws_status(url, route.path, headers) == 403, route.path
                assert await _ws_status(url, route.path, {}, f"?token={WRONG}") == 403
                assert await _ws_status(url, route.path, {}, f"?token={TEST_TOKEN}") == 101
                assert await _ws_status(url, route.path, _cookie(port)) == 101
            # A whole session, page and websocket, with only the cookie.
            session = await open_session(url, "/GPU-Utilization",
                                         headers={"Authorization": "", **_cookie(port)})
            assert session.document["doc"]["roots"]
            session.close()

        asyncio.run(check())
        assert get(url + "/info.json", token=None)[0] == 403
        assert "Traceback" not in server_output(process)


def test_the_printed_url_carries_a_fresh_token_per_launch() -> None:
    tokens = []
    for _ in range(2):
        port = free_port()
        # An empty NVDASHBOARD_TOKEN counts as unset: the server makes its own.
        with cli_server(["--simulate", "1"], env={"NVDASHBOARD_TOKEN": ""}, port=port) as (
                url, process):
            printed = re.search(rf"dashboards at (http://127\.0\.0\.1:{port}/\?token=(\S+))",
                                server_output(process))
            assert printed, server_output(process)
            tokens.append(printed.group(2))
            assert len(printed.group(2)) >= 32
            assert get(printed.group(1), token=None)[0] == 200
            assert get(url + "/", token=None)[0] == 403
            assert get(url + "/", token=TEST_TOKEN)[0] == 403
    assert tokens[0] != tokens[1]


def _forged_tokens(issued: str) -> dict[str, str]:
    other_secret = b"a-secret-this-server-never-had-0123456789"
    expiry = {"session_expiry": int(time.time()) + 300}
    forged_id = generate_session_id(secret_key=other_secret, signed=True)
    return {
        "unsigned made-up id": generate_jwt_token("made-up-session", signed=False,
                                                  extra_payload=expiry),
        "signed with another secret": generate_jwt_token(forged_id, secret_key=other_secret,
                                                         signed=True, extra_payload=expiry),
        # The server's own token with its signature cut off.
        "issued token, signature removed": issued.split(".")[0],
    }


async def _forged_session_gets_nothing(url: str, token: str) -> None:
    request = HTTPRequest("ws" + url[len("http"):] + "/GPU-Utilization/ws",
                          headers={"Origin": url, "Authorization": f"token {TEST_TOKEN}"})
    connection = await websocket_connect(request, subprotocols=["bokeh", token])
    session = BokehSession(connection, "/GPU-Utilization")
    with pytest.raises(ConnectionError):  # closed by the server: no ACK, no document
        async with asyncio.timeout(10):
            await session.receive()


@pytest.mark.parametrize("mode", ["token", "jupyter-proxy"])
def test_a_session_id_the_server_never_issued_is_refused(mode: str) -> None:
    # Behind the proxy there is no token of our own: signed sessions are the boundary.
    fields = {} if mode == "token" else {"token": None, "jupyter_proxy": True}
    with in_process_server(gpus=1, **fields) as server:

        async def check() -> None:
            genuine = await open_session(server.url, "/GPU-Utilization")
            issued = re.search(r'"token":\s*"([^"]+)"',
                               get(server.url + "/GPU-Utilization")[1].decode()).group(1)
            genuine.close()
            before = server.session_ids()
            for token in _forged_tokens(issued).values():
                await _forged_session_gets_nothing(server.url, token)
            # No document was made for them (the closed one's may have gone meanwhile).
            assert server.session_ids() <= before

        asyncio.run(check())
        status, _ = get(server.url + "/GPU-Utilization?bokeh-session-id=made-up-session")
        assert status == 403


def _buttons(document: dict) -> dict[str, dict]:
    return {model["attributes"]["label"]: model for model in document_models(document)
            if model.get("name") == "Button" and "label" in model.get("attributes", {})}


async def _click(session: BokehSession, button_id: str) -> str:
    """Send the click BokehJS would send; return the status text the server answers with."""
    click = {"kind": "MessageSent", "msg_type": "bokeh_event",
             "msg_data": {"type": "event", "name": "button_click",
                          "values": {"type": "map", "entries": [["model", {"id": button_id}]]}}}
    await session.send("PATCH-DOC", {"events": [click]})
    async with asyncio.timeout(10):
        while True:
            message = await session.receive()
            for event in message.content.get("events", []) if message.msgtype == "PATCH-DOC" \
                    else []:
                if event.get("attr") == "text" and "not st" in str(event.get("new")):
                    return str(event["new"])


def test_no_token_serves_views_but_refuses_run_control() -> None:
    with cli_server(["--simulate", "2", "--no-token"]) as (url, process):
        for route in ["/", "/index.json", "/info.json", "/static/js/bokeh.min.js",
                      *[route.path for route in ROUTES]]:
            assert get(url + route, token=None)[0] == 200, route
        assert VIEW_ONLY_REASON in server_output(process)

        async def check() -> tuple[dict, list[str], list[str]]:
            session = await open_session(url, "/Workload", headers={"Authorization": ""})
            buttons = _buttons(session.document)
            texts = [model["attributes"].get("text", "")
                     for model in document_models(session.document)
                     if model.get("name") == "Div"]
            # Clicks a browser would not send for a disabled button: the server refuses them.
            replies = [await _click(session, buttons[label]["id"]) for label in ("Start", "Stop")]
            session.close()
            return buttons, texts, replies

        buttons, texts, replies = asyncio.run(check())
        assert buttons["Start"]["attributes"]["disabled"] is True
        assert buttons["Stop"]["attributes"]["disabled"] is True
        assert any(VIEW_ONLY_REASON in text for text in texts), texts
        assert "not started: " + VIEW_ONLY_REASON in replies[0]
        assert "not stopped: " + VIEW_ONLY_REASON in replies[1]
        time.sleep(1.0)
        assert psutil.Process(process.pid).children(recursive=True) == []  # nothing launched


def test_token_mode_enables_the_run_panel() -> None:
    # The counterpart of the view-only test: the same buttons, enabled, with the token.
    with in_process_server(gpus=1) as server:
        async def pull() -> dict:
            session = await open_session(server.url, "/Workload")
            session.close()
            return _buttons(session.document)

        buttons = asyncio.run(pull())
        assert buttons["Start"]["attributes"].get("disabled", False) is False


def test_access_follows_the_mode() -> None:
    socket_args = ["--unix-socket", "/tmp/nvdashboard-test.sock"]
    standalone = Access.for_config(load_config([], environ={"NVDASHBOARD_TOKEN": TEST_TOKEN}))
    assert standalone.token == TEST_TOKEN and standalone.run_control
    view_only = Access.for_config(load_config(["--no-token"], environ={}))
    assert view_only.token is None and not view_only.run_control
    proxied = Access.for_config(load_config([*socket_args, "--jupyter-proxy"], environ={}))
    assert proxied.token is None and proxied.run_control
    with pytest.raises(ConfigError, match="--unix-socket"):
        load_config(["--jupyter-proxy"], environ={})
    assert "--jupyter-proxy" in __import__("jupyterlab_nvdashboard").launch_server()["command"]


# ----- bad settings: one line on stderr, exit code 2 ---------------------------------------
def _run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("NVDASHBOARD_", "BOKEH_"))}
    environment.update({"NVDASHBOARD_PORT": str(free_port()), **(env or {})})
    # A value that is wrongly accepted starts a server: the timeout fails the test.
    return subprocess.run([sys.executable, "-m", "jupyterlab_nvdashboard.server", *args],
                          capture_output=True, text=True, timeout=60, env=environment)


def _refused_in_process(env: dict[str, str]) -> subprocess.CompletedProcess:
    """What ``python -m jupyterlab_nvdashboard.server`` does first with ``env``
    (``preflight.exit_on_bad_settings``), run in this process: the same exit code and stderr
    without an interpreter start for each value. Each variable's first malformed value still
    goes through a real process."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("NVDASHBOARD_", "BOKEH_"))}
    environment.update({"NVDASHBOARD_PORT": str(free_port()), **env})
    stderr = io.StringIO()
    code: object = 0
    with mock.patch.dict(os.environ, environment, clear=True), redirect_stderr(stderr):
        try:
            exit_on_bad_settings([])
        except SystemExit as exit:
            code = exit.code
    return subprocess.CompletedProcess(["exit_on_bad_settings"], code, "", stderr.getvalue())


def _assert_one_line_exit_2(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("nvdashboard: error:"), lines
    return lines[0]


@pytest.mark.parametrize(("args", "env"), [
    (["--allow-websocket-origin", "*"], {}),
    (["--allow-websocket-origin", "*.example.com"], {}),
    (["--allow-websocket-origin", "localhost:8000", "--allow-websocket-origin", "*:8000"], {}),
    ([], {"NVDASHBOARD_ALLOW_WEBSOCKET_ORIGIN": "*"}),
    ([], {"NVDASHBOARD_ALLOW_WEBSOCKET_ORIGIN": "localhost:8000,*"}),
    ([], {"BOKEH_ALLOW_WS_ORIGIN": "*"}),
])
def test_a_wildcard_origin_is_refused(args: list[str], env: dict[str, str]) -> None:
    line = _assert_one_line_exit_2(_run_cli(*args, env=env))
    assert "'*'" in line


# Several malformed values for every NVDASHBOARD_* variable in config._ENVIRONMENT.
MALFORMED = {
    "NVDASHBOARD_ADDRESS": ["no-such-host.invalid", "300.1.1.1", "::::"],
    "NVDASHBOARD_PORT": ["eighty", "-1", "1e3", "65536", "0"],
    "NVDASHBOARD_UNIX_SOCKET": ["/nonexistent-dir/x.sock", "/" + "a" * 200],
    "NVDASHBOARD_INTERVAL": ["nan", "inf", "-1", "fast", "0.01", "1e400"],
    "NVDASHBOARD_HISTORY": ["nan", "inf", "0", "long"],
    "NVDASHBOARD_IDLE_INTERVAL": ["nan", "inf", "-1", "slow", "0.001", "61"],
    "NVDASHBOARD_EXIT_AFTER_IDLE": ["nan", "inf", "-5", "never", "1e12"],
    "NVDASHBOARD_ALLOW_WEBSOCKET_ORIGIN": ["*", ",,,", "a b", "http://x:1/path", "h:*"],
    "NVDASHBOARD_SIMULATE": ["many", "1.5", "99", "-1"],
    "NVDASHBOARD_SIMULATE_NVLINK": ["maybe", "2", "yes please"],
    "NVDASHBOARD_SIMULATE_FAULTS": [
        "lose=x@y", "lose=1@", "lose=1", "lose=@", "lose=9@1", "lose=1@-1", "lose=1@nan",
        "lose=1@inf", "init=Nope", "init=", "unsupported=", "unsupported=bogus",
        "unsupported=|", "=", "x", ",=,", "slow=x", "slow=-1", "slow=nan", "slow=inf",
        "slow=1e400", "binding=", "binding=x", "binding=12", "binding=12.x", "binding=1.2.3.4",
    ],
    "NVDASHBOARD_SIMULATE_PROFILE": ["nope", "H200"],
    "NVDASHBOARD_SIMULATE_SCENARIO": ["nope", "Launch-Bound", "idle,starved"],
    "NVDASHBOARD_KEEP_RUNS": ["many", "0", "-1", "1.5"],
    "NVDASHBOARD_SIMULATE_PROCESSES": ["/", "/nonexistent-dir/p.json", " "],
    "NVDASHBOARD_UNUSED_SESSION_LIFETIME_MS": ["soon", "1", "nan", "99999999999"],
    # Valid before, and then every ?token= request answered 500 (spaces) or dropped the
    # connection (Cyrillic): a token must be URL-safe printable ASCII.
    "NVDASHBOARD_TOKEN": ["short", " " * 20, "x" * 15, "padded-token-value-1234 ",
                          "has inner spaces in it ok", "токен-из-кириллицы-1234",
                          "semi;colon=and,comma-token", "percent%20encoded-token"],
    "NVDASHBOARD_ALLOW_HOST": ["*", "*.example.com", ",,", "host:8000", "a b", "http://x",
                               "-leading.example"],
    "NVDASHBOARD_SIMULATE_HOST": ["two words", "a/b", "h" * 64],
    "NVDASHBOARD_SIMULATE_BINDING": ["/nonexistent/nvidia_ml_py.whl", "README.md", "."],
    "NVDASHBOARD_METRICS_HOSTNAME_LABEL": ["host", "HOSTNAME", "host name"],
    "NVDASHBOARD_METRICS": ["maybe"],
    "NVDASHBOARD_METRICS_ALLOW": ["not-an-ip", ",,", "10.0.0.300"],
    "DASK_SCHEDULER_ADDRESS": ["http://x y", "tcp://host:port:1"],
    # A store file that cannot be used is one log line at run time (tests/test_store.py);
    # these do not name a file at all.
    "NVDASHBOARD_STORE": ["/", ".", "some/folder/"],
    "NVDASHBOARD_STORE_RETENTION_5S": ["nan", "inf", "-1", "59", "1e9", "a day"],
    "NVDASHBOARD_STORE_RETENTION_1MIN": ["nan", "inf", "3599", "1e12", "a month"],
    "NVDASHBOARD_METRICS_PER_USER": ["many", "-1", "1.5", "10001"],
    "NVDASHBOARD_METRICS_NAMES": ["dcgm48", "Classic", "classic,dcgm47", "DCGM 4.7"],
    "NVDASHBOARD_UNUSED_AFTER": ["nan", "inf", "0", "-1", "1e9", "half an hour"],
}
# Variables that only mean something in simulate mode get simulated GPUs.
NEEDS_SIMULATION = {"NVDASHBOARD_SIMULATE_NVLINK", "NVDASHBOARD_SIMULATE_FAULTS",
                    "NVDASHBOARD_SIMULATE_PROFILE", "NVDASHBOARD_SIMULATE_PROCESSES"}


# Any path is a valid runs directory: one that cannot be used disables only the run panel,
# and the server serves everything else (tests/test_runs_fuzz.py).
NEVER_MALFORMED = {"NVDASHBOARD_RUNS_DIR"}
# Metrics-only variables are read only with /metrics on; off, they are ignored with a warning
# (tests/test_metrics_names.py).
NEEDS_METRICS = {"NVDASHBOARD_METRICS_HOSTNAME_LABEL", "NVDASHBOARD_METRICS_NAMES"}


def test_the_malformed_values_cover_every_variable() -> None:
    variables = {variable for variable, _ in config_module._ENVIRONMENT.values()}
    assert variables - NEVER_MALFORMED == set(MALFORMED)


@pytest.mark.parametrize(("variable", "value"),
                         [(variable, value) for variable, values in MALFORMED.items()
                          for value in values])
def test_every_malformed_environment_value_is_one_line_and_exit_2(variable: str,
                                                                  value: str) -> None:
    env = {variable: value}
    if variable in NEEDS_SIMULATION:
        env["NVDASHBOARD_SIMULATE"] = "2"
    if variable in NEEDS_METRICS:
        env["NVDASHBOARD_METRICS"] = "1"
    first = value == MALFORMED[variable][0]
    _assert_one_line_exit_2(_run_cli(env=env) if first else _refused_in_process(env))


@pytest.mark.parametrize("spec", ["lose=x@y", "lose=1@", "init=Nope", "unsupported=", "="])
def test_a_malformed_fault_spec_names_the_variable(spec: str) -> None:
    line = _assert_one_line_exit_2(_refused_in_process({"NVDASHBOARD_SIMULATE": "2",
                                                        "NVDASHBOARD_SIMULATE_FAULTS": spec}))
    assert "NVDASHBOARD_SIMULATE_FAULTS" in line


def test_faults_without_simulated_gpus_are_refused() -> None:
    line = _assert_one_line_exit_2(_run_cli(env={"NVDASHBOARD_SIMULATE_FAULTS": "slow=0.1"}))
    assert "simulate" in line


def test_history_csv_asks_for_the_token() -> None:
    # It answered without one (it was a plain RequestHandler) while the README said 403.
    with in_process_server(gpus=1) as server:
        assert get(server.url + "/history.csv?seconds=5", token=None)[0] == 403
        assert get(server.url + "/history.csv?seconds=5")[0] == 200


@pytest.mark.parametrize("setting", [
    {"NVDASHBOARD_METRICS": "maybe"},
    {"NVDASHBOARD_SIMULATE": "2", "NVDASHBOARD_SIMULATE_FAULTS": "slow=x"},
    {"NVDASHBOARD_SIMULATE": "2", "NVDASHBOARD_SIMULATE_PROFILE": "nope"},
    {"NVDASHBOARD_ADDRESS": "300.1.1.1"},
    {"NVDASHBOARD_UNIX_SOCKET": "/nonexistent-dir/x.sock"},
], ids=["setting", "fault-spec", "profile", "address", "unix-socket"])
def test_a_bad_setting_is_answered_before_bokeh_is_imported(setting: dict[str, str]) -> None:
    """Bokeh's import takes seconds on a busy machine; a malformed setting, a simulated
    machine that cannot be, or a place nobody can listen on needs none of it."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("NVDASHBOARD_", "BOKEH_"))}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "jupyterlab_nvdashboard.server"],
        capture_output=True, text=True, timeout=60, env={**environment, **setting})
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")]
    errors = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert result.returncode == 2 and len(errors) == 1, errors
    assert errors[0].startswith("nvdashboard: error:"), errors
    assert "jupyterlab_nvdashboard.config" in imported
    assert not [name for name in imported if name.startswith("bokeh")]
