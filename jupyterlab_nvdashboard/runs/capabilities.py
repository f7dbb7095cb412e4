"""What the run panel may offer on this machine: which devices each workload path can use,
and which path it offers first.

Decided from installed package metadata and the server's GPU facts, without importing
TensorFlow or CuPy (seconds of start-up, and GPU memory, for a page that only asks), and
once per process: what is installed does not change under a running server. A device the
chosen path cannot use here is not offered; a path that cannot run here at all is labelled
with what it needs, and when a GPU exists but the path lacks its GPU libraries, the panel
says which extra to install.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from ..workload.extras import (
    CUPY_DISTRIBUTIONS,
    GPU_EXTRA,
    TENSORFLOW_EXTRA,
    TF_CUDA_DISTRIBUTIONS,
    TF_DISTRIBUTIONS,
    installed,
)

TF_PATHS = ("native", "hashtable", "plugin")
# The panel's first choice: the optimized path first, on a GPU where one can be used.
PREFERRED_PATHS = ("plugin", "cupy-plugin", "numpy")


class Devices(NamedTuple):
    offered: tuple[str, ...]  # what the device menu lists for this path, best first
    hint: str  # why a device is missing and what to install; "" when nothing is missing
    needs: str = ""  # why the path cannot run here at all, in a few words; "" when it can


@functools.cache
def devices_for(path: str, real_gpus: bool) -> Devices:
    """The devices ``path`` can run on here; ``real_gpus`` is False for simulated GPUs."""
    if path == "numpy":
        return Devices(("cpu",), "")
    if path == "cupy-plugin":
        if not real_gpus:
            return Devices((), "cupy-plugin runs on a GPU only, and this machine has no real "
                               "GPU", "needs a real GPU")
        if not installed(*CUPY_DISTRIBUTIONS):
            return Devices((), f"cupy-plugin needs CuPy: {GPU_EXTRA}", "needs CuPy")
        return Devices(("gpu",), "")
    if path in TF_PATHS:
        if not installed(*TF_DISTRIBUTIONS):
            return Devices((), f"{path} needs TensorFlow: {TENSORFLOW_EXTRA} (CPU) or "
                               f"{GPU_EXTRA} (GPU)", "needs TensorFlow")
        if not real_gpus:
            return Devices(("cpu",), "")
        if not installed(*TF_CUDA_DISTRIBUTIONS):
            return Devices(("cpu",), f"TensorFlow here is CPU-only; for GPU runs: {GPU_EXTRA}")
        return Devices(("gpu", "cpu"), "")
    return Devices((), f"unknown path {path!r}", "unknown path")


def default_path(paths: Sequence[str], real_gpus: bool) -> str:
    """The path the panel offers first: the first of ``PREFERRED_PATHS`` that can run on a
    GPU here (where there is a real one), else the first that can run at all."""
    preferred = [p for p in PREFERRED_PATHS if p in paths] + \
        [p for p in paths if p not in PREFERRED_PATHS]
    runnable = [p for p in preferred if devices_for(p, real_gpus).offered]
    on_gpu = [p for p in runnable if "gpu" in devices_for(p, real_gpus).offered]
    return (on_gpu or runnable or [paths[0]])[0]


def path_label(path: str, real_gpus: bool) -> str:
    """The path's entry in the path menu: ``native (needs TensorFlow)`` where it cannot run."""
    needs = devices_for(path, real_gpus).needs
    return f"{path} ({needs})" if needs else path
