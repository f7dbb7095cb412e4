"""A real ``jupyter lab`` subprocess with a token and a non-root base URL, for proxy and
browser tests. NVDashboard is reached through jupyter-server-proxy at
``<base_url>nvdashboard/``."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.support.servers import free_port

BASE_URL = "/user/alice/"
CHECKOUT = str(Path(__file__).resolve().parents[2])
BUILT = Path(CHECKOUT) / "jupyterlab_nvdashboard" / "labextension"


def stale_sources(build: Path) -> list[str]:
    """The frontend sources changed after ``build`` was written, relative to the checkout."""
    root = BUILT.parents[1]
    built_at = build.stat().st_mtime
    return sorted(str(path.relative_to(root)) for folder in ("src", "style", "schema")
                  for path in (root / folder).rglob("*")
                  if path.is_file() and "__tests__" not in path.parts
                  and path.stat().st_mtime > built_at)


def this_build(share: str) -> dict[str, str]:
    """The environment that makes a lab load the extension built from this checkout
    (``jlpm build`` writes ``jupyterlab_nvdashboard/labextension``): put first on Jupyter's
    path, in ``share`` (a folder the caller owns), for that lab only. Empty where there is
    no build: the lab loads the installed extension."""
    if not (BUILT / "package.json").exists():
        return {}
    stale = stale_sources(BUILT / "package.json")
    if stale:
        # A build older than its sources fails tests with no sign of why (a sidebar that
        # lacks what the sources draw): say so instead.
        raise RuntimeError(f"{BUILT} is older than {', '.join(stale[:3])}: run `jlpm build`")
    labextensions = Path(share) / "labextensions"
    labextensions.mkdir()
    (labextensions / "jupyterlab-nvdashboard").symlink_to(BUILT)
    return {"JUPYTER_PATH": share}  # earlier data paths win


@dataclass
class JupyterLab:
    root_url: str  # http://127.0.0.1:PORT
    base_url: str  # /user/alice/
    token: str
    process: subprocess.Popen

    @property
    def url(self) -> str:
        return self.root_url + self.base_url

    @property
    def proxy_url(self) -> str:
        return self.url + "nvdashboard"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def get(self, path: str) -> tuple[int, bytes]:
        request = urllib.request.Request(self.url + path, headers=self.auth)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except OSError:  # not listening yet
            return 0, b""

    def shut_down(self) -> None:
        """Ask Jupyter to shut down (``api/shutdown``, its File menu's "Shut Down")."""
        request = urllib.request.Request(self.url + "api/shutdown", method="POST",
                                         headers=self.auth, data=b"")
        urllib.request.urlopen(request, timeout=10)

    def dashboard_index(self, timeout_s: float = 60.0) -> dict[str, str]:
        """The proxied server's dashboard index once it has read its GPUs: the first request
        starts it, and until its first GPU read its index lists the machine dashboards only."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status, body = self.get("nvdashboard/info.json")
            if status == 200 and not json.loads(body).get("reading_gpus"):
                status, body = self.get("nvdashboard/index.json")
                assert status == 200, body[:500]
                return json.loads(body)
            time.sleep(0.2)
        raise AssertionError(f"the proxied server did not read its GPUs in {timeout_s:.0f} s")


def dashboard_servers(jupyter_pid: int) -> list[psutil.Process]:
    """The dashboard servers the Jupyter server ``jupyter_pid`` started (its proxy's)."""
    try:
        children = psutil.Process(jupyter_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            if "jupyterlab_nvdashboard.server" in " ".join(child.cmdline()):
                found.append(child)
    return found


def _never_ask_about_news(settings_dir: str) -> None:
    """JupyterLab's "get notified about Jupyter news?" toast covers part of every screenshot."""
    folder = os.path.join(settings_dir, "@jupyterlab", "apputils-extension")
    os.makedirs(folder)
    with open(os.path.join(folder, "notification.jupyterlab-settings"), "w") as settings:
        json.dump({"fetchNews": "false"}, settings)


def lab_environment(home: str, settings: str, simulate: int,
                    extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """JupyterLab's environment: every Jupyter and IPython folder inside ``home``."""
    return {**os.environ, "NVDASHBOARD_SIMULATE": str(simulate), "NVDASHBOARD_INTERVAL": "0.2",
            "JUPYTERLAB_SETTINGS_DIR": settings,
            "JUPYTER_CONFIG_DIR": os.path.join(home, "config"),
            "JUPYTER_RUNTIME_DIR": os.path.join(home, "runtime"),
            # Jupyter's data (the server's secret, kernels' connection files) and IPython's
            # profile went to ~/.local/share/jupyter and ~/.ipython: everything stays here.
            "JUPYTER_DATA_DIR": os.path.join(home, "data"),
            "IPYTHONDIR": os.path.join(home, "ipython"),
            "JUPYTERLAB_WORKSPACES_DIR": os.path.join(home, "workspaces"),
            # The proxied server's runs folder (default ~/.cache/nvdashboard/runs) too.
            "NVDASHBOARD_RUNS_DIR": os.path.join(home, "runs"),
            # And its history store (default: in the user's state folder).
            "NVDASHBOARD_STORE": os.path.join(home, "state", "history.sqlite"),
            # Jupyter runs in ``home``: this checkout's package first, so that its server
            # extension and the proxied dashboard server are the code under test, not an
            # older install of it.
            "PYTHONPATH": os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")])),
            **(extra_env or {})}


@contextmanager
def jupyter_lab(
    simulate: int = 2, extra_env: dict[str, str] | None = None, extra_args: Sequence[str] = (),
    wrap: Callable[[list[str], str], list[str]] | None = None,
) -> Iterator[JupyterLab]:
    """``wrap(command, cwd)``: the command that runs it instead (inside a PID namespace, say)."""
    port, token = free_port(), secrets.token_hex(16)
    with tempfile.TemporaryDirectory() as home:
        settings = os.path.join(home, "settings")
        _never_ask_about_news(settings)
        env = lab_environment(home, settings, simulate, extra_env)

        log = open(os.path.join(home, "jupyter.log"), "w+")  # noqa: SIM115
        command = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
                   "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
                   f"--ServerApp.base_url={BASE_URL}", f"--ServerApp.root_dir={home}",
                   "--LabApp.news_url=", "--LabApp.collaborative=False",
                   *(["--allow-root"] if os.geteuid() == 0 else []), *extra_args]
        process = subprocess.Popen(command if wrap is None else wrap(command, home),
                                   env=env, stdout=log, stderr=subprocess.STDOUT, cwd=home)
        lab = JupyterLab(f"http://127.0.0.1:{port}", BASE_URL, token, process)
        try:
            deadline = time.monotonic() + 120
            while lab.get("api/status")[0] != 200:
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"jupyter lab did not start:\n{log.read()[-3000:]}")
                time.sleep(0.5)
            yield lab
        finally:
            try:
                lab.shut_down()
                process.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
            log.close()


@contextmanager
def lab_with_processes(processes_file: object, simulate: int,
                       extra_env: dict[str, str] | None = None,
                       extra_args: Sequence[str] = ()) -> Iterator[JupyterLab]:
    """A lab of ``simulate`` GPUs, this checkout's build, whose simulated driver lists the
    processes a test writes to ``processes_file``."""
    with tempfile.TemporaryDirectory() as share:
        extra = {"NVDASHBOARD_SIMULATE_PROCESSES": str(processes_file), **this_build(share),
                 **(extra_env or {})}
        with jupyter_lab(simulate=simulate, extra_env=extra,
                         extra_args=extra_args) as running:
            yield running


@contextmanager
def shell_client(connection_file: Path) -> Iterator[Any]:
    """A client of the kernel of ``connection_file`` on its shell channel alone.

    A request there is queued until the kernel reads it, and its reply waited for: no IOPub
    subscription (whose messages are lost until it is connected) and no heartbeat (whose
    1 s deadline judges a kernel dead when a busy machine leaves it unscheduled for a
    second) stands between a request and its reply."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    client.start_channels(iopub=False, stdin=False, hb=False, control=False)
    try:
        yield client
    finally:
        client.stop_channels()


def cell_reply(connection_file: Path, code: str, timeout: float = 60) -> dict[str, Any]:
    """Run ``code`` in the kernel of ``connection_file``; the content of its execute_reply."""
    with shell_client(connection_file) as client:
        return client.execute(code, reply=True, timeout=timeout)["content"]
