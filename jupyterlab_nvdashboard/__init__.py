"""NVDashboard: live GPU and machine dashboards for JupyterLab.

Public entry points: ``launch_server()`` (the jupyter-server-proxy entry point),
``_jupyter_labextension_paths()`` (where JupyterLab finds the frontend) and
``_jupyter_server_extension_points()`` (the server extension that starts the dashboard
server with Jupyter: ``jupyter_extension.py``).
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("jupyterlab-nvdashboard")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0+unknown"

# jupyter-server-proxy already checked the browser's Origin and the user's login; it then
# stamps this Origin on what it forwards, and the backend allows exactly that one.
#
# Overriding the Origin is acceptable because the checks it replaces happen elsewhere:
# jupyter-server-proxy 4.2 and later checks the browser's own Origin against Jupyter's
# policy before forwarding a websocket (pyproject requires >=4.2), Jupyter authenticates
# every request, and the backend signs its sessions with a secret made at each launch, so
# a websocket needs a session token this server issued on a page fetched through the
# authenticated proxy.
PROXY_ORIGIN_HOST = "nvdashboard-proxy.localhost"


def launch_server() -> dict[str, Any]:
    """jupyter-server-proxy settings: start the Bokeh server on a private unix socket.

    ``NVDASHBOARD_*`` settings (simulate mode and so on) reach the server through the
    environment it inherits from Jupyter. ``--jupyter-proxy`` asks for no token of its
    own (Jupyter's login covers every request) and keeps run control on; the server
    refuses it without ``--unix-socket``. jupyter-server-proxy calls this inside the Jupyter
    server, so ``--jupyter-process`` names that very process: the dashboard server exits
    once it is gone, however early (``jupyter_watch.py``).
    """
    from .jupyter_watch import this_process

    return {
        "command": [
            sys.executable, "-m", "jupyterlab_nvdashboard.server",
            "--unix-socket", "{unix_socket}", "--jupyter-proxy",
            "--allow-websocket-origin", PROXY_ORIGIN_HOST,
            "--jupyter-process", this_process().argument(),
        ],
        "unix_socket": True,
        "request_headers_override": {"Origin": f"http://{PROXY_ORIGIN_HOST}"},
        "timeout": 60,
        "launcher_entry": {"enabled": False},
        "new_browser_tab": False,
    }


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyterlab-nvdashboard"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "jupyterlab_nvdashboard.jupyter_extension"}]
