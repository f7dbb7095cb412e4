"""Lazy imports of the heavy optional frameworks, with a one-line install hint."""

from __future__ import annotations

import os
from types import ModuleType


class MissingDependencyError(ImportError):
    """An optional framework is not installed; the message says how to install it."""


def import_tensorflow() -> ModuleType:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise MissingDependencyError(
            'TensorFlow is not installed: pip install "jupyterlab-nvdashboard[tensorflow]"'
        ) from exc
    return tf


def import_cupy() -> ModuleType:
    try:
        import cupy
    except ImportError as exc:
        raise MissingDependencyError(
            'CuPy is not installed: pip install "jupyterlab-nvdashboard[cupy]"'
        ) from exc
    return cupy


def import_torch() -> ModuleType:
    """torch, for the sharded path's gloo and NCCL exchanges (the CPU build is enough)."""
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            "torch is not installed (the gloo and nccl shard backends need it): "
            "pip install torch  (the CPU build is enough for gloo)"
        ) from exc
    return torch
