"""The Jupyter server extension: start the dashboard server when Jupyter starts.

Behind jupyter-server-proxy the dashboard server used to start on the first request, so a
kernel started before any Lab tab (from the command line, a hub API) left no trace in the
history. This extension asks jupyter-server-proxy for the server once Jupyter is serving: one
authenticated request to ``<base_url>nvdashboard/info.json``, which makes the proxy's own
launcher start it (the same process, the same socket, the same settings as a Lab page
would get). Jupyter's start-up never waits on it: the request runs on Jupyter's event loop
after start-up, and whatever it meets (a login Jupyter asks for, a Jupyter on a unix socket,
a server that fails to start) is one log line.

On by default (``jupyter_server_config.d/jupyterlab_nvdashboard.json`` enables it). Turn it
off with ``NVDASHBOARD_START_WITH_JUPYTER=0``, or with ``jupyter server extension disable
jupyterlab_nvdashboard``; the dashboards then start with the first page, as before.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from .config import ConfigError, start_with_jupyter

# jupyter-server-proxy's name for this server (the entry point in pyproject.toml).
PROXY_NAME = "nvdashboard"
# Seconds after Jupyter's loop starts: Jupyter has bound its port and logged its URL.
START_DELAY_S = 1.0
# The proxy waits up to launch_server()'s timeout for the server; a little more here.
REQUEST_TIMEOUT_S = 90.0


def start_url(serverapp: Any) -> str | None:
    """Where this Jupyter server answers on this machine (None: a unix socket)."""
    if getattr(serverapp, "sock", ""):
        return None
    ip = serverapp.ip or "127.0.0.1"
    if ip in ("0.0.0.0", "*"):
        ip = "127.0.0.1"
    elif ip == "::":
        ip = "::1"
    host = f"[{ip}]" if ":" in ip else ip
    scheme = "https" if getattr(serverapp, "certfile", "") else "http"
    base = serverapp.base_url if serverapp.base_url.endswith("/") else serverapp.base_url + "/"
    return f"{scheme}://{host}:{serverapp.port}{base}{PROXY_NAME}/info.json"


def jupyter_token(serverapp: Any) -> str:
    """The token this Jupyter server accepts ('' when it asks for none, or a password)."""
    provider = getattr(serverapp, "identity_provider", None)
    token = getattr(provider, "token", "") or getattr(serverapp, "token", "")
    return token or os.environ.get("JUPYTERHUB_API_TOKEN", "")


async def start_dashboard_server(serverapp: Any, log: logging.Logger) -> bool:
    """Ask jupyter-server-proxy for the dashboard server; True when it answered."""
    from tornado.httpclient import AsyncHTTPClient, HTTPClientError

    url = start_url(serverapp)
    if url is None:
        log.info("nvdashboard: Jupyter listens on a unix socket; the dashboard server starts "
                 "with the first dashboard page instead")
        return False
    token = jupyter_token(serverapp)
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        await AsyncHTTPClient().fetch(url, headers=headers, request_timeout=REQUEST_TIMEOUT_S,
                                      follow_redirects=False,
                                      # Jupyter's own certificate, on this machine.
                                      validate_cert=False)
    except HTTPClientError as error:
        why = ("Jupyter asks for a login this extension cannot give"
               if error.code in (302, 401, 403) else f"HTTP {error.code}")
        log.warning("nvdashboard: could not start the dashboard server with Jupyter (%s); it "
                    "starts with the first dashboard page instead", why)
        return False
    except Exception as error:  # noqa: BLE001 - one line; Jupyter carries on
        log.warning("nvdashboard: could not start the dashboard server with Jupyter (%s: %s);"
                    " it starts with the first dashboard page instead",
                    type(error).__name__, error)
        return False
    log.info("nvdashboard: the dashboard server is sampling (started with Jupyter)")
    return True


def _load_jupyter_server_extension(serverapp: Any) -> None:
    log = serverapp.log
    try:
        wanted = start_with_jupyter(os.environ)
    except ConfigError as error:
        log.warning("nvdashboard: %s; the dashboard server starts with the first page", error)
        return
    if not wanted:
        return
    from tornado.ioloop import IOLoop

    # After start-up: the loop runs this once Jupyter serves, and never holds it up.
    IOLoop.current().call_later(START_DELAY_S, lambda: IOLoop.current().add_callback(
        start_dashboard_server, serverapp, log))
