"""Fixtures shared by more than one test module, and the suite's own temp folder.

The whole session (and every process it starts: servers, runs, JupyterLab, Chromium) uses
a temp folder of its own, made here at import and removed when the session ends, so the
suite leaves nothing in the system temp folder even when a test or a killed process does.
What this suite's own helpers leave there is still reported: a helper that does not clean
up after itself fails the session (``pytest_sessionfinish``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SYSTEM_TEMP = tempfile.gettempdir()
SESSION_TEMP = tempfile.mkdtemp(prefix="nvdashboard-tests-", dir=SYSTEM_TEMP)
os.environ["TMPDIR"] = SESSION_TEMP
tempfile.tempdir = SESSION_TEMP
# Every server the suite starts keeps its history store in the session's folder, never in
# the user's own state folder (a test that needs a store of its own names one).
os.environ["XDG_STATE_HOME"] = os.path.join(SESSION_TEMP, "state")
# Names the suite's own helpers give what they make (tests/support/); each must be gone by
# the end of the session.
# (fake_cupy's build folder lives as long as the process, and goes at exit.)
OWN_PREFIXES = ("nvdashboard-", "nvd-dask-")


def leftovers(folder: str) -> list[str]:
    """What the suite's own helpers left in ``folder``."""
    try:
        return sorted(name for name in os.listdir(folder) if name.startswith(OWN_PREFIXES))
    except OSError:
        return []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    left = leftovers(SESSION_TEMP)
    shutil.rmtree(SESSION_TEMP, ignore_errors=True)
    if left and os.environ.get("PYTEST_XDIST_WORKER") is None:
        print(f"\ntests left these in the temp folder: {', '.join(left[:20])}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="module")
def processes_file() -> Iterator[Path]:
    """Where a test writes the simulated GPU process list (NVDASHBOARD_SIMULATE_PROCESSES)."""
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder) / "processes.json"
