"""Where workload runs are written: the one place a runs-directory path is expanded; where
the history store lives by default; and where a simulating server and a notebook's kernel
meet to list the kernel as a simulated GPU holder (``simulated_holders.py``).

Both the server (``config.py``) and the workload (``workload/config.py``) take the runs
directory from here, so ``NVDASHBOARD_RUNS_DIR=~/x`` or ``$SCRATCH/runs`` names the same
directory to both. Standard library only: every layer may import it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

RUNS_DIR_ENV = "NVDASHBOARD_RUNS_DIR"


def expand_path(text: str) -> Path:
    """A path as a user typed it, with ``~`` and ``$VARIABLES`` expanded."""
    return Path(os.path.expandvars(text)).expanduser()


def default_runs_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$NVDASHBOARD_RUNS_DIR`` if set, else ``~/.cache/nvdashboard/runs``."""
    env = os.environ if environ is None else environ
    value = env.get(RUNS_DIR_ENV)
    if value:
        return expand_path(value)
    return Path.home() / ".cache" / "nvdashboard" / "runs"


STORE_FILE_NAME = "history.sqlite"


def default_store_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/nvdashboard/history.sqlite`` where XDG_STATE_HOME is set, else
    ``nvdashboard/history.sqlite`` in Jupyter's data folder (``$JUPYTER_DATA_DIR``, else
    ``~/.local/share/jupyter`` on Linux)."""
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME")
    if state and os.path.isabs(os.path.expanduser(state)):  # the spec ignores relative ones
        return expand_path(state) / "nvdashboard" / STORE_FILE_NAME
    data = env.get("JUPYTER_DATA_DIR")
    if data:
        return expand_path(data) / "nvdashboard" / STORE_FILE_NAME
    try:  # jupyter_core knows each platform's folder (it comes with jupyter-server)
        from jupyter_core.paths import jupyter_data_dir

        return Path(jupyter_data_dir()) / "nvdashboard" / STORE_FILE_NAME
    except ImportError:
        return Path.home() / ".local" / "share" / "jupyter" / "nvdashboard" / STORE_FILE_NAME


SIMULATED_PROCESSES_ENV = "NVDASHBOARD_SIMULATE_PROCESSES"
SIMULATED_PROCESSES_FILE_NAME = "simulated-processes.json"


def simulated_processes_file(environ: Mapping[str, str] | None = None) -> Path:
    """The simulated driver's process list: ``$NVDASHBOARD_SIMULATE_PROCESSES`` if set, else
    ``simulated-processes.json`` beside the default history store. JupyterLab starts the
    dashboard server and the notebook kernels with one environment, so both name one file."""
    env = os.environ if environ is None else environ
    value = env.get(SIMULATED_PROCESSES_ENV)
    if value:
        return expand_path(value)
    return default_store_path(env).parent / SIMULATED_PROCESSES_FILE_NAME
