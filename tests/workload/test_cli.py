"""The CLI end to end in a subprocess: events file, bad arguments and Ctrl-C."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.workload import build_command, read_events
from tests.support.waiting import until

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path):
    env = dict(os.environ, NVDASHBOARD_RUNS_DIR=str(tmp_path / "runs"), TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def test_cli_writes_events_to_runs_dir(tmp_path):
    pytest.importorskip("tensorflow")
    cmd = build_command({"path": "plugin", "preset": "ci", "iterations": 12, "device": "cpu"})
    done = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    files = list((tmp_path / "runs").glob("*.jsonl"))
    assert len(files) == 1
    events = read_events(files[0])
    kinds = [e["event"] for e in events]
    # The default 3 untimed warm-up iterations each say so (the panel's "warm-up k of W").
    assert kinds == ["start"] + ["warmup_step"] * 3 + ["warmup_end"] + ["iteration"] * 12 \
        + ["end"]
    assert [e["step"] for e in events[1:4]] == [1, 2, 3] and all(e["ms"] > 0
                                                                 for e in events[1:4])
    assert len({e["run_id"] for e in events}) == 1 and files[0].stem == events[0]["run_id"]
    assert all(isinstance(e["time"], float) for e in events)
    start, end = events[0], events[-1]
    assert start["path"] == "plugin" and start["device"] == "cpu" and start["pid"] > 0
    assert start["config"]["vocabulary"] == 512
    it = events[5]
    assert {"iteration", "ms", "samples_per_s", "loss"} <= set(it)
    assert end["iterations"] == 12 and end["interrupted"] is False
    assert end["p10_ms"] <= end["median_ms"] <= end["p90_ms"]
    assert end["peak_host_memory_bytes"] > 0 and end["peak_device_memory_bytes"] is None


def test_cli_numpy_path_with_events_flag(tmp_path):
    events_file = tmp_path / "e.jsonl"
    cmd = [sys.executable, "-m", "jupyterlab_nvdashboard.workload", "--path", "numpy"]
    cmd += ["--preset", "ci", "--iterations", "5", "--events", str(events_file), "--warmup", "0"]
    done = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert read_events(events_file)[-1]["iterations"] == 5
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("preset", "set_by_user", "threads"),
                         [("ci", None, "1"), ("ci", "2", "2"), ("densedemo", None, None)])
def test_the_ci_preset_runs_on_one_blas_thread_unless_the_user_says(
        tmp_path, preset, set_by_user, threads):
    # A tiny preset's BLAS threads only spin against other work on a busy machine.
    events_file = tmp_path / "e.jsonl"
    env = {k: v for k, v in _env(tmp_path).items() if not k.endswith("_NUM_THREADS")}
    if set_by_user:
        env["OPENBLAS_NUM_THREADS"] = set_by_user
    cmd = [sys.executable, "-m", "jupyterlab_nvdashboard.workload", "--path", "numpy",
           "--preset", preset, "--iterations", "1", "--warmup", "0",
           "--events", str(events_file)]
    # The run's first event says what BLAS was allowed; nothing after it is under test. The
    # wait is for that event, not for DenseDemo's data and a step of its 6 x 1024 MLP
    # (on a loaded machine, more than the two minutes the whole run was given).
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        start = until(lambda: _first_event(events_file, proc), "the run's start event")
    finally:
        proc.kill()
        _, stderr = proc.communicate()
    assert start["event"] == "start", stderr
    assert start.get("blas_threads") == threads


def _first_event(events_file, proc):  # noqa: ANN001, ANN202
    """The events file's first event once written; a run that ended without one fails."""
    ended = proc.poll() is not None  # before the file is read: it may write, then end
    if events_file.exists() and (events := read_events(events_file)):
        return events[0]
    assert not ended, proc.communicate()[1]
    return None


@pytest.mark.parametrize(
    "args",
    [
        ["--path", "nope"],
        ["--iterations", "0"],
        ["--iterations", "x"],
        ["--device", "tpu"],
        ["--preset", "ci", "--vocab", "0"],
        ["--path", "numpy", "--device", "gpu", "--preset", "ci"],
    ],
)
def test_cli_bad_arguments(tmp_path, args):
    cmd = [sys.executable, "-m", "jupyterlab_nvdashboard.workload", *args]
    done = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode in (1, 2)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0]
    if args[0] != "--path" or args[1] != "numpy":
        assert done.returncode == 2


