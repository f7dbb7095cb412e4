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

It also serves the idle-kernel notice's routes (authenticated by Jupyter, XSRF-checked
as Jupyter's own API): ``POST <base_url>nvdashboard-idle/notices`` (JupyterLab shows the
notice for a kernel's idle episode), ``POST <base_url>nvdashboard-idle/keeps`` (the user
chose "Keep this kernel"), ``GET <base_url>nvdashboard-idle/culls`` (the admin's cull
policy, the warnings armed and what it shut down) and ``GET
<base_url>nvdashboard-idle/executions`` (when each kernel last ran a cell, for the idle
judgment, and its last cells' spans, for the timelines' marks: ``kernel_executions.py``),
and runs that cull when an admin turned it on
(``idle_cull.py``).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from .config import ConfigError, CullSettings, cull_settings, start_with_jupyter
from .http_edge import EVERY_RESPONSE
from .idle_cull import (
    CULLS_PATH,
    EXECUTIONS_PATH,
    KEEPS_PATH,
    NOTICES_PATH,
    CullPolicy,
    IdleCuller,
    kernel_from_body,
    notice_from_body,
)
from .kernel_executions import ExecutionClock

# jupyter-server-proxy's name for this server (the entry point in pyproject.toml).
PROXY_NAME = "nvdashboard"
# Seconds after Jupyter's loop starts: Jupyter has bound its port and logged its URL.
START_DELAY_S = 1.0
# The proxy waits up to launch_server()'s timeout for the server; a little more here.
REQUEST_TIMEOUT_S = 90.0


def start_url(serverapp: Any) -> str | None:
    """Where this Jupyter server answers on this machine (None: a unix socket)."""
    return proxy_url(serverapp, "info.json")


def proxy_url(serverapp: Any, name: str) -> str | None:
    """``name`` of the dashboard server, through this Jupyter's proxy on this machine (None:
    Jupyter listens on a unix socket)."""
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
    return f"{scheme}://{host}:{serverapp.port}{base}{PROXY_NAME}/{name}"


def jupyter_token(serverapp: Any) -> str:
    """The token this Jupyter server accepts ('' when it asks for none, or a password)."""
    provider = getattr(serverapp, "identity_provider", None)
    token = getattr(provider, "token", "") or getattr(serverapp, "token", "")
    return token or os.environ.get("JUPYTERHUB_API_TOKEN", "")


async def fetch_from_proxy(serverapp: Any, url: str) -> bytes:
    """GET ``url`` from this Jupyter with its own token (raises as tornado's client does)."""
    from tornado.httpclient import AsyncHTTPClient

    token = jupyter_token(serverapp)
    headers = {"Authorization": f"token {token}"} if token else {}
    response = await AsyncHTTPClient().fetch(url, headers=headers,
                                             request_timeout=REQUEST_TIMEOUT_S,
                                             follow_redirects=False,
                                             # Jupyter's own certificate, on this machine.
                                             validate_cert=False)
    return response.body


async def start_dashboard_server(serverapp: Any, log: logging.Logger) -> bool:
    """Ask jupyter-server-proxy for the dashboard server; True when it answered."""
    from tornado.httpclient import HTTPClientError

    url = start_url(serverapp)
    if url is None:
        log.info("nvdashboard: Jupyter listens on a unix socket; the dashboard server starts "
                 "with the first dashboard page instead")
        return False
    try:
        await fetch_from_proxy(serverapp, url)
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


