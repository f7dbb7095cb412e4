"""The CLI: bad input is one line on stderr and exit code 2; good input serves and stops."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from tests.support.servers import cli_server, free_port, get, server_output, wait_until_serving


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jupyterlab_nvdashboard.server", *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nvdashboard: error:")
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["eighty"], ["port", "'eighty'"]),
        (["70000"], ["port", "65535"]),
        (["0"], ["port"]),
        (["--interval", "0.01"], ["interval", "0.05"]),
        (["--interval", "fast"], ["interval"]),
        (["--frobnicate"], ["--frobnicate"]),
        (["--simulate", "-1"], ["simulate"]),
        (["--jupyter-process", "4242"], ["--jupyter-process", "PID:STARTED"]),
        (["--jupyter-process", "0:17"], ["--jupyter-process"]),
        (["--jupyter-process", "4242:soon"], ["--jupyter-process"]),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], words: list[str]) -> None:
    assert_one_line_error(run_cli(*args), *words)


@pytest.mark.parametrize(
    ("variable", "value"),
    [("NVDASHBOARD_PORT", "abc"), ("NVDASHBOARD_INTERVAL", "0"),
     ("NVDASHBOARD_SIMULATE", "many"), ("NVDASHBOARD_SIMULATE_NVLINK", "maybe"),
     ("NVDASHBOARD_HISTORY", "-5")],
)
def test_malformed_environment_is_one_line(variable: str, value: str) -> None:
    assert_one_line_error(run_cli(env={variable: value}), variable)


def test_busy_port_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert_one_line_error(run_cli(str(port)), "address already in use", str(port))


def test_no_gpu_machine_serves_machine_dashboard_only() -> None:
    # This machine has no NVIDIA driver: the real pynvml path must say so and carry on.
    with cli_server() as (url, _):
        status, body = get(url + "/index.json")
        assert status == 200
        assert json.loads(body) == {"/Machine-Resources": "Machine Resources",
                                    "/Workload": "Embedding Workload"}
        info = json.loads(get(url + "/info.json")[1])
        assert info["simulated"] is False and info["gpu_count"] == 0
        assert info["nvml_state"] in ("library_not_found", "driver_not_loaded", "no_devices")
        assert get(url + "/Machine-Resources")[0] == 200
        page = get(url + "/")[1].decode()
        assert "No NVIDIA GPU or driver was found" in page
        gpu_page = get(url + "/GPU-Utilization")
        assert gpu_page[0] == 200


def test_ctrl_c_stops_cleanly() -> None:
    with cli_server(["--simulate", "2"]) as (url, process):
        assert get(url + "/index.json")[0] == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == 0
        assert "Traceback" not in server_output(process)


# The server, with one callback that does what a weakref callback or a finalizer does with an
# exception (it swallows it), sending Ctrl-C to its own process while it runs.
_SWALLOWING_SERVER = """
import os, signal, sys, time
from jupyterlab_nvdashboard import server

def swallowing_callback():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)
    except BaseException:
        print("swallowed an exception", flush=True)

made = server.make_server
def make_server(*args, **kwargs):
    running = made(*args, **kwargs)
    running.io_loop.call_later(1.0, swallowing_callback)
    return running
server.make_server = make_server
sys.exit(server.main(sys.argv[1:]))
"""


def test_ctrl_c_stops_even_when_it_lands_in_code_that_swallows_exceptions(tmp_path) -> None:  # noqa: ANN001
    # Ctrl-C raised as KeyboardInterrupt lands wherever the main thread is; in a callback that
    # swallows it, the server never stopped (seen in 1 of 15 starts on a loaded machine).
    result = subprocess.run(
        [sys.executable, "-c", _SWALLOWING_SERVER, str(free_port()), "--simulate", "1"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "NVDASHBOARD_RUNS_DIR": str(tmp_path / "runs")})
    assert "swallowed" not in result.stdout, result.stdout
    assert result.returncode == 0, result.stderr
    assert "stopped" in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_second_ctrl_c_while_stopping_ends_the_process_at_once(tmp_path) -> None:  # noqa: ANN001
    # The stop is made slow (a stop of the sampler that hangs): the second Ctrl-C ends it.
    slow_stop = ("import sys, time\nfrom jupyterlab_nvdashboard import server\n"
                 "composed = server.compose_sources\n"
                 "def compose_sources(*args, **kwargs):\n"
                 "    sources = composed(*args, **kwargs)\n"
                 "    sources.stop = lambda: time.sleep(120)\n"
                 "    return sources\n"
                 "server.compose_sources = compose_sources\n"
                 "sys.exit(server.main(sys.argv[1:]))\n")
    port = free_port()
    with open(tmp_path / "server.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", slow_stop, str(port), "--simulate", "1"],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "NVDASHBOARD_RUNS_DIR": str(tmp_path / "runs")})
    process.log_path = log.name  # type: ignore[attr-defined] - what server_output reads
    try:
        wait_until_serving(f"http://127.0.0.1:{port}/", process=process)
        process.send_signal(signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(2)  # stopping, slowly
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == -signal.SIGINT
    finally:
        process.kill()
        process.wait()


def test_all_interfaces_warns() -> None:
    port = free_port()
    with cli_server(["--address", "0.0.0.0"], port=port) as (_, process):
        process.send_signal(signal.SIGINT)
        process.wait(15)
        assert "anyone on the network can watch" in server_output(process)
