"""Idle GPU holders, judged honestly (issue 28, item 1).

First the pure judgment (``diagnosis/idle.py``) as a table: each case is a history of
passes and Jupyter's word on the kernel, and the state it must come to. Then the same
judgment end to end: the simulated driver lists real local processes (a stand-in kernel
with its connection file on its command line, and its child), the sampler reads them, the
attribution ties them to the kernel, and ``/glance.json``'s ``idle`` says what the table
says: with per-process samples, with only the device's activity, on MIG, and in another
PID namespace.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.apps.processes import glance
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.diagnosis.idle import (
    BUSY,
    CANNOT_TELL,
    EVIDENCE_GAP_S,
    IDLE,
    DeviceEvidence,
    HolderTrack,
    advance,
    advance_device,
    evidence_gap_s,
    judge,
    unused_for,
)
from jupyterlab_nvdashboard.jupyter_sessions import (
    JupyterServer,
    JupyterSessions,
    Session,
    parse_executions,
    parse_sessions,
)
from jupyterlab_nvdashboard.kernel_executions import ExecutionClock
from jupyterlab_nvdashboard.metrics import (
    OWNER_FAMILY,
    PROCESS_FAMILY,
    GpuReading,
    Metrics,
    ProcessOwner,
    ProcessReading,
)
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from tests.support import pidns
from tests.support.stand_in_kernel import Kernel, stand_in_kernel

GIB = 2**30
T0 = 1_800_000_000.0  # wall time of the first pass in the table


def on(label: str = "GPU 1", held: float | None = 38 * GIB, sm: float | None = 0.0,
       only: bool = True, device: float | None = 0.0, row: int = 1,
       signal: str = "utilization") -> DeviceEvidence:
    return DeviceEvidence(row, label, held, sm, only, device, signal)


def play(passes: Sequence[tuple[float, Sequence[DeviceEvidence]]]) -> HolderTrack:
    track = None
    for at, devices in passes:
        track = advance(track, T0 + at, devices)
    assert track is not None
    return track


def every(seconds: float, until: float, devices: Sequence[DeviceEvidence], start: float = 0.0
          ) -> list[tuple[float, Sequence[DeviceEvidence]]]:
    count = int((until - start) / seconds) + 1
    return [(start + i * seconds, devices) for i in range(count)]


@dataclass(frozen=True)
class Case:
    name: str
    passes: list[tuple[float, Sequence[DeviceEvidence]]]
    state: str  # the judgment at the end
    execution_state: str | None = "idle"
    last_activity: float | None = None  # seconds after T0
    idle_s: float | None = None  # expected, for IDLE
    signal: str = ""  # a word the signal must contain

    def judge(self, at: float | None = None):  # noqa: ANN201
        track = play(self.passes)
        now = track.last_pass_s if at is None else T0 + at
        activity = None if self.last_activity is None else T0 + self.last_activity
        return judge("k1", track, now, self.execution_state, activity)


MINUTES_42 = 42 * 60.0
CASES = [
    Case("idle holder, per-process samples", every(1, MINUTES_42, [on()]), IDLE,
         last_activity=-600, idle_s=MINUTES_42, signal="per-process"),
    Case("idle holder, the device's utilization: the kernel is its only process",
         every(1, MINUTES_42, [on(sm=None)]), IDLE, idle_s=MINUTES_42, signal="only process"),
    Case("busy kernel: Jupyter runs a cell", every(1, 600, [on()]), BUSY,
         execution_state="busy", signal="Jupyter"),
    Case("kernel starting", every(1, 60, [on()]), BUSY, execution_state="starting"),
    Case("GPU work by the kernel's processes", every(1, 600, [on(sm=35.0, device=90.0)]),
         BUSY, signal="per-process"),
    Case("shared with another busy process, no per-process samples",
         every(1, 600, [on(sm=None, only=False, device=85.0)]), CANNOT_TELL),
    Case("shared with another process, but nobody on the GPU works",
         every(1, 600, [on(sm=None, only=False, device=0.0)]), IDLE, idle_s=600,
         signal="no process on it worked"),
    Case("MIG device without per-process samples or utilization",
         every(1, 600, [on("GPU 0 · MIG 1", sm=None, device=None)]), CANNOT_TELL),
    Case("MIG device with GPM SM activity, the kernel its only process",
         every(1, 600, [on("GPU 0 · MIG 1", sm=None, device=0.0, signal="SM activity")]),
         IDLE, idle_s=600, signal="MIG 1's SM activity"),
    Case("Jupyter does not say (no session)", every(1, 600, [on()]), CANNOT_TELL,
         execution_state=None),
    # pip install in the kernel: the GPU does nothing for 5 minutes while Jupyter says busy.
    Case("pip install in the kernel", every(1, 300, [on()]), BUSY, execution_state="busy"),
    # ... and once it is done, the idle time counts from the end of the cell, not before.
    Case("after pip install", every(1, 300, [on()]), IDLE, last_activity=290, idle_s=10),
    # A training loop in a subprocess of the kernel: the kernel is idle in Jupyter (the cell
    # that started it returned), its child works on the GPU.
    Case("training loop in a subprocess", every(1, 600, [on(sm=0.0), on(
        "GPU 2", row=2, held=10 * GIB, sm=97.0, device=97.0)]), BUSY, signal="per-process"),
    Case("GPU work ended 5 minutes ago", every(1, 300, [on(sm=60.0)]) +
         every(1, 600, [on()], start=301), IDLE, idle_s=299),
    Case("a minute with no reading: cannot tell",
         every(1, 600, [on()]) + every(1, 660, [on(sm=None, only=False, device=50.0)], 601),
         CANNOT_TELL),
    Case("an unknown stretch restarts the episode",
         every(1, 600, [on()]) + every(1, 660, [on(sm=None, only=False, device=50.0)], 601)
         + every(1, 720, [on()], 661), IDLE, idle_s=59),
    Case("a pass without samples now and then keeps the episode",
         [(t, [on()] if t % 3 else [on(sm=None, only=False, device=40.0)])
          for t in range(0, 901)], IDLE, idle_s=900),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_judgment_table(case: Case) -> None:
    judgment = case.judge()
    assert judgment.state == case.state, (judgment.state, judgment.reason)
    if case.state == IDLE:
        assert judgment.idle_s == pytest.approx(case.idle_s, abs=1.0)
        assert judgment.episode.startswith("k1:")
        assert judgment.figures["quiet_passes"] > 0
    else:
        assert judgment.idle_s is None and judgment.reason
    assert case.signal in judgment.signal or case.signal in judgment.reason
    assert judgment.held_bytes == sum(d.held_bytes or 0.0 for d in case.passes[-1][1])


def test_a_busy_kernel_is_never_idle_whatever_the_gpu_shows() -> None:
    for state in ("busy", "starting", "restarting", "autorestarting"):
        assert judge("k", play(every(1, 3600, [on()])), T0 + 3600, state, None).state == BUSY


def test_the_episode_is_stable_and_new_after_work_or_a_cell() -> None:
    quiet = every(1, 600, [on()])
    first = judge("k", play(quiet), T0 + 600, "idle", None)
    later = judge("k", play(quiet + every(1, 900, [on()], 601)), T0 + 900, "idle", None)
    assert first.episode == later.episode == f"k:{int(T0)}"
    after_work = judge("k", play(quiet + [(601, [on(sm=50.0)])] + every(1, 900, [on()], 602)),
                       T0 + 900, "idle", None)
    assert after_work.episode == f"k:{int(T0 + 602)}" != first.episode
    after_cell = judge("k", play(quiet), T0 + 600, "idle", T0 + 500)
    assert after_cell.episode == f"k:{int(T0 + 500)}"


def test_the_idle_time_goes_on_between_passes_until_the_readings_stop() -> None:
    track = play(every(1, 600, [on()]))
    assert judge("k", track, T0 + 605, "idle", None).idle_s == pytest.approx(605)
    assert judge("k", track, T0 + 600 + EVIDENCE_GAP_S + 1, "idle", None).state == CANNOT_TELL


def test_a_pass_between_two_of_the_drivers_samples_keeps_the_holders_own_word() -> None:
    """The kernel's own samples say 0% each second; every third pass comes within the same
    second of the driver's as the one before (no sample: NOT_FOUND), while the GPU, the
    kernel alone on it, reads 40% from something the kernel did not do (a simulated
    scenario, or a process the server cannot see). The episode goes on, by its own samples
    (the full suite's lab idle test read "GPU 1's utilization: ..." at its first look)."""
    passes = [(t, [on(sm=None if t % 3 == 0 else 0.0, device=40.0)]) for t in range(1, 300)]
    track = play(passes)
    judgment = judge("k", track, T0 + 299, "idle", None)
    assert judgment.state == IDLE and judgment.signal == "per-process SM samples", judgment
    assert judgment.episode == f"k:{int(T0 + 1)}"
    assert track.working_share == 0.0
    # Samples that stop for longer than the gap: the device speaks again.
    later = play(passes + [(t, [on(sm=None, device=40.0)]) for t in range(300, 340)])
    assert judge("k", later, T0 + 339, "idle", None).state == BUSY


def test_usage_since_start_integrates_memory_and_working_time() -> None:
    track = play(every(1, 100, [on(held=4 * GIB, sm=50.0)])
                 + every(1, 400, [on(held=4 * GIB)], 101))
    assert track.byte_seconds == pytest.approx(4 * GIB * 400)
    assert track.held_s == pytest.approx(400)
    assert track.working_share == pytest.approx(100 / 400)


def test_unused_device_by_activity_or_by_no_process() -> None:
    device = None
    for t in range(0, 1801):
        device = advance_device(device, T0 + t, 50.0 if t < 100 else 0.0, 1, 2 * GIB)
    assert device is not None
    unused, why, since_start = unused_for(device, T0 + 1800)
    assert unused == pytest.approx(1701) and why == "no GPU work" and not since_start
    assert device.idle_held_s == pytest.approx(1701) and device.held_s == pytest.approx(1800)
    blind = None  # a device without activity readings: unused while no process is listed
    for t in range(0, 601):
        blind = advance_device(blind, T0 + t, None, 1 if t <= 200 else 0, 0.0)
    assert blind is not None
    assert unused_for(blind, T0 + 600) == (pytest.approx(400), "no process on it", False)
    never = advance_device(advance_device(None, T0, 0.0, 0, 0.0), T0 + 60, 0.0, 0, 0.0)
    assert unused_for(never, T0 + 60) == (60.0, "no GPU work", True)


def test_sessions_carry_the_kernels_execution_state_and_last_activity() -> None:
    sessions = parse_sessions([{"path": "a.ipynb", "type": "notebook", "kernel": {
        "id": "k1", "execution_state": "busy", "last_activity": "2026-12-02T08:40:26.5Z"}},
        {"path": "b.ipynb", "kernel": {"id": "k2", "last_activity": "yesterday"}}])
    assert sessions["k1"].execution_state == "busy"
    assert sessions["k1"].last_activity_s == datetime(2026, 12, 2, 8, 40, 26, 500000,
                                                      tzinfo=timezone.utc).timestamp()
    assert sessions["k2"].execution_state is None and sessions["k2"].last_activity_s is None


# ----- end to end: real processes listed by the simulated driver ------------------------

@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    with stand_in_kernel(tmp_path) as kernel:
        yield kernel


def server(tmp_path: Path, kernel: Kernel, processes: list[SimulatedProcess],
           execution_state: str = "idle", profile: str = "mixed", scenario: str = "idle",
           gpus: int = 2, unsupported: Sequence[str] = ()) -> tuple[Metrics, DashboardSources]:
    config = Config(interval_s=0.1, token=None, runs_dir=tmp_path, simulation=SimulationConfig(
        gpu_count=gpus, profile=profile, scenario=scenario))
    metrics = create_metrics(config, environ={})
    metrics.nvml.ensure_initialized()
    assert metrics.simulator is not None and metrics.processes is not None
    metrics.simulator.set_unsupported(unsupported)
    metrics.simulator.set_processes(processes)
    for family in (metrics.processes, *metrics.sampler.families):
        family.every_s = 0.0  # type: ignore[attr-defined] # a pass every tick: not timed
    jupyter = JupyterSessions(None)
    jupyter.sessions = {kernel.kernel_id: Session("work/Untitled3.ipynb", "notebook",
                                                  "Untitled3.ipynb", execution_state)}
    return metrics, DashboardSources(metrics, jupyter=jupyter)


def passes(metrics: Metrics, count: int = 4) -> None:
    """Process passes, one per simulated second (the driver samples once a second)."""
    assert metrics.simulator is not None
    for _ in range(count):
        metrics.simulator.step_wall_clock(1.0)
        metrics.sampler.read_slow()  # owners of the newest pass
        metrics.sampler.tick()


def idle_of(sources: DashboardSources, kernel: Kernel) -> dict:
    data = glance(sources)
    [entry] = [k for k in data["kernels"] if k["kernel_id"] == kernel.kernel_id]
    return entry["idle"]


def test_idle_holder_and_cpu_only_kernel_end_to_end(tmp_path: Path, kernel: Kernel) -> None:
    metrics, sources = server(tmp_path, kernel, [
        SimulatedProcess(1, kernel.pid, 38 * GIB, sm_pct=0)])
    passes(metrics)
    idle = idle_of(sources, kernel)
    assert idle["state"] == IDLE and idle["signal"] == "per-process SM samples", idle
    assert idle["held_bytes"] == 38 * GIB and idle["idle_s"] >= 0
    assert idle["text"].startswith("Untitled3.ipynb holds 38.0 GiB on GPU 1 and has done no "
                                   "GPU work for ")
    assert idle["episode"].startswith(kernel.kernel_id + ":")
    assert set(idle) == {"state", "signal", "held_bytes", "gpus", "idle_s", "episode",
                         "figures", "text"}
    # The same kernel without GPU memory (CPU only) is not listed: nothing to say.
    metrics.simulator.set_processes([])  # type: ignore[union-attr]
    passes(metrics)
    assert glance(sources)["kernels"] == []


def test_busy_in_jupyter_no_notice_while_pip_installs(tmp_path: Path, kernel: Kernel) -> None:
    metrics, sources = server(tmp_path, kernel, [
        SimulatedProcess(0, kernel.pid, 8 * GIB, sm_pct=0),
        SimulatedProcess(0, kernel.child, 0, sm_pct=0)], execution_state="busy")
    passes(metrics)
    idle = idle_of(sources, kernel)
    assert idle["state"] == BUSY and "busy in Jupyter" in idle["text"], idle


def test_training_loop_in_a_subprocess_of_the_kernel_is_busy(tmp_path: Path,
                                                             kernel: Kernel) -> None:
    metrics, sources = server(tmp_path, kernel, [
        SimulatedProcess(0, kernel.pid, 2 * GIB, sm_pct=0),
        SimulatedProcess(1, kernel.child, 30 * GIB, sm_pct=95)], scenario="compute-bound")
    passes(metrics)
    idle = idle_of(sources, kernel)
    assert idle["state"] == BUSY and idle["held_bytes"] == 32 * GIB, idle
    assert "GPU work (95%" in idle["text"]


def test_sharing_a_gpu_with_another_busy_process_cannot_tell(tmp_path: Path,
                                                             kernel: Kernel) -> None:
    other = subprocess.Popen(["sleep", "60"])
    try:
        metrics, sources = server(tmp_path, kernel, [
            SimulatedProcess(0, kernel.pid, 4 * GIB), SimulatedProcess(0, other.pid, 20 * GIB)],
            scenario="compute-bound", unsupported=["nvmlDeviceGetProcessUtilization"])
        passes(metrics)
        idle = idle_of(sources, kernel)
        assert idle["state"] == CANNOT_TELL and idle["idle_s"] is None, idle
        assert "shared with another process that is working" in idle["text"]
        # Alone on the GPU, the device's activity (GPM here) speaks for the kernel.
        metrics.simulator.set_processes([SimulatedProcess(0, kernel.pid, 4 * GIB)])  # type: ignore[union-attr]
        metrics.simulator.set_scenario("idle")  # type: ignore[union-attr]
        passes(metrics)
        idle = idle_of(sources, kernel)
        assert idle["state"] == IDLE and "its only process" in idle["signal"], idle
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("profile, state", [("a100-mig", CANNOT_TELL), ("h100-mig", BUSY)])
def test_mig(tmp_path: Path, kernel: Kernel, profile: str, state: str) -> None:
    # MIG gives no per-process samples (NotSupported) and no utilization: on an A100 nothing
    # tells; an H100's GPM SM activity per GPU instance does, the kernel being alone on it
    # (the simulated instance's load is a wave that never rests: busy).
    metrics, sources = server(tmp_path, kernel, [
        SimulatedProcess(0, kernel.pid, 6 * GIB, mig=0)], profile=profile, gpus=1)
    passes(metrics)
    idle = idle_of(sources, kernel)
    assert idle["state"] == state, idle
    assert "MIG" in idle["gpus"][0]
    if state == BUSY:
        assert "MIG 1's SM activity: the kernel is its only process" in idle["text"]
    else:
        assert "neither per-process SM samples nor SM activity" in idle["text"]


@pytest.mark.skipif(pidns.unavailable() is not None, reason=str(pidns.unavailable()))
def test_a_kernel_in_another_pid_namespace() -> None:
    """The kernel and the server run in a container (a PID namespace of their own); the
    simulated driver names the kernel as each kind of driver does. Host PIDs: the kernel is
    paired by the GPU node it holds, its samples are not trusted, and the GPU's own activity
    speaks for it (its only process); translated lists: the same, the samples being host
    PIDs; local PIDs: its own samples."""
    judge_script = str(Path(__file__).with_name("support") / "ns_idle.py")
    kernel_id = str(uuid.uuid4())
    signals = {"host": "its only process", "translated": "its only process",
               "local": "per-process SM samples"}
    with pidns.PidNamespace(gpus=2) as ns:
        _, kernel = ns.spawn([sys.executable, "-c", "import os, time; os.open('/dev/nvidia0', "
                              "os.O_RDWR); time.sleep(600)", "-f",
                              f"/tmp/kernel-{kernel_id}.json"])
        judges = {}
        for behaviour, scenario in [*((b, "idle") for b in signals), ("busy", "compute-bound")]:
            listing = Path(ns.folder) / f"{behaviour}.json"
            listing.write_text(json.dumps({
                "pid_behaviour": "host" if behaviour == "busy" else behaviour,
                "processes": [{"gpu": 0, "pid": kernel, "used_memory_bytes": 12 * GIB,
                               "sm_pct": 90 if behaviour == "busy" else 0,
                               "namespace_pids": pidns.namespace_pids(kernel, ns)}]}))
            judges[behaviour] = subprocess.Popen(
                ns.command([sys.executable, judge_script, str(listing), kernel_id, scenario]),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        verdicts = {}
        for behaviour, process in judges.items():
            out, err = process.communicate(timeout=180)
            assert process.returncode == 0, err[-3000:]
            verdicts[behaviour] = json.loads(out.strip().splitlines()[-1])["kernels"]
    for behaviour, signal in signals.items():
        [listed] = verdicts[behaviour]
        idle = listed["idle"]
        assert listed["kernel_id"] == kernel_id and idle["state"] == IDLE, (behaviour, idle)
        assert signal in idle["signal"] and idle["held_bytes"] == 12 * GIB, (behaviour, idle)
    [busy] = verdicts["busy"]
    assert busy["idle"]["state"] == BUSY and "only process" in busy["idle"]["text"], busy


def scripted(tmp_path: Path, gpus: int, sessions: dict[str, Session] | None = None
             ) -> tuple[Metrics, DashboardSources]:
    """Simulated GPUs whose history a test writes by hand (nothing samples them), and the
    pages' sources over it, with these Jupyter sessions."""
    metrics = create_metrics(Config(interval_s=0.1, token=None, runs_dir=tmp_path,
                                    simulation=SimulationConfig(gpu_count=gpus)), environ={})
    metrics.nvml.ensure_initialized()
    jupyter = JupyterSessions(None)
    jupyter.sessions = sessions or {}
    return metrics, DashboardSources(metrics, jupyter=jupyter)


def test_held_but_unused_devices_on_the_overview_and_in_glance(tmp_path: Path) -> None:
    """A scripted 40 minutes: GPU 0 works until 5 minutes ago; GPU 1 is held by a process
    (4 GiB) and does nothing throughout. GPU 1 is held but unused for the threshold (30
    minutes, issue 28); GPU 0 is not, yet."""
    from jupyterlab_nvdashboard.apps.overview import build_overview, overview_html

    metrics, sources = scripted(tmp_path, 2)
    host = metrics.sampler.host.read()
    now = time.time()
    holder = ProcessReading(1, os.getpid(), "compute", 4 * GIB, None, None, now - 2400)
    for t in range(-2400, 1, 2):
        gpus = (GpuReading.unavailable(0, False)._replace(
                    utilization_pct=60.0 if t < -300 else 0.0),
                GpuReading.unavailable(1, False)._replace(utilization_pct=0.0))
        metrics.history.append(now + t, gpus, host, extra={PROCESS_FAMILY: (holder,)})
    unused = glance(sources)["unused_devices"]
    assert [device["index"] for device in unused] == [1], unused
    [gpu1] = unused
    assert gpu1["held_bytes"] == 4 * GIB and gpu1["unused_s"] == pytest.approx(2400, abs=5)
    assert gpu1["uuid"] == metrics.facts[1].uuid and gpu1["label"] == "GPU 1"
    assert gpu1["why"].startswith("GPU 1: held by 1 process (4.0 GiB); no GPU work")
    assert "40 min" in gpu1["why"]
    rows = build_overview(sources).rows
    assert rows[1].unused is not None and rows[0].unused is None
    page = overview_html(sources, {})
    assert page.count("data-unused") == 1 and "held, unused 40 min" in page
    assert "Unused for 30 min or more:" in page
    # The threshold decides: GPU 0, unused for 5 minutes, is listed from a 4-minute one.
    sources.usage.unused_after_s = 10 * 60.0
    assert [d["index"] for d in glance(sources)["unused_devices"]] == [1]
    sources.usage.unused_after_s = 4 * 60.0
    assert [d["index"] for d in glance(sources)["unused_devices"]] == [0, 1]


def test_per_notebook_usage_since_the_server_started(tmp_path: Path) -> None:
    """A scripted history: a notebook's first kernel holds 4 GiB on GPU 0 for 600 s and works
    for the first 150 s of it, then ends; its second kernel holds 2 GiB for 300 s and does
    nothing. /GPU-Processes gives the notebook 3000 GiB·s (0.83 GiB·h), its GPU working
    150 s of 900 (17%), both kernels counted."""
    from jupyterlab_nvdashboard.apps.processes import ProcessTableFeed, processes_json
    from jupyterlab_nvdashboard.apps.processes import process_rows as rows_of

    metrics, sources = scripted(tmp_path, 2, {
        kernel: Session("work/a.ipynb", "notebook", "a.ipynb", "idle") for kernel in ("k1", "k2")})
    host = metrics.sampler.host.read()
    gpus = (GpuReading.unavailable(0, False)._replace(utilization_pct=0.0),
            GpuReading.unavailable(1, False)._replace(utilization_pct=0.0))
    now = time.time()
    start = now - 1000
    first, second = 2_000_001, os.getpid()
    owners = {pid: ProcessOwner(pid, "ok", "alice", "python -m ipykernel", start, kernel,
                                pid, (pid,)) for pid, kernel in ((first, "k1"), (second, "k2"))}

    def play(pid: int, memory: float, begin: float, seconds: int, working_s: int) -> None:
        for t in range(seconds + 1):
            reading = ProcessReading(0, pid, "compute", memory,
                                     50.0 if 0 < t <= working_s else 0.0, 0.0, begin)
            metrics.history.append(begin + t, gpus, host, extra={
                PROCESS_FAMILY: (reading,), OWNER_FAMILY: owners})

    play(first, 4 * GIB, start, 600, 150)
    metrics.history.append(start + 650, gpus, host, extra={PROCESS_FAMILY: ()})
    play(second, 2 * GIB, now - 300, 300, 0)
    [usage] = processes_json(sources)["notebooks"]
    assert usage["path"] == "work/a.ipynb" and usage["kernels"] == 2
    assert usage["byte_seconds"] == pytest.approx((4 * 600 + 2 * 300) * GIB)
    assert usage["held_s"] == pytest.approx(900)
    assert usage["working_share"] == pytest.approx(150 / 900)
    [row] = rows_of(sources)
    assert row.pid == second and row.notebook == "work/a.ipynb"
    assert row.notebook_byte_seconds == pytest.approx(3000 * GIB)
    table = ProcessTableFeed(sources).rows([]).text
    assert table["notebook_held"] == ["0.83 GiB·h"] and table["notebook_working"] == ["17%"]


def test_an_ended_notebooks_usage_stays_in_the_process_table(tmp_path: Path) -> None:
    """Issue 44: a notebook's GiB·h and "GPU working" vanished from /GPU-Processes once its
    kernel was shut down, though /processes.json kept them under ``notebooks``."""
    from jupyterlab_nvdashboard.apps.processes import ENDED, ProcessTableFeed, processes_json
    from jupyterlab_nvdashboard.apps.processes import process_rows as rows_of

    metrics, sources = scripted(tmp_path, 1, {
        "k1": Session("work/a.ipynb", "notebook", "a.ipynb", "idle")})
    host = metrics.sampler.host.read()
    gpus = (GpuReading.unavailable(0, False)._replace(utilization_pct=0.0),)
    start = time.time() - 700
    pid = 2_000_001
    owners = {pid: ProcessOwner(pid, "ok", "alice", "python -m ipykernel", start, "k1",
                                pid, (pid,))}
    for t in range(601):
        reading = ProcessReading(0, pid, "compute", 4 * GIB, 50.0 if 0 < t <= 150 else 0.0,
                                 0.0, start)
        metrics.history.append(start + t, gpus, host, extra={
            PROCESS_FAMILY: (reading,), OWNER_FAMILY: owners})
    metrics.history.append(start + 650, gpus, host, extra={PROCESS_FAMILY: ()})
    assert rows_of(sources) == []  # no process holds a GPU now
    [usage] = processes_json(sources)["notebooks"]
    table = ProcessTableFeed(sources).rows([]).text
    # The notebook keeps its row, marked ended, with the usage /processes.json gives it.
    assert table["held"] == [ENDED] and table["pid"] == [""], table
    assert table["what"][0].startswith("work/a.ipynb") and "GPU use ended" in table["what"][0]
    assert table["notebook_held"] == [f"{usage['byte_seconds'] / 3600 / GIB:.2f} GiB·h"]
    assert table["notebook_working"] == [f"{100 * usage['working_share']:.0f}%"] == ["25%"]


def test_time_a_holder_was_absent_is_not_counted_held() -> None:
    track = None
    for t in list(range(0, 101)) + list(range(131, 201)):  # absent from 101 s to 130 s
        track = advance(track, T0 + t, [on(held=2 * GIB)], T0 + t - 1)
    assert track is not None
    assert track.held_s == pytest.approx(170)  # 100 s, then 1 s back at 131, then 69 s
    assert track.byte_seconds == pytest.approx(2 * GIB * 170)


def test_the_sentence_says_when_memory_is_held_with_other_processes() -> None:
    from jupyterlab_nvdashboard.apps.usage import idle_json

    judgment = judge("k1", play(every(1, 3000, [on(held=None)])), T0 + 3000, "idle", None)
    shared = idle_json(judgment, "work/a.ipynb", "k1", 0.0, ["GPU 1 (CUDA 1)"], 35 * 10**9)
    assert shared["text"] == ("a.ipynb holds part of 32.6 GiB held with other processes on "
                              "GPU 1 and has done no GPU work for 50 min.")
    plain = idle_json(judgment, "work/a.ipynb", "k1", 2 * GIB, ["GPU 1 (CUDA 1)"])
    assert plain["text"].startswith("a.ipynb holds 2.0 GiB on GPU 1 and")
    assert plain["gpus"] == ["GPU 1 (CUDA 1)"]


def test_unused_after_is_a_setting_of_its_own() -> None:
    from jupyterlab_nvdashboard.config import ConfigError, load_config

    assert load_config([], environ={}).unused_after_s == 1800.0  # issue 28: 30 minutes
    assert load_config(["--unused-after", "600"], environ={}).unused_after_s == 600.0
    assert load_config([], environ={"NVDASHBOARD_UNUSED_AFTER": "90"}).unused_after_s == 90.0
    with pytest.raises(ConfigError, match="between 1 second and 30 days"):
        load_config(["--unused-after", "0"], environ={})


@pytest.mark.parametrize("second_sm, state", [(None, CANNOT_TELL), (0.0, IDLE), (40.0, BUSY)])
def test_a_kernel_process_the_samples_left_out_is_not_taken_for_idle(
        tmp_path: Path, second_sm: float | None, state: str) -> None:
    """A kernel's two processes share GPU 0 with another user's busy process (utilization
    70%). The kernel's first process was sampled at 0% SM; if its second was not sampled at
    all, its own samples do not say the kernel did nothing: cannot tell."""

    metrics, sources = scripted(tmp_path, 1, {"k1": Session("a.ipynb", "notebook", "a.ipynb",
                                                            "idle")})
    owners = {1001: ProcessOwner(1001, "ok", "alice", "kernel", 0.0, "k1", 1001),
              1002: ProcessOwner(1002, "ok", "alice", "worker", 0.0, "k1", 1001),
              1003: ProcessOwner(1003, "ok", "bob", "train.py", 0.0, None, None)}
    readings = (ProcessReading(0, 1001, "compute", 2 * GIB, 0.0, 0.0),
                ProcessReading(0, 1002, "compute", 1 * GIB, second_sm, 0.0),
                ProcessReading(0, 1003, "compute", 9 * GIB, 70.0, 30.0))
    gpus = (GpuReading.unavailable(0, False)._replace(utilization_pct=70.0),)
    now = time.time()
    for t in range(-20, 1):
        metrics.history.append(now + t, gpus, metrics.sampler.host.read(),
                               extra={PROCESS_FAMILY: readings, OWNER_FAMILY: owners})
    judgment = sources.usage.judgment("alice", "k1", now)
    assert judgment is not None and judgment.state == state, judgment


def test_passes_as_slow_as_the_sampler_is_set_to_still_make_an_episode() -> None:
    """--idle-interval 30: with nobody watching, a process pass every 30 s. The episode
    runs on; with the default gap every pass would restart it."""
    gap = evidence_gap_s(30.0)
    assert gap == 91.0 and evidence_gap_s(1.0) == EVIDENCE_GAP_S
    restarted = play(every(30, 1800, [on()]))  # the default gap: each pass a new episode
    assert judge("k", restarted, T0 + 1800, "idle", None).idle_s == pytest.approx(0)
    slow = None
    for t in range(0, 1801, 30):
        slow = advance(slow, T0 + t, [on()], T0 + t - 30, gap)
    assert slow is not None
    assert judge("k", slow, T0 + 1810, "idle", None, gap).idle_s == pytest.approx(1810)
    assert judge("k", slow, T0 + 1800 + 92, "idle", None, gap).state == CANNOT_TELL


def test_a_stale_copy_of_jupyters_sessions_is_cannot_tell_never_idle(tmp_path: Path) -> None:
    """The sessions API stops answering: the kernel's last known "idle" is old news, and the
    judgment (which the cull reads) says it cannot tell."""
    metrics, sources = scripted(tmp_path, 1)
    answers: list[object] = [
        [{"path": "a.ipynb", "type": "notebook", "kernel": {"id": "k1",
                                                            "execution_state": "idle"}}],
        OSError("Jupyter does not answer")]

    def fetch(_: object) -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    jupyter = JupyterSessions(JupyterServer("http://127.0.0.1:1/", "/", "t"), fetch=fetch)
    sources.usage.jupyter = jupyter
    owners = {1001: ProcessOwner(1001, "ok", "alice", "kernel", 0.0, "k1", 1001)}
    readings = (ProcessReading(0, 1001, "compute", 2 * GIB, 0.0, 0.0),)
    gpus = (GpuReading.unavailable(0, False)._replace(utilization_pct=0.0),)
    now = time.time()
    for t in range(-20, 1):
        metrics.history.append(now + t, gpus, metrics.sampler.host.read(),
                               extra={PROCESS_FAMILY: readings, OWNER_FAMILY: owners})
    jupyter.refresh()
    assert sources.usage.judgment("alice", "k1", now).state == IDLE  # type: ignore[union-attr]
    jupyter.refresh()
    assert set(jupyter.sessions) == {"k1"}  # kept for the pages' names
    judgment = sources.usage.judgment("alice", "k1", now)
    assert judgment is not None and judgment.state == CANNOT_TELL, judgment


def test_no_cell_run_counts_from_the_last_execution_where_the_extension_serves_it() -> None:
    body = [{"path": "a.ipynb", "kernel": {"id": "k1", "execution_state": "idle",
                                           "last_activity": "2026-12-02T08:40:26Z"}},
            {"path": "b.ipynb", "kernel": {"id": "k2", "execution_state": "idle",
                                           "last_activity": "2026-12-02T08:40:26Z"}}]
    activity = datetime(2026, 12, 2, 8, 40, 26, tzinfo=timezone.utc).timestamp()
    served = parse_sessions(body, parse_executions({"kernels": {"k1": 1000.0, "k9": "x"}}))
    assert served["k1"].last_cell_s == 1000.0
    assert served["k2"].last_cell_s is None  # no cell since it was watched
    # Without the server extension, Jupyter's last_activity stands in.
    assert parse_sessions(body)["k1"].last_cell_s == activity
    assert parse_executions({"kernels": []}) is None and parse_executions(None) is None


def test_the_execution_clock_counts_only_what_answers_a_cell() -> None:
    now = [50.0]
    clock = ExecutionClock(kernel_manager=None, log=logging.getLogger("test"),
                           clock=lambda: now[0])
    for parent in ("kernel_info_request", "comm_open", "comm_info_request", None):
        clock.on_message("k1", "status", {"msg_type": parent, "msg_id": "m"})
    assert clock.last_execution("k1") is None
    # A silent execute_request (an extension asking the kernel something on reconnecting,
    # issue 51): busy, a result, idle, and never an execute_input. It runs no cell.
    silent = {"msg_type": "execute_request", "msg_id": "silent"}
    for kind in ("status", "execute_result", "status"):
        clock.on_message("k1", kind, silent)
    assert clock.last_execution("k1") is None
    cell = {"msg_type": "execute_request", "msg_id": "cell"}
    clock.on_message("k1", "status", cell)  # busy comes before the input
    assert clock.last_execution("k1") is None
    clock.on_message("k1", "execute_input", cell)
    assert clock.last_execution("k1") == 50.0 and clock.executions() == {"k1": 50.0}
    now[0] = 60.0
    clock.on_message("k1", "stream", cell)  # its output
    now[0] = 70.0
    clock.on_message("k1", "status", cell)  # its end
    assert clock.last_execution("k1") == 70.0
    now[0] = 80.0
    clock.on_message("k1", "status", cell)  # nothing of that cell after its end
    assert clock.last_execution("k1") == 70.0


def test_a_kernel_the_execution_clock_cannot_watch_is_one_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    class Kernels:
        ids = ["k1"]

        def list_kernel_ids(self) -> list[str]:
            return self.ids

        def get_kernel(self, kernel_id: str) -> object:
            raise RuntimeError("its sockets are not open yet")

    kernels = Kernels()
    clock = ExecutionClock(kernels, logging.getLogger("test.executions"))
    with caplog.at_level(logging.WARNING, "test.executions"):
        for _ in range(3):
            clock.sync()
    assert [r.getMessage().count("\n") for r in caplog.records] == [0], caplog.text
    assert "cannot watch kernel k1" in caplog.text and clock.last_execution("k1") is None


def test_an_unused_gpus_badge_and_its_grounds_say_the_same_of_who_holds_it(
        tmp_path: Path) -> None:
    """GPU 1 did nothing for 40 minutes with nothing on it; in the newest pass a process
    holds it, whose owner the slow thread has not told yet, so the unused judgment has not
    read that pass (``HolderPasses``). The overview's badge said "held, unused" from the
    row's process list while its grounds and the summary under the table said "no process
    holds it" (full run 15). Both now say the judgment's word, until it reads the pass."""
    from jupyterlab_nvdashboard.apps.overview import overview_html

    metrics, sources = scripted(tmp_path, 2)
    host = metrics.sampler.host.read()
    now = time.time()
    holder = ProcessReading(1, os.getpid(), "compute", 6 * GIB, None, None, now - 2)
    for t in range(-2400, 1, 2):
        gpus = (GpuReading.unavailable(0, False)._replace(utilization_pct=60.0),
                GpuReading.unavailable(1, False)._replace(utilization_pct=0.0))
        held = (holder,) if t == 0 else ()
        metrics.history.append(now + t, gpus, host,
                               extra={PROCESS_FAMILY: held, OWNER_FAMILY: {}})
    page = overview_html(sources, {})
    summary = page[page.index("unused-summary"):]
    assert "GPU 1: no process holds it" in summary, summary
    assert "held, unused" not in page and "unused 40 min" in page, page
    # The owners told: the judgment reads the pass, and both say it is held.
    owners = {os.getpid(): ProcessOwner(os.getpid(), "ok", "alice", "python", now - 2, None,
                                        None)}
    metrics.history.append(now + 2, gpus, host,
                           extra={PROCESS_FAMILY: (holder,), OWNER_FAMILY: owners})
    page = overview_html(sources, {})
    summary = page[page.index("unused-summary"):]
    assert "GPU 1: held by 1 process (6.0 GiB)" in summary, summary
    assert "held, unused" in page, page
