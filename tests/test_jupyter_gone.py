"""A dashboard server never outlives the Jupyter server that started it (issue 57).

A fake Jupyter (a Python process that calls ``launch_server()`` in itself, as Jupyter
does, and starts the command it returns) ends exactly where a test wants: before the
server has read its GPUs, or after; with a store and without. The server exits within a
few seconds, with one log line saying why, and the store's writer lock is free for the next
server. The first case once left a server sampling for ever: it took its parent's PID
seconds after it started, when a Jupyter already gone had left it re-parented to init.
The real ``jupyter lab``, through jupyter-server-proxy's own launcher, is in
``test_jupyter_gone_lab.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest

from jupyterlab_nvdashboard.config import JupyterProcess, load_config
from jupyterlab_nvdashboard.jupyter_watch import JupyterWatch, start_mark, this_process
from jupyterlab_nvdashboard.preflight import PROXY_SOCKET_FOLDER_PREFIX
from tests.support.jupyter import CHECKOUT
from tests.support.jupyter_gone import (
    lock_is_free,
    lock_is_held,
    seconds_to_end,
    stored_buckets,
)
from tests.support.waiting import until

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


class FakeJupyter(NamedTuple):
    process: subprocess.Popen
    server_pid: int  # the dashboard server it started (1 simulated GPU)
    socket_folder: Path  # made as jupyter-server-proxy makes it, for the server to remove


@contextmanager
def fake_jupyter(folder: Path, store: Path | None, faults: str = "") -> Iterator[FakeJupyter]:
    """``faults``: the simulated driver's (``NVDASHBOARD_SIMULATE_FAULTS``)."""
    env = {**os.environ, "NVDASHBOARD_SIMULATE": "1", "NVDASHBOARD_SIMULATE_FAULTS": faults,
           "NVDASHBOARD_STORE": str(store) if store else "off",
           "NVDASHBOARD_RUNS_DIR": str(folder / "runs"),
           "PYTHONPATH": os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")]))}
    # In the session's temp folder, as the proxy does: under tmp_path the socket's path
    # would pass the 107 bytes a unix socket's path may hold.
    socket_folder = Path(tempfile.mkdtemp(prefix=PROXY_SOCKET_FOLDER_PREFIX))
    process = subprocess.Popen(
        [sys.executable, "-c", _FAKE_JUPYTER, str(socket_folder / "socket"),
         str(folder / "server.log")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None and process.stdin is not None
    try:
        yield FakeJupyter(process, int(process.stdout.readline()), socket_folder)
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(socket_folder, ignore_errors=True)


def end(jupyter: subprocess.Popen) -> None:
    assert jupyter.stdin is not None
    jupyter.stdin.close()
    jupyter.wait(30)


@pytest.mark.parametrize("with_store", [True, False], ids=["store", "no-store"])
def test_jupyter_exits_before_the_server_has_read_its_gpus(tmp_path: Path,
                                                           with_store: bool) -> None:
    store = tmp_path / "history.sqlite" if with_store else None
    with fake_jupyter(tmp_path, store) as jupyter:
        end(jupyter.process)  # the server has only just been started
        seconds_to_end(jupyter.server_pid, tmp_path / "server.log")
        assert not jupyter.socket_folder.exists()
    output = (tmp_path / "server.log").read_text()
    # It read no GPU and opened no store: it left before Bokeh was even imported.
    assert GONE_LINE in output and GPUS_READ_LINE not in output, output
    assert len(output.strip().splitlines()) == 1, output
    if store is not None:
        assert lock_is_free(store)


def test_jupyter_exits_while_the_server_serves_but_still_reads_its_gpus(tmp_path: Path) -> None:
    # Every simulated NVML call takes 1 s: the pages answer, the first GPU read is far off.
    store, log = tmp_path / "history.sqlite", tmp_path / "server.log"
    with fake_jupyter(tmp_path, store, faults="slow=1") as jupyter:
        until(lambda: "dashboards at" in log.read_text(), "the server serves")
        until(lambda: lock_is_held(store), "the server writes the store")
        end(jupyter.process)
        seconds_to_end(jupyter.server_pid, log)
    output = log.read_text()
    assert GPUS_READ_LINE not in output and output.count(GONE_LINE) == 1, output
    assert output.rstrip().endswith("stopped"), output
    assert lock_is_free(store)


@pytest.mark.parametrize("with_store", [True, False], ids=["store", "no-store"])
def test_jupyter_exits_after_the_server_has_read_its_gpus(tmp_path: Path,
                                                          with_store: bool) -> None:
    store = tmp_path / "history.sqlite" if with_store else None
    log = tmp_path / "server.log"
    with fake_jupyter(tmp_path, store) as jupyter:
        until(lambda: GPUS_READ_LINE in log.read_text(), "the server reads its GPUs")
        if store is not None:
            until(lambda: lock_is_held(store), "the server writes the store")
        end(jupyter.process)
        seconds_to_end(jupyter.server_pid, log)
        assert not jupyter.socket_folder.exists()  # its socket, and the proxy's folder
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
