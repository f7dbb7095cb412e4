"""Start real nvdashboard servers for tests: in this process (to reach the simulator and
inject faults) or as a subprocess through the CLI (exactly what a user runs).

Both ask for ``TEST_TOKEN`` (as a user's server asks for its printed token); ``get`` sends
it unless told ``token=None``, and ``with_token`` adds it to a URL for a browser.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TypeVar

from tornado.ioloop import IOLoop

from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.metrics import Metrics
from jupyterlab_nvdashboard.server import compose_sources, make_server
from jupyterlab_nvdashboard.simnvml import SimulatedNvml
from jupyterlab_nvdashboard.stream.broadcaster import Broadcaster
from tests.support.bokeh_client import TEST_TOKEN

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_serving(
    url: str, timeout_s: float = 60.0, process: subprocess.Popen | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}: "
                               f"{server_output(process)[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # any HTTP answer (a 403 without the token, too) means it is serving
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


def wait_until_gpus_read(url: str, token: str | None, process: subprocess.Popen,
                         timeout_s: float = 60.0) -> None:
    """Until ``/info.json`` stops saying ``reading_gpus`` (or cannot be read with ``token``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        status, body = get(url + "/info.json", token=token)
        if status != 200 or not json.loads(body).get("reading_gpus"):
            return
        time.sleep(0.05)


# How long a request may take: a server sharing two loaded cores (a CPU hog, two other test
# workers, and in one process several servers at 10 ticks a second) answered a history
# query after more than 10 s. A hung server still fails the test, at this deadline.
REQUEST_TIMEOUT_S = 60.0


def get(url: str, headers: Mapping[str, str] | None = None,
        token: str | None = TEST_TOKEN) -> tuple[int, bytes]:
    """GET with the test token (``token=None``: without any), as (status, body)."""
    headers = dict(headers or {})
    if token is not None:
        headers = {"Authorization": f"token {token}", **headers}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def with_token(url: str, token: str = TEST_TOKEN) -> str:
    """``url`` with ``?token=``: the first page a browser opens, which sets the cookie."""
    return f"{url}{'&' if '?' in url else '?'}token={token}"


@dataclass
class RunningServer:
    url: str
    config: Config
    metrics: Metrics
    server: object = None  # the bokeh Server, for its public API (get_sessions)
    sources: object = None  # the DashboardSources it serves (the workload service, ...)

    @property
    def broadcaster(self) -> Broadcaster:
        return self.server.broadcaster  # type: ignore[attr-defined]

    def live_sessions(self) -> int:
        return len(self.session_ids())

    def session_ids(self) -> set[str]:
        return {session.id for session in self.server.get_sessions()}  # type: ignore[attr-defined]

    def on_loop(self, function: Callable[[], T]) -> T:
        """``function()`` run on the server's event loop, between two of its callbacks: what
        the broadcaster counts is read whole, never halfway through a publish."""
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                done.set_result(function())
            except BaseException as error:  # noqa: BLE001 - handed to the caller
                done.set_exception(error)

        self.server.io_loop.add_callback(call)  # type: ignore[attr-defined]
        return done.result(30)

    def wait_until_gpus_read(self, timeout_s: float = 30.0) -> None:
        """Until a tick holds GPU readings: the server answers before NVML has started."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            latest = self.metrics.history.latest()
            if latest is not None and latest.gpus:
                return
            time.sleep(0.05)
        raise TimeoutError(f"no GPU reading within {timeout_s} s")

    @property
    def simulator(self) -> SimulatedNvml:
        assert self.metrics.simulator is not None
        return self.metrics.simulator


@contextmanager
def in_process_server(
    gpus: int = 4, simulator: SimulatedNvml | None = None, retry_interval_s: float | None = None,
    profile: str = "mixed", binding: str = "", scenario: str = "", **config_fields: object
) -> Iterator[RunningServer]:
    """A real Bokeh server on a free port, on its own IOLoop thread, with simulated NVML.

    ``retry_interval_s`` shortens how often NVML init and lost GPUs are retried; ``binding``
    is an nvidia-ml-py wheel to run over the simulated driver ('' for the installed one)."""
    runs_dir = Path(tempfile.mkdtemp(prefix="nvdashboard-runs-"))
    # No idle slowdown unless a test asks for one: tests read the history without pages.
    config = replace(Config(port=free_port(), interval_s=0.1, idle_interval_s=0.1,
                            runs_dir=runs_dir, token=TEST_TOKEN),
                     simulation=SimulationConfig(gpu_count=gpus, profile=profile,
                                                 binding=binding, scenario=scenario),
                     **config_fields)
    metrics = create_metrics(config, environ={}, simulator=simulator)
    sources = compose_sources(config, metrics)
    if retry_interval_s is not None:
        metrics.nvml.retry_interval_s = retry_interval_s
    started = threading.Event()
    holder: dict[str, object] = {}

    def serve() -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        server = make_server(config, sources, io_loop=IOLoop.current())
        server.start()
        holder["server"] = server
        started.set()
        try:
            server.io_loop.start()
        finally:
            # Stopped, and its loop closed: tornado keeps every IOLoop that is not closed
            # (keyed by its asyncio loop), and with it this server's timers, sessions and
            # history. Left open, each test's server stayed in the worker's heap, and later
            # tests' garbage collections walked them all.
            server.stop()
            server.io_loop.close(all_fds=True)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(30)
    sources.start()
    try:
        yield RunningServer(f"http://127.0.0.1:{config.port}", config, metrics, holder["server"],
                            sources)
    finally:
        sources.stop()
        server = holder["server"]
        server.io_loop.add_callback(server.io_loop.stop)  # type: ignore[attr-defined]
        thread.join(10)
        shutil.rmtree(runs_dir, ignore_errors=True)  # every test cleans up what it makes


@contextmanager
def cli_server(
    args: Sequence[str] = (), env: Mapping[str, str] | None = None, port: int | None = None,
    sigint_ignored: bool = False, open_files_limit: int | None = None,
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``python -m jupyterlab_nvdashboard.server`` as a subprocess, stopped with Ctrl-C.

    Its token is ``TEST_TOKEN`` unless ``env`` sets another NVDASHBOARD_TOKEN.
    ``sigint_ignored`` starts it as a non-interactive shell's ``cmd &`` does: SIGINT ignored.
    ``open_files_limit`` lowers its soft limit of open files (``ulimit -n``).
    """
    port = port or free_port()
    runs_dir = tempfile.mkdtemp(prefix="nvdashboard-runs-")
    environment = {**os.environ, "NVDASHBOARD_RUNS_DIR": runs_dir,
                   "NVDASHBOARD_TOKEN": TEST_TOKEN, **(env or {})}
    # The server's output goes to a file, never an unread pipe: a full pipe would freeze it.
    log = tempfile.NamedTemporaryFile("w+", prefix="nvdashboard-server-", suffix=".log")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab_nvdashboard.server", str(port), *args],
        env=environment, stdout=log, stderr=subprocess.STDOUT, text=True,
        preexec_fn=partial(_before_exec, sigint_ignored, open_files_limit)  # noqa: PLW1509
        if sigint_ignored or open_files_limit is not None else None,  # test only
    )
    process.log_path = log.name  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(url + "/", process=process)
        # The server answers before NVML has started (it never waits on it); tests read the
        # steady state, so wait for the first GPU read too.
        wait_until_gpus_read(url, environment["NVDASHBOARD_TOKEN"] or None, process)
        yield url, process
    finally:
        process.send_signal(2)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(runs_dir, ignore_errors=True)


def _before_exec(sigint_ignored: bool, open_files_limit: int | None) -> None:
    if sigint_ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if open_files_limit is not None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files_limit, hard))


def server_output(process: subprocess.Popen) -> str:
    """Everything a ``cli_server`` process has printed so far."""
    with open(process.log_path) as log:  # type: ignore[attr-defined]
        return log.read()
