"""The suite cleans up after itself: the server helpers remove the runs folders they make,
the JupyterLab helper keeps every Jupyter and IPython folder inside its temporary home, the
session's temp folder is its own (tests/conftest.py), and a browser test ignores a console
error only when it is named in one list and comes from JupyterLab's own code. The workers
are handed the longest files first, in the order the suite chose, and collecting a file
imports no heavy library (each worker collects every file)."""

from __future__ import annotations

import ast
import gc
import importlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

import psutil
import pytest

from tests.conftest import (
    IMPORTED_AT_COLLECTION,
    SESSION_TEMP,
    SYSTEM_TEMP,
    leftovers,
    longest_first,
    processes_left,
    recorded_durations,
)
from tests.support.browser import JUPYTERLAB_OWN_CONSOLE_ERRORS, jupyterlab_own_error
from tests.support.jupyter import cell_reply, lab_environment
from tests.support.servers import cli_server, in_process_server
from tests.support.waiting import until_ended


def test_the_session_uses_a_temp_folder_of_its_own() -> None:
    assert tempfile.gettempdir() == SESSION_TEMP != SYSTEM_TEMP
    assert os.environ["TMPDIR"] == SESSION_TEMP  # and so does every process it starts


def test_server_helpers_remove_their_runs_folders() -> None:
    with in_process_server(gpus=1) as server:
        in_process = server.config.runs_dir
        assert in_process.is_dir()
    with cli_server(["--simulate", "1"]):
        made = [name for name in leftovers(SESSION_TEMP) if name.startswith("nvdashboard-runs-")]
    assert not in_process.exists()
    assert not any((Path(SESSION_TEMP) / name).exists() for name in made)


def test_an_in_process_server_is_freed_when_it_stops() -> None:
    # A server kept alive by its event loop kept its history and documents in the test
    # worker's heap: each later garbage collection walked every earlier test's server.
    with in_process_server(gpus=1) as server:
        server.wait_until_gpus_read()
        metrics = weakref.ref(server.metrics)
    del server
    gc.collect()
    assert metrics() is None


def test_a_cell_is_answered_by_a_kernel_a_busy_machine_left_unscheduled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CI lost both container fixtures to "Kernel died before replying to kernel_info": the
    # helper judged the kernel by its heartbeat, which calls one missed 1 s deadline death.
    # Here the kernel is stopped (SIGSTOP, as an unscheduled process) for 3 s across the
    # request: the cell still runs, and its reply is read once the kernel is back.
    from jupyter_client import KernelManager

    environment = lab_environment(str(tmp_path), str(tmp_path / "settings"), 0)
    # Finding the kernel's spec makes IPython's folder, in the home unless told otherwise.
    monkeypatch.setenv("IPYTHONDIR", environment["IPYTHONDIR"])
    manager = KernelManager(connection_file=str(tmp_path / "kernel.json"))
    manager.start_kernel(env=environment, cwd=str(tmp_path))
    try:
        ready = manager.client()
        ready.start_channels()
        ready.wait_for_ready(timeout=60)
        ready.stop_channels()
        kernel = manager.provisioner.pid  # type: ignore[union-attr]
        os.kill(kernel, signal.SIGSTOP)
        resume = threading.Timer(3, os.kill, (kernel, signal.SIGCONT))
        resume.start()
        asked = time.monotonic()
        try:
            reply = cell_reply(tmp_path / "kernel.json", "6 * 7")
        finally:
            resume.join()
        assert reply["status"] == "ok", reply
        assert time.monotonic() - asked >= 3  # answered after the stall, not before it
    finally:
        manager.shutdown_kernel(now=True)


def test_waiting_for_a_process_to_end_holds_when_it_already_has() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    until_ended(gone.pid)  # psutil.Process(pid) alone raises NoSuchProcess (loaded run T)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(psutil.TimeoutExpired):
            until_ended(sleeper.pid, 0.2)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_process_the_session_started_and_left_running_is_listed_and_killed(
        tmp_path: Path) -> None:
    # Its grandchild too: the dashboard server a Jupyter started, Chromium under Playwright.
    folder = str(tmp_path / "nvdashboard-tests-x")
    elsewhere = str(tmp_path / "nvdashboard-tests-xy")  # a folder beside it is not it
    sleeper = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    ours = subprocess.Popen(sleeper, stdin=subprocess.PIPE, env={**os.environ, "TMPDIR": folder})
    inside = subprocess.Popen(sleeper, stdin=subprocess.PIPE,
                              env={"XDG_STATE_HOME": os.path.join(folder, "state")})
    not_ours = subprocess.Popen(sleeper, stdin=subprocess.PIPE,
                                env={**os.environ, "TMPDIR": elsewhere})
    ended = subprocess.Popen([sys.executable, "-c", "pass"], env={"TMPDIR": folder})
    ended.wait()
    try:
        # One of them ends within the grace period: only the other is left behind.
        assert inside.stdin is not None
        inside.stdin.close()
        left = processes_left(folder, ignore=set(), grace_s=5)
        assert len(left) == 1 and left[0].startswith(f"pid {ours.pid}: "), left
        assert "sys.stdin.read()" in left[0]
        assert ours.wait(10) == -signal.SIGKILL  # listed, then killed
        assert not_ours.poll() is None
        assert processes_left(folder, ignore=set(), grace_s=0) == []
    finally:
        for process in (ours, inside, not_ours):
            process.kill()
            process.wait()


