"""A run never outlives its server, and Stop works whatever signals were inherited.

Real servers, real runs (the numpy path on the ``ci`` preset) started from the /Workload
panel over the Bokeh protocol: ``kill -9`` of the server ends its run within 2 s with an
``end`` event; a second server on the same runs folder sees the live run, refuses a second
one and can stop it; a server started with SIGINT ignored (a non-interactive shell's
``cmd &``) still stops its run within 1 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from jupyterlab_nvdashboard.runs.launcher import RUN_LOCK_NAME, RunLauncher, alive
from jupyterlab_nvdashboard.workload.lifetime import PARENT_PID_ENV, process_start_ticks
from tests.support.bokeh_client import BokehSession, document_models, open_session
from tests.support.servers import cli_server, server_output

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups")
LONG_RUN = 100_000  # iterations: far longer than any test waits


def _model(session: BokehSession, kind: str, **attributes: Any) -> dict:
    return next(model for model in document_models(session.document) if model.get("name") == kind
                and all(model.get("attributes", {}).get(k) == v for k, v in attributes.items()))


def _set(model: dict, attribute: str, value: Any) -> dict:
    return {"kind": "ModelChanged", "model": {"id": model["id"]}, "attr": attribute,
            "new": value}


def _click(model: dict) -> dict:
    return {"kind": "MessageSent", "msg_type": "bokeh_event",
            "msg_data": {"type": "event", "name": "button_click",
                         "values": {"type": "map", "entries": [["model", {"id": model["id"]}]]}}}


async def _panel(url: str, action: str, iterations: int = LONG_RUN) -> str:
    """Press Start (numpy path, CPU) or Stop on /Workload; return the status line it shows."""
    session = await open_session(url, "/Workload")
    events = []
    if action == "Start":
        events = [_set(_model(session, "Select", name="workload-path"), "value", "numpy"),
                  _set(_model(session, "Spinner", name="workload-iterations"), "value",
                       iterations)]
    events.append(_click(_model(session, "Button", label=action)))
    # The answer to the press, not the progress line above it (which says "starting" too).
    status = _model(session, "Div", name="workload-status")["id"]
    await session.send("PATCH-DOC", {"events": events})
    try:
        async with asyncio.timeout(15):
            while True:
                message = await session.receive()
                for event in message.content.get("events", []) \
                        if message.msgtype == "PATCH-DOC" else []:
                    text = str(event.get("new"))
                    if event.get("attr") == "text" and event.get("model", {}).get("id") \
                            == status and ("start" in text or "stop" in text):
                        return text
    finally:
        await session.aclose()


def _events(runs_dir: Path) -> list[dict]:
    found = []
    for path in sorted(runs_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                pass
    return found


def _wait_for(predicate: Any, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def _running_pid(runs_dir: Path) -> int:
    _wait_for(lambda: any(e["event"] == "iteration" for e in _events(runs_dir)), 60,
              "the run's first timed iteration")
    return next(e["pid"] for e in _events(runs_dir) if e["event"] == "start")


def _ended(runs_dir: Path, pid: int) -> bool:
    events = _events(runs_dir)
    return not _pid_alive(pid) and bool(events) and events[-1]["event"] == "end"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours does not count
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return True


def test_kill_9_of_the_server_ends_its_run_with_an_end_event(tmp_path: Path) -> None:
    with cli_server(["--simulate", "1", "--runs-dir", str(tmp_path)]) as (url, process):
        assert "started numpy" in asyncio.run(_panel(url, "Start")), server_output(process)
        pid = _running_pid(tmp_path)
        process.kill()  # SIGKILL: no shutdown handler runs
        process.wait(10)
        took = _wait_for(lambda: _ended(tmp_path, pid), 30, "the orphaned run's end")
    end = _events(tmp_path)[-1]
    assert end["interrupted"] is True, end
    print(f"the run ended {took:.2f} s after the server was killed")


def test_a_second_server_sees_the_live_run_refuses_another_and_can_stop_it(
        tmp_path: Path) -> None:
    args = ["--simulate", "1", "--runs-dir", str(tmp_path)]
    with cli_server(args) as (first, first_process):
        assert "started numpy" in asyncio.run(_panel(first, "Start"))
        pid = _running_pid(tmp_path)
        assert (tmp_path / RUN_LOCK_NAME).exists()
        with cli_server(args) as (second, second_process):
            refused = asyncio.run(_panel(second, "Start"))
            assert "not started: a run is already in progress" in refused, refused
            assert str(pid) in refused
            stopping = asyncio.run(_panel(second, "Stop"))
            assert "stopping the run of another server" in stopping, stopping
            _wait_for(lambda: _ended(tmp_path, pid), 30, "the stopped run's end")
            # Stopped: the next run may start, from either server.
            started = asyncio.run(_panel(second, "Start", iterations=5))
            assert "started numpy" in started, started
            output = server_output(second_process)
        assert "Traceback" not in output and "Traceback" not in server_output(first_process)


def test_stop_works_when_the_server_inherited_sigint_ignored(tmp_path: Path) -> None:
    with cli_server(["--simulate", "1", "--runs-dir", str(tmp_path)],
                    sigint_ignored=True) as (url, process):
        assert "started numpy" in asyncio.run(_panel(url, "Start"))
        pid = _running_pid(tmp_path)
        assert "stopping the run" in asyncio.run(_panel(url, "Stop"))
        _wait_for(lambda: _ended(tmp_path, pid), 30, "the stopped run's end")
        assert _events(tmp_path)[-1]["interrupted"] is True
        # Had the run kept SIGINT ignored, only the SIGTERM sent SIGTERM_AFTER_S later would
        # have stopped it; the launcher says when it sends one. (A timing would say it too,
        # but a loaded machine can take that long over the Stop click alone.)
        output = server_output(process)
        assert "sending SIGTERM" not in output, output[-2000:]
    # Ctrl-C still stops the server itself (cli_server sends SIGINT and waits 15 s).
    assert process.returncode == 0, server_output(process)


def test_a_stale_lock_does_not_block_a_run(tmp_path: Path) -> None:
    # A lock naming a process that is gone (or a PID reused by another process) is ignored.
    (tmp_path / RUN_LOCK_NAME).write_text(json.dumps({"pid": 2**22 - 1, "start_ticks": 1}))
    launcher = RunLauncher(tmp_path)
    assert launcher.adopted() is None and not launcher.running
    (tmp_path / RUN_LOCK_NAME).write_text(json.dumps({"pid": os.getpid(), "start_ticks": 1}))
    assert launcher.adopted() is None  # this process does not lead its group with that start
    assert not alive(2**22 - 1, None)


def test_the_run_is_told_its_server(tmp_path: Path) -> None:
    launcher = RunLauncher(tmp_path, environ={"PATH": os.environ.get("PATH", "")})
    launcher.start({"path": "numpy", "preset": "ci", "iterations": 3, "device": "cpu"})
    try:
        environ = Path(f"/proc/{launcher.pid}/environ")
        if environ.exists():
            assert f"{PARENT_PID_ENV}={os.getpid()}".encode() in environ.read_bytes()
    finally:
        launcher.shutdown()
    assert not (tmp_path / RUN_LOCK_NAME).exists() or launcher.adopted() is None



def test_a_run_names_its_process_by_pid_and_start_time(tmp_path: Path) -> None:
    """What the run writes in its start event is what the launcher reports at its exit, so
    the server finds the file of that very process (a reused PID has another start)."""
    exits: list[tuple] = []
    launcher = RunLauncher(tmp_path, environ={"PATH": os.environ.get("PATH", "")},
                           on_exit=lambda *report: exits.append(report))
    launcher.start({"path": "numpy", "preset": "ci", "iterations": 3, "device": "cpu"})
    try:
        _wait_for(lambda: exits, 60, "the run's exit")
    finally:
        launcher.shutdown()
    ((pid, started, returncode, _),) = exits
    start = next(e for e in _events(tmp_path) if e["event"] == "start")
    assert returncode == 0 and start["pid"] == pid
    if os.path.exists(f"/proc/{os.getpid()}/stat"):
        assert isinstance(started, int) and start["pid_start_ticks"] == started


@pytest.mark.skipif(not os.path.exists("/proc/self/cmdline"), reason="Linux /proc")
def test_a_run_is_found_by_another_server_as_soon_as_it_is_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Popen returns once the child's exec has begun, and Linux fills in its /proc/PID/cmdline
    a moment later (more often than not, measured here): a server looking in between saw no
    workload there, so no run, and would have let a second one start. The run's exec is held
    back here by a shell that waits before it execs the workload, as a loaded machine can."""
    real_popen = subprocess.Popen

    def exec_late(argv: list[str], **options: Any) -> subprocess.Popen:
        return real_popen(["sh", "-c", 'sleep 0.3; exec "$@"', "sh", *argv], **options)

    monkeypatch.setattr(subprocess, "Popen", exec_late)
    environ = {"PATH": os.environ.get("PATH", "")}
    observer = RunLauncher(tmp_path, environ=environ)
    launcher = RunLauncher(tmp_path, environ=environ)
    launcher.start({"path": "numpy", "preset": "ci", "iterations": LONG_RUN, "device": "cpu"})
    try:
        assert observer.adopted() == (launcher.pid, process_start_ticks(launcher.pid))
        with pytest.raises(ValueError, match="already in progress"):
            observer.start({"path": "numpy", "preset": "ci", "iterations": 3, "device": "cpu"})
    finally:
        launcher.shutdown()


