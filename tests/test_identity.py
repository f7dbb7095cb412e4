"""Which local process an NVML entry is (``metrics/identity.py``), the device-node scan that
finds this namespace's GPU holders (``metrics/device_nodes.py``), and the simulated driver's
three PID behaviours, without root: the rules on their own, the scan over a /proc tree
made in a temporary folder, the driver through the real binding.
(``tests/test_containers.py`` runs them all in a real PID namespace, as root.)"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from jupyterlab_nvdashboard.metrics.binding import binding_loader
from jupyterlab_nvdashboard.metrics.device_nodes import DeviceNodeScanner, nvidia_major
from jupyterlab_nvdashboard.metrics.families import ProcessReading
from jupyterlab_nvdashboard.metrics.identity import pair, runs_as
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader
from jupyterlab_nvdashboard.simnvml import SimulatedNvml
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess

GB = 1e9


def reading(row: int, pid: int, memory: float = GB, sm: float | None = 50.0) -> ProcessReading:
    return ProcessReading(row, pid, "compute", memory, sm, 5.0)


def test_the_hosts_pids_need_no_pairing() -> None:
    listed = (reading(0, 4242),)
    assert pair(listed, None, host_namespace=True) == listed
    assert listed[0].local_pid == 4242 and runs_as(listed[0], (4242,))


def test_an_entry_held_here_under_its_pid_is_the_same_process() -> None:
    [same] = pair((reading(0, 12),), {12: {0}}, host_namespace=False, sample_pids={0: {12}})
    assert same.identity == "same" and same.local_pid == 12 and same.sm_pct == 50.0


def test_host_pid_samples_beside_translated_lists_are_credited_to_nobody() -> None:
    # List PID 324 is ours; the samples name host PIDs (HAMi-core#112): 645400 and 645401.
    out = pair((reading(0, 324),), {324: {0}}, host_namespace=False,
               sample_pids={0: {645400, 645401}})
    same, unlisted = out
    assert same.identity == "same" and same.sm_pct is None and same.memory_pct is None
    # Two samples, one listed process: one more process of another container.
    assert unlisted.identity == "unlisted" and unlisted.group.entries == 1  # type: ignore[union-attr]
    assert unlisted.local_pid is None and not runs_as(unlisted, (324,))


def test_one_entry_and_one_holder_left_pair_by_elimination() -> None:
    [paired] = pair((reading(0, 645400),), {7: {0}}, host_namespace=False,
                    sample_pids={0: {645400}})
    assert paired.identity == "paired" and paired.local_pid == 7 and runs_as(paired, (7,))
    assert paired.sm_pct is None  # not certain: its samples are not used
    assert paired.used_memory_bytes == GB


def test_several_left_are_reported_together_and_the_rest_are_other_containers() -> None:
    out = pair((reading(1, 900, 2 * GB), reading(1, 901, 3 * GB)), {7: {1}, 8: {1}},
               host_namespace=False)
    assert {r.identity for r in out} == {"shared"}
    assert out[0].group == out[1].group and out[0].group.memory_bytes == 5 * GB  # type: ignore[union-attr]
    assert out[0].group.holders == (7, 8) and runs_as(out[0], (8,))  # type: ignore[union-attr]
    assert all(r.local_pid is None for r in out)
    # A GPU nobody here holds: every entry is another container's.
    [other] = pair((reading(0, 900),), {7: {1}}, host_namespace=False)
    assert other.identity == "other" and not runs_as(other, (7, 900))


def test_no_node_to_scan_outside_the_hosts_namespace_is_unknown() -> None:
    [unknown] = pair((reading(0, os.getpid()),), None, host_namespace=False)
    assert unknown.identity == "unknown" and unknown.local_pid is None and unknown.sm_pct is None


def test_a_mig_device_is_paired_with_its_parents_node() -> None:
    [paired] = pair((reading(3, 645400),), {7: {0}}, host_namespace=False, node_rows={3: 0})
    assert paired.identity == "paired" and paired.local_pid == 7


def test_the_nvidia_major_comes_from_proc_devices() -> None:
    text = ("Character devices:\n  1 mem\n195 nvidia-frontend\n508 nvidia-uvm\n\n"
            "Block devices:\n195 nvidia\n")
    assert nvidia_major(text) == 195
    assert nvidia_major("Character devices:\n195 nvidia\n") == 195
    assert nvidia_major("Character devices:\n  1 mem\n") is None


class FakeProc:
    """A /proc of three processes under a temporary folder: fd links, stat, ns/pid."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.nodes = root / "dev"
        self.nodes.mkdir()
        # A name with "nvidia" in it that resolves to a real character device.
        (self.nodes / "nvidia0").symlink_to("/dev/null")
        (root / "proc").mkdir()
        (root / "proc" / "ns-mine").write_text("")
        (root / "proc" / "ns-nested").write_text("")

    def process(self, pid: int, ticks: int, holds: bool, nested: bool = False) -> None:
        folder = self.root / "proc" / str(pid)
        (folder / "fd").mkdir(parents=True, exist_ok=True)
        (folder / "ns").mkdir(exist_ok=True)
        (folder / "stat").write_text(f"{pid} (py thon) S 1 " + " ".join(
            str(ticks) if i == 17 else "0" for i in range(30)))
        link = folder / "ns" / "pid"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(self.root / "proc" / ("ns-nested" if nested else "ns-mine"))
        self.hold(pid, holds)

    def hold(self, pid: int, holds: bool) -> None:
        fd = self.root / "proc" / str(pid) / "fd" / "3"
        if fd.is_symlink():
            fd.unlink()
        fd.symlink_to(self.nodes / "nvidia0" if holds else "/dev/zero")


