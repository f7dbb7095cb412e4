"""Through a real JupyterLab and jupyter-server-proxy, under base_url /user/alice/ with a
token: index, info, every dashboard page, static BokehJS and a live websocket."""

from __future__ import annotations

import asyncio
import json
import os
import stat

import pytest

from jupyterlab_nvdashboard import launch_server
from tests.support.bokeh_client import open_session
from tests.support.jupyter import jupyter_lab
from tests.support.stream_client import open_stream

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab():
    with jupyter_lab(simulate=2) as running:
        yield running


def test_index_and_info_through_proxy(lab) -> None:
    index = lab.dashboard_index()
    assert "/GPU-Resources" in index and "/Machine-Resources" in index
    info = json.loads(lab.get("nvdashboard/info.json")[1])
    assert info["simulated"] is True and info["gpu_count"] == 2


def test_unauthenticated_request_is_refused(lab) -> None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(lab.proxy_url + "/index.json", timeout=30) as response:
            # Followed a redirect: it must have landed on the login page, not on the data.
            assert "/login" in response.url and b"/GPU-Resources" not in response.read()
    except urllib.error.HTTPError as refused:
        assert refused.code in (401, 403)


def test_every_dashboard_and_bokehjs_through_proxy(lab) -> None:
    index = lab.dashboard_index()
    for route in index:
        status, body = lab.get("nvdashboard" + route)
        assert status == 200, route
        assert b'src="static/js/bokeh.min.js' in body
    status, body = lab.get("nvdashboard/static/js/bokeh.min.js")
    assert status == 200 and len(body) > 100_000


def test_websocket_through_proxy_receives_updates(lab) -> None:
    async def updates() -> int:
        session = await open_session(lab.proxy_url, "/GPU-Resources", origin=lab.root_url,
                                     headers=lab.auth)
        # The page's live data comes on its stream socket, under the page's proxied path.
        stream = await open_stream(lab.proxy_url, "/GPU-Resources", origin=lab.root_url,
                                   headers=lab.auth)
        for _ in range(3):
            await stream.receive(10)
        session.close()
        stream.close()
        return len(stream.frames) - 1

    assert asyncio.run(updates()) == 3


def _browser_cookie(lab) -> str:
    """Log in the way a browser does (token once, then a cookie)."""
    import urllib.request

    with urllib.request.urlopen(f"{lab.url}api/status?token={lab.token}", timeout=30) as reply:
        cookies = reply.headers.get_all("Set-Cookie") or []
    assert cookies, "jupyter set no login cookie"
    return "; ".join(cookie.split(";")[0] for cookie in cookies)


def test_cross_origin_websocket_through_proxy_is_refused(lab) -> None:
    # Jupyter skips the origin check for explicit token headers (a browser cannot send
    # those cross-site), so this uses cookie auth, as a hostile page in a browser would.
    cookie = {"Cookie": _browser_cookie(lab)}

    async def connect(origin: str) -> None:
        session = await open_session(lab.proxy_url, "/GPU-Resources", origin=origin,
                                     headers=cookie)
        session.close()

    asyncio.run(connect(lab.root_url))
    with pytest.raises(Exception) as refused:  # noqa: B017
        asyncio.run(connect("http://evil.example"))
    assert "403" in str(refused.value) or "closed" in str(refused.value).lower()


def test_backend_listens_on_a_private_unix_socket(lab) -> None:
    settings = launch_server()
    assert settings["unix_socket"] is True and "{unix_socket}" in settings["command"]
    assert "*" not in settings["command"]
    sockets = [path for path in _unix_sockets_of_children(lab.process.pid)]
    assert sockets, "no unix socket found for the nvdashboard backend"
    for path in sockets:
        mode = os.stat(path).st_mode
        assert stat.S_ISSOCK(mode)
        # Only the owner may connect: the private directory holding the socket gives
        # group and others no access at all.
        parent = os.stat(os.path.dirname(path)).st_mode
        assert parent & (stat.S_IRWXG | stat.S_IRWXO) == 0, oct(parent)


def _unix_sockets_of_children(parent_pid: int) -> list[str]:
    import psutil

    paths = []
    for child in psutil.Process(parent_pid).children(recursive=True):
        if "jupyterlab_nvdashboard.server" in " ".join(child.cmdline()):
            command = child.cmdline()
            paths.append(command[command.index("--unix-socket") + 1])
    return paths


def test_no_page_through_the_proxy_carries_a_jupyter_credential(lab) -> None:
    """Jupyter's HttpOnly login cookie, _xsrf and token stayed in every page's session token
    (a JWT is signed, not encrypted): page scripts could read them."""
    import urllib.request

    from bokeh.util.token import get_token_payload

    from tests.support.bokeh_client import SESSION_TOKEN

    login_cookie, xsrf = "2|login-cookie-value-0123|99", "2|xsrf-value-4567|99"
    index = lab.dashboard_index()
    for route in index:
        request = urllib.request.Request(
            f"{lab.proxy_url}{route}?token={lab.token}",
            headers={"Cookie": f"username-x={login_cookie}; _xsrf={xsrf}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            page = response.read().decode()
            assert response.headers.get("Cache-Control") == "no-store", route
            assert "frame-ancestors" in response.headers.get("Content-Security-Policy", "")
        match = SESSION_TOKEN.search(page)
        assert match, route
        decoded = json.dumps(get_token_payload(match.group(1)), default=repr)
        for secret in (lab.token, login_cookie, xsrf, "login-cookie-value", "xsrf-value"):
            assert secret not in decoded and secret not in page, (route, secret)
