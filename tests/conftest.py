"""Fixtures shared by more than one test module."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def processes_file() -> Iterator[Path]:
    """Where a test writes the simulated GPU process list (NVDASHBOARD_SIMULATE_PROCESSES)."""
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder) / "processes.json"
