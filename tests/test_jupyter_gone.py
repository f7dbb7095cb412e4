"""A dashboard server never outlives the Jupyter server that started it (issue 57).

However early Jupyter goes (before the server has read its GPUs, while the request that
launches it is in flight, killed with ``-9`` once it is up), the dashboard server exits
within a few seconds, with one log line saying why, and the store's writer lock is free for
the next server. Each case once left a server sampling for ever: it took its parent's PID
seconds after it started, when a Jupyter already gone had left it re-parented to init.

A fake Jupyter (a Python process that calls ``launch_server()`` in itself, as Jupyter
does, and starts the command it returns) places the end exactly; the real ``jupyter lab``
goes through jupyter-server-proxy's own launcher.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from jupyterlab_nvdashboard.config import JupyterProcess, load_config
from jupyterlab_nvdashboard.jupyter_watch import JupyterWatch, start_mark, this_process
from jupyterlab_nvdashboard.store.file import WriterLock
from tests.support.jupyter import CHECKOUT, dashboard_servers, jupyter_lab
from tests.support.waiting import until

# The "within a few seconds", on a loaded 2-core machine: the watch looks four
# times a second, and a clean stop writes the store's last batch.
EXIT_WITHIN_S = 10.0
GONE_LINE = "the Jupyter server that started this one"
GPUS_READ_LINE = "simulated GPU(s) every"

# Calls launch_server() in itself, as jupyter-server-proxy does inside Jupyter, starts the
# command it returns with the socket filled in, prints the server's PID and exits when its
# standard input closes: the test decides when this "Jupyter" is gone.
_FAKE_JUPYTER = """
import subprocess, sys
from jupyterlab_nvdashboard import launch_server
socket_path, log_path = sys.argv[1:3]
command = [part.replace("{unix_socket}", socket_path) for part in launch_server()["command"]]
with open(log_path, "w") as log:
    server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
print(server.pid, flush=True)
sys.stdin.read()
"""


def has_ended(pid: int) -> bool:
    """Whether ``pid`` has ended: gone, or a zombie whose new parent has not reaped it."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def lock_is_free(store: Path) -> bool:
    """Whether the next server would become the store's writer now."""
    lock = WriterLock(store)
    try:
        return lock.try_acquire()
    finally:
        lock.release()


def stored_buckets(store: Path) -> int:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        return db.execute("SELECT count(*) FROM buckets").fetchone()[0]


def seconds_to_end(pid: int, log: Path) -> float:
    """How long ``pid`` took to end from now; it is killed (and the test fails) when it
    keeps running past ``EXIT_WITHIN_S``."""
    started = time.monotonic()
    try:
        until(lambda: has_ended(pid), "the dashboard server exits", EXIT_WITHIN_S)
    except AssertionError:
        with_output = log.read_text()[-2000:] if log.exists() else ""
        psutil.Process(pid).kill()
        raise AssertionError(f"the dashboard server outlived its Jupyter server:\n"
                             f"{with_output}") from None
    return time.monotonic() - started


