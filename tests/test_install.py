"""The installed package, as JupyterLab sees it: the labextension and the proxy."""

from __future__ import annotations

import re
import subprocess
import sys

from jupyterlab_nvdashboard import _jupyter_labextension_paths, launch_server


def jupyter(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "jupyter", *args], capture_output=True,
                            text=True, timeout=120)
    return re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)  # drop colours


def test_labextension_is_enabled_and_ok() -> None:
    listing = jupyter("labextension", "list")
    assert re.search(r"jupyterlab-nvdashboard v\S+ enabled OK", listing), listing


def test_jupyter_server_proxy_is_enabled() -> None:
    listing = jupyter("server", "extension", "list")
    assert re.search(r"jupyter_server_proxy\s+enabled", listing), listing


def test_entry_points_describe_the_package() -> None:
    assert _jupyter_labextension_paths() == [{"src": "labextension",
                                              "dest": "jupyterlab-nvdashboard"}]
    settings = launch_server()
    assert settings["command"][1:3] == ["-m", "jupyterlab_nvdashboard.server"]
    assert settings["launcher_entry"] == {"enabled": False} and settings["timeout"] >= 30
