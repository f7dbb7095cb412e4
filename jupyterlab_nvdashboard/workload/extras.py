"""Which optional frameworks are installed, and the extra that installs each: read from
package metadata, so asking costs no import of TensorFlow or CuPy."""

from __future__ import annotations

import importlib.metadata

GPU_EXTRA = 'pip install "jupyterlab-nvdashboard[gpu]"'
TENSORFLOW_EXTRA = 'pip install "jupyterlab-nvdashboard[tensorflow]"'
# TensorFlow wheels built with CUDA (Linux); "tensorflow-cpu" is not one of them.
TF_CUDA_DISTRIBUTIONS = ("tensorflow", "tf-nightly")
TF_DISTRIBUTIONS = (*TF_CUDA_DISTRIBUTIONS, "tensorflow-cpu", "tensorflow-intel",
                    "tensorflow-macos")
CUPY_DISTRIBUTIONS = ("cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x", "cupy")


def installed(*distributions: str) -> bool:
    """Whether any of ``distributions`` is installed."""
    for name in distributions:
        try:
            importlib.metadata.version(name)
            return True
        except importlib.metadata.PackageNotFoundError:
            continue
    return False


def tensorflow_cpu_only() -> bool:
    """TensorFlow is installed, but only a build without CUDA."""
    return installed(*TF_DISTRIBUTIONS) and not installed(*TF_CUDA_DISTRIBUTIONS)
