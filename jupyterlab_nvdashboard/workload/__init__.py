"""The bundled embedding workload (a recommender modeled on NVIDIA SOK's DenseDemo).

Public entry points for the dashboard server: :func:`build_command` (the only way to
launch a run), :func:`read_events` (tolerant of a run still writing) and
:func:`default_runs_dir` (the directory runs write their event files to).
TensorFlow and CuPy are imported only when a path that needs them runs.
"""

from .cli import build_command
from .config import PATHS, PRESETS, WorkloadConfig, default_runs_dir, make_config
from .events import read_events

__all__ = [
    "PATHS",
    "PRESETS",
    "WorkloadConfig",
    "build_command",
    "default_runs_dir",
    "make_config",
    "read_events",
]
