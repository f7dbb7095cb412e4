"""Per-process readings against the simulated NVML, and who those processes are.

Covers the awkward cases: memory the driver does not report, a binding or driver without the
_v3 functions, MIG instances, no utilization samples, a PID that exits between NVML and
psutil, /proc hidden (hidepid), another PID namespace, kernels and their forked workers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from jupyterlab_nvdashboard.apps.processes import HIDDEN_COMMAND, STATUS_TEXT, process_rows
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.jupyter_sessions import (
    JupyterSessions,
    Session,
    find_parent_server,
    parse_sessions,
)
from jupyterlab_nvdashboard.metrics import OWNER_FAMILY, PROCESS_FAMILY, ProcessReading
from jupyterlab_nvdashboard.metrics.attribution import (
    REMEMBER_S,
    ProcessAttributor,
    host_pid_namespace,
    kernel_id_of,
    start_ticks,
)
from jupyterlab_nvdashboard.metrics.binding import binding_loader
from jupyterlab_nvdashboard.metrics.identity import pair
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader
from jupyterlab_nvdashboard.metrics.processes import ProcessReader
from jupyterlab_nvdashboard.simnvml import SimulatedNvml
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess

GB = 10**9


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reader_for(simulator: SimulatedNvml, clock: FakeClock | None = None) -> ProcessReader:
    nvml = NvmlReader(binding_loader(simulator.library))
    nvml.ensure_initialized()
    return ProcessReader(nvml, clock=clock or FakeClock())


def test_lists_every_kind_with_memory_and_activity() -> None:
    simulator = SimulatedNvml(gpu_count=2)
    simulator.set_processes([
        SimulatedProcess(0, 101, 3 * GB, sm_pct=40, memory_pct=12),
        SimulatedProcess(0, 102, GB, kind="graphics", sm_pct=5),
        SimulatedProcess(1, 103, 2 * GB, kind="mps"),
        SimulatedProcess(1, 101, GB),  # the same PID on another GPU is its own row
    ])
    readings = {(r.device, r.pid): r for r in reader_for(simulator).read_all()}
    assert set(readings) == {(0, 101), (0, 102), (1, 103), (1, 101)}
    assert readings[0, 101].kind == "compute" and readings[0, 101].used_memory_bytes == 3 * GB
    assert (readings[0, 101].sm_pct, readings[0, 101].memory_pct) == (40.0, 12.0)
    assert readings[0, 102].kind == "graphics" and readings[1, 103].kind == "mps"
    assert readings[1, 103].sm_pct is None  # MPS clients have no per-process samples here
    assert simulator.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 2


def test_memory_the_driver_does_not_report_is_not_available_not_zero() -> None:
    simulator = SimulatedNvml(gpu_count=1)
    simulator.set_processes([SimulatedProcess(0, 201, None)])
    (reading,) = reader_for(simulator).read_all()
    assert reading.used_memory_bytes is None


def test_a_context_listed_as_compute_and_graphics_is_one_row() -> None:
    simulator = SimulatedNvml(gpu_count=1)
    simulator.set_processes([SimulatedProcess(0, 301, GB),
                             SimulatedProcess(0, 301, GB, kind="graphics")])
    assert [(r.pid, r.kind) for r in reader_for(simulator).read_all()] == [(301, "compute")]


def test_old_binding_and_old_driver_fall_back_to_v2_once() -> None:
    # nvidia-ml-py 11.470 has no _v3 names; the consumer card has no per-process samples.
    simulator = SimulatedNvml(gpu_count=1, profile="consumer")
    simulator.set_processes([SimulatedProcess(0, 401, GB, sm_pct=50)])
    reader = reader_for(simulator)
    (reading,) = reader.read_all()
    assert reading.used_memory_bytes == GB and reading.sm_pct is None
    assert simulator.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 1
    # A newer binding on a driver without the _v3 symbols: FunctionNotFound, then _v2.
    simulator = SimulatedNvml(gpu_count=1, profile="a100-535")
    simulator.profile = dataclasses.replace(simulator.profile, driver_version="470.256.02")
    simulator.set_processes([SimulatedProcess(0, 402, GB)])
    reader = reader_for(simulator)
    for _ in range(3):
        assert [r.pid for r in reader.read_all()] == [402]
    # The driver exports no _v3 symbol: the binding answers FunctionNotFound without
    # reaching it, and the reader stops asking after the first time.
    assert simulator.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 0
    assert reader.session.devices()[0].skips("nvmlDeviceGetComputeRunningProcesses_v3")
    assert simulator.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 3


def test_utilization_carries_the_last_seen_timestamp() -> None:
    simulator = SimulatedNvml(gpu_count=1)
    now = [5000.4]
    simulator.set_clock(lambda: now[0])
    simulator.set_processes([SimulatedProcess(0, 501, GB, sm_pct=70)])
    reader = reader_for(simulator)
    assert reader.read_all()[0].sm_pct == 70.0
    now[0] += 0.3  # same driver sample: NotFound, so not available (never a stale 0)
    assert reader.read_all()[0].sm_pct is None
    now[0] += 1.0
    assert reader.read_all()[0].sm_pct == 70.0


def test_no_new_utilization_sample_is_not_a_fault(caplog: pytest.LogCaptureFixture) -> None:
    # NOT_FOUND from nvmlDeviceGetProcessUtilization means "no sample since lastSeen"
    # (nvml.h): every idle GPU answers it. It is neither logged nor listed as unavailable.
    simulator = SimulatedNvml(gpu_count=1)
    simulator.set_clock(lambda: 7000.0)
    reader = reader_for(simulator)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert reader.read_all() == ()
    assert "process_utilization" not in reader.session.devices()[0].unavailable
    assert not [r for r in caplog.records if "nvmlDeviceGetProcessUtilization" in r.getMessage()]


def test_mig_processes_are_listed_on_their_mig_device() -> None:
    simulator = SimulatedNvml(gpu_count=2, profile="a100-mig")
    simulator.set_processes([SimulatedProcess(0, 601, 5 * GB, mig=0),
                             SimulatedProcess(0, 602, 7 * GB, mig=1),
                             SimulatedProcess(1, 603, GB)])
    reader = reader_for(simulator)
    labels = {device.facts.index: device.facts.label for device in reader.session.devices()}
    readings = {r.pid: r for r in reader.read_all()}
    assert labels[readings[601].device] == "GPU 0 · MIG 1"
    assert labels[readings[602].device] == "GPU 0 · MIG 2"
    assert labels[readings[603].device] == "GPU 1"
    assert readings[601].used_memory_bytes == 5 * GB
    assert readings[601].sm_pct is None  # no per-process utilization under MIG
    assert readings[603].sm_pct == 0.0


def test_a_lost_gpu_leaves_the_others_listed() -> None:
    simulator = SimulatedNvml(gpu_count=2)
    simulator.set_processes([SimulatedProcess(0, 701, GB), SimulatedProcess(1, 702, GB)])
    reader = reader_for(simulator)
    simulator.lose_gpu(1)
    assert [r.pid for r in reader.read_all()] == [701]


def test_read_at_most_once_a_second_whatever_the_tick() -> None:
    simulator = SimulatedNvml(gpu_count=1)
    simulator.set_processes([SimulatedProcess(0, 801, GB)])
    clock = FakeClock()
    reader = reader_for(simulator, clock)
    passes = []
    for _ in range(30):  # 3 s of 100 ms ticks
        passes.append(reader.read() is not None)
        clock.now += 0.1
    assert sum(passes) == 3
    assert simulator.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 3


def test_samples_carry_the_process_family_in_extra() -> None:
    config = Config(interval_s=0.1, token=None, simulation=SimulationConfig(gpu_count=1))
    metrics = create_metrics(config, environ={})
    metrics.nvml.ensure_initialized()
    assert metrics.simulator is not None
    metrics.simulator.set_processes([SimulatedProcess(0, os.getpid(), GB)])
    first = metrics.sampler.tick()
    assert [r.pid for r in first.extra[PROCESS_FAMILY]] == [os.getpid()]
    second = metrics.sampler.tick()  # within the second: no fresh process reading
    assert PROCESS_FAMILY not in second.extra
    assert second.extra[OWNER_FAMILY][os.getpid()].user == psutil.Process().username()


def test_processes_file_is_read_from_outside_and_follows_pid_exit(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    spec = tmp_path / "processes.json"
    spec.write_text(json.dumps([{"gpu": 0, "pid": child.pid, "used_memory_bytes": 2e9,
                                 "until_exit": True}]))
    simulator = SimulatedNvml(gpu_count=1)
    simulator.set_processes_file(str(spec))
    reader = reader_for(simulator)
    assert [r.pid for r in reader.read_all()] == [child.pid]
    child.kill()
    child.wait()
    assert reader.read_all() == ()
    spec.write_text("{not json")  # half-written: the previous list stays
    assert reader.read_all() == ()



def test_a_processes_file_read_while_half_written_is_read_again_when_finished(
        tmp_path: Path) -> None:
    """A writer truncates, then writes (``Path.write_text``, a notebook's ``json.dump``), and
    both can fall in one tick of the filesystem's clock: a read between them must not keep
    the old list once the file is whole (the full suite's cells test read a kernel's 90% SM
    a second into the next cell, which set it to 0)."""
    spec = tmp_path / "processes.json"
    busy = [{"gpu": 0, "pid": os.getpid(), "used_memory_bytes": 2e9, "sm_pct": 90}]
    spec.write_text(json.dumps(busy))
    simulator = SimulatedNvml(gpu_count=1)
    simulator.set_processes_file(str(spec))
    reader = reader_for(simulator)
    assert [r.used_memory_bytes for r in reader.read_all()] == [2e9]
    tick = spec.stat().st_mtime_ns
    spec.write_text("")  # truncated: the writer has not written yet
    os.utime(spec, ns=(tick, tick))
    assert [r.used_memory_bytes for r in reader.read_all()] == [2e9]  # the previous list
    spec.write_text(json.dumps([{**busy[0], "used_memory_bytes": 3e9}]))
    os.utime(spec, ns=(tick, tick))  # finished within the same tick
    assert [r.used_memory_bytes for r in reader.read_all()] == [3e9]

# ----- attribution ----------------------------------------------------------------------

def test_a_pid_that_exits_between_nvml_and_psutil_is_ended() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    simulator = SimulatedNvml(gpu_count=1)
    simulator.set_processes([SimulatedProcess(0, child.pid, GB)])
    reader = reader_for(simulator)
    readings = reader.read_all()
    child.kill()
    child.wait()
    owners = ProcessAttributor(lambda: readings, host_namespace=True).family()[OWNER_FAMILY]
    assert owners[child.pid].status == "ended" and owners[child.pid].user is None


def test_a_process_that_let_go_of_its_gpu_keeps_its_owner_while_it_lives() -> None:
    """A cell frees the kernel's memory and the next takes it again: the kernel's owner is
    known at once (its passes count for its cells), not a slow pass later; an ended
    process, and one unlisted for REMEMBER_S, are forgotten."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    listed: list[tuple[ProcessReading, ...]] = []
    clock = [0.0]
    attributor = ProcessAttributor(lambda: listed[-1], host_namespace=True,
                                   clock=lambda: clock[0])
    try:
        listed.append(tuple(ProcessReading(0, pid, "compute", GB, 0.0, 0.0)
                            for pid in (os.getpid(), child.pid)))
        assert set(attributor.family()[OWNER_FAMILY]) == {os.getpid(), child.pid}
        listed.append(())  # both let go of the GPU
        clock[0] = 10.0
        owners = attributor.family()[OWNER_FAMILY]
        assert set(owners) == {os.getpid(), child.pid}
        assert owners[os.getpid()].status == "ok" and owners[os.getpid()].user
        child.kill()
        child.wait()
        clock[0] = 20.0
        assert set(attributor.family()[OWNER_FAMILY]) == {os.getpid()}
        clock[0] = REMEMBER_S - 1  # last listed at 0
        assert set(attributor.family()[OWNER_FAMILY]) == {os.getpid()}
        clock[0] = REMEMBER_S + 1
        assert attributor.family()[OWNER_FAMILY] == {}
    finally:
        child.kill()
        child.wait()


class _HiddenProc:
    """psutil as a process under hidepid=1 sees another user's process."""

    NoSuchProcess = psutil.NoSuchProcess
    AccessDenied = psutil.AccessDenied

    class Process:
        def __init__(self, pid: int) -> None:
            self.pid = pid

        def create_time(self) -> float:
            raise psutil.AccessDenied(self.pid)


def test_hidepid_no_access_is_said_not_guessed() -> None:
    attributor = ProcessAttributor(lambda: (), host_namespace=True, psutil_module=_HiddenProc)
    owner = attributor.attribute([4242])[4242]
    assert owner.status == "no_access" and owner.user is None and owner.command is None
    assert "hidepid" in STATUS_TEXT["no_access"]


def test_hidepid_through_the_proc_stat_fast_path() -> None:
    def hidden(pid: int) -> float:
        raise PermissionError(pid)  # hidepid=1: the directory is there, its files are not

    def gone(pid: int) -> float:
        raise FileNotFoundError(pid)  # hidepid=2, or the process ended

    assert ProcessAttributor(lambda: (), host_namespace=True, created=hidden).attribute(
        [os.getpid()])[os.getpid()].status == "no_access"
    assert ProcessAttributor(lambda: (), host_namespace=True, created=gone).attribute(
        [os.getpid()])[os.getpid()].status == "ended"
    assert start_ticks(os.getpid()) == start_ticks(os.getpid()) > 0


def test_another_pid_namespace_names_nobody() -> None:
    # NVML names our own PID (a host PID that happens to be ours here): in another namespace,
    # with no process of ours holding that GPU's node, it must not be looked up as ours.
    reading = ProcessReading(0, os.getpid(), "compute", 1e9, 50.0, 5.0)
    paired = pair((reading,), {}, host_namespace=False)
    assert paired[0].identity == "other" and paired[0].local_pid is None
    assert paired[0].sm_pct is None  # a host-PID sample is credited to nobody here
    attributor = ProcessAttributor(lambda: paired, host_namespace=False)
    assert attributor.family() == {"process_owners": {}}

    class Stat:
        def __init__(self, inode: int) -> None:
            self.st_ino = inode

    assert host_pid_namespace(lambda _: Stat(0xEFFFFFFC)) is True  # type: ignore[arg-type, return-value]
    assert host_pid_namespace(lambda _: Stat(4026532201)) is False  # type: ignore[arg-type, return-value]

    def unreadable(_: str) -> os.stat_result:
        raise PermissionError

    assert host_pid_namespace(unreadable) is None


# A stand-in kernel: a process group leader with a kernel connection file on its command
# line, a forked child, and a worker re-parented to init (double fork) that keeps the group.
_KERNEL = """
import os, sys, time
child = os.fork()
if child == 0:
    time.sleep(60); os._exit(0)
middle = os.fork()
if middle == 0:
    orphan = os.fork()
    if orphan == 0:
        time.sleep(60); os._exit(0)
    print(child, orphan, flush=True); os._exit(0)
os.waitpid(middle, 0)
time.sleep(60)
"""


def test_kernel_children_and_group_members_map_to_the_kernel(tmp_path: Path) -> None:
    kernel_id = str(uuid.uuid4())
    connection = tmp_path / f"kernel-{kernel_id}.json"
    kernel = subprocess.Popen([sys.executable, "-c", _KERNEL, "-f", str(connection)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child, orphan = (int(pid) for pid in kernel.stdout.readline().split())  # type: ignore[union-attr]
        assert psutil.Process(orphan).ppid() != kernel.pid  # really re-parented
        attributor = ProcessAttributor(lambda: (), host_namespace=True)
        owners = attributor.attribute([kernel.pid, child, orphan, os.getpid()])
        assert owners[kernel.pid].kernel_id == kernel_id
        assert owners[child].kernel_id == kernel_id and owners[child].kernel_pid == kernel.pid
        assert owners[orphan].kernel_id == kernel_id
        assert owners[os.getpid()].kernel_id is None
        lookups = attributor.lookups
        attributor.attribute([kernel.pid, child, orphan])
        assert attributor.lookups == lookups  # cached by (pid, create time)
    finally:
        os.killpg(kernel.pid, 9)
        kernel.wait()


def test_kernel_id_from_command_line() -> None:
    assert kernel_id_of(["python", "-m", "ipykernel_launcher", "-f",
                         "/run/jupyter/kernel-0f1e2d3c-aaaa-bbbb-cccc-000000000001.json"]) \
        == "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
    assert kernel_id_of(["python", "train.py", "--config", "kernel.json"]) is None


# ----- the table --------------------------------------------------------------------------

def test_table_own_processes_first_then_by_memory_and_notebook_links(tmp_path: Path) -> None:
    config = Config(interval_s=0.1, token=None, runs_dir=tmp_path,
                    simulation=SimulationConfig(gpu_count=2))
    metrics = create_metrics(config, environ={})
    metrics.nvml.ensure_initialized()
    other = subprocess.Popen(["sleep", "60"])  # same user here; the owner is faked below
    try:
        assert metrics.simulator is not None
        metrics.simulator.set_processes([
            SimulatedProcess(0, os.getpid(), GB), SimulatedProcess(1, other.pid, 9 * GB),
            SimulatedProcess(1, 999_999_999, None)])
        metrics.sampler.tick()
        metrics.sampler.read_slow()
        assert metrics.owners is not None
        latest = dict(metrics.owners.latest)
        latest[other.pid] = latest[other.pid]._replace(user="somebody-else")
        mine = latest[os.getpid()]
        latest[os.getpid()] = mine._replace(kernel_id="k1", kernel_pid=os.getpid())
        metrics.history.append(time.time(), (), metrics.sampler.host.read(),
                               extra={OWNER_FAMILY: latest})
        jupyter = JupyterSessions(None)
        jupyter.sessions = {"k1": Session("work/<b>plot</b>.ipynb", "notebook", "x")}
        sources = DashboardSources(metrics, jupyter=jupyter)
        rows = process_rows(sources)
        assert [row.pid for row in rows] == [os.getpid(), other.pid, 999_999_999]
        assert rows[0].mine and rows[0].notebook == "work/<b>plot</b>.ipynb"
        assert rows[2].memory_bytes is None and rows[2].what == STATUS_TEXT["ended"]
        assert rows[1].what.startswith("sleep")
        # A view-only server (--no-token) does not show command lines to the network.
        view_only = process_rows(DashboardSources(metrics, jupyter=jupyter, run_control=False))
        assert view_only[1].what == HIDDEN_COMMAND
        assert view_only[0].notebook == "work/<b>plot</b>.ipynb"
    finally:
        other.kill()
        other.wait()


def test_sessions_from_the_parent_servers_runtime_file(tmp_path: Path) -> None:
    (tmp_path / "jpserver-4321.json").write_text(json.dumps(
        {"url": "http://127.0.0.1:8888/user/alice/", "base_url": "/user/alice/",
         "token": "secret", "pid": 4321, "sock": ""}))
    server = find_parent_server({"JUPYTER_RUNTIME_DIR": str(tmp_path)}, parent_pid=4321)
    assert server is not None and server.token == "secret"
    assert server.lab_url("a b/n.ipynb") == "/user/alice/lab/tree/a%20b/n.ipynb"
    assert find_parent_server({"JUPYTER_RUNTIME_DIR": str(tmp_path)}, parent_pid=1) is None
    body = [{"path": "n.ipynb", "type": "notebook", "name": "n.ipynb",
             "kernel": {"id": "k1"}}, {"path": "broken"}, "junk"]
    assert parse_sessions(body) == {"k1": Session("n.ipynb", "notebook", "n.ipynb")}
    answers: list[object] = [body, OSError("refused")]

    def fetch(_: object) -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    sessions = JupyterSessions(server, fetch=fetch)
    sessions.refresh()
    sessions.refresh()  # a failure keeps the last good map
    assert set(sessions.sessions) == {"k1"}


@pytest.mark.parametrize("spec", ['[{"gpu": 0}]', '[{"gpu": 0, "pid": 1, "kind": "bogus"}]',
                                  '{"gpu": 0}'])
def test_malformed_processes_file_is_ignored(tmp_path: Path, spec: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(spec)
    simulator = SimulatedNvml(gpu_count=1)
    simulator.set_processes_file(str(path))
    assert reader_for(simulator).read_all() == ()


def test_unchanged_readings_are_the_same_objects_in_the_history() -> None:
    # A reading a second for 30 minutes: unchanged rows must not be copies.
    simulator = SimulatedNvml(gpu_count=1, profile="consumer")  # no activity samples
    simulator.set_processes([SimulatedProcess(0, os.getpid(), GB)])
    reader = reader_for(simulator)
    first, second = reader.read_all(), reader.read_all()
    assert first is second
    attributor = ProcessAttributor(lambda: first, host_namespace=True)
    assert attributor.family()[OWNER_FAMILY] is attributor.family()[OWNER_FAMILY]


def test_held_for_reads_like_every_other_duration_on_the_pages(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One formatter: the table said "2 min" where the run panel says "2 min 05 s"."""
    from jupyterlab_nvdashboard.apps import processes

    def row(held_s: float | None) -> processes.ProcessRow:
        return processes.ProcessRow(
            device=0, gpu="GPU 0", pid=4242, kind="compute", user="u", mine=True, what="x",
            notebook=None, lab_url=None, kernel_id=None, memory_bytes=None,
            memory_fraction=None, sm_pct=None, memory_pct=None, held_s=held_s)

    held = (7, 125, 3720, None)
    monkeypatch.setattr(processes, "process_rows", lambda _sources: [row(s) for s in held])
    config = Config(interval_s=0.1, token=None, runs_dir=tmp_path,
                    simulation=SimulationConfig(gpu_count=1))
    feed = processes.process_feed(DashboardSources(create_metrics(config, environ={})))
    assert feed.rows([]).text["held"] == ["7 s", "2 min 05 s", "1 h 02 min", "not available"]


# A process that only names a kernel's connection file: started by someone else (here a
# parent that exits at once, so it is re-parented), in a session of its own.
_IMPOSTOR = """
import subprocess, sys
impostor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-f",
                             sys.argv[1]], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(impostor.pid, flush=True)
"""


def test_a_kernel_is_the_process_its_launcher_started_not_a_command_line(
        tmp_path: Path) -> None:
    """Issue 53: with the kernel launcher known (the Jupyter server), a process whose
    command line names a kernel's connection file but that the launcher did not start, nor
    descends from the kernel, is no kernel's. The kernel, its children and its re-parented
    group members still are."""
    kernel_id = str(uuid.uuid4())
    connection = tmp_path / f"kernel-{kernel_id}.json"
    kernel = subprocess.Popen([sys.executable, "-c", _KERNEL, "-f", str(connection)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    starter = subprocess.run([sys.executable, "-c", _IMPOSTOR, str(connection)],
                             capture_output=True, text=True, timeout=60)
    impostor = int(starter.stdout.split()[0])
    try:
        child, orphan = (int(pid) for pid in kernel.stdout.readline().split())  # type: ignore[union-attr]
        launched = ProcessAttributor(lambda: (), host_namespace=True,
                                     kernel_launcher_pid=os.getpid())
        owners = launched.attribute([kernel.pid, child, orphan, impostor])
        assert [owners[pid].kernel_id for pid in (kernel.pid, child, orphan)] == [kernel_id] * 3
        assert owners[impostor].kernel_id is None and owners[impostor].kernel_pid is None
        # Without a known launcher (standalone), the command line is all there is.
        anyone = ProcessAttributor(lambda: (), host_namespace=True)
        assert anyone.attribute([impostor])[impostor].kernel_id == kernel_id
    finally:
        os.killpg(kernel.pid, 9)
        os.kill(impostor, 9)
        kernel.wait()