def test_a_server_whose_own_run_finished_still_sees_another_servers_run(
        tmp_path: Path) -> None:
    """Two servers on one runs folder: after the first one's own run finished, a run the
    second one started is running for the first too (its Start refuses, its Stop stops it)."""
    environ = {"PATH": os.environ.get("PATH", "")}
    exits: list[tuple] = []
    first = RunLauncher(tmp_path, environ=environ, on_exit=lambda *report: exits.append(report))
    second = RunLauncher(tmp_path, environ=environ)
    first.start({"path": "numpy", "preset": "ci", "iterations": 3, "device": "cpu"})
    try:
        _wait_for(lambda: exits, 60, "the first server's own run's exit")
        second.start({"path": "numpy", "preset": "ci", "iterations": LONG_RUN,
                      "device": "cpu"})
        assert first.adopted() is not None and first.adopted()[0] == second.pid
        assert first.running and first.pid == second.pid
        with pytest.raises(ValueError, match="already in progress"):
            first.start({"path": "numpy", "preset": "ci", "iterations": 3, "device": "cpu"})
        assert "stopping the run of another server" in first.stop()
        _wait_for(lambda: not second.running, 30, "the second server's run to stop")
    finally:
        second.shutdown()
        first.shutdown()


@pytest.mark.skipif(not os.path.exists("/proc/self/cmdline"), reason="Linux /proc")
def test_a_lock_naming_a_process_that_is_no_run_is_never_signalled(tmp_path: Path) -> None:
    """A planted lock naming one of the user's own process-group leaders (live, with its
    true start time): it is not a run, so Stop says there is none and signals nobody."""
    from jupyterlab_nvdashboard.runs.launcher import write_lock

    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)  # noqa: S603, S607
    try:
        write_lock(tmp_path / RUN_LOCK_NAME, victim.pid, process_start_ticks(victim.pid))
        launcher = RunLauncher(tmp_path)
        assert launcher.adopted() is None and not launcher.running
        assert launcher.stop() == "no run in progress"
        with pytest.raises(subprocess.TimeoutExpired):  # a SIGINT would have ended it
            victim.wait(0.5)
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a file to another user needs root")
def test_a_lock_written_by_another_user_is_ignored(tmp_path: Path) -> None:
    from jupyterlab_nvdashboard.runs.launcher import read_lock

    lock = tmp_path / RUN_LOCK_NAME
    lock.write_text(json.dumps({"pid": os.getpid(), "start_ticks": None}))
    assert read_lock(lock) is not None
    os.chown(lock, 65534, 65534)
    assert read_lock(lock) is None
