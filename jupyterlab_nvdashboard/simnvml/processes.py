"""The simulated driver's process lists: which processes hold a context on which GPU.

Part of ``SimulatedNvml`` (a mixin), written from nvml.h and the driver release notes, not
from what the reader expects:

- ``nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses`` list ``nvmlProcessInfo``
  entries: ``pid`` (a host PID), ``usedGpuMemory`` (the binding turns
  ``NVML_VALUE_NOT_AVAILABLE`` into None, as under WDDM), ``gpuInstanceId`` and
  ``computeInstanceId`` (0xFFFFFFFF when MIG is off). The ``_v3`` entry points came with
  R510 (older drivers answer FunctionNotFound); ``_v2`` is in every driver simulated here.
- Under MIG, a MIG device handle lists the processes of its instance; the parent GPU's
  aggregate list needs privileges (nvml.h), which the simulated caller does not have:
  NoPermission.
- ``nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp)`` returns the samples newer
  than the timestamp (µs), NotFound when there are none, NotSupported under MIG and on
  devices that are not fully supported. The driver samples about once a second, so two calls
  within one second give one sample and then NotFound.

Tests put processes on GPUs with ``set_processes``; a test that runs the server in another
process, or a notebook's kernel (``simulated_holders.hold_gpu``), writes the same list as
JSON to the file the server was given (``NVDASHBOARD_SIMULATE_PROCESSES``, or by default
``paths.simulated_processes_file``), which the simulator re-reads when it changes::

    [{"gpu": 0, "pid": 1234, "used_memory_bytes": 2e9, "kind": "compute",
      "mig": null, "sm_pct": 40, "memory_pct": 10, "until_exit": true}]

``until_exit``: the driver stops listing the process once that PID has exited, as a real
driver does when the process's context goes away.

**PID namespaces.** ``pid`` is the process's PID in the initial (host) namespace: the one
the kernel module records for each client. What a caller inside a PID namespace (a
container without ``--pid=host``) gets back depends on the driver, and the file may say
which behaviour to play: ``{"pid_behaviour": "translated", "processes": [...]}``, each
process then naming its PID in the namespaces that see it, by namespace inode
(``/proc/<pid>/ns/pid``): ``"namespace_pids": {"4026532844": 7}``.

- ``host`` (the default): every call returns host PIDs. NVIDIA, nvidia-docker#1483: "the
  nvidia-driver itself does not support pid-namespaces, so anytime you query it for the
  set of processes that are using GPUs, you will always get the host pids"; a caller in
  a container finds no such PID, or another process under that number.
- ``translated``: the running-process lists name each process by its PID in the caller's
  namespace, and leave out a process that has none there: in open-gpu-kernel-modules
  (``src/nvidia/src/kernel/gpu/gpu.c``) ``gpuGetProcWithObject`` converts each client's PID
  with ``_gpuConvertPid`` (``osFindNsPid``) and skips it on ``NV_ERR_OBJECT_NOT_FOUND``.
  ``nvmlDeviceGetProcessUtilization`` still names host PIDs: HAMi-core#112 shows both
  from one process on driver 560.35.03 (list PID 324, sample PID 645400), and
  open-gpu-kernel-modules PR #614 is about the same split for per-PID queries.
- ``local``: the caller sees the host's PIDs (``--pid=host``, or no container): every
  call names the caller's own PIDs. Played here by naming each process by its PID in the
  caller's namespace, in lists and samples alike, and leaving out one it cannot see.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from . import nvml_h
from .nvml_h import NVMLError

log = logging.getLogger(__name__)
E = nvml_h.ERROR_CODES
_NO_INSTANCE = 0xFFFFFFFF
_KINDS = ("compute", "graphics", "mps")
PID_BEHAVIOURS = ("host", "translated", "local")
V3_DRIVER_MAJOR = 510


@dataclass(frozen=True)
class SimulatedProcess:
    """A process with a context on GPU ``gpu`` (on its MIG device ``mig``, by position)."""

    gpu: int
    pid: int
    used_memory_bytes: int | None  # None: the driver reports NVML_VALUE_NOT_AVAILABLE
    kind: str = "compute"
    mig: int | None = None
    sm_pct: int = 0
    memory_pct: int = 0
    until_exit: bool = False  # listed only while the PID exists
    # Its PID in each PID namespace that sees it, by the namespace's inode number (the
    # kernel keeps one number per level, /proc/<pid>/status NSpid); () when the caller
    # shares its namespace, so that ``pid`` is the caller's too.
    namespace_pids: tuple[tuple[int, int], ...] = ()

    def pid_in(self, namespace: int) -> int | None:
        """Its PID in the namespace with inode ``namespace``; None when it has none there."""
        return dict(self.namespace_pids).get(namespace)

    def to_json(self) -> dict[str, Any]:
        """The entry ``from_json`` reads back as this process."""
        return {"gpu": self.gpu, "pid": self.pid, "used_memory_bytes": self.used_memory_bytes,
                "kind": self.kind, "mig": self.mig, "sm_pct": self.sm_pct,
                "memory_pct": self.memory_pct, "until_exit": self.until_exit,
                "namespace_pids": {str(ns): pid for ns, pid in self.namespace_pids}}

    @classmethod
    def from_json(cls, item: Any) -> SimulatedProcess:
        if not isinstance(item, dict):
            raise ValueError(f"each process must be an object, got {item!r:.60}")
        kind = str(item.get("kind", "compute"))
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {', '.join(_KINDS)}, got {kind!r}")
        memory = item.get("used_memory_bytes")
        mig = item.get("mig")
        namespaces = item.get("namespace_pids") or {}
        if not isinstance(namespaces, dict):
            raise ValueError("namespace_pids must map namespace inodes to PIDs")
        return cls(int(item["gpu"]), int(item["pid"]), None if memory is None else int(memory),
                   kind, None if mig is None else int(mig), int(item.get("sm_pct", 0)),
                   int(item.get("memory_pct", 0)), bool(item.get("until_exit", False)),
                   tuple(sorted((int(ns), int(pid)) for ns, pid in namespaces.items())))


class ProcessInfo:
    """What the binding returns per process (it builds a plain object from the struct)."""

    def __init__(self, pid: int, used: int | None, gpu_instance: int, compute_instance: int):
        self.pid, self.usedGpuMemory = pid, used
        self.gpuInstanceId, self.computeInstanceId = gpu_instance, compute_instance


def _caller_namespace() -> int | None:
    """The PID namespace of the process that loaded the library (the driver's caller)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SimulatedProcesses:
    """Mixin for SimulatedNvml: the process lists and per-process utilization."""

    _processes: tuple[SimulatedProcess, ...] = ()
    _processes_file: str | None = None
    # The file's version as last read: its modification time and size. A writer truncates,
    # then writes; both can fall in one tick of the filesystem's coarse clock, so a read
    # between them (an empty or half-written file) shares the finished file's time, and
    # only its size tells the finished file apart.
    _processes_file_version: tuple[int, int] | None = None
    pid_behaviour = "host"  # PID_BEHAVIOURS: what a caller in a PID namespace gets back

    # ----- test hooks -----------------------------------------------------------------
    def set_processes(self, processes: list[SimulatedProcess]) -> None:
        """Replace every GPU's process list."""
        self._processes = tuple(processes)

    def set_pid_behaviour(self, behaviour: str) -> None:
        """Which PIDs the driver returns to a caller in a PID namespace (module docstring)."""
        if behaviour not in PID_BEHAVIOURS:
            raise ValueError(f"pid_behaviour must be one of {', '.join(PID_BEHAVIOURS)}, "
                             f"got {behaviour!r}")
        self.pid_behaviour = behaviour

    def set_processes_file(self, path: str | None) -> None:
        """Read the process list from this JSON file, again whenever it changes (test-only)."""
        self._processes_file, self._processes_file_version = path or None, None

    def _current_processes(self) -> tuple[SimulatedProcess, ...]:
        path = self._processes_file
        if path:
            try:
                stat = os.stat(path)
                version: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
            except OSError:
                version = None
            if version != self._processes_file_version:
                self._processes_file_version = version
                self._load_processes_file(path, version is not None)
        caller = _caller_namespace()
        return tuple(p for p in self._processes if not p.until_exit
                     or _exists(p.pid if p.pid_in(caller or 0) is None else p.pid_in(caller or 0)))

    def _named(self, process: SimulatedProcess, in_list: bool) -> int | None:
        """The PID a call returns for ``process``; None: the call leaves it out."""
        behaviour = self.pid_behaviour
        if behaviour == "host" or (behaviour == "translated" and not in_list):
            return process.pid
        return process.pid_in(_caller_namespace() or 0) if process.namespace_pids \
            else process.pid

    def _load_processes_file(self, path: str, exists: bool) -> None:
        if not exists:
            self._processes = ()
            return
        try:
            with open(path, encoding="utf-8") as file:
                items = json.load(file)
            if isinstance(items, dict):  # {"pid_behaviour": ..., "processes": [...]}
                self.set_pid_behaviour(str(items.get("pid_behaviour", "host")))
                items = items.get("processes")
            if not isinstance(items, list):
                raise ValueError("the file must hold a JSON list")
            self._processes = tuple(SimulatedProcess.from_json(item) for item in items)
        except (OSError, ValueError, KeyError, TypeError) as error:
            # Half-written or malformed: keep the previous list, say why once per change.
            log.warning("simulated processes file %s ignored: %s", path, error)

    # ----- NVML functions ---------------------------------------------------------------
    def _running(self, function: str, kind: str, handle: Any, v3: bool) -> list[ProcessInfo]:
        gpu = self._enter(function, handle)  # type: ignore[attr-defined]
        assert gpu is not None
        if v3 and self.profile.driver_major < V3_DRIVER_MAJOR:  # type: ignore[attr-defined]
            raise NVMLError(E["NVML_ERROR_FUNCTION_NOT_FOUND"])
        slots = gpu.model.mig
        if slots and handle.mig is None:
            raise NVMLError(E["NVML_ERROR_NO_PERMISSION"])
        found = []
        for process in self._current_processes():
            if process.gpu != gpu.index or process.kind != kind or process.mig != handle.mig:
                continue
            if handle.mig is None:
                gi = ci = _NO_INSTANCE
            else:
                slot = slots[handle.mig]
                gi, ci = slot.gpu_instance_id, slot.compute_instance_id
            pid = self._named(process, in_list=True)
            if pid is not None:
                found.append(ProcessInfo(pid, process.used_memory_bytes, gi, ci))
        return found

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any) -> list[ProcessInfo]:  # noqa: N802
        return self._running("nvmlDeviceGetComputeRunningProcesses_v3", "compute", handle, True)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[ProcessInfo]:  # noqa: N802
        return self._running("nvmlDeviceGetComputeRunningProcesses_v2", "compute", handle, False)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: Any) -> list[ProcessInfo]:  # noqa: N802
        return self._running("nvmlDeviceGetGraphicsRunningProcesses_v3", "graphics", handle,
                             True)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: Any) -> list[ProcessInfo]:  # noqa: N802
        return self._running("nvmlDeviceGetGraphicsRunningProcesses_v2", "graphics", handle,
                             False)

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: Any) -> list[ProcessInfo]:  # noqa: N802
        return self._running("nvmlDeviceGetMPSComputeRunningProcesses_v3", "mps", handle, True)

    def nvmlDeviceGetMPSComputeRunningProcesses_v2(self, handle: Any) -> list[ProcessInfo]:  # noqa: N802
        return self._running("nvmlDeviceGetMPSComputeRunningProcesses_v2", "mps", handle, False)

    def nvmlDeviceGetProcessUtilization(self, handle: Any, last_seen_us: int) -> list[Any]:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetProcessUtilization", handle)  # type: ignore[attr-defined]
        assert gpu is not None
        if gpu.model.mig:
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        # One sample per process per second, stamped at the whole second.
        stamp = self._wall_us() // 1_000_000 * 1_000_000  # type: ignore[attr-defined]
        samples = [nvml_h.ProcessUtilizationSample(pid=pid, timeStamp=stamp,
                                                    smUtil=process.sm_pct,
                                                    memUtil=process.memory_pct)
                   for process in self._current_processes()
                   if process.gpu == gpu.index and process.kind != "mps"
                   and (pid := self._named(process, in_list=False)) is not None]
        if not samples or stamp <= int(last_seen_us):
            raise NVMLError(E["NVML_ERROR_NOT_FOUND"])
        return samples


# What the binding exposes; the plain names are the newest version the binding has.
PROCESS_FUNCTIONS = (
    "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2",
    "nvmlDeviceGetProcessUtilization",
)
