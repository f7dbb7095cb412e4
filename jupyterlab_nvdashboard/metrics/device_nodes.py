"""Which of this server's processes hold a GPU's device node open: found in ``/proc/*/fd``,
as ``fuser /dev/nvidia*`` finds them, in whatever PID namespace this server runs.

**What an open node means.** The driver makes one character device per GPU,
``/dev/nvidia<minor>``, where the minor is ``nvmlDeviceGetMinorNumber`` (nvml.h: "the
Nvidia device node file for each GPU will have the form /dev/nvidia[minor number]"); its
major is the one the driver registers as ``nvidia-frontend`` in ``/proc/devices`` (195 on
every release; ``nvidia`` on old single-module drivers). CUDA opens the nodes of the
devices it enumerates when it initialises, and skips devices whose node it may not open
(NVIDIA in nvidia-docker#170: CUDA, nvidia-smi and NVML "report the right number of GPUs by
ignoring the ones they don't have permission to use"). So an open ``/dev/nvidia<minor>``
means: this process initialised CUDA (or NVML) and that GPU is visible to it. It does not
by itself mean a context on that GPU: a process that uses GPU 1 may hold GPU 0's node too
(mmx-binaries#29, "the driver likes to use GPU 0"). Only NVML's lists say "context"; the
node says "this process, in this namespace, could be one of the GPU's entries", which is
what ``identity.pair()`` needs to pair NVML's entries with local processes.

**Recognising the nodes.** By device number (``st_rdev``), not by path: inside a container
the node may be reached under another path (``/run/nvidia/driver/dev/nvidia0``). In
production a node is ``makedev(<nvidia-frontend major>, <minor from NVML>)``. The simulated
driver registers no major, so in simulate mode (``any_major``, chosen by the composition
root) a GPU's node is whatever character device stands at ``/dev/nvidia<minor>``: the
namespace tests put an openable device there (``/dev/full``, say) in a private mount
namespace.

**Cost.** On the sampler's slow thread. Only this user's processes are looked at unless
the server runs as root (another user's ``/proc/<pid>/fd`` is unreadable anyway). Each
pass lists ``/proc``; a process is scanned when first seen, keyed by (pid, start time);
the processes found holding a node are scanned again every pass (they may close it); all
of this user's processes are scanned again only when NVML's lists change (a process that
initialised CUDA after it was first seen). ``benchmarks/fd_scan_cost.py`` measures it.
A holder in a PID namespace nested below this one (a container started from this one) is
another container's, not this one's.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterable
from typing import NamedTuple

from .families import ProcessReading
from .identity import start_ticks
from .session import NvmlSession

log = logging.getLogger(__name__)

HOLDER_FAMILY = "gpu_node_holders"  # dict[int, NodeHolder], keyed by this namespace's PID
NODE_PREFIX = "/dev/nvidia"
_NODE_NAMES = ("nvidia-frontend", "nvidia")  # /proc/devices, newest first
_MAX_ANCESTORS = 32
_NONE: frozenset[int] = frozenset()


class NodeHolder(NamedTuple):
    """One process of this namespace that holds GPU device nodes open."""

    rows: frozenset[int]  # device rows whose node it holds
    lineage: tuple[int, ...]  # its PID, its parent's, ... (a run's process tree)


def nvidia_major(devices_text: str) -> int | None:
    """The character-device major the NVIDIA driver registered, from ``/proc/devices``."""
    found: dict[str, int] = {}
    block = False
    for line in devices_text.splitlines():
        if line.startswith("Block devices"):
            block = True
        parts = line.split()
        if not block and len(parts) == 2 and parts[0].isdigit():
            found.setdefault(parts[1], int(parts[0]))
    return next((found[name] for name in _NODE_NAMES if name in found), None)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:
        return ""


class DeviceNodeScanner:
    """Finds this namespace's holders of GPU nodes; call ``family`` from the slow thread."""

    def __init__(self, session: NvmlSession, readings: Callable[[], tuple[ProcessReading, ...]],
                 any_major: bool = False, proc: str = "/proc", node_prefix: str = NODE_PREFIX,
                 uid: int | None = None) -> None:
        self.session = session
        self._readings = readings
        self._any_major = any_major
        self._proc, self._prefix = proc, node_prefix
        self._uid = os.geteuid() if uid is None else uid
        self._namespace = self._namespace_of("self")
        self._epoch: object = None
        self.nodes: dict[int, int] = {}  # st_rdev -> device row
        self.node_rows: dict[int, int] = {}  # device row -> the row whose node it uses
        # pid -> (start ticks, rows held); rows None: not this user's, never scanned
        self._seen: dict[int, tuple[int, frozenset[int] | None]] = {}
        self._holding: set[int] = set()  # the PIDs last found holding a node
        # holder pid -> (start ticks, in this namespace, lineage)
        self._placed: dict[int, tuple[int, bool, tuple[int, ...]]] = {}
        self._listed: frozenset[tuple[int, int]] = frozenset()
        self.latest: dict[int, NodeHolder] | None = None  # None: no node to look for
        self.passes = self.full_scans = self.fd_scans = 0

    # ----- which devices are which nodes ----------------------------------------------
    def _refresh_nodes(self) -> None:
        epoch = self.session.epoch
        if epoch == self._epoch:
            return
        self._epoch = epoch
        major = None if self._any_major else nvidia_major(_read(f"{self._proc}/devices"))
        nodes: dict[int, int] = {}
        node_rows: dict[int, int] = {}
        for device in self.session.devices():
            facts = device.facts
            if facts.kind == "mig":
                continue
            minor = self.session.query(device, "nvmlDeviceGetMinorNumber", metric="minor")
            if minor is None:
                continue
            if major is not None:
                nodes[os.makedev(major, int(minor))] = facts.index
            elif self._any_major:
                try:
                    found = os.stat(f"{self._prefix}{int(minor)}")
                except OSError:
                    continue
                if stat.S_ISCHR(found.st_mode):
                    nodes[found.st_rdev] = facts.index
        for device in self.session.devices():
            facts = device.facts
            if facts.kind == "mig" and facts.parent is not None:
                node_rows[facts.index] = facts.parent
        self.nodes, self.node_rows = nodes, node_rows
        self._seen.clear()
        if not nodes:
            log.info("no NVIDIA device node found (%s<minor>); processes in other PID "
                     "namespaces cannot be paired with this server's", self._prefix)

    # ----- /proc ------------------------------------------------------------------------
    def _namespace_of(self, pid: int | str) -> int | None:
        try:
            return os.stat(f"{self._proc}/{pid}/ns/pid").st_ino
        except OSError:
            return None

    def _held(self, pid: int) -> frozenset[int]:
        """The device rows whose nodes ``pid`` holds open."""
        self.fd_scans += 1
        folder = f"{self._proc}/{pid}/fd"
        try:
            names = os.listdir(folder)
        except OSError:
            return _NONE
        rows = None
        for name in names:
            path = f"{folder}/{name}"
            try:
                # The link names the node as the holder opened it: only a name with
                # "nvidia" in it is looked at closer (its device number decides).
                if "nvidia" not in os.readlink(path):
                    continue
                row = self.nodes.get(os.stat(path).st_rdev)
            except OSError:
                continue
            if row is not None:
                rows = {row} if rows is None else rows | {row}
        return frozenset(rows) if rows else _NONE

    def _lineage(self, pid: int) -> tuple[int, ...]:
        lineage = [pid]
        current = pid
        for _ in range(_MAX_ANCESTORS):
            text = _read(f"{self._proc}/{current}/stat")
            try:
                parent = int(text[text.rindex(")") + 2:].split()[1])
            except (ValueError, IndexError):
                break
            if parent <= 1 or parent in lineage:
                break
            lineage.append(parent)
            current = parent
        return tuple(lineage)

    def _ours(self, pid: int) -> bool:
        if self._uid == 0:
            return True
        try:
            return os.stat(f"{self._proc}/{pid}").st_uid == self._uid
        except OSError:
            return False

    def scan(self, full: bool = False) -> dict[int, NodeHolder]:
        """One pass: the holders of GPU nodes among this user's processes here. Only new
        processes and the holders are read (set arithmetic over ``/proc``'s listing, so a
        steady pass costs little more than the listing); ``full``: every one of this
        user's processes again."""
        try:
            present = {int(name) for name in os.listdir(self._proc) if name.isdigit()}
        except OSError:
            present = set()
        seen = self._seen
        for gone in seen.keys() - present:
            del seen[gone]
        self._holding &= present
        if full:
            self.full_scans += 1
            todo = present  # another user's PID may have been reused by one of ours
        else:
            todo = (present - seen.keys()) | self._holding
        for pid in todo:
            known = seen.get(pid)
            if (known is None or known[1] is None) and not self._ours(pid):
                seen[pid] = (0, None)  # not this user's: never read
                continue
            try:
                ticks = start_ticks(pid, self._proc)
            except (OSError, ValueError, IndexError):
                seen.pop(pid, None)
                self._holding.discard(pid)
                continue
            rows = self._held(pid)  # a reused PID (other start ticks) is simply read anew
            seen[pid] = (ticks, rows)
            if rows:
                self._holding.add(pid)
            else:
                self._holding.discard(pid)
        holders = {}
        for pid in sorted(self._holding):
            ticks, rows = seen[pid]
            # Its namespace and ancestors, read once per (pid, start time).
            known = self._placed.get(pid)
            if known is None or known[0] != ticks:
                known = (ticks, self._namespace_of(pid) == self._namespace, self._lineage(pid))
                self._placed[pid] = known
            if known[1]:
                holders[pid] = NodeHolder(rows, known[2])  # type: ignore[arg-type]
        for gone in self._placed.keys() - self._holding:
            del self._placed[gone]
        return holders

    def family(self) -> dict[str, object]:
        """The sampler's slow-thread hook: this namespace's holders of GPU nodes."""
        self._refresh_nodes()
        if not self.nodes:
            self.latest = None
            return {}
        listed = frozenset((r.device, r.pid) for r in self._readings() if r.pid)
        full = listed != self._listed
        self._listed = listed
        holders = self.scan(full=full)
        self.passes += 1
        if holders != self.latest:
            self.latest = holders
        return {HOLDER_FAMILY: self.latest}


def holding_rows(holders: dict[int, NodeHolder], pids: Iterable[int]) -> set[int]:
    """The device rows whose node any holder in the process trees of ``pids`` holds."""
    wanted = set(pids)
    return {row for holder in holders.values() if wanted.intersection(holder.lineage)
            for row in holder.rows}
