"""Who a GPU process is: its owner, command line, and the Jupyter kernel it belongs to.

``ProcessAttributor.family()`` runs on the sampler's slow thread (psutil reads ``/proc``;
it never runs on the event loop). It looks at the local PIDs of the newest process reading
(``processes.py``; which local process an NVML entry is, is ``identity.py``'s to say) and
of the processes found holding GPU nodes in a ``shared`` group, and stores
``{local pid: ProcessOwner}`` in ``Sample.extra[OWNER_FAMILY]``.

- **Cache.** Keyed by (pid, create time): a PID reused by a new process is looked up again;
  everything else is read once. Each pass costs one create-time read per listed PID, from
  ``/proc/<pid>/stat`` on Linux (psutil elsewhere).
- **Jupyter kernels.** A kernel started by ``jupyter_client`` runs with its connection file,
  ``kernel-<id>.json``, on its command line. A process belongs to kernel <id> if it is that
  process, descends from it (children, forked workers), or is in its process group
  (``jupyter_client`` starts each kernel as a group leader, and a worker that was re-parented
  to init keeps its group). Where the process that launches kernels is known (the Jupyter
  server this one runs under, ``kernel_launcher_pid``), the kernel is the process it
  started: a kernel's processes are that process's tree, and any other process whose command
  line merely names the connection file (another user's, a ``jupyter console --existing``)
  is no kernel's (issue 53). The notebook path for a kernel id comes from the Jupyter server
  (``jupyter_sessions.py``), not from here.
- **Containers.** Only local PIDs are looked up: an NVML entry that ``identity.pair()`` could
  not tie to a process of this namespace is never looked up under its number (a host PID
  may name a different local process), so a row is never given a wrong name.
- **Remembered.** A process that let go of every GPU keeps its owner in the family for
  ``REMEMBER_S`` while it lives (the same create time): when it takes a GPU again (a cell
  that frees its memory, and the next that allocates), its passes are its kernel's at once,
  not a slow pass later (a 5 s cell after a release was "no process pass fell in the span").
- **Not visible.** A PID that ended between NVML's list and this lookup, or that
  ``hidepid=2`` hides, is ``ended``; one whose ``/proc`` entry may not be read
  (``hidepid=1``, ``AccessDenied``) is ``no_access``.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from .families import ProcessReading
from .identity import SHARED, start_ticks

OWNER_FAMILY = "process_owners"  # dict[int, ProcessOwner], keyed by local PID
COMMAND_CHARS = 160
_MAX_ANCESTORS = 32
# How long the owner of a process that let go of every GPU is kept, and of how many.
REMEMBER_S = 600.0
REMEMBER_MAX = 256
# The initial (host) PID namespace's inode number (include/linux/proc_ns.h PROC_PID_INIT_INO).
_HOST_PID_NAMESPACE_INODE = 0xEFFFFFFC
__all__ = ["OWNER_FAMILY", "ProcessAttributor", "ProcessOwner", "host_pid_namespace",
           "kernel_id_of", "start_ticks"]
_KERNEL_FILE = re.compile(r"kernel-([0-9A-Za-z][0-9A-Za-z_-]{7,})\.json$")


class ProcessOwner(NamedTuple):
    """What this server could find out about one PID NVML reported."""

    pid: int
    status: str  # "ok", "ended" or "no_access"
    user: str | None
    command: str | None  # the command line, cut to COMMAND_CHARS
    create_time_s: float | None
    kernel_id: str | None  # the Jupyter kernel this process is, or belongs to
    kernel_pid: int | None
    lineage: tuple[int, ...] = ()  # the PID, its parent, ... (for workload runs)


def host_pid_namespace(stat: Callable[[str], os.stat_result] = os.stat) -> bool | None:
    """Whether this process sees the host's PIDs; None when /proc will not say."""
    try:
        return stat("/proc/self/ns/pid").st_ino == _HOST_PID_NAMESPACE_INODE
    except OSError:
        return None