def scanner_over(proc: FakeProc, uid: int = 0) -> DeviceNodeScanner:
    scanner = DeviceNodeScanner(None, lambda: (), proc=str(proc.root / "proc"),  # type: ignore[arg-type]
                                uid=uid)
    scanner._namespace = os.stat(proc.root / "proc" / "ns-mine").st_ino  # noqa: SLF001
    scanner.nodes = {os.stat("/dev/null").st_rdev: 0}
    return scanner


def test_the_scan_finds_holders_and_rescans_others_only_when_asked() -> None:
    with tempfile.TemporaryDirectory() as folder:
        proc = FakeProc(Path(folder))
        proc.process(10, 100, holds=True)
        proc.process(11, 100, holds=False)
        proc.process(12, 100, holds=True, nested=True)  # a container below this one
        scanner = scanner_over(proc)
        assert set(scanner.scan()) == {10}  # the nested container's holder is not ours
        assert scanner.scan()[10].rows == frozenset({0})
        scans = scanner.fd_scans
        proc.hold(11, True)  # initialised CUDA after it was first seen
        assert set(scanner.scan()) == {10}
        assert scanner.fd_scans == scans + 2  # a steady pass reads only the holders' fds
        assert set(scanner.scan(full=True)) == {10, 11}  # NVML's lists changed: all again
        proc.hold(10, False)  # closed its node
        assert set(scanner.scan()) == {11}
        proc.process(11, 200, holds=False)  # the PID reused by a new process
        assert set(scanner.scan()) == set()


def test_the_scan_looks_only_at_this_users_processes_unless_root() -> None:
    with tempfile.TemporaryDirectory() as folder:
        proc = FakeProc(Path(folder))
        proc.process(10, 100, holds=True)
        mine = os.stat(proc.root / "proc" / "10").st_uid
        assert set(scanner_over(proc, uid=mine + 1).scan()) == set()
        assert scanner_over(proc, uid=mine + 1).fd_scans == 0
        assert set(scanner_over(proc, uid=0 if mine == 0 else mine).scan()) == {10}


def _driver_pids(behaviour: str) -> tuple[set[int], set[int]]:
    """(list PIDs, sample PIDs) the simulated driver returns through the real binding."""
    simulator = SimulatedNvml(gpu_count=1, profile="h200")
    here = os.stat("/proc/self/ns/pid").st_ino
    with tempfile.TemporaryDirectory() as folder:
        listing = Path(folder) / "processes.json"
        listing.write_text(json.dumps({"pid_behaviour": behaviour, "processes": [
            {"gpu": 0, "pid": 645400, "used_memory_bytes": GB, "sm_pct": 13,
             "namespace_pids": {str(here): 324}},
            # Another container's: a PID in its own namespace only, none in the caller's.
            {"gpu": 0, "pid": 645401, "used_memory_bytes": GB, "sm_pct": 5,
             "namespace_pids": {str(here + 1): 7}}]}))
        simulator.set_processes_file(str(listing))
        nvml = NvmlReader(binding_loader(simulator.library))
        nvml.ensure_initialized()
        [device] = nvml.session.devices()
        lists = nvml.session.query(device, "nvmlDeviceGetComputeRunningProcesses_v3")
        samples = nvml.session.query(device, "nvmlDeviceGetProcessUtilization", 0)
    return {int(p.pid) for p in lists}, {int(s.pid) for s in samples}


def test_the_simulated_driver_plays_each_pid_behaviour() -> None:
    # nvidia-docker#1483: host PIDs from every call.
    assert _driver_pids("host") == ({645400, 645401}, {645400, 645401})
    # open-gpu-kernel-modules gpu.c: lists in the caller's namespace, others left out;
    # samples still host PIDs (HAMi-core#112: list 324, sample 645400).
    assert _driver_pids("translated") == ({324}, {645400, 645401})
    # The caller sees the host's PIDs: its own namespace's in every call.
    assert _driver_pids("local") == ({324}, {324})


def test_the_simulated_gpus_have_minor_numbers() -> None:
    nvml = NvmlReader(binding_loader(SimulatedNvml(gpu_count=2).library))
    nvml.ensure_initialized()
    minors = [nvml.session.query(d, "nvmlDeviceGetMinorNumber") for d in nvml.session.devices()]
    assert minors == [0, 1]
    assert SimulatedProcess(0, 1, None).pid_in(1) is None
