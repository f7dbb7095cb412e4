"""Fixtures shared by more than one test module, and the suite's own temp folder.

The whole session (and every process it starts: servers, runs, JupyterLab, Chromium) uses
a temp folder of its own, made here at import and removed when the session ends, so the
suite leaves nothing in the system temp folder even when a test or a killed process does.
What this suite's own helpers leave there is still reported: a helper that does not clean
up after itself fails the session (``pytest_sessionfinish``). So does a process the session
started, directly or not, that is still running when it ends: each carries the session's
temp folder in its environment (``processes_left``).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

# pytest-xdist's workers inherit the controller's TMPDIR (its session folder): each makes its
# own folder beside the controller's, not inside it, since a Unix socket's path must stay
# under 108 bytes.
SYSTEM_TEMP = os.environ.setdefault("PYTEST_NVDASHBOARD_SYSTEM_TEMP", tempfile.gettempdir())
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


# How long a process the session started may take to end after its last test (a server
# writing its store's last batch, Chromium closing) before the session calls it left behind.
PROCESS_GRACE_S = 10.0


def carries(environ: dict[str, str], folder: str) -> bool:
    """Whether an environment names ``folder``: TMPDIR, or any path inside it."""
    return any(value == folder or value.startswith(folder + os.sep)
               for value in environ.values())


def processes_left(folder: str, ignore: set[int], grace_s: float = PROCESS_GRACE_S
                   ) -> list[str]:
    """The command lines of the processes still running after ``grace_s`` whose environment
    carries ``folder`` (those a session started, directly or not: it set TMPDIR before it
    started any), but for ``ignore``; each is killed once listed, so a failed run leaves
    none behind. A process started with an environment of its own making, or one that
    reset it, is not seen."""
    carrying = []
    for process in psutil.process_iter():
        if process.pid in ignore:
            continue
        try:
            if carries(process.environ(), folder):
                carrying.append(process)
        except psutil.Error:  # gone meanwhile, a zombie, or another user's
            continue
    _, alive = psutil.wait_procs(carrying, timeout=grace_s) if carrying else ([], [])
    left = []
    for process in alive:
        try:
            left.append(f"pid {process.pid}: {' '.join(process.cmdline())[:300]}")
            process.kill()
        except psutil.Error:
            continue
    return left


# What pytest-xdist's workers report they left in their temp folders, and still running
# (controller only).
WORKER_LEFTOVERS = pytest.StashKey[list[str]]()
WORKER_PROCESSES_LEFT = pytest.StashKey[list[str]]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    worker_output = getattr(session.config, "workeroutput", None)
    ignore = {os.getpid()}
    if session.config.pluginmanager.hasplugin("dsession"):
        # pytest-xdist's controller: its children are the workers, which carry its folder
        # (they started with its TMPDIR) and end once it lets them go; each checks its own.
        ignore |= {child.pid for child in psutil.Process().children()}
    running = processes_left(SESSION_TEMP, ignore)
    left = leftovers(SESSION_TEMP)
    shutil.rmtree(SESSION_TEMP, ignore_errors=True)
    if worker_output is not None:
        # A pytest-xdist worker: its exit status is not the run's, so hand what it found to the
        # controller (pytest_testnodedown), which fails the run.
        worker_output.update(leftovers=left, processes_left=running)
        return
    left += session.config.stash.get(WORKER_LEFTOVERS, [])
    running += session.config.stash.get(WORKER_PROCESSES_LEFT, [])
    if left:
        print(f"\ntests left these in the temp folder: {', '.join(left[:20])}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if running:
        print("\ntests left these processes running (now killed):\n" + "\n".join(running))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if session.config.getoption("record_durations"):
        record_durations(FILE_SECONDS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist's controller: a worker has finished; keep what it left behind."""
    output = getattr(node, "workeroutput", {})
    config: pytest.Config = node.config  # type: ignore[attr-defined]
    config.stash.setdefault(WORKER_LEFTOVERS, []).extend(output.get("leftovers", []))
    config.stash.setdefault(WORKER_PROCESSES_LEFT, []).extend(output.get("processes_left", []))


# Libraries no test module may import when it is collected: every pytest-xdist worker
# collects every file, so each worker would pay for the import (TensorFlow: 5 s of CPU),
# where only the worker that runs the file needs it.
KEPT_OUT_OF_COLLECTION = ("tensorflow", "torch")
IMPORTED_AT_COLLECTION = pytest.StashKey[list[str]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[IMPORTED_AT_COLLECTION] = [
        name for name in KEPT_OUT_OF_COLLECTION if name in sys.modules]


@pytest.fixture(scope="module")
def processes_file() -> Iterator[Path]:
    """Where a test writes the simulated GPU process list (NVDASHBOARD_SIMULATE_PROCESSES)."""
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder) / "processes.json"


# How long each test file took (setup, call and teardown of its tests, in seconds), from a
# quiet full run: pytest-xdist hands whole files out in the order below, longest first.
# Refresh it with `python -m pytest --record-durations` after adding or reshaping a long file.
DURATIONS_FILE = Path(__file__).parent / "durations.json"
FILE_SECONDS: dict[str, float] = {}  # this run's, by file, as the reports come in


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-durations", action="store_true",
                     help=f"write how long each test file took to {DURATIONS_FILE.name}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::")[0]
    FILE_SECONDS[path] = FILE_SECONDS.get(path, 0.0) + report.duration


def record_durations(seconds: dict[str, float]) -> None:
    """Write this run's file lengths over the recorded ones (files not run keep theirs)."""
    recorded = recorded_durations()
    recorded.update({path: round(length, 1) for path, length in seconds.items()})
    ordered = dict(sorted(recorded.items(), key=lambda item: -item[1]))
    DURATIONS_FILE.write_text(json.dumps(ordered, indent=0) + "\n")


def recorded_durations() -> dict[str, float]:
    try:
        return json.loads(DURATIONS_FILE.read_text())
    except (OSError, ValueError):
        return {}


def longest_first(files: list[str], recorded: dict[str, float]) -> list[str]:
    """The order to hand ``files`` out in: the longest recorded first, and before them any
    file with no record (a new file may be long, and a long file handed out last keeps one
    worker busy after the others are done)."""
    return sorted(files, key=lambda path: -recorded.get(path, math.inf))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Longest files first (``longest_first``). pytest-xdist (``--dist loadfile
    --no-loadscope-reorder`` in ``addopts``) hands out whole files in this order; by default
    it would sort them by how many tests they hold, and a file of one long test, a cluster
    or a lab, went last. The order of tests within a file is kept."""
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::")[0], []).append(item)
    order = longest_first(list(by_file), recorded_durations())
    items[:] = [item for path in order for item in by_file[path]]