@contextmanager
def fake_jupyter(folder: Path, store: Path | None) -> Iterator[tuple[subprocess.Popen, int]]:
    """The fake Jupyter and the PID of the dashboard server it started (1 simulated GPU)."""
    env = {**os.environ, "NVDASHBOARD_SIMULATE": "1",
           "NVDASHBOARD_STORE": str(store) if store else "off",
           "NVDASHBOARD_RUNS_DIR": str(folder / "runs"),
           "PYTHONPATH": os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")]))}
    jupyter = subprocess.Popen(
        [sys.executable, "-c", _FAKE_JUPYTER, str(folder / "s.sock"), str(folder / "server.log")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert jupyter.stdout is not None and jupyter.stdin is not None
    try:
        yield jupyter, int(jupyter.stdout.readline())
    finally:
        jupyter.kill()
        jupyter.wait()


def end(jupyter: subprocess.Popen) -> None:
    assert jupyter.stdin is not None
    jupyter.stdin.close()
    jupyter.wait(30)


@pytest.mark.parametrize("with_store", [True, False], ids=["store", "no-store"])
def test_jupyter_exits_before_the_server_has_read_its_gpus(tmp_path: Path,
                                                           with_store: bool) -> None:
    store = tmp_path / "history.sqlite" if with_store else None
    with fake_jupyter(tmp_path, store) as (jupyter, server):
        end(jupyter)  # the server has only just been started
        seconds_to_end(server, tmp_path / "server.log")
    output = (tmp_path / "server.log").read_text()
    # It read no GPU and opened no store: it left before Bokeh was even imported.
    assert GONE_LINE in output and GPUS_READ_LINE not in output, output
    assert len(output.strip().splitlines()) == 1, output
    if store is not None:
        assert lock_is_free(store)


@pytest.mark.parametrize("with_store", [True, False], ids=["store", "no-store"])
def test_jupyter_exits_after_the_server_has_read_its_gpus(tmp_path: Path,
                                                          with_store: bool) -> None:
    store = tmp_path / "history.sqlite" if with_store else None
    log = tmp_path / "server.log"
    with fake_jupyter(tmp_path, store) as (jupyter, server):
        until(lambda: GPUS_READ_LINE in log.read_text(), "the server reads its GPUs")
        end(jupyter)
        seconds_to_end(server, log)
    output = log.read_text()
    assert output.count(GONE_LINE) == 1 and "Traceback" not in output, output
    assert output.rstrip().endswith("stopped"), output  # the clean stop ran
    if store is not None:
        assert lock_is_free(store)
        assert stored_buckets(store) > 0  # its last batch, written as it stopped


def test_the_identity_is_this_process_and_ends_with_it() -> None:
    jupyter = this_process()
    assert jupyter.pid == os.getpid()
    assert load_config(["--jupyter-process", jupyter.argument()],
                       environ={}).jupyter_process == jupyter
    assert JupyterWatch(jupyter).alive()
    # A later process given the same PID started at another time: not this Jupyter.
    assert not JupyterWatch(JupyterProcess(jupyter.pid, jupyter.started + 1)).alive()
    # A Jupyter killed with -9 stays a zombie until its parent reaps it: it is gone.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, "a zombie")
    assert start_mark(child.pid) is None
    child.wait()
    assert start_mark(child.pid) is None


def test_a_watch_runs_what_was_asked_once_when_the_jupyter_goes() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    mark = start_mark(child.pid)
    assert mark is not None
    watch = JupyterWatch(JupyterProcess(child.pid, mark), every_s=0.01)
    watch.start()
    acts: list[str] = []
    watch.when_gone(lambda: acts.append("asked before"))
    assert not watch.gone.is_set()
    assert child.stdin is not None
    child.stdin.close()
    child.wait()  # reaped: no zombie left for the watch to see
    until(watch.gone.is_set, "the watch sees its Jupyter gone")
    watch.when_gone(lambda: acts.append("asked after"))  # at once, on this thread
    until(lambda: len(acts) == 2, "both acts ran")
    assert sorted(acts) == ["asked after", "asked before"]


def lab_env(store: Path) -> dict[str, str]:
    # One launch, by the test's own request: not the server extension's at start-up.
    return {"NVDASHBOARD_STORE": str(store), "NVDASHBOARD_START_WITH_JUPYTER": "0"}


def test_jupyter_shut_down_while_the_request_that_launches_the_server_is_in_flight(
        tmp_path: Path) -> None:
    store = tmp_path / "history.sqlite"
    with jupyter_lab(simulate=1, extra_env=lab_env(store)) as lab:
        threading.Thread(target=lab.get, args=("nvdashboard/info.json",), daemon=True).start()
        [server] = until(lambda: dashboard_servers(lab.process.pid),
                         "jupyter-server-proxy launches the dashboard server", every_s=0.01)
        # Held still from its first moments until its Jupyter has gone, as a machine too busy
        # to run it would: the request is in flight, the server not yet started.
        server.suspend()
        try:
            lab.shut_down()
            lab.process.wait(60)
        finally:
            server.resume()
        seconds_to_end(server.pid, tmp_path / "no log")
    assert lock_is_free(store)


def test_jupyter_killed_with_minus_9_after_the_server_is_up(tmp_path: Path) -> None:
    store = tmp_path / "history.sqlite"
    with jupyter_lab(simulate=1, extra_env=lab_env(store)) as lab:
        assert "/GPU-Resources" in lab.dashboard_index()  # it has read its GPUs
        [server] = dashboard_servers(lab.process.pid)
        lab.process.send_signal(signal.SIGKILL)
        lab.process.wait(30)
        took = seconds_to_end(server.pid, tmp_path / "no log")
    assert lock_is_free(store)
    assert stored_buckets(store) > 0
    print(f"the dashboard server exited {took:.2f} s after its Jupyter was killed")