def test_jupyterlab_keeps_its_state_in_its_own_folder(tmp_path: Path) -> None:
    environment = lab_environment(str(tmp_path), str(tmp_path / "settings"), 2)
    for variable in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR",
                     "IPYTHONDIR", "JUPYTERLAB_SETTINGS_DIR", "JUPYTERLAB_WORKSPACES_DIR",
                     "NVDASHBOARD_RUNS_DIR", "NVDASHBOARD_STORE"):
        assert environment[variable].startswith(str(tmp_path)), variable


def test_only_jupyterlab_own_errors_are_ignored() -> None:
    assert "Disposed" in JUPYTERLAB_OWN_CONSOLE_ERRORS
    lab = "http://127.0.0.1:1/user/alice/static/lab/jlab_core.1234.js"
    ours = "http://127.0.0.1:1/user/alice/lab/extensions/jupyterlab-nvdashboard/static/x.js"
    assert jupyterlab_own_error("Uncaught (in promise) Error: Disposed", lab)
    assert not jupyterlab_own_error("Uncaught (in promise) Error: Disposed", ours)
    assert not jupyterlab_own_error("Uncaught (in promise) Error: Disposed", "")
    assert not jupyterlab_own_error("TypeError: x is undefined", lab)
    # A stack through our code is ours, even when JupyterLab's code is on it too.
    assert not jupyterlab_own_error("Error: Disposed", f"at f ({ours})\n at g ({lab})")



# What starts the suite's heavy parts, and the marker a test module that starts one must carry,
# so that the developers' fast loop (`-m "not browser and not lab and not cluster"`,
# DEVELOPING.md) leaves out every test that starts them. A support function that calls a
# starter is a starter too.
STARTERS = {"chromium": "browser", "jupyter_lab": "lab", "DaskCluster": "cluster",
            "start_scheduler": "cluster"}
TESTS = Path(__file__).parent


def _calls(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            names.add(function.id if isinstance(function, ast.Name)
                      else getattr(function, "attr", ""))
    return names


def _starters() -> dict[str, str]:
    """The starters, with every support function that calls one (to a fixed point)."""
    starters = dict(STARTERS)
    functions = [node for path in (TESTS / "support").glob("*.py")
                 for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.FunctionDef)]
    grew = True
    while grew:
        grew = False
        for function in functions:
            called = _calls(function) & starters.keys()
            if called and function.name not in starters:
                starters[function.name] = starters[min(called)]
                grew = True
    return starters


def test_every_module_that_starts_a_browser_lab_or_cluster_carries_its_marker() -> None:
    starters = _starters()
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        needed = {starters[name] for name in _calls(ast.parse(path.read_text())) & starters.keys()}
        if not needed:
            continue
        name = ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)
        module = importlib.import_module(name)
        marks = getattr(module, "pytestmark", [])
        carried = {mark.name for mark in (marks if isinstance(marks, list) else [marks])}
        if needed - carried:
            unmarked.append(f"{path.relative_to(TESTS)}: {sorted(needed - carried)}")
    assert not unmarked, f"modules that start these without the marker: {'; '.join(unmarked)}"


def test_files_go_out_longest_first_and_unrecorded_files_before_them() -> None:
    recorded = {"tests/test_a.py": 5.0, "tests/test_b.py": 60.0, "tests/test_c.py": 0.5}
    files = ["tests/test_a.py", "tests/test_c.py", "tests/test_new.py", "tests/test_b.py"]
    assert longest_first(files, recorded) == [
        "tests/test_new.py", "tests/test_b.py", "tests/test_a.py", "tests/test_c.py"]


def test_every_test_file_has_a_recorded_length() -> None:
    here = Path(__file__).resolve().parent
    files = {path.relative_to(here.parent).as_posix() for path in here.rglob("test_*.py")}
    assert files - set(recorded_durations()) == set(), "python -m pytest --record-durations"


def test_pytest_xdist_keeps_the_suites_order(request: pytest.FixtureRequest) -> None:
    # By default pytest-xdist sorts the files by how many tests they hold, so a file of one
    # long test (a cluster, a lab) went out last and held one worker after the others ended.
    assert request.config.getoption("loadscopereorder") is False


def test_collecting_the_suite_imports_neither_tensorflow_nor_torch(
    request: pytest.FixtureRequest,
) -> None:
    # Each worker collects every file: a module-level import there is paid once a worker.
    assert request.config.stash[IMPORTED_AT_COLLECTION] == []
