"""What the run panel may offer on this machine: which devices each workload path can use.

Decided from installed package metadata and the server's GPU facts, without importing
TensorFlow or CuPy (seconds of start-up, and GPU memory, for a page that only asks). A
device the chosen path cannot use here is not offered; when a GPU exists but the path
lacks its GPU libraries, the panel says which extra to install.
"""

from __future__ import annotations

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


class Devices(NamedTuple):
    offered: tuple[str, ...]  # what the device menu lists for this path, best first
    hint: str  # why a device is missing and what to install; "" when nothing is missing


def devices_for(path: str, real_gpus: bool) -> Devices:
    """The devices ``path`` can run on here; ``real_gpus`` is False for simulated GPUs."""
    if path == "numpy":
        return Devices(("cpu",), "")
    if path == "cupy-plugin":
        if not real_gpus:
            return Devices((), "cupy-plugin runs on a GPU only, and this machine has no real GPU")
        if not installed(*CUPY_DISTRIBUTIONS):
            return Devices((), f"cupy-plugin needs CuPy: {GPU_EXTRA}")
        return Devices(("gpu",), "")
    if path in TF_PATHS:
        if not installed(*TF_DISTRIBUTIONS):
            return Devices((), f"{path} needs TensorFlow: {TENSORFLOW_EXTRA} (CPU) or "
                               f"{GPU_EXTRA} (GPU)")
        if not real_gpus:
            return Devices(("cpu",), "")
        if not installed(*TF_CUDA_DISTRIBUTIONS):
            return Devices(("cpu",), f"TensorFlow here is CPU-only; for GPU runs: {GPU_EXTRA}")
        return Devices(("gpu", "cpu"), "")
    return Devices((), f"unknown path {path!r}")
