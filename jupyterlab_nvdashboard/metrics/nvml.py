"""The NVML reader: the only code that calls NVML.

- **Lifecycle.** Initialization is lazy, idempotent and repeated after ``fork``.
  ``NvmlState`` records why there is no GPU. A state without GPUs is retried slowly (a
  driver loaded later, a GPU made visible later), and a running reader rescans now and then
  for a hot-plugged GPU.
- **One choke point.** Every NVML function and constant goes through the public session
  (``session.py``), which every reading family shares: a binding that lacks a name or a
  driver that answers an error makes that one metric "not available", with a reason, and
  the server carries on. ``NVMLError_GpuIsLost`` marks that one GPU (and its MIG devices)
  lost; the others go on.
- **Devices.** Physical GPUs in nvidia-smi order, each MIG device right after its GPU.
  Which ones show, and their CUDA positions, follow ``CUDA_VISIBLE_DEVICES`` and
  ``CUDA_DEVICE_ORDER`` (``cuda_visibility.py``). Static facts are read once.
- **Rates.** PCIe and NVLink byte rates, and the 20 ms PCIe fallback that ``read_slow``
  takes on drivers without counters, are ``links.py``'s. Where the counters answer, their
  raw totals ride along (``GpuReading.pcie_*_bytes_total``, ``nvlink_bytes_total``): NVML's
  own, the same for every process that reads the GPU.
- **Only these devices.** ``only`` (or ``read_only`` later) limits the rows to some device
  UUIDs, so several processes on one host can share its GPUs with one reader each (the
  Dask worker plugin); ``cuda_positions`` still names every device CUDA shows this process.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections import Counter
from collections.abc import Callable, Collection
from enum import Enum
from typing import Any, NamedTuple

from .binding import load_binding
from .cuda_visibility import MigEntry, PhysicalGpu, cuda_indices
from .links import (
    PCIE_SNAPSHOT_EVERY_S,
    LinkReader,
    NvlinkReading,
    PcieReading,
    pcie_max_bytes_per_s,
)
from .session import Device, GpuFacts, NvmlSession, decode, numbers, skip_key

log = logging.getLogger(__name__)

# How often to try NVML again after it failed to start (the driver may load later).
REINIT_INTERVAL_S = 10.0
# How often to look again for GPUs when there were none, or for a hot-plugged GPU.
RESCAN_INTERVAL_S = 30.0
_VIRTUALIZATION = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
__all__ = ["PCIE_SNAPSHOT_EVERY_S", "GpuFacts", "GpuReading", "NvmlReader", "NvmlState"]


class NvmlState(str, Enum):
    """Why NVML data is or is not available."""

    UNINITIALIZED = "uninitialized"
    OK = "ok"
    LIBRARY_NOT_FOUND = "library_not_found"
    DRIVER_NOT_LOADED = "driver_not_loaded"
    NO_PERMISSION = "no_permission"
    NO_DEVICES = "no_devices"
    ERROR = "error"


STATE_MESSAGES = {
    NvmlState.UNINITIALIZED: "NVML has not been started yet.",
    NvmlState.OK: "NVML is running.",
    NvmlState.LIBRARY_NOT_FOUND: "No NVIDIA driver library (libnvidia-ml) was found on this "
    "machine, so there is no NVIDIA GPU to show.",
    NvmlState.DRIVER_NOT_LOADED: "The NVIDIA driver is not loaded, so no NVIDIA GPU can be read.",
    NvmlState.NO_PERMISSION: "This user has no permission to read the NVIDIA GPUs.",
    NvmlState.NO_DEVICES: "NVML is running but no NVIDIA GPU is visible to this process.",
    NvmlState.ERROR: "NVML failed to start.",
}


MIG_PARENT_UTILIZATION = ("not reported for the whole GPU while MIG is enabled; NVML gives "
                          "each MIG device's activity only through GPM (Hopper and later)")


MIG_PHYSICAL = "a reading of the whole physical GPU: see the parent GPU's row"


class GpuReading(NamedTuple):
    """One tick's readings for one device row. ``None`` means not available."""

    index: int
    lost: bool
    utilization_pct: float | None
    memory_utilization_pct: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    memory_reserved_bytes: float | None  # memory v2 only
    pcie_tx_bytes_per_s: float | None
    pcie_rx_bytes_per_s: float | None
    pcie_is_snapshot: bool  # a 20 ms nvmlDeviceGetPcieThroughput sample, not a counter rate
    nvlink_tx_bytes_per_s: float | None
    nvlink_rx_bytes_per_s: float | None
    temperature_c: float | None
    power_w: float | None
    # NVML's own cumulative counters (bytes since the driver started counting; they wrap at
    # the field's width): None where the driver has no such counter (the 20 ms snapshot).
    pcie_tx_bytes_total: float | None = None
    pcie_rx_bytes_total: float | None = None
    nvlink_bytes_total: float | None = None  # transmitted and received, all active links

    @classmethod
    def unavailable(cls, index: int, lost: bool) -> GpuReading:
        values: list[Any] = [None] * (len(cls._fields) - 2)
        values[cls._fields.index("pcie_is_snapshot") - 2] = False
        return cls(index, lost, *values)


