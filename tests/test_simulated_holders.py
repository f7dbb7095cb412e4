"""Try it without a GPU: the README's one line, run in a real notebook kernel, makes the
simulated driver list that kernel as a GPU holder (issue 44, section 5).

Before, the only way was the test-only ``NVDASHBOARD_SIMULATE_PROCESSES``, whose format was
described only in a docstring. Now a kernel started with JupyterLab's environment writes the
file a simulating server reads by default, and the server's ``/glance.json`` ("Your GPU
kernels", the idle notice and the cull read it) names the kernel as an idle holder; the
kernel lets go with ``release_gpu()``, and an ended kernel's entry goes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.apps.processes import glance
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import load_config
from jupyterlab_nvdashboard.diagnosis.idle import IDLE
from jupyterlab_nvdashboard.jupyter_sessions import JupyterSessions, Session
from jupyterlab_nvdashboard.paths import simulated_processes_file
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from jupyterlab_nvdashboard.simulated_holders import hold_gpu, release_gpu
from tests.support.jupyter import cell_reply, lab_environment

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30


def readme_line() -> str:
    """The README's one line for a notebook cell (the test runs what users are told)."""
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("from jupyterlab_nvdashboard.simulated_holders import hold_gpu"):
            return line
    raise AssertionError("the README has no hold_gpu line")


