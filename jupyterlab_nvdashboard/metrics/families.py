"""The per-tick reading families that ride in ``Sample.extra``, beside the core GPU readings.

Each family is read by the metrics layer on the reader thread at its own rate and stored in
``Sample.extra[<FAMILY>]``; a sample that has no fresh reading of a family simply lacks the key.
Everything downstream (dashboards, the workload verdict, the Prometheus export) reads these
shapes and nothing else. ``None`` in any field means "not available", never 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, TypeVar

GPM_FAMILY = "gpm"  # dict[int, GpmReading], keyed by device row (GpuFacts.index)
HEALTH_FAMILY = "health"  # dict[int, HealthReading], keyed by device row
PROCESS_FAMILY = "processes"  # tuple[ProcessReading, ...], all devices together


class GpmReading(NamedTuple):
    """What the SMs and DRAM did between two GPM samples (Hopper and later), in percent of
    the device's peak, or bytes per second for the interconnect rates."""

    sm_activity_pct: float | None
    sm_occupancy_pct: float | None
    tensor_activity_pct: float | None
    dram_bandwidth_pct: float | None
    fp64_activity_pct: float | None
    fp32_activity_pct: float | None
    fp16_activity_pct: float | None
    pcie_tx_bytes_per_s: float | None
    pcie_rx_bytes_per_s: float | None
    nvlink_tx_bytes_per_s: float | None
    nvlink_rx_bytes_per_s: float | None


class HealthReading(NamedTuple):
    """Clocks, limits and error counters of one device row."""

    sm_clock_mhz: float | None
    sm_clock_max_mhz: float | None
    memory_clock_mhz: float | None
    memory_clock_max_mhz: float | None
    pstate: int | None
    clock_event_reasons: int | None  # NVML's clocks-event (throttle) bit mask
    temperature_c: float | None
    temperature_slowdown_c: float | None
    temperature_shutdown_c: float | None
    power_w: float | None
    power_limit_w: float | None
    fan_pct: float | None
    ecc_volatile_corrected: int | None
    ecc_volatile_uncorrected: int | None
    ecc_aggregate_corrected: int | None
    ecc_aggregate_uncorrected: int | None
    remapped_rows_pending: bool | None
    remapped_rows_failed: bool | None
    # Every XID event seen on this GPU since the server started (the newest 50), oldest
    # first: they stay listed after the history has moved on.
    xid_events: tuple[XidEvent, ...] = ()
    # The PCIe link as trained now (nvmlDeviceGetCurrPcieLinkGeneration/Width): below the
    # maximum in the static facts when a card sits in a slower slot or trained down.
    pcie_link_generation: int | None = None
    pcie_link_width: int | None = None


class XidEvent(NamedTuple):
    """One XID (a driver-reported GPU error) from NVML's event set."""

    time_s: float  # unix epoch seconds when the reader took it from the event set
    xid: int  # NVIDIA's XID number, e.g. 79 "GPU has fallen off the bus"
    gpu_instance_id: int | None  # the MIG GPU instance it concerns, where NVML says


class ProcessGroup(NamedTuple):
    """NVML entries on one GPU that this namespace's processes account for only together
    (``identity.py``)."""

    entries: int  # how many NVML entries (for ``unlisted``: how many unlisted processes)
    holders: tuple[int, ...]  # this namespace's PIDs that hold that GPU's node among them
    memory_bytes: float | None  # the entries' memory together; None if any is unknown


class ProcessReading(NamedTuple):
    """One process that holds a context on one device row."""

    device: int  # device row (GpuFacts.index): the GPU, or the MIG device it runs on
    # As NVML reports it: a host PID or this namespace's, depending on the driver
    # (identity.py); compare local PIDs with ``local_pid``, never with this.
    pid: int
    kind: str  # "compute", "graphics" or "mps"
    used_memory_bytes: float | None
    sm_pct: float | None  # from nvmlDeviceGetProcessUtilization; None without samples
    memory_pct: float | None
    # Unix time this server first saw the process on this device (it may have held it longer).
    seen_since_s: float | None = None
    # Which local process this is, and how sure (identity.py): "same" (the driver's PID is
    # this server's), "paired", "shared", "other", "unlisted" or "unknown".
    identity: str = "same"
    paired_pid: int | None = None  # the local PID, for "paired"
    group: ProcessGroup | None = None  # for "shared" and "unlisted"

    @property
    def local_pid(self) -> int | None:
        """This process's PID in this server's namespace, where one is known."""
        if self.identity == "same":
            return self.pid
        return self.paired_pid if self.identity == "paired" else None


Reading = TypeVar("Reading")


def device_reading(extra: Mapping[str, object], family: str, row: int,
                   kind: type[Reading]) -> Reading | None:
    """Device row ``row``'s reading of a per-device ``family`` in a sample's ``extra``; None
    when the sample has no such reading (not read this tick, or not available)."""
    readings = extra.get(family)
    reading = readings.get(row) if isinstance(readings, dict) else None
    return reading if isinstance(reading, kind) else None
