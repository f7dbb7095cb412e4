"""Where workload runs are written: the one place a runs-directory path is expanded.

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
