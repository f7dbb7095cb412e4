"""rapidsai's jupyterlab-nvdashboard 0.15.0 as ``versus_v015.py`` runs it: its virtual
environment, its simulated GPUs and its lab.

- ``v015_environment(folder)``: ``python -m venv`` and pip install of
  ``jupyterlab-nvdashboard==0.15.0``, ``jupyterlab==<the version installed here>`` (both labs
  are the same JupyterLab) and nvidia-ml-py, made once and reused; never this project's
  environment.
- ``simulation_path(folder)``: a folder for v0.15's PYTHONPATH holding a copy of this
  project's ``simnvml/`` renamed ``v015_simnvml`` and ``v015_sitecustomize.py`` as its
  ``sitecustomize.py``, which makes that driver nvidia-ml-py's loaded NVML library.
- ``v015_lab(...)``: its lab, started as ``tests/support/jupyter.py`` starts this project's
  (own HOME, settings and runtime folders, a token), with v0.15's Python.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import v015_sitecustomize as hook  # noqa: E402
from jupyterlab_nvdashboard.config import load_config  # noqa: E402
from tests.support.jupyter import JupyterLab, jupyter_lab  # noqa: E402

V015 = "0.15.0"
SETTINGS_ID = "jupyterlab-nvdashboard:config"  # v0.15's settings schema
# The simulated machine this project's lab gets (tests/support/jupyter.py sets it).
SIMULATE = {"NVDASHBOARD_SIMULATE": "4"}
SIMNVML = ROOT / "jupyterlab_nvdashboard" / "simnvml"
READY_MARK = "installed.json"  # written last: a venv without it is remade


def default_environment() -> Path:
    """Where the v0.15 environment for this JupyterLab is kept between runs."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "nvdashboard-benchmarks" / f"v015-{importlib.metadata.version('jupyterlab')}"


def v015_environment(folder: Path) -> Path:
    """The Python of a virtual environment with v0.15 in ``folder``, made on first use."""
    python = folder / "bin" / "python"
    wanted = {"jupyterlab-nvdashboard": V015,
              "jupyterlab": importlib.metadata.version("jupyterlab")}
    mark = folder / READY_MARK
    if python.exists() and mark.exists() and json.loads(mark.read_text()) == wanted:
        return python
    print(f"... making v0.15's environment in {folder} (pip, once)", file=sys.stderr,
          flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q",
                    *(f"{name}=={version}" for name, version in wanted.items()),
                    "nvidia-ml-py"], check=True)
    mark.write_text(json.dumps(wanted))
    return python


def simulation_settings() -> dict[str, object]:
    """The simulated machine of this project's lab (``SIMULATE``), as config reads it."""
    return dataclasses.asdict(load_config([], SIMULATE).simulation)


def simulation_path(folder: Path) -> Path:
    """A folder for v0.15's PYTHONPATH: the simnvml copy and the start-up hook."""
    path = folder / "v015-path"
    shutil.copytree(SIMNVML, path / hook.SIMNVML_COPY,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(Path(hook.__file__), path / "sitecustomize.py")
    return path


@contextmanager
def v015_lab(python: Path, folder: Path) -> Iterator[JupyterLab]:
    """v0.15's lab over the simulated GPUs; ``folder`` is the caller's scratch folder."""
    environment = {
        "PYTHONPATH": str(simulation_path(folder)),
        # tests/support/jupyter.py points Jupyter's path at this checkout's build for the
        # caller's own lab; v0.15's lab finds its own extension in its environment.
        "JUPYTER_PATH": "",
        hook.SETTINGS_VARIABLE: json.dumps(simulation_settings()),
        hook.SOCKET_FOLDER_VARIABLE: str(folder),
    }
    with jupyter_lab(simulate=4, extra_env=environment,
                     extra_args=["--LabApp.expose_app_in_browser=True"],
                     wrap=lambda command, _cwd: [str(python), *command[1:]]) as lab:
        yield lab


def nvml_calls(lab: JupyterLab, folder: Path) -> int | None:
    """v0.15's simulated NVML calls so far, as its lab's hook counts them; None if it
    does not answer."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(10)
            connection.connect(hook.calls_socket(str(folder), lab.process.pid))
            return int(connection.recv(64))
    except (OSError, ValueError):
        return None


def set_update_frequency(lab: JupyterLab, frequency_ms: int | None) -> None:
    """v0.15's ``updateFrequency`` setting, through JupyterLab's settings API (None: its
    default). A page reads it when it loads."""
    raw = json.dumps({} if frequency_ms is None else {"updateFrequency": frequency_ms})
    request = urllib.request.Request(
        f"{lab.url}lab/api/settings/{SETTINGS_ID}", method="PUT",
        data=json.dumps({"raw": raw}).encode(),
        headers={**lab.auth, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