def test_the_file_lists_this_process_until_released(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "folder" / "processes.json"
    monkeypatch.setenv("NVDASHBOARD_SIMULATE_PROCESSES", str(path))
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    path.parent.mkdir()
    path.write_text(json.dumps({"pid_behaviour": "host", "processes": [
        {"gpu": 1, "pid": ended.pid, "used_memory_bytes": GIB, "until_exit": True}]}))
    said = hold_gpu(1, gib=2.5, busy_pct=60)
    assert said.startswith(f"the simulated driver lists pid {os.getpid()} on GPU 1 with 2.5 "
                           "GiB and 60% of its SMs busy until it exits")
    written = json.loads(path.read_text())
    assert written["pid_behaviour"] == "host"  # the file's own form is kept
    # The ended process's entry is gone; this one is as the simulator reads it.
    [entry] = [SimulatedProcess.from_json(item) for item in written["processes"]]
    assert entry == SimulatedProcess(1, os.getpid(), int(2.5 * GIB), sm_pct=60, memory_pct=30,
                                     until_exit=True)
    hold_gpu(0, gib=4)  # held again: one entry, the newest
    [entry] = [SimulatedProcess.from_json(item) for item in
               json.loads(path.read_text())["processes"]]
    assert (entry.gpu, entry.used_memory_bytes, entry.sm_pct) == (0, 4 * GIB, 0)
    release_gpu()
    assert json.loads(path.read_text())["processes"] == []
    assert sorted(p.name for p in path.parent.iterdir()) == ["processes.json"]  # no leftovers
    with pytest.raises(ValueError, match="busy_pct must be from 0 to 100"):
        hold_gpu(0, busy_pct=101)
    # A file that is no process list is not ours: one readable error, and it stays as it was.
    path.write_text("notes: do not overwrite")
    with pytest.raises(ValueError, match="is not a simulated process list"):
        hold_gpu(0)
    assert path.read_text() == "notes: do not overwrite"


def test_the_readme_line_in_a_kernel_makes_it_an_idle_gpu_holder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_client import KernelManager

    # One environment for the server and the kernel, as JupyterLab gives both.
    environment = {**lab_environment(str(tmp_path), str(tmp_path / "settings"), 2),
                   "XDG_STATE_HOME": str(tmp_path / "state")}
    environment.pop("NVDASHBOARD_SIMULATE_PROCESSES", None)
    config = load_config(["--simulate", "2", "--interval", "0.1"], environ=environment)
    path = simulated_processes_file(environment)
    assert config.simulation.processes_file == str(path)  # read by default when simulating
    assert path == tmp_path / "state" / "nvdashboard" / "simulated-processes.json"

    monkeypatch.setenv("IPYTHONDIR", environment["IPYTHONDIR"])
    kernel_id = str(uuid.uuid4())
    connection = tmp_path / f"kernel-{kernel_id}.json"
    manager = KernelManager(connection_file=str(connection))
    manager.start_kernel(env=environment, cwd=str(tmp_path))
    metrics = create_metrics(config, environ={})
    try:
        reply = cell_reply(connection, readme_line())
        assert reply["status"] == "ok", reply
        kernel_pid = manager.provisioner.pid  # type: ignore[union-attr]
        metrics.nvml.ensure_initialized()
        assert metrics.simulator is not None and metrics.processes is not None
        for family in (metrics.processes, *metrics.sampler.families):
            family.every_s = 0.0  # type: ignore[attr-defined] # a pass every tick
        jupyter = JupyterSessions(None)
        jupyter.sessions = {kernel_id: Session("Untitled.ipynb", "notebook", "Untitled.ipynb",
                                               "idle")}
        sources = DashboardSources(metrics, jupyter=jupyter)

        def passes() -> list[dict]:
            for _ in range(4):  # the driver samples each process once a second
                metrics.simulator.step_wall_clock(1.0)  # type: ignore[union-attr]
                metrics.sampler.read_slow()
                metrics.sampler.tick()
            return glance(sources)["kernels"]

        [kernel] = passes()
        assert kernel["kernel_id"] == kernel_id, kernel
        assert [item["pid"] for item in json.loads(path.read_text())] == [kernel_pid]
        idle = kernel["idle"]
        assert idle["state"] == IDLE and idle["held_bytes"] == 4 * GIB, idle
        assert idle["text"].startswith("Untitled.ipynb holds 4.0 GiB on GPU 0"), idle

        reply = cell_reply(connection, "from jupyterlab_nvdashboard.simulated_holders import "
                                       "release_gpu; release_gpu()")
        assert reply["status"] == "ok", reply
        assert passes() == []
    finally:
        manager.shutdown_kernel(now=True)


def test_a_training_run_tells_the_driver_once_a_second_what_its_steps_kept_the_gpu_doing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The busy share is the time the steps' device worked over the wall time since the last
    word (a real GPU's SM share), from the steps' own events: input waits and host-only
    stages are not the device's, nor the time between steps."""
    from jupyterlab_nvdashboard.simulated_holders import SimulatedTrainingGpu, simulating

    path = tmp_path / "processes.json"
    monkeypatch.setenv("NVDASHBOARD_SIMULATE_PROCESSES", str(path))
    now = [100_000]  # ms: whole numbers add up exactly

    def listed() -> SimulatedProcess:
        [entry] = [SimulatedProcess.from_json(item) for item in json.loads(path.read_text())]
        return entry

    gpu = SimulatedTrainingGpu(gpu=1, gib=0.5, clock=lambda: now[0] / 1000)
    assert gpu.summary().startswith("the simulated GPU was told nothing")
    with gpu:
        assert (listed().gpu, listed().used_memory_bytes, listed().sm_pct) == (1, GIB // 2, 0)
        for _ in range(100):  # 10 ms steps, 4 of them on the host's hash table, 1 s in all
            now[0] += 10
            gpu.step({"ms": 10.0, "input_ms": 0.0, "host_ms": 4.0})
        assert listed().sm_pct == 60 and gpu.said == [60]
        for _ in range(50):  # 10 ms steps, 20 ms apart: the device waits between them too
            now[0] += 20
            gpu.step({"ms": 10.0, "input_ms": 1.0, "host_ms": None})
        assert listed().sm_pct == 45 and gpu.said == [60, 45]
        gpu.step({"ms": 0.0})  # a step too quick to time tells nothing, and breaks nothing
    assert listed().sm_pct == 0  # trained: still holding, no work
    assert gpu.summary() == "simulated GPU 1 told 60% busy (median of 2 s, 45-60%)"
    assert simulating({"NVDASHBOARD_SIMULATE": "2"}) and not simulating({})