def kernel_id_of(command: Iterable[str]) -> str | None:
    """The kernel id in a command line that names ``kernel-<id>.json``, else None."""
    for argument in command:
        found = _KERNEL_FILE.search(argument)
        if found:
            return found.group(1)
    return None


def _load_psutil() -> Any:
    import psutil

    return psutil


class ProcessAttributor:
    """Turns PIDs into owners; call from the sampler's slow thread only."""

    def __init__(self, readings: Callable[[], tuple[ProcessReading, ...]],
                 host_namespace: bool | None = None, psutil_module: Any = None,
                 getpgid: Callable[[int], int] = os.getpgid,
                 created: Callable[[int], float] | None = None,
                 kernel_launcher_pid: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._readings = readings
        self._clock = clock
        # Local PIDs listed in a pass, and when last (the clock's): the owners kept for
        # processes that let go of every GPU (REMEMBER_S).
        self._listed_at: dict[int, float] = {}
        self._launcher = kernel_launcher_pid
        self._psutil = psutil_module or _load_psutil()
        self._getpgid = getpgid
        # The create time that keys the cache: /proc/<pid>/stat where Linux has it, else
        # psutil's (any OSError from /proc falls back to psutil too).
        if created is None and psutil_module is None and sys.platform.startswith("linux"):
            created = start_ticks
        self._created = created
        # None: /proc would not say; look PIDs up (they may still be right).
        self.host_namespace = host_pid_namespace() if host_namespace is None else host_namespace
        self._cache: dict[int, tuple[float, ProcessOwner]] = {}
        self._kernels: dict[tuple[int, float], str | None] = {}  # (pid, created) -> kernel id
        self._last_pids: tuple[int, ...] | None = None
        self.latest: dict[int, ProcessOwner] = {}
        self.lookups = 0  # full lookups (cache misses), for tests and benchmarks

    def family(self) -> dict[str, object]:
        """The sampler's hook: owners of the newest process reading's local PIDs."""
        local: set[int] = set()
        for reading in self._readings():
            if reading.local_pid is not None:
                local.add(reading.local_pid)
            elif reading.identity == SHARED and reading.group is not None:
                local.update(reading.group.holders)
        now = self._clock()
        self._listed_at.update(dict.fromkeys(local, now))
        recent = sorted(self._listed_at, key=self._listed_at.__getitem__)
        for pid in recent[:max(0, len(recent) - REMEMBER_MAX)]:
            del self._listed_at[pid]
        for pid in [p for p, at in self._listed_at.items() if now - at > REMEMBER_S]:
            del self._listed_at[pid]
        pids = tuple(sorted(self._listed_at))
        if not pids and self._last_pids == ():
            return {}
        self._last_pids = pids
        # A process no longer listed keeps its owner while it lives; one that ended, or
        # whose PID another process took, is forgotten (listed ones say "ended" as ever).
        owners = {pid: owner for pid, owner in self.attribute(pids).items()
                  if pid in local or (owner.status == "ok" and pid in self.latest
                                      and self.latest[pid].create_time_s
                                      == owner.create_time_s)}
        for pid in self._listed_at.keys() - owners.keys():
            del self._listed_at[pid]
        if owners != self.latest:  # unchanged: the same object again, a reference in history
            self.latest = owners
        return {OWNER_FAMILY: self.latest}

    def attribute(self, pids: Iterable[int]) -> dict[int, ProcessOwner]:
        owners = {pid: self._owner(pid) for pid in pids}
        for gone in self._cache.keys() - owners.keys():
            del self._cache[gone]
        return owners

    def _owner(self, pid: int) -> ProcessOwner:
        psutil = self._psutil
        created: float | None = None
        if self._created is not None:
            try:
                created = self._created(pid)
            except FileNotFoundError:  # ended, or hidden by hidepid=2
                self._cache.pop(pid, None)
                return ProcessOwner(pid, "ended", None, None, None, None, None)
            except PermissionError:  # hidepid=1: the entry is there, its files are not ours
                return ProcessOwner(pid, "no_access", None, None, None, None, None)
            except (OSError, ValueError, IndexError):
                created = None  # an odd /proc: psutil decides
            cached = self._cache.get(pid)
            if created is not None and cached is not None and cached[0] == created:
                return cached[1]
        try:
            process = psutil.Process(pid)
            if created is None:
                created = process.create_time()
        except psutil.NoSuchProcess:
            self._cache.pop(pid, None)
            return ProcessOwner(pid, "ended", None, None, None, None, None)
        except psutil.AccessDenied:
            return ProcessOwner(pid, "no_access", None, None, None, None, None)
        cached = self._cache.get(pid)
        if cached is not None and cached[0] == created:
            return cached[1]
        self.lookups += 1
        try:
            owner = self._look_up(process, pid, process.create_time())
        except psutil.NoSuchProcess:  # ended while being read
            return ProcessOwner(pid, "ended", None, None, None, None, None)
        self._cache[pid] = (created, owner)
        return owner

    def _look_up(self, process: Any, pid: int, created: float) -> ProcessOwner:
        psutil = self._psutil
        try:
            user: str | None = process.username()
        except (psutil.AccessDenied, KeyError):
            user = None
        try:
            command = process.cmdline()
        except psutil.AccessDenied:
            command = None
        if not command:  # kernel threads and zombies have none; the name is what there is
            try:
                command = [process.name()]
            except psutil.AccessDenied:
                command = None
        lineage, kernel_id, kernel_pid = self._kernel_of(process, pid, created, command)
        text = None if command is None else " ".join(command)
        if text is not None and len(text) > COMMAND_CHARS:
            text = text[:COMMAND_CHARS - 1] + "…"
        return ProcessOwner(pid, "ok", user, text, created, kernel_id, kernel_pid, lineage)

    def _kernel_of(self, process: Any, pid: int, created: float, command: list[str] | None
                   ) -> tuple[tuple[int, ...], str | None, int | None]:
        """(lineage, kernel id, kernel pid): from the process and its ancestors, else its
        process group. A forked worker carries its kernel's command line, so the kernel is
        the topmost ancestor that names the same kernel id."""
        lineage = [pid]
        kernel_id = kernel_id_of(command or ())
        kernel_pid = pid if kernel_id else None
        current = process
        for _ in range(_MAX_ANCESTORS):
            try:
                current = current.parent()
            except (self._psutil.NoSuchProcess, self._psutil.AccessDenied):
                current = None
            if current is None or current.pid in lineage or current.pid <= 1:
                break
            lineage.append(current.pid)
            found = self._kernel_id(current)
            if found and (kernel_id is None or found == kernel_id):
                kernel_id, kernel_pid = found, current.pid
            elif kernel_id is not None:
                break  # above the kernel: its launcher, the Jupyter server
        if kernel_pid is not None and not self._launched(kernel_pid):
            kernel_id = kernel_pid = None  # it names a kernel, but is none's tree
        if kernel_id is None:
            try:
                leader = self._getpgid(pid)
            except OSError:
                leader = None
            if leader and leader not in (pid, 1):
                try:
                    kernel_id = self._kernel_id(self._psutil.Process(leader))
                except (self._psutil.NoSuchProcess, self._psutil.AccessDenied):
                    kernel_id = None
                kernel_pid = leader if kernel_id and self._launched(leader) else None
                kernel_id = kernel_id if kernel_pid is not None else None
        return tuple(lineage), kernel_id, kernel_pid

    def _launched(self, kernel_pid: int) -> bool:
        """Whether the process taken for a kernel is one the kernel launcher started (any,
        where the launcher is not known)."""
        if self._launcher is None:
            return True
        psutil = self._psutil
        try:
            return psutil.Process(kernel_pid).ppid() == self._launcher
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    def _kernel_id(self, process: Any) -> str | None:
        """The kernel id a process's own command line names (cached per process)."""
        psutil = self._psutil
        try:
            key = (process.pid, process.create_time())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        if key not in self._kernels:
            try:
                self._kernels[key] = kernel_id_of(process.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                return None
            if len(self._kernels) > 4096:  # a long-lived server: forget the oldest
                del self._kernels[next(iter(self._kernels))]
        return self._kernels[key]
