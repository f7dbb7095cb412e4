"""Per-process GPU readings: which processes hold a context on each device, how much memory
each holds and how busy each keeps the SMs.

``ProcessReader.read()`` runs on the sampler's GPU reader thread (a ``FamilyReader``), right
after the per-tick reading, at most once every ``PROCESS_EVERY_S`` whatever the tick; what it
returns goes into ``Sample.extra[PROCESS_FAMILY]`` (``families.py``). Every NVML call goes
through the NVML reader's choke point (``NvmlReader._query``), so a missing function, an
older binding or a lost GPU is "not available" for that device only.

- **Lists.** Compute, graphics and MPS processes, each from the newest versioned function
  the binding and driver have (``_v3``, then ``_v2``, then the plain name); a function that
  is missing or answers NotSupported / FunctionNotFound is not asked again on that device.
  A process listed twice (a context that does compute and graphics) is one row, under the
  first list it appears in.
- **MIG.** A MIG-enabled GPU lists no processes of its own: each MIG device's handle lists
  the processes running in that instance (the parent's aggregate list needs privileges a
  user seldom has, per nvml.h).
- **Memory.** ``usedGpuMemory`` that the driver does not report (the binding turns
  ``NVML_VALUE_NOT_AVAILABLE`` into None) is None, never 0.
- **Activity.** ``nvmlDeviceGetProcessUtilization`` returns the samples newer than the
  timestamp it is given; the newest timestamp seen is carried to the next pass. NotFound (no
  new samples) and NotSupported (MIG) leave SM and memory % not available.
- **Identity.** Each pass is paired with this namespace's holders of GPU nodes, as the slow
  thread last found them (``device_nodes.py``), by ``identity.pair()``: each reading says
  which local process it is and how sure, and SM samples are kept only where certain.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .families import PROCESS_FAMILY, ProcessReading
from .identity import pair
from .nvml import GpuReading, NvmlReader
from .session import Device

PROCESS_EVERY_S = 1.0
_NOT_AVAILABLE_BYTES = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE, should a binding pass it through
_LISTS: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (kind, tuple(f"nvmlDeviceGet{name}RunningProcesses{suffix}" for suffix in ("_v3", "_v2", "")))
    for kind, name in (("compute", "Compute"), ("graphics", "Graphics"), ("mps", "MPSCompute"))
)
_UTILIZATION = "nvmlDeviceGetProcessUtilization"


def _memory(value: Any) -> float | None:
    if value is None or value == _NOT_AVAILABLE_BYTES:
        return None
    return float(value)


class ProcessReader:
    """Reads every shown device's process lists; call from the GPU reader thread only."""

    name = PROCESS_FAMILY

    def __init__(self, nvml: NvmlReader, every_s: float = PROCESS_EVERY_S,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.session = nvml.session  # the choke point (session.py)
        self.every_s = every_s
        self._clock, self._wall_clock = clock, wall_clock
        self._last_pass = -float("inf")
        # Per device row: the newest process-utilization sample timestamp seen (µs).
        self._last_seen_us = nvml.session.per_device()  # UUID -> newest sample time (µs)
        # (row, pid) -> unix time this reader first listed it.
        self._seen_since = nvml.session.per_device()  # (UUID, PID) -> wall time first listed
        self.latest: tuple[ProcessReading, ...] = ()  # replaced whole, so any thread may read it
        self.passes = 0
        # Set by build_metrics: whether this server sees the host's PIDs, and the slow
        # thread's newest holders of GPU nodes (device_nodes.py; None: none scanned).
        self.host_namespace: bool | None = True
        self.holders: Callable[[], Any] = lambda: None
        self.node_rows: Callable[[], dict[int, int]] = dict

    def read(self, gpus: tuple[GpuReading, ...] = ()) -> tuple[ProcessReading, ...] | None:
        """The sampler's family read: a pass if the last one is at least ``every_s`` old,
        else None (that sample has no fresh process reading)."""
        now = self._clock()
        if now - self._last_pass < self.every_s:
            return None
        self._last_pass = now
        return self.read_all()

    def read_all(self) -> tuple[ProcessReading, ...]:
        """One pass over every shown device (MIG devices included)."""
        nvml = self.session
        devices = nvml.devices()
        wall = self._wall_clock()
        # The history keeps a reading a second for its whole window: a row that did not
        # change is the previous object, so it costs the history a reference, not a copy.
        previous = {(r.device, r.pid): r for r in self.latest}
        readings: list[ProcessReading] = []
        listed: set[tuple[int, int]] = set()
        held: set[tuple[str, int]] = set()
        sampled: dict[int, frozenset[int]] = {}
        for device in devices:
            if device.lost or device.facts.mig_enabled:
                continue
            row = device.facts.index
            activity = self._activity(device)
            if activity:
                sampled[row] = frozenset(activity)
            for kind, functions in _LISTS:
                for process in self._list(device, functions) or ():
                    pid = int(process.pid)
                    if (row, pid) in listed:
                        continue
                    listed.add((row, pid))
                    held.add((device.facts.uuid, pid))
                    sm_pct, memory_pct = activity.get(pid, (None, None))
                    since = self._seen_since.setdefault((device.facts.uuid, pid), wall)
                    readings.append(ProcessReading(
                        row, pid, kind, _memory(getattr(process, "usedGpuMemory", None)),
                        sm_pct, memory_pct, since))
        for gone in self._seen_since.keys() - held:
            del self._seen_since[gone]
        holders = self.holders()
        held = None if holders is None else {pid: h.rows for pid, h in holders.items()}
        readings = [previous.get((r.device, r.pid)) if previous.get((r.device, r.pid)) == r
                    else r for r in pair(readings, held, self.host_namespace,
                                         self.node_rows(), sampled)]
        if tuple(readings) != self.latest:
            self.latest = tuple(readings)
        self.passes += 1
        return self.latest

    def _list(self, device: Device, functions: tuple[str, ...]) -> list[Any] | None:
        """The newest versioned list function that answers; None when none does."""
        for function in functions:
            if device.skips(function):
                continue
            processes = self.session.query(device, function, metric="processes")
            if processes is not None:
                return list(processes)
            if not device.skips(function):  # a real error (or a lost GPU): not this pass
                return None
            # Missing from the binding, or the driver is too old for it: try the older one.
        return None

    def _activity(self, device: Device) -> dict[int, tuple[float | None, float | None]]:
        """pid -> (SM %, memory %) from the samples newer than the last seen; {} without."""
        uuid = device.facts.uuid
        samples = self.session.query(device, _UTILIZATION, self._last_seen_us.get(uuid, 0),
                                   metric="process_utilization",
                                   normal_errors=("NVML_ERROR_NOT_FOUND",))
        if not samples:  # NotFound (no new samples), NotSupported (MIG), or an old binding
            return {}
        newest: dict[int, Any] = {}
        for sample in samples:
            pid, stamp = int(sample.pid), int(sample.timeStamp)
            if pid not in newest or stamp >= int(newest[pid].timeStamp):
                newest[pid] = sample
            if stamp > self._last_seen_us.get(uuid, 0):
                self._last_seen_us[uuid] = stamp
        return {pid: (float(sample.smUtil), float(sample.memUtil))
                for pid, sample in newest.items()}