def idle_handlers(culler: IdleCuller, executions: ExecutionClock
                  ) -> list[tuple[str, Any, dict[str, Any]]]:
    """The notice's routes, relative to Jupyter's base URL, with Jupyter's own login and
    permission checks (the ``kernels`` resource: what they touch is the user's kernels)."""
    from jupyter_server.auth.decorator import authorized
    from jupyter_server.base.handlers import APIHandler
    from tornado import web

    class IdleHandler(APIHandler):
        auth_resource = "kernels"

        def initialize(self, culler: IdleCuller, executions: ExecutionClock) -> None:
            self.culler, self.executions = culler, executions

        def posted(self) -> object:
            """The request's JSON, or None where it is not JSON or nests past Python's stack
            (each route then answers 400 with what it expected)."""
            try:
                return json.loads(self.request.body or b"null")
            except (ValueError, RecursionError):
                return None

        def check_kernel(self, kernel_id: str) -> None:
            if not self.culler.is_kernel(kernel_id):
                raise web.HTTPError(404, "no such kernel in this Jupyter server")

        def set_default_headers(self) -> None:
            super().set_default_headers()  # Jupyter's own, nosniff among them
            for name, value in EVERY_RESPONSE.items():
                self.set_header(name, value)

    class NoticesHandler(IdleHandler):
        @web.authenticated
        @authorized
        def post(self) -> None:
            notice = notice_from_body(self.posted())
            if notice is None:
                raise web.HTTPError(400, "expected {kernel_id, episode}, two short strings")
            self.check_kernel(notice[0])
            self.finish(json.dumps({"cull_at": self.culler.record_notice(*notice)}))

    class KeepsHandler(IdleHandler):
        @web.authenticated
        @authorized
        def post(self) -> None:
            kernel_id = kernel_from_body(self.posted())
            if kernel_id is None:
                raise web.HTTPError(400, "expected {kernel_id}, a short string")
            self.check_kernel(kernel_id)
            self.finish(json.dumps({"kept_until": self.culler.keep(kernel_id)}))

    class CullsHandler(IdleHandler):
        @web.authenticated
        @authorized
        def get(self) -> None:
            self.finish(json.dumps(self.culler.state()))

    class ExecutionsHandler(IdleHandler):
        @web.authenticated
        @authorized
        def get(self) -> None:
            self.finish(json.dumps({"kernels": self.executions.executions(),
                                    "cells": self.executions.cells.as_json()}))

    services = {"culler": culler, "executions": executions}
    return [(NOTICES_PATH, NoticesHandler, services), (KEEPS_PATH, KeepsHandler, services),
            (CULLS_PATH, CullsHandler, services),
            (EXECUTIONS_PATH, ExecutionsHandler, services)]


def add_idle_cull(serverapp: Any, log: logging.Logger) -> IdleCuller:
    """The notice's routes, and the cull when NVDASHBOARD_CULL_AFTER_MINUTES turns it on."""
    try:
        settings = cull_settings(os.environ)
    except ConfigError as error:
        log.warning("nvdashboard: %s; the GPU idle cull is off", error)
        settings = CullSettings()
    policy = CullPolicy.from_settings(settings)

    async def read_glance() -> Any:
        url = proxy_url(serverapp, "glance.json")
        if url is None:
            raise OSError("Jupyter listens on a unix socket")
        return json.loads(await fetch_from_proxy(serverapp, url))

    executions = ExecutionClock(serverapp.kernel_manager, log)
    event_logger = getattr(serverapp, "event_logger", None)
    if event_logger is not None:
        executions.watch_starts(event_logger)
    culler = IdleCuller(policy, serverapp.kernel_manager, read_glance, log,
                        last_execution=executions.last_execution)
    base = serverapp.base_url if serverapp.base_url.endswith("/") else serverapp.base_url + "/"
    serverapp.web_app.add_handlers(".*$", [
        (base + path, handler, kwargs)
        for path, handler, kwargs in idle_handlers(culler, executions)])
    from tornado.ioloop import IOLoop

    # On Jupyter's loop once it runs: the kernels' IOPub streams live there.
    IOLoop.current().add_callback(executions.start)
    if policy.on:
        log.info("nvdashboard: the GPU idle cull is on: a kernel with no GPU work for %.0f "
                 "min, holding %.1f GiB or more, is shut down %.1f min after its user was "
                 "told", settings.idle_minutes, settings.min_gib, settings.after_minutes)
        culler.start()
    return culler


def _load_jupyter_server_extension(serverapp: Any) -> None:
    log = serverapp.log
    add_idle_cull(serverapp, log)
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
