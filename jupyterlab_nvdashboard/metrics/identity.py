"""Which process an NVML entry is, across PID namespaces: the one place that knows.

NVML names processes by PID, but whose PID depends on the driver and on where this server
runs (docs/containers.md):

- **host PIDs from every call** (NVIDIA in nvidia-docker#1483: "the nvidia-driver itself
  does not support pid-namespaces"): inside a container no local process has that PID, or
  a different one does;
- **translated lists, host-PID samples**: newer drivers name each listed process by its PID
  in the caller's namespace and leave out processes that have none there
  (open-gpu-kernel-modules ``gpu.c``, ``_gpuConvertPid``), while
  ``nvmlDeviceGetProcessUtilization`` still names host PIDs (HAMi-core#112, driver
  560.35.03: list PID 324, sample PID 645400);
- **local PIDs**: the server sees the host's PIDs (bare metal, ``--pid=host``).

What this server can know on its own is which of *its* processes hold a GPU's device node
open (``device_nodes.py``). ``pair()`` joins the two, per GPU, and says how sure it is:

- ``same``: the driver's PID is this process here, certainly: this server sees the host's
  PIDs, or a local process with that PID holds that GPU's node.
- ``paired``: the one entry left on a GPU and the one local holder left: paired by
  elimination. Likely, not certain (a holder may have CUDA initialised without a context).
- ``shared``: N entries left, M >= 1 local holders left: M of these N are this
  container's, and the driver's PIDs cannot say which; reported together, with their
  memory summed.
- ``other``: no local holder left on that GPU: another container's process.
- ``unlisted``: processes the lists leave out but the per-process samples show (a
  translating driver lists only the caller's namespace): another container's, counted.
- ``unknown``: outside the host's namespace with no device node to scan: cannot be told.

A process here is named by its PID and its start time (``start_ticks``), so a PID the
kernel reuses is another process: the owner lookups and the node scan cache by that pair.
Everything downstream (the process table, ``/glance.json``, the verdict, the diagnosis)
asks ``ProcessReading.local_pid`` / ``runs_as()``, never compares the driver's PID with a
local one. Per-process SM samples are kept only for ``same`` entries whose samples are
in the lists' PID space (``pair()``), so a host-PID sample is never credited to a local
process by coincidence of numbers.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from .families import ProcessGroup, ProcessReading

SAME, PAIRED, SHARED, OTHER, UNLISTED, UNKNOWN = (
    "same", "paired", "shared", "other", "unlisted", "unknown")
# The PID an ``unlisted`` reading carries: the driver named no such process in its lists.
NO_PID = 0


def start_ticks(pid: int, proc: str = "/proc") -> int:
    """When the process started, in clock ticks since boot (/proc/<pid>/stat field 22)."""
    with open(f"{proc}/{pid}/stat", "rb") as stat:
        text = stat.read()
    # The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    return int(text[text.rindex(b")") + 2:].split()[19])


def runs_as(reading: ProcessReading, pids: Collection[int]) -> bool:
    """Whether ``reading`` is (or, for a ``shared`` group, may be) one of the local processes
    ``pids``: the one comparison of a local PID with NVML's entries."""
    local = reading.local_pid
    if local is not None:
        return local in pids
    group = reading.group
    return group is not None and reading.identity == SHARED \
        and any(pid in pids for pid in group.holders)


def certain(reading: ProcessReading) -> bool:
    """Whether the reading is certainly the local process ``local_pid`` names."""
    return reading.identity == SAME


def pair(readings: Sequence[ProcessReading], holders: Mapping[int, Collection[int]] | None,
         host_namespace: bool | None, node_rows: Mapping[int, int] | None = None,
         sample_pids: Mapping[int, Collection[int]] | None = None
         ) -> tuple[ProcessReading, ...]:
    """NVML's readings of one pass, each with its identity.

    ``holders``: this namespace's PIDs that hold GPU device nodes open, with the device rows
    whose nodes they hold (``device_nodes.py``); None when no node could be scanned.
    ``host_namespace``: whether this server sees the host's PIDs (None: /proc would not say).
    ``node_rows``: the row whose node a device row uses (a MIG device: its parent's), where
    not its own. ``sample_pids``: per device row, the PIDs the per-process samples named.
    """
    if host_namespace is True or (host_namespace is None and holders is None):
        return tuple(readings)  # SAME: the driver's PIDs are this server's
    node_rows = node_rows or {}
    sample_pids = sample_pids or {}
    rows: dict[int, list[int]] = {row: [] for row in sample_pids}
    for index, reading in enumerate(readings):
        rows.setdefault(reading.device, []).append(index)
    out = list(readings)
    extra: list[ProcessReading] = []
    for row, indices in rows.items():
        listed = {readings[i].pid for i in indices}
        # Samples outside the lists' PID space (host PIDs beside translated lists): no
        # sample on this row may be credited to a listed process by its number.
        foreign = set(sample_pids.get(row, ())) - listed
        if holders is None:
            for i in indices:
                out[i] = readings[i]._replace(identity=UNKNOWN, sm_pct=None, memory_pct=None)
            continue
        node = node_rows.get(row, row)
        held = {pid for pid, held_rows in holders.items() if node in held_rows}
        left: list[int] = []
        for i in indices:
            reading = readings[i]
            if reading.pid in held:
                held.discard(reading.pid)
                out[i] = reading if not foreign else \
                    reading._replace(sm_pct=None, memory_pct=None)
            else:
                left.append(i)
        if len(left) == 1 and len(held) == 1:
            out[left[0]] = readings[left[0]]._replace(
                identity=PAIRED, paired_pid=next(iter(held)), sm_pct=None, memory_pct=None)
        elif left and held:
            memories = [readings[i].used_memory_bytes for i in left]
            group = ProcessGroup(len(left), tuple(sorted(held)),
                                 None if None in memories else float(sum(memories)))  # type: ignore[arg-type]
            for i in left:
                out[i] = readings[i]._replace(identity=SHARED, group=group, sm_pct=None,
                                              memory_pct=None)
        else:
            for i in left:
                out[i] = readings[i]._replace(identity=OTHER, sm_pct=None, memory_pct=None)
        # A translating driver lists only this namespace's processes; each of them may have a
        # host-PID sample, so samples beyond that count are other containers' processes.
        unlisted = len(foreign) - len(indices)
        if unlisted > 0:
            extra.append(ProcessReading(row, NO_PID, "compute", None, None, None, None,
                                        UNLISTED, None, ProcessGroup(unlisted, (), None)))
    return tuple(out + extra)
