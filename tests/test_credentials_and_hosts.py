"""No credential in a page, a header or a log; Host and Origin checked by the project itself.

Against real servers over HTTP and websockets: every dashboard page's Bokeh session token
is decoded and must hold no token or cookie value (standalone, and as behind Jupyter);
pages are ``no-store`` and carry ``frame-ancestors``; every response, errors and websocket
handshakes included, carries ``nosniff`` and a ``Referrer-Policy``; a foreign or malformed
``Host`` is refused on every route and socket, with and without a token; a websocket whose
forged Origin equals its forged Host is refused; library log lines carry no token, however
its name is encoded.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from bokeh.util.token import get_token_payload
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from jupyterlab_nvdashboard.apps.registry import ROUTES
from jupyterlab_nvdashboard.auth import HostRule, scrub_secrets
from jupyterlab_nvdashboard.config import load_config
from jupyterlab_nvdashboard.http_edge import EVERY_RESPONSE
from tests.support.bokeh_client import SESSION_TOKEN, TEST_TOKEN
from tests.support.servers import cli_server, get, in_process_server, server_output
from tests.support.waiting import until

# What a browser behind Jupyter sends along: Jupyter's HttpOnly login cookie and _xsrf.
JUPYTER_COOKIE_VALUE = "2|jupyter-login-cookie-secret-value|1234"
XSRF_VALUE = "2|xsrf-secret-value|5678"
JUPYTER_TOKEN = "jupyter-token-0123456789abcdef"
BROWSER_COOKIES = (f"username-127-0-0-1-8888={JUPYTER_COOKIE_VALUE}; _xsrf={XSRF_VALUE}")
SECRETS = (TEST_TOKEN, JUPYTER_COOKIE_VALUE, XSRF_VALUE, JUPYTER_TOKEN, "jupyter-login",
           "xsrf-secret")


def _session_payload(page: str) -> dict:
    match = SESSION_TOKEN.search(page)
    assert match, "no session token in the page"
    return get_token_payload(match.group(1))


@pytest.mark.parametrize("mode", ["token", "jupyter-proxy"])
def test_no_page_or_session_token_carries_a_credential(mode: str) -> None:
    fields = {} if mode == "token" else {"token": None, "jupyter_proxy": True}
    query_token = TEST_TOKEN if mode == "token" else JUPYTER_TOKEN
    with in_process_server(gpus=1, **fields) as server:
        for route in ROUTES:
            status, body = get(f"{server.url}{route.path}?token={query_token}&theme=dark",
                               headers={"Cookie": BROWSER_COOKIES,
                                        "Authorization": f"token {query_token}",
                                        "X-Forwarded-User": "alice"},
                               token=None)
            assert status == 200, route.path
            page = body.decode()
            payload = _session_payload(page)
            assert payload["headers"] == {} and payload["cookies"] == {}, payload
            # The one argument a document reads survives; nothing else does.
            assert set(payload["arguments"]) == {"theme"}, payload["arguments"]
            decoded = json.dumps(payload, default=repr)
            for secret in SECRETS:
                assert secret not in decoded, (route.path, secret)
                assert secret not in page, (route.path, secret)


def test_pages_are_no_store_and_framed_only_by_their_own_origin() -> None:
    with in_process_server(gpus=1) as server:

        async def check() -> None:
            client = AsyncHTTPClient()
            for route in ["/", "/index.json", "/info.json", "/processes.json",
                          *[route.path for route in ROUTES]]:
                response = await client.fetch(server.url + route, raise_error=False,
                                              headers={"Authorization": f"token {TEST_TOKEN}"})
                assert response.code == 200, route
                assert response.headers.get("Cache-Control") == "no-store", route
                assert "frame-ancestors 'self'" in response.headers.get(
                    "Content-Security-Policy", ""), route

        asyncio.run(check())


def test_every_response_says_nosniff_and_keeps_its_url_from_other_sites() -> None:
    with in_process_server(gpus=1) as server:
        auth = {"Authorization": f"token {TEST_TOKEN}"}
        requests = [(path, auth, 200) for path in (
            "/", "/index.json", "/info.json", "/history.csv?seconds=5", "/diagnosis.json",
            "/static/js/bokeh.min.js", *[route.path for route in ROUTES])]
        requests += [("/info.json", {}, 403), ("/no-such-page", auth, 404),
                     ("/history.csv?seconds=-1", auth, 400),
                     ("/info.json", {**auth, "Host": "evil.example"}, 403),
                     (ROUTES[0].path + "/ws", auth, 400)]  # not a websocket handshake

        def carries_both(headers: object) -> bool:
            return all(headers.get(name) == value  # type: ignore[attr-defined]
                       for name, value in EVERY_RESPONSE.items())

        async def check() -> None:
            client = AsyncHTTPClient()
            for path, headers, code in requests:
                response = await client.fetch(server.url + path, headers=headers,
                                              raise_error=False, request_timeout=60)
                assert response.code == code, (path, response.code)
                assert carries_both(response.headers), (path, dict(response.headers))
            assert EVERY_RESPONSE["Referrer-Policy"] in ("no-referrer", "same-origin")
            own = server.url.split("//", 1)[1]
            socket = await websocket_connect(HTTPRequest(
                "ws" + server.url[len("http"):] + ROUTES[0].path + "/stream",
                headers={**auth, "Origin": f"http://{own}"}))
            assert carries_both(socket.headers), dict(socket.headers)
            socket.close()

        asyncio.run(check())


async def _ws(url: str, path: str, headers: dict[str, str], subprotocols: list[str]) -> int:
    request = HTTPRequest("ws" + url[len("http"):] + path, headers=headers)
    try:
        connection = await websocket_connect(request, subprotocols=subprotocols)
    except HTTPClientError as error:
        return error.code
    connection.close()
    return 101


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.mark.parametrize("token_mode", ["--no-token", "token"])
def test_a_foreign_host_is_refused_on_every_route_and_socket(token_mode: str) -> None:
    args = ["--simulate", "1", "--allow-host", "dash.example"]
    if token_mode == "--no-token":
        args.append("--no-token")
    with cli_server(args) as (url, process):
        port = _port(url)
        routes = ["/", "/index.json", "/info.json", "/processes.json", "/glance.json",
                  "/history.csv?seconds=5", "/static/js/bokeh.min.js",
                  *[route.path for route in ROUTES]]
        for host in (f"evil.example:{port}", "evil.example", f"dash.example.evil:{port}",
                     f"localhost.evil.example:{port}"):
            for route in routes:
                assert get(url + route, headers={"Host": host})[0] == 403, (host, route)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"dash.example:{port}",
                     f"DASH.example:{port}", f"127.0.0.2:{port}", f"[::1]:{port}"):
            assert get(url + "/processes.json", headers={"Host": host})[0] == 200, host

        async def sockets() -> None:
            evil = f"evil.example:{port}"
            for route in ROUTES[:3]:
                for path, protocols in ((route.path + "/ws", ["bokeh", "x"]),
                                        (route.path + "/stream", [])):
                    code = await _ws(url, path, {"Host": evil, "Origin": f"http://{evil}",
                                                 "Authorization": f"token {TEST_TOKEN}"},
                                     protocols)
                    assert code == 403, (path, code)
            own = f"127.0.0.1:{port}"
            code = await _ws(url, ROUTES[0].path + "/stream",
                             {"Host": own, "Origin": f"http://{own}",
                              "Authorization": f"token {TEST_TOKEN}"}, [])
            assert code == 101

        asyncio.run(sockets())
        assert "Traceback" not in server_output(process)


def test_an_origin_equal_to_its_host_is_still_checked_against_the_allow_list() -> None:
    # The Host is allowed here (a loopback address, and a name given with --allow-host), so
    # only the Origin allow-list can refuse: tornado 6.6 accepted Origin == Host unasked.
    with in_process_server(gpus=1) as server:
        port = _port(server.url)

        async def check() -> None:
            for forged in (f"127.0.0.2:{port}", f"[::1]:{port}"):
                for path, protocols in (("/GPU-Utilization/ws", ["bokeh", "x"]),
                                        ("/GPU-Utilization/stream", [])):
                    for fetch_site in ({}, {"Sec-Fetch-Site": "same-origin"}):
                        code = await _ws(server.url, path,
                                         {"Host": forged, "Origin": f"http://{forged}",
                                          "Authorization": f"token {TEST_TOKEN}",
                                          **fetch_site}, protocols)
                        assert code == 403, (forged, path, fetch_site)
            own = f"127.0.0.1:{port}"
            assert await _ws(server.url, "/GPU-Utilization/stream",
                             {"Host": own, "Origin": f"http://{own}",
                              "Authorization": f"token {TEST_TOKEN}"}, []) == 101
            # "null" (a sandboxed frame or a file: page) is not an allowed origin either.
            assert await _ws(server.url, "/GPU-Utilization/stream",
                             {"Origin": "null", "Authorization": f"token {TEST_TOKEN}"},
                             []) == 403

        asyncio.run(check())


def test_only_a_well_formed_host_and_port_pass() -> None:
    # A loopback address followed by anything but a port, or by a port that is not one, was
    # read as the loopback address.
    with in_process_server(gpus=1) as server:
        port = _port(server.url)
        for host in ("[::1]evil.example", f"[::1]evil.example:{port}", f"[::1]:{port}junk",
                     f"127.0.0.1:{port}junk", f"localhost:{port}:{port}", "[::1]:",
                     "[::1]:99999", "::1", f"[127.0.0.1]:{port}", "[::1", ""):
            status, _ = get(server.url + "/info.json", headers={"Host": host})
            assert status == 403, host
        for host in (f"[::1]:{port}", "[::1]", f"127.0.0.1:{port}", f"localhost.:{port}",
                     "LOCALHOST"):
            assert get(server.url + "/info.json", headers={"Host": host})[0] == 200, host


def test_the_allowed_names_come_from_the_flag_the_environment_and_the_bind_address() -> None:
    config = load_config(["--allow-host", "a.example,b.example", "--allow-host", "c.example",
                          "--address", "10.1.2.3"],
                         environ={"NVDASHBOARD_ALLOW_HOST": "ignored.example"})
    rule = HostRule.for_config(config)
    for host in ("a.example:8000", "B.EXAMPLE", "c.example.", "10.1.2.3:8000", "localhost",
                 "x.localhost:1", "127.0.0.1", "[::1]:8000"):
        assert rule.host_allowed(host), host
    for host in ("ignored.example", "evil.example", "10.1.2.4", "", "a.example.evil"):
        assert not rule.host_allowed(host), host
    assert "a.example:8000" in config.websocket_origins
    from_env = HostRule.for_config(load_config([], environ={"NVDASHBOARD_ALLOW_HOST":
                                                           "env.example"}))
    assert from_env.host_allowed("env.example:9")
    # Bound to every interface: any IP literal is this machine's; names still need the flag.
    everywhere = HostRule.for_config(load_config(["--address", "0.0.0.0"], environ={}))
    assert everywhere.host_allowed("192.0.2.7:8000")
    assert not everywhere.host_allowed("evil.example:8000")


def test_request_logs_never_carry_the_token() -> None:
    with cli_server(["--simulate", "1"]) as (url, process):
        port = _port(url)
        guess = "a-guessed-token-value-0123456789"
        assert get(f"{url}/history.csv?seconds=-1&token={TEST_TOKEN}", token=None)[0] == 400
        assert get(f"{url}/info.json?token={guess}", token=None)[0] == 403
        assert get(f"{url}/info.json?token={TEST_TOKEN}", token=None,
                   headers={"Host": f"evil.example:{port}"})[0] == 403
        assert get(f"{url}/no-such-page?token={TEST_TOKEN}&_xsrf={XSRF_VALUE}",
                   token=None)[0] == 404
        assert get(f"{url}/GPU-Utilization/nope?token={TEST_TOKEN}", token=None)[0] == 404
        output = server_output(process)
        logged = [line for line in output.splitlines() if "dashboards at" not in line]
        assert any("400" in line for line in logged), output
        assert any("404" in line for line in logged), output
        for line in logged:
            assert TEST_TOKEN not in line and guess not in line, line
            assert "xsrf-secret" not in line, line
        # The one line that must show it: the URL to open, as Jupyter prints its own.
        assert f"?token={TEST_TOKEN}" in output


def test_a_token_under_an_encoded_name_never_reaches_the_log() -> None:
    # Tornado decodes an argument's name once: ?to%6ben= is ?token=, and authenticates.
    with cli_server(["--simulate", "1"]) as (url, process):
        assert get(f"{url}/info.json?to%6ben={TEST_TOKEN}", token=None)[0] == 200
        assert get(f"{url}/no-such-page?to%6ben={TEST_TOKEN}", token=None)[0] == 404
        for query in (f"%74oken={TEST_TOKEN}", f"TO%6BEN={TEST_TOKEN}",
                      f"to%256ben={TEST_TOKEN}", f"token%3D{TEST_TOKEN}",
                      f"_%78srf={XSRF_VALUE}&to%6Ben={TEST_TOKEN}"):
            get(f"{url}/no-such-page?{query}", token=None)
        # Each request's line, once the server has written it.
        output = until(lambda: (text := server_output(process)).count("no-such-page") == 6
                       and text, "the server logs the six requests")
        logged = [line for line in output.splitlines() if "dashboards at" not in line]
        for line in logged:
            assert TEST_TOKEN not in line and "xsrf-secret" not in line, line


def test_scrub_secrets_replaces_every_token_value() -> None:
    line = "403 GET /x?a=1&token=abc&bokeh-token=eyJ.x&_xsrf=2|y (127.0.0.1) 1.00ms"
    scrubbed = scrub_secrets(line)
    assert "abc" not in scrubbed and "eyJ" not in scrubbed and "2|y" not in scrubbed
    assert scrubbed.startswith("403 GET /x?a=1&token=[secret]&")
    encoded = scrub_secrets("404 GET /x?to%6ben=abc&%5Fxsrf=def&token%3Dghi&t%256Fken=jkl&b=2")
    assert encoded == "404 GET /x?to%6ben=[secret]&%5Fxsrf=[secret]&[secret]&t%256Fken=" \
        "[secret]&b=2"


def test_behind_jupyter_any_host_but_only_the_proxy_origin() -> None:
    # Jupyter checked the Host (its own rules); jupyter-server-proxy stamps its Origin.
    from jupyterlab_nvdashboard import PROXY_ORIGIN_HOST

    with in_process_server(gpus=1, token=None, jupyter_proxy=True,
                           allow_websocket_origin=(PROXY_ORIGIN_HOST,)) as server:
        assert get(server.url + "/info.json", headers={"Host": "hub.example"})[0] == 200

        async def check() -> None:
            path = "/GPU-Utilization/stream"
            forged = {"Host": "hub.example", "Origin": "http://hub.example"}
            assert await _ws(server.url, path, forged, []) == 403
            stamped = {"Host": "hub.example", "Origin": f"http://{PROXY_ORIGIN_HOST}"}
            assert await _ws(server.url, path, stamped, []) == 101

        asyncio.run(check())
