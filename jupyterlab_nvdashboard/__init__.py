"""NVDashboard: live GPU and machine dashboards for JupyterLab.

Public entry points: ``launch_server()`` (the jupyter-server-proxy entry point) and
``_jupyter_labextension_paths()`` (where JupyterLab finds the frontend).
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
PROXY_ORIGIN_HOST = "nvdashboard-proxy.localhost"


def launch_server() -> dict[str, Any]:
    """jupyter-server-proxy settings: start the Bokeh server on a private unix socket.

    ``NVDASHBOARD_*`` settings (simulate mode and so on) reach the server through the
    environment it inherits from Jupyter.
    """
    return {
        "command": [
            sys.executable, "-m", "jupyterlab_nvdashboard.server",
            "--unix-socket", "{unix_socket}",
            "--allow-websocket-origin", PROXY_ORIGIN_HOST,
        ],
        "unix_socket": True,
        "request_headers_override": {"Origin": f"http://{PROXY_ORIGIN_HOST}"},
        "timeout": 60,
        "launcher_entry": {"enabled": False},
        "new_browser_tab": False,
    }


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyterlab-nvdashboard"}]
