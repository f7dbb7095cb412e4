"""The real nvidia-ml-py releases the suite runs the reader under.

``.ci/install`` downloads them into ``.ci/cache/bindings/``: the oldest release
``pyproject.toml`` accepts, a mid-12.x release with the PCIe counter fields, the newest
12.x and the newest 13.x. Each runs unchanged over the simulated driver
(``metrics/binding.py``); the installed release is one of them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.metrics.binding import binding_loader
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".ci" / "cache" / "bindings"
# What .ci/install fetches; a test fails (never skips) when one is missing.
EXPECTED = ("12.535.161", "12.555.43", "12.575.51", "13.615.71")
OLDEST = EXPECTED[0]


def wheel(release: str) -> Path:
    path = CACHE / f"nvidia_ml_py-{release}-py3-none-any.whl"
    assert path.is_file(), f"{path} is missing: run `bash .ci/install` first"
    return path


def release_params() -> list[object]:
    """pytest parameters, one per release, with the release number as the test ID."""
    return [pytest.param(release, id=f"nvml-py-{release}") for release in EXPECTED]


def release_tuple(release: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", release).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def reader_over(simulator: object, release: str, **kwargs: object) -> NvmlReader:
    """A reader running nvidia-ml-py ``release`` over ``simulator``'s driver."""
    return NvmlReader(binding_loader(simulator.library, wheel(release)),  # type: ignore[attr-defined]
                      **kwargs)  # type: ignore[arg-type]