def _cuda_version(value: Any) -> str:
    """nvmlSystemGetCudaDriverVersion's 12080 as CUDA writes it: '12.8' ('' if unknown)."""
    return f"{value // 1000}.{value % 1000 // 10}" if isinstance(value, int) and value > 0 else ""


class NvmlReader:
    """Reads every visible GPU. ``read`` from one thread, ``read_slow`` from another."""

    def __init__(
        self,
        load_library: Callable[[], Any] = load_binding,
        cuda_visible_devices: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        cuda_device_order: str | None = None,
        only: Collection[str] | None = None,
    ) -> None:
        self._load_library = load_library
        # Read only devices with these UUIDs (a MIG device: its own or its GPU's); None: all.
        self._only: frozenset[str] | None = None if only is None else frozenset(only)
        # Every device CUDA shows this process (UUID -> CUDA position), read or not.
        self.cuda_positions: dict[str, int] = {}
        self._cuda_visible_devices = cuda_visible_devices
        self._cuda_device_order = cuda_device_order or "FASTEST_FIRST"
        self._clock = clock
        # The choke point every reading family shares (session.py), and the link rates.
        self.session = NvmlSession(None, clock)
        self.links = LinkReader(self.session)
        self._physical_count = 0
        self._last_init_attempt = -float("inf")
        self._last_rescan = 0.0
        # How often to retry a failed init and to reopen a lost GPU (tests shorten it).
        self.retry_interval_s = REINIT_INTERVAL_S
        self.rescan_interval_s = RESCAN_INTERVAL_S
        self.state = NvmlState.UNINITIALIZED
        self.message = STATE_MESSAGES[self.state]
        _READERS.add(self)

    @property
    def versions(self) -> dict[str, str]:
        """driver, nvml, binding and cuda_driver versions ('' where unknown)."""
        return self.session.versions

    def ensure_initialized(self) -> NvmlState:
        """Start NVML once; later calls return the cached state."""
        with self.session.lock:
            if self.state is NvmlState.UNINITIALIZED:
                self._initialize()
            return self.state

    def retry_if_due(self) -> None:
        """Now and then: start NVML again while it is down, or look for new GPUs."""
        with self.session.lock:
            now = self._clock()
            if self.state in (NvmlState.OK, NvmlState.NO_DEVICES):
                # NVML is up: only the GPUs can change (hot plug, a driver seeing one more).
                if now - self._last_rescan >= self.rescan_interval_s:
                    self._last_rescan = now
                    count = self.session.call("nvmlDeviceGetCount")
                    if isinstance(count, int) and count != self._physical_count:
                        log.warning("NVML now sees %d GPU(s), was %d", count,
                                    self._physical_count)
                        self._enumerate()
                return
            if self.state is NvmlState.UNINITIALIZED:
                return
            wait = self.rescan_interval_s if self.state is NvmlState.LIBRARY_NOT_FOUND \
                else self.retry_interval_s
            if now - self._last_init_attempt >= wait:
                self._initialize()

    def reset_after_fork(self) -> None:
        """A forked child must not reuse the parent's NVML handles."""
        self.session.reset()
        self._set_state(NvmlState.UNINITIALIZED)

    def read_only(self, uuids: Collection[str] | None) -> None:
        """Read only the devices with these UUIDs from now on (None: every visible one);
        a change enumerates the devices again (a new ``epoch``)."""
        chosen = None if uuids is None else frozenset(uuids)
        with self.session.lock:
            if chosen == self._only:
                return
            self._only = chosen
            if self.state in (NvmlState.OK, NvmlState.NO_DEVICES):
                self._enumerate()

    def _set_state(self, state: NvmlState, detail: str = "") -> None:
        self.state = state
        self.message = STATE_MESSAGES[state] + (f" ({detail})" if detail else "")

    def _initialize(self) -> None:
        self._last_init_attempt = self._clock()
        self.session.set_devices([])
        try:
            lib = self._load_library()
        except ImportError as error:
            self._set_state(NvmlState.LIBRARY_NOT_FOUND, f"cannot import pynvml: {error}")
            return
        error_class = getattr(lib, "NVMLError", None) or Exception
        try:
            lib.nvmlInit()
        except error_class as error:
            self._set_state(self._state_for_init_error(lib, error), str(error))
            return
        except (OSError, AttributeError) as error:  # a broken library fails before NVML answers
            self._set_state(NvmlState.LIBRARY_NOT_FOUND, str(error))
            return
        self.session.attach(lib)
        self.session.versions.update({
            "driver": str(self.session.call("nvmlSystemGetDriverVersion") or ""),
            "nvml": str(self.session.call("nvmlSystemGetNVMLVersion") or ""),
            "cuda_driver": _cuda_version(self.session.call("nvmlSystemGetCudaDriverVersion")),
        })
        self._enumerate()

    def _state_for_init_error(self, lib: Any, error: Exception) -> NvmlState:
        value = getattr(error, "value", None)
        states = {
            "NVML_ERROR_LIBRARY_NOT_FOUND": NvmlState.LIBRARY_NOT_FOUND,
            "NVML_ERROR_DRIVER_NOT_LOADED": NvmlState.DRIVER_NOT_LOADED,
            "NVML_ERROR_NO_PERMISSION": NvmlState.NO_PERMISSION,
        }
        for name, state in states.items():
            if value is not None and value == getattr(lib, name, None):
                return state
        return NvmlState.ERROR

    def _enumerate(self) -> None:
        """Open every physical GPU and MIG device this process should show."""
        self._last_rescan = self._clock()
        count = self.session.call("nvmlDeviceGetCount")
        if not isinstance(count, int):
            self._set_state(NvmlState.ERROR, "nvmlDeviceGetCount failed")
            return
        self._physical_count = count
        opened: list[tuple[Device, list[Device]]] = []
        for nvml_index in range(count):
            handle, error = self.session.invoke("nvmlDeviceGetHandleByIndex", nvml_index)
            if error is not None:
                log.warning("GPU %d cannot be opened: %s", nvml_index, error)
                continue
            gpu = self._new_device(handle, nvml_index, "gpu")
            opened.append((gpu, self._open_mig_devices(gpu)))
        physical = [
            PhysicalGpu(gpu.facts.nvml_index, gpu.facts.uuid, self._speed(gpu),
                        tuple(MigEntry(mig.facts.uuid, (mig.facts.mig or {}).get("gpu_instance_id"),
                                       (mig.facts.mig or {}).get("compute_instance_id"))
                              for mig in migs))
            for gpu, migs in opened
        ]
        visible = cuda_indices(physical, self._cuda_visible_devices, self._cuda_device_order)
        self.cuda_positions = dict(visible)
        only = self._only
        rows: list[Device] = []
        for gpu, migs in opened:
            whole = only is None or gpu.facts.uuid in only
            shown_migs = [mig for mig in migs if mig.facts.uuid in visible and
                          (whole or mig.facts.uuid in only)]  # type: ignore[operator]
            if (gpu.facts.uuid not in visible or not whole) and not shown_migs:
                continue
            parent_row = len(rows)
            rows.append(self._finish(gpu, parent_row, None, visible.get(gpu.facts.uuid)))
            for mig in shown_migs:
                rows.append(self._finish(mig, len(rows), parent_row, visible[mig.facts.uuid]))
        self.session.set_devices(rows)
        if rows:
            self._set_state(NvmlState.OK)
        elif only is not None and visible:
            self._set_state(NvmlState.NO_DEVICES, "another process reads this one's GPUs")
        elif self._cuda_visible_devices is not None and count:
            self._set_state(NvmlState.NO_DEVICES,
                            f"CUDA_VISIBLE_DEVICES={self._cuda_visible_devices!r} hides them")
        else:
            self._set_state(NvmlState.NO_DEVICES)

    def _new_device(self, handle: Any, nvml_index: int, kind: str,
                    parent: Device | None = None) -> Device:
        name = f"GPU {nvml_index}"
        facts = GpuFacts(0, name, kind, None, nvml_index, None, name, "", None, "v1", None, None,
                         None, (), None, None, False, None, "none", None)
        device = Device(facts, handle, parent=parent)
        uuid = self.session.query(device, "nvmlDeviceGetUUID") or ""
        device.facts = facts._replace(name=self.session.query(device, "nvmlDeviceGetName") or name,
                                      uuid=uuid)
        return device

    def _open_mig_devices(self, gpu: Device) -> list[Device]:
        mode = self.session.query(gpu, "nvmlDeviceGetMigMode")
        enabled = self.session.constant("NVML_DEVICE_MIG_ENABLE")
        if not mode or enabled is None or mode[0] != enabled:
            return []
        gpu.facts = gpu.facts._replace(mig_enabled=True)
        migs = []
        parent_mib = self._total_mib(gpu)
        for position in range(self.session.query(gpu, "nvmlDeviceGetMaxMigDeviceCount") or 0):
            handle, error = self.session.invoke("nvmlDeviceGetMigDeviceHandleByIndex", gpu.handle,
                                         position)
            if error is not None:  # NOT_FOUND: an empty slot
                continue
            mig = self._new_device(handle, gpu.facts.nvml_index, "mig", parent=gpu)
            mig.mig_position = position
            gi = self.session.query(mig, "nvmlDeviceGetGpuInstanceId")
            ci = self.session.query(mig, "nvmlDeviceGetComputeInstanceId")
            attributes = self.session.query(mig, "nvmlDeviceGetAttributes")
            info: dict[str, int] = {"gpu_instance_id": gi, "compute_instance_id": ci}
            if attributes is not None:
                memory_mib = int(attributes.memorySizeMB)
                info.update(gpu_slices=int(attributes.gpuInstanceSliceCount),
                            compute_slices=int(attributes.computeInstanceSliceCount),
                            multiprocessors=int(attributes.multiprocessorCount),
                            memory_bytes=memory_mib * 2**20)
                if parent_mib:  # MIG memory comes in eighths of the GPU's (MIG user guide)
                    info["memory_slices"] = max(1, round(8 * memory_mib / parent_mib))
            label = f"GPU {gpu.facts.nvml_index} · MIG {gi if gi is not None else position}"
            mig.facts = mig.facts._replace(label=label, mig=info)
            migs.append(mig)
        # GPM reads a whole GPU instance: say where compute instances share one.
        shared = Counter((mig.facts.mig or {}).get("gpu_instance_id") for mig in migs)
        for mig in migs:
            info = mig.facts.mig or {}
            if info.get("gpu_instance_id") is not None and shared[info["gpu_instance_id"]] > 1:
                info["compute_instances"] = shared[info["gpu_instance_id"]]
        return migs

    def _total_mib(self, gpu: Device) -> float:
        memory = self.session.query(gpu, "nvmlDeviceGetMemoryInfo")
        return 0.0 if memory is None else int(memory.total) / 2**20

    def _speed(self, gpu: Device) -> tuple[int, int, int]:
        """What CUDA's FASTEST_FIRST guess is made of; 0 where NVML won't say."""
        if self._cuda_device_order == "PCI_BUS_ID":
            return (0, 0, 0)
        major, minor = self.session.query(gpu, "nvmlDeviceGetCudaComputeCapability") or (0, 0)
        cores = self.session.query(gpu, "nvmlDeviceGetNumGpuCores") or 0
        sm_clock = self.session.constant("NVML_CLOCK_SM")
        clock = self.session.query(gpu, "nvmlDeviceGetMaxClockInfo", sm_clock) \
            if sm_clock is not None else None
        return int(major), int(minor), int(cores) * int(clock or 0)

    def _finish(self, device: Device, row: int, parent_row: int | None,
                cuda_index: int | None) -> Device:
        """Read the rest of a device's static facts, once."""
        facts = device.facts._replace(index=row, parent=parent_row, cuda_index=cuda_index)
        memory = self._probe_memory(device)
        facts = facts._replace(
            memory_total_bytes=None if memory is None else int(memory.total),
            memory_api="v2" if device.memory_version is not None else "v1")
        pci = self.session.query(device.parent or device, "nvmlDeviceGetPciInfo")
        bus_id = decode(getattr(pci, "busId", None)) if pci is not None else None
        facts = facts._replace(pci_bus_id=bus_id or None)
        if device.parent is not None:
            for metric in ("temperature", "power", "pcie", "nvlink"):
                device.unavailable[metric] = MIG_PHYSICAL
            device.facts = facts
            return device
        generation = self.session.query(device, "nvmlDeviceGetMaxPcieLinkGeneration", metric="pcie")
        width = self.session.query(device, "nvmlDeviceGetMaxPcieLinkWidth", metric="pcie")
        pcie_max = pcie_max_bytes_per_s(generation, width)
        power_limit = self.session.query(device, "nvmlDeviceGetEnforcedPowerLimit", metric="power")
        mode = self.session.query(device, "nvmlDeviceGetVirtualizationMode")
        gpm = self.session.query(device, "nvmlGpmQueryDeviceSupport", metric="gpm")
        facts = facts._replace(
            pcie_max_generation=generation, pcie_max_width=width, pcie_max_bytes_per_s=pcie_max,
            power_limit_w=None if power_limit is None else power_limit / 1000,
            virtualization=_VIRTUALIZATION.get(mode, "none") if mode is not None else "none",
            gpm_supported=None if gpm is None else bool(gpm.isSupportedDevice),
        )
        device.facts = facts
        links, nvlink_max = self.links.probe_nvlink(device)
        counters = device.nvlink_fields
        device.facts = facts._replace(
            nvlink_link_ids=links, nvlink_max_bytes_per_s=nvlink_max,
            nvlink_payload_counters=bool(counters and counters.payload_only))
        self.links.probe_pcie(device)
        if facts.mig_enabled:
            device.unavailable["utilization"] = MIG_PARENT_UTILIZATION
            device.skip.add(skip_key("nvmlDeviceGetUtilizationRates", ()))
        return device

    def _probe_memory(self, device: Device) -> Any:
        """Memory v2 where the binding and driver have it (used then matches nvidia-smi)."""
        version = self.session.constant("nvmlMemory_v2")
        if version is not None:
            memory, error = self.session.invoke("nvmlDeviceGetMemoryInfo", device.handle,
                                         version=version)
            if error is None:
                device.memory_version = version
                return memory
        return self.session.query(device, "nvmlDeviceGetMemoryInfo", metric="memory")

    @property
    def facts(self) -> list[GpuFacts]:
        return [device.facts for device in self.session.devices()]

    def unavailable(self) -> dict[int, dict[str, str]]:
        """Row -> {metric: why it is not available}, as learned so far."""
        return {device.facts.index: dict(device.unavailable) for device in self.session.devices()}

    def read(self) -> tuple[GpuReading, ...]:
        """Read every shown device once (never blocks on the PCIe fallback)."""
        with self.session.lock:
            if self.state is not NvmlState.OK:
                return ()
            devices = self.session.devices()
        return tuple(self._read_device(device) for device in devices)

    def read_slow(self) -> None:
        """Refresh the 20 ms PCIe snapshots that are due; call from a thread of its own."""
        with self.session.lock:
            devices = self.session.devices() if self.state is NvmlState.OK else []
        self.links.read_snapshots(devices)

    def _read_device(self, device: Device) -> GpuReading:
        index = device.facts.index
        if device.lost:
            self._try_recover(device)
            if device.lost:
                return GpuReading.unavailable(index, lost=True)
        now = self._clock()
        utilization = self.session.query(device, "nvmlDeviceGetUtilizationRates",
                                         metric="utilization")
        if device.memory_version is not None:
            memory = self.session.query(device, "nvmlDeviceGetMemoryInfo", metric="memory",
                                 version=device.memory_version)
        else:
            memory = self.session.query(device, "nvmlDeviceGetMemoryInfo", metric="memory")
        temperature = power = None
        pcie: PcieReading = (None, None, False, None, None)
        nvlink: NvlinkReading = (None, None, None)
        if device.parent is None:
            sensor = self.session.constant("NVML_TEMPERATURE_GPU")
            temperature = self.session.query(device, "nvmlDeviceGetTemperature", sensor,
                                      metric="temperature") if sensor is not None else None
            power = self.session.query(device, "nvmlDeviceGetPowerUsage", metric="power")
            pcie, nvlink = self.links.read(device, now)
        if device.lost:
            return GpuReading.unavailable(index, lost=True)
        busy = busy_memory = used = total = reserved = None
        if utilization is not None:
            busy, busy_memory = numbers(utilization, "gpu", "memory")
        if memory is not None:
            used, total = numbers(memory, "used", "total")
            reserved = getattr(memory, "reserved", None) if device.memory_version else None
        # Positional, in GpuReading's field order: a NamedTuple's keyword arguments cost 1.3 us
        # more per device and tick.
        return GpuReading(
            index,
            False,  # lost
            None if busy is None else float(busy),  # utilization_pct
            None if busy_memory is None else float(busy_memory),  # memory_utilization_pct
            None if used is None else float(used),  # memory_used_bytes
            None if total is None else float(total),  # memory_total_bytes
            None if reserved is None else float(reserved),  # memory_reserved_bytes
            pcie[0],  # pcie_tx_bytes_per_s
            pcie[1],  # pcie_rx_bytes_per_s
            pcie[2],  # pcie_is_snapshot
            nvlink[0],  # nvlink_tx_bytes_per_s
            nvlink[1],  # nvlink_rx_bytes_per_s
            None if temperature is None else float(temperature),  # temperature_c
            None if power is None else power / 1000,  # power_w
            pcie[3],  # pcie_tx_bytes_total
            pcie[4],  # pcie_rx_bytes_total
            nvlink[2],  # nvlink_bytes_total
        )

    def _try_recover(self, device: Device) -> None:
        """A lost GPU may come back after a reset: reopen it by index now and then."""
        if self._clock() - device.last_recovery_attempt < self.retry_interval_s:
            return
        device.last_recovery_attempt = self._clock()
        parent = device.parent
        if parent is not None:
            if not parent.lost and device.mig_position is not None:
                handle, error = self.session.invoke("nvmlDeviceGetMigDeviceHandleByIndex",
                                             parent.handle, device.mig_position)
                uuid = self.session.call("nvmlDeviceGetUUID", handle) if error is None else None
                if uuid == device.facts.uuid:
                    device.handle, device.lost = handle, False
            return
        handle, error = self.session.invoke("nvmlDeviceGetHandleByIndex", device.facts.nvml_index)
        if error is None and self.session.call("nvmlDeviceGetUUID", handle) == device.facts.uuid:
            log.warning("%s (%s) is back", device.facts.label, device.facts.uuid)
            device.handle, device.lost = handle, False


_READERS: weakref.WeakSet[NvmlReader] = weakref.WeakSet()


def _reset_readers_after_fork() -> None:
    for reader in list(_READERS):
        reader.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_readers_after_fork)