def _long_run_past_five_events(tmp_path, events_file):  # noqa: ANN001, ANN202
    """A long NumPy run, once it has written at least 5 timed iteration events."""
    cmd = [sys.executable, "-m", "jupyterlab_nvdashboard.workload", "--path", "numpy",
           "--preset", "ci", "--iterations", "100000", "--events", str(events_file)]
    proc = subprocess.Popen(cmd, env=_env(tmp_path), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if events_file.exists() and sum(e["event"] == "iteration"
                                        for e in read_events(events_file)) >= 5:
            break
        time.sleep(0.1)
    return proc


def test_cli_ctrl_c_ends_cleanly(tmp_path):
    events_file = tmp_path / "e.jsonl"
    proc = _long_run_past_five_events(tmp_path, events_file)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    events = read_events(events_file)
    end = events[-1]
    assert end["event"] == "end" and end["interrupted"] is True
    assert end["iterations"] == sum(e["event"] == "iteration" for e in events) >= 3
    assert "Traceback" not in err and "interrupted" in err


def test_ctrl_c_inside_an_iteration_record_waits_for_the_record():
    from jupyterlab_nvdashboard.workload.lifetime import ctrl_c_held, own_signal_dispositions

    inherited = signal.getsignal(signal.SIGINT)
    # What the workload's CLI does first: pytest itself may have inherited SIGINT ignored
    # (started by `cmd &` in a non-interactive shell).
    own_signal_dispositions()
    recorded = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with ctrl_c_held():
                os.kill(os.getpid(), signal.SIGINT)
                recorded.append("event")  # still runs: the Ctrl-C is held
                recorded.append("time")
        assert recorded == ["event", "time"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_ctrl_c_stops_a_run_started_with_sigint_ignored(tmp_path):
    """`cmd &` in a non-interactive shell starts it with SIGINT ignored; Stop sends Ctrl-C."""
    events_file = tmp_path / "e.jsonl"
    cmd = [sys.executable, "-m", "jupyterlab_nvdashboard.workload", "--path", "numpy",
           "--preset", "ci", "--iterations", "100000", "--events", str(events_file)]
    proc = subprocess.Popen(cmd, env=_env(tmp_path), stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
            events_file.exists() and len(read_events(events_file)) >= 5):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=5)
    assert proc.returncode == 130, err
    assert read_events(events_file)[-1]["interrupted"] is True


def test_a_failure_writes_an_end_event_with_its_one_line_error(tmp_path):
    cmd = [sys.executable, "-m", "jupyterlab_nvdashboard.workload", "--path", "numpy",
           "--preset", "ci", "--device", "gpu"]
    done = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    [events_file] = (tmp_path / "runs").glob("*.jsonl")
    events = read_events(events_file)
    assert [e["event"] for e in events] == ["start", "end"]
    assert events[-1]["error"] == (
        "ValueError: the numpy path runs on the CPU only; use --device cpu")


def test_sigterm_ends_the_run_with_its_summary(tmp_path):
    events_file = tmp_path / "e.jsonl"
    proc = _long_run_past_five_events(tmp_path, events_file)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    events = read_events(events_file)
    assert [e["event"] for e in events[1:5]] == ["warmup_step"] * 3 + ["warmup_end"]
    assert events[-1]["event"] == "end" and events[-1]["interrupted"] is True, err


def test_a_second_sigterm_does_not_cut_the_end_event_short():
    from jupyterlab_nvdashboard.workload.runner import Terminated, sigterm_stops

    inherited = signal.getsignal(signal.SIGTERM)
    stopped_by = []
    with sigterm_stops():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
        except Terminated:
            stopped_by.append("first SIGTERM")
            os.kill(os.getpid(), signal.SIGTERM)  # where the run writes its end event
            time.sleep(0.05)
            stopped_by.append("end event written")
    assert stopped_by == ["first SIGTERM", "end event written"]
    assert signal.getsignal(signal.SIGTERM) is inherited


# A run whose parent dies: the real lifetime code, in a child of a short-lived parent.
_ORPHAN = """
import os, signal, sys, time
from jupyterlab_nvdashboard.workload.lifetime import end_with_parent
received = []
signal.signal(signal.SIGTERM, lambda number, frame: received.append(number))
end_with_parent({"NVDASHBOARD_PARENT_PID": str(os.getppid())})
os.write(1, b"watching\\n")
deadline = time.monotonic() + 3
while time.monotonic() < deadline:
    time.sleep(0.05)
with open(sys.argv[1], "w") as out:
    out.write(str(len(received)))
"""
_PARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]],
                         stdout=subprocess.PIPE, start_new_session=True)
child.stdout.readline()  # the child watches its parent from here on
"""


def test_the_death_of_its_parent_sends_the_run_one_sigterm(tmp_path):
    """Two SIGTERMs for one death (the parent-death signal and the watcher both) made the
    second land while the run wrote its end event, which was then lost."""
    count_file = tmp_path / "sigterms"
    subprocess.run([sys.executable, "-c", _PARENT, _ORPHAN, str(count_file)],
                   env=_env(tmp_path), timeout=60, check=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not count_file.exists():
        time.sleep(0.1)
    assert count_file.read_text() == "1"


def test_a_gpu_run_with_cpu_only_tensorflow_names_the_extra(tmp_path):
    from jupyterlab_nvdashboard.workload.extras import GPU_EXTRA, tensorflow_cpu_only

    if not tensorflow_cpu_only():
        pytest.skip("this machine's TensorFlow has CUDA (or there is none)")
    cmd = build_command({"path": "plugin", "preset": "ci", "iterations": 3, "device": "gpu"})
    done = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.strip().endswith(GPU_EXTRA), done.stderr
    [events_file] = (tmp_path / "runs").glob("*.jsonl")
    assert read_events(events_file)[-1]["error"].endswith(GPU_EXTRA)
