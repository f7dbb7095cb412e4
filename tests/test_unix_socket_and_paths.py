"""The smaller edges: ``--unix-socket`` at a directory or a live socket is one line and exit
code 2 (a live socket is never taken over), the socket file is removed at a clean stop, a
stale one is replaced, and a NUL byte in a static file path is a 400, not a 500."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.bokeh_client import TEST_TOKEN
from tests.support.servers import cli_server, free_port, get, server_output


def _environment(tmp_path: Path) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("NVDASHBOARD_", "BOKEH_"))}
    return {**environment, "NVDASHBOARD_TOKEN": TEST_TOKEN,
            "NVDASHBOARD_RUNS_DIR": str(tmp_path / "runs")}


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jupyterlab_nvdashboard.server", *args],
                          capture_output=True, text=True, timeout=60, env=_environment(tmp_path))


def _one_line_exit_2(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and lines[0].startswith("nvdashboard: error:")
    return lines[0]


def _get_over_socket(path: str, route: str = "/info.json") -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(path)
        client.sendall(f"GET {route} HTTP/1.1\r\nHost: localhost\r\nAuthorization: token "
                       f"{TEST_TOKEN}\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while chunk := client.recv(65536):
            reply += chunk
    return int(reply.split(b" ", 2)[1])


def _serve_on_socket(tmp_path: Path, path: str) -> subprocess.Popen:
    log = open(tmp_path / f"server-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab_nvdashboard.server", "--unix-socket", path],
        env=_environment(tmp_path), stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "the server exited"
        try:
            if _get_over_socket(path) == 200:
                return process
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the server never answered on its socket")


def test_a_directory_as_the_unix_socket_is_one_line(tmp_path: Path) -> None:
    line = _one_line_exit_2(_run(tmp_path, "--unix-socket", str(tmp_path)))
    assert "directory" in line
    plain = tmp_path / "plain-file"
    plain.write_text("mine")
    _one_line_exit_2(_run(tmp_path, "--unix-socket", str(plain)))
    assert plain.read_text() == "mine"


@pytest.fixture
def socket_folder() -> Iterator[Path]:
    """A folder with a short path: a Unix socket's path must stay under 108 bytes, and
    pytest-xdist's tmp_path is longer than that allows."""
    with tempfile.TemporaryDirectory(prefix="nvdashboard-sock-") as folder:
        yield Path(folder)


def test_a_live_socket_is_not_taken_over_and_a_clean_stop_removes_it(
        tmp_path: Path, socket_folder: Path) -> None:
    path = str(socket_folder / "nvdashboard.sock")
    first = _serve_on_socket(tmp_path, path)
    try:
        line = _one_line_exit_2(_run(tmp_path, "--unix-socket", path))
        assert "another server is listening" in line
        assert _get_over_socket(path) == 200  # the first server still has it
    finally:
        first.send_signal(2)
        first.wait(15)
    assert first.returncode == 0
    assert not os.path.exists(path), "the socket file was left after a clean stop"


def test_a_stale_socket_left_by_a_crash_is_replaced(tmp_path: Path, socket_folder: Path) -> None:
    path = str(socket_folder / "stale.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(path)  # closed without unlinking: what a kill -9 leaves
    second = _serve_on_socket(tmp_path, path)
    second.send_signal(2)
    second.wait(15)
    assert second.returncode == 0


def test_a_nul_byte_in_a_static_path_is_a_400(tmp_path: Path) -> None:
    with cli_server(["--simulate", "1", "--runs-dir", str(tmp_path)],
                    port=free_port()) as (url, process):
        for route in ("/static/%00", "/static/js/%00bokeh.min.js",
                      "/GPU-Utilization/static/%00x", "/static/js/bokeh.min.js%00"):
            status, _ = get(url + route)
            assert 400 <= status < 500, (route, status)
            assert get(url + route, token=None)[0] == 403, route  # the token still first
        assert get(url + "/static/js/bokeh.min.js")[0] == 200
        output = server_output(process)
    # A 500 is an access-log line "nvdashboard: 500 GET ...": a bare "500" also matched a
    # port that began with it (CI drew 50011).
    assert "Uncaught exception" not in output and " 500 " not in output, output


def test_the_proxy_socket_folder_goes_with_the_socket_and_only_when_empty(tmp_path: Path) -> None:
    from jupyterlab_nvdashboard.preflight import remove_proxy_socket_folder

    # What jupyter-server-proxy makes for `unix_socket: True`: mkdtemp("jupyter-server-proxy-").
    folder = tmp_path / "jupyter-server-proxy-abc123"
    folder.mkdir()
    remove_proxy_socket_folder(str(folder / "socket"))
    assert not folder.exists()
    # A folder with something else in it, or one of another name, stays.
    folder.mkdir()
    (folder / "other").write_text("not ours")
    remove_proxy_socket_folder(str(folder / "socket"))
    assert (folder / "other").exists()
    mine = tmp_path / "my-sockets"
    mine.mkdir()
    remove_proxy_socket_folder(str(mine / "nvdashboard.sock"))
    assert mine.exists()
