"""The NVML reader: the only code that calls NVML.

Initialization is lazy, idempotent and repeated after ``fork``. ``NvmlState`` records why
there is no GPU. Every device call goes through one choke point (``_query``) that turns an
``NVMLError`` into ``None`` ("not available") for that one metric; ``NVMLError_GpuIsLost``
marks that one GPU as lost while the others carry on. Static facts are read once.

Byte rates (PCIe, NVLink) come from cumulative counters divided by the difference of the
counters' own NVML timestamps, so they are right whatever the sampling interval.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from .rates import CounterRates

log = logging.getLogger(__name__)

# Bytes per second per lane, per direction, after line encoding.
_PCIE_LANE_BYTES_PER_S = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969e6, 5: 3938e6, 6: 7877e6}
_UINT_MAX = 0xFFFFFFFF
# How often to try NVML again after it failed to start (the driver may load later).
REINIT_INTERVAL_S = 10.0


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


class GpuFacts(NamedTuple):
    """Static facts about one visible GPU, read once. ``None`` means not available."""

    index: int  # position among the GPUs visible to this process
    nvml_index: int
    name: str
    uuid: str
    memory_total_bytes: int | None
    pcie_max_generation: int | None
    pcie_max_width: int | None
    pcie_max_bytes_per_s: float | None  # one direction
    nvlink_links: int  # active links; 0 when the GPU has none or NVLink is unsupported
    nvlink_max_bytes_per_s: float | None  # one direction, all links together
    power_limit_w: float | None


class GpuReading(NamedTuple):
    """One tick's readings for one GPU. ``None`` means not available."""

    index: int
    lost: bool
    utilization_pct: float | None
    memory_utilization_pct: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    pcie_tx_bytes_per_s: float | None
    pcie_rx_bytes_per_s: float | None
    nvlink_tx_bytes_per_s: float | None
    nvlink_rx_bytes_per_s: float | None
    temperature_c: float | None
    power_w: float | None

    @classmethod
    def unavailable(cls, index: int, lost: bool) -> GpuReading:
        return cls(index, lost, *([None] * (len(cls._fields) - 2)))


@dataclass
class _Device:
    facts: GpuFacts
    handle: Any
    lost: bool = False
    pcie_from_counters: bool = True
    last_recovery_attempt: float = 0.0


def _load_pynvml() -> Any:
    import pynvml

    return pynvml


def _visible_nvml_indices(lib: Any, count: int, cuda_visible_devices: str | None) -> list[int]:
    """Map CUDA_VISIBLE_DEVICES (indices or UUID prefixes) to NVML indices.

    As CUDA does, the list stops at the first entry that names no device. NVML enumerates
    in PCI bus order, which matches CUDA when CUDA_DEVICE_ORDER=PCI_BUS_ID.
    """
    if cuda_visible_devices is None:
        return list(range(count))
    uuids: list[str] | None = None
    chosen: list[int] = []
    for token in (part.strip() for part in cuda_visible_devices.split(",")):
        if token.isdigit() and int(token) < count:
            chosen.append(int(token))
            continue
        if token.startswith("GPU-"):
            if uuids is None:
                uuids = [_decode(lib.nvmlDeviceGetUUID(lib.nvmlDeviceGetHandleByIndex(i)))
                         for i in range(count)]
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(token)]
            if len(matches) == 1:
                chosen.append(matches[0])
                continue
        break
    return list(dict.fromkeys(chosen))


def _decode(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _field_number(field: Any) -> float:
    """The numeric value of an nvmlFieldValue_t, whatever its value type."""
    by_type = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return float(getattr(field.value, by_type.get(field.valueType, "ullVal")))


class NvmlReader:
    """Reads every visible GPU. Safe to call from one sampler thread."""

    def __init__(
        self,
        load_library: Callable[[], Any] = _load_pynvml,
        cuda_visible_devices: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load_library = load_library
        self._cuda_visible_devices = cuda_visible_devices
        self._clock = clock
        self._lock = threading.RLock()
        self._lib: Any = None
        self._devices: list[_Device] = []
        self._rates = CounterRates()
        self._logged: set[tuple[str, int | None]] = set()
        self._last_init_attempt = -float("inf")
        # How often to retry a failed init and to reopen a lost GPU (tests shorten it).
        self.retry_interval_s = REINIT_INTERVAL_S
        self.state = NvmlState.UNINITIALIZED
        self.message = STATE_MESSAGES[self.state]
        _READERS.add(self)

    # ----- lifecycle ------------------------------------------------------------------
    def ensure_initialized(self) -> NvmlState:
        """Start NVML once; later calls return the cached state."""
        with self._lock:
            if self.state is NvmlState.UNINITIALIZED:
                self._initialize()
            return self.state

    def retry_if_due(self) -> None:
        """Try NVML again now and then while it is down (the driver may be loaded later)."""
        with self._lock:
            retryable = self.state in (
                NvmlState.DRIVER_NOT_LOADED, NvmlState.ERROR, NvmlState.NO_PERMISSION
            )
            if retryable and self._clock() - self._last_init_attempt >= self.retry_interval_s:
                self._initialize()

    def reset_after_fork(self) -> None:
        """A forked child must not reuse the parent's NVML handles."""
        self._lock = threading.RLock()
        self._lib = None
        self._devices = []
        self._rates = CounterRates()
        self._set_state(NvmlState.UNINITIALIZED)

    def _set_state(self, state: NvmlState, detail: str = "") -> None:
        self.state = state
        self.message = STATE_MESSAGES[state] + (f" ({detail})" if detail else "")

    def _initialize(self) -> None:
        self._last_init_attempt = self._clock()
        self._devices = []
        try:
            lib = self._load_library()
        except ImportError as error:
            self._set_state(NvmlState.LIBRARY_NOT_FOUND, f"cannot import pynvml: {error}")
            return
        try:
            lib.nvmlInit()
        except lib.NVMLError as error:
            self._set_state(self._state_for_init_error(lib, error), str(error))
            return
        except OSError as error:  # a broken library can fail before NVML itself answers
            self._set_state(NvmlState.LIBRARY_NOT_FOUND, str(error))
            return
        self._lib = lib
        try:
            count = lib.nvmlDeviceGetCount()
            indices = _visible_nvml_indices(lib, count, self._cuda_visible_devices)
        except lib.NVMLError as error:
            self._set_state(NvmlState.ERROR, str(error))
            return
        for position, nvml_index in enumerate(indices):
            device = self._open_device(position, nvml_index)
            if device is not None:
                self._devices.append(device)
        if self._devices:
            self._set_state(NvmlState.OK)
        elif self._cuda_visible_devices is not None and count:
            self._set_state(NvmlState.NO_DEVICES,
                            f"CUDA_VISIBLE_DEVICES={self._cuda_visible_devices!r} hides them")
        else:
            self._set_state(NvmlState.NO_DEVICES)

    @staticmethod
    def _state_for_init_error(lib: Any, error: Exception) -> NvmlState:
        value = getattr(error, "value", None)
        return {
            lib.NVML_ERROR_LIBRARY_NOT_FOUND: NvmlState.LIBRARY_NOT_FOUND,
            lib.NVML_ERROR_DRIVER_NOT_LOADED: NvmlState.DRIVER_NOT_LOADED,
            lib.NVML_ERROR_NO_PERMISSION: NvmlState.NO_PERMISSION,
        }.get(value, NvmlState.ERROR)

    # ----- the choke point ------------------------------------------------------------
    def _query(self, device: _Device, function: str, *args: Any) -> Any:
        """Call an NVML device function; any NVMLError becomes None for this metric only."""
        if device.lost:
            return None
        lib = self._lib
        try:
            return _decode(getattr(lib, function)(device.handle, *args))
        except lib.NVMLError as error:
            if isinstance(error, lib.NVMLError_GpuIsLost):
                self._mark_lost(device)
            else:
                self._log_once(function, getattr(error, "value", None), error)
            return None
        except AttributeError as error:  # an older pynvml without this function
            self._log_once(function, None, error)
            return None

    def _log_once(self, function: str, code: int | None, error: Exception) -> None:
        if (function, code) not in self._logged:
            self._logged.add((function, code))
            log.info("NVML %s is not available: %s", function, error)

    def _mark_lost(self, device: _Device) -> None:
        if not device.lost:
            log.warning("GPU %d (%s) is lost", device.facts.index, device.facts.uuid)
        device.lost = True
        device.last_recovery_attempt = self._clock()
        self._rates.forget(device.facts.index)

    def _fields(self, device: _Device, field_ids: Sequence[Any]) -> list[Any] | None:
        """Field values, or None; each value's own nvmlReturn is checked by the caller."""
        values = self._query(device, "nvmlDeviceGetFieldValues", list(field_ids))
        return None if values is None else list(values)

    # ----- static facts ---------------------------------------------------------------
    def _open_device(self, position: int, nvml_index: int) -> _Device | None:
        lib = self._lib
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(nvml_index)
        except lib.NVMLError as error:
            log.warning("GPU %d cannot be opened: %s", nvml_index, error)
            return None
        placeholder = GpuFacts(position, nvml_index, f"GPU {nvml_index}", "", None, None, None,
                               None, 0, None, None)
        device = _Device(placeholder, handle)
        device.facts = self._read_facts(device, position, nvml_index)
        return device

    def _read_facts(self, device: _Device, position: int, nvml_index: int) -> GpuFacts:
        lib = self._lib
        memory = self._query(device, "nvmlDeviceGetMemoryInfo")
        generation = self._query(device, "nvmlDeviceGetMaxPcieLinkGeneration")
        width = self._query(device, "nvmlDeviceGetMaxPcieLinkWidth")
        pcie_max = None
        if generation in _PCIE_LANE_BYTES_PER_S and width:
            pcie_max = _PCIE_LANE_BYTES_PER_S[generation] * width
        links, nvlink_max = self._read_nvlink_facts(device)
        power_limit = self._query(device, "nvmlDeviceGetEnforcedPowerLimit")
        counters = self._fields(device, [lib.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
                                         lib.NVML_FI_DEV_PCIE_COUNT_RX_BYTES])
        device.pcie_from_counters = bool(counters) and all(
            value.nvmlReturn == lib.NVML_SUCCESS for value in counters
        )
        return GpuFacts(
            index=position,
            nvml_index=nvml_index,
            name=self._query(device, "nvmlDeviceGetName") or f"GPU {nvml_index}",
            uuid=self._query(device, "nvmlDeviceGetUUID") or "",
            memory_total_bytes=None if memory is None else int(memory.total),
            pcie_max_generation=generation,
            pcie_max_width=width,
            pcie_max_bytes_per_s=pcie_max,
            nvlink_links=links,
            nvlink_max_bytes_per_s=nvlink_max,
            power_limit_w=None if power_limit is None else power_limit / 1000,
        )

    def _read_nvlink_facts(self, device: _Device) -> tuple[int, float | None]:
        """Active link count and the summed per-direction speed of those links."""
        lib = self._lib
        active = []
        for link in range(lib.NVML_NVLINK_MAX_LINKS):
            state = self._query(device, "nvmlDeviceGetNvLinkState", link)
            if state is None:
                break
            if state == lib.NVML_NVLINK_STATE_ACTIVE:
                active.append(link)
        if not active:
            return 0, None
        # NVML_FI_DEV_NVLINK_GET_SPEED works on Hopper, where the old SPEED_MBPS_L* fields don't.
        speeds = self._fields(device, [(lib.NVML_FI_DEV_NVLINK_GET_SPEED, link) for link in active])
        good = [_field_number(v) for v in speeds or [] if v.nvmlReturn == lib.NVML_SUCCESS]
        total = sum(good) * 1e6 if good else None  # NVML reports MB/s per link
        return len(active), total

    @property
    def facts(self) -> list[GpuFacts]:
        return [device.facts for device in self._devices]

    @property
    def library(self) -> Any:
        """The loaded NVML module (or the simulator); None before a successful init."""
        return self._lib

    # ----- per-tick readings ----------------------------------------------------------
    def read(self) -> tuple[GpuReading, ...]:
        """Read every visible GPU once."""
        with self._lock:
            if self.state is not NvmlState.OK:
                return ()
            return tuple(self._read_device(device) for device in self._devices)

    def _read_device(self, device: _Device) -> GpuReading:
        index = device.facts.index
        if device.lost:
            self._try_recover(device)
            if device.lost:
                return GpuReading.unavailable(index, lost=True)
        lib = self._lib
        utilization = self._query(device, "nvmlDeviceGetUtilizationRates")
        memory = self._query(device, "nvmlDeviceGetMemoryInfo")
        temperature = self._query(device, "nvmlDeviceGetTemperature", lib.NVML_TEMPERATURE_GPU)
        power = self._query(device, "nvmlDeviceGetPowerUsage")
        pcie_tx, pcie_rx = self._read_pcie(device)
        nvlink_tx, nvlink_rx = self._read_nvlink(device)
        if device.lost:
            return GpuReading.unavailable(index, lost=True)
        return GpuReading(
            index=index,
            lost=False,
            utilization_pct=None if utilization is None else float(utilization.gpu),
            memory_utilization_pct=None if utilization is None else float(utilization.memory),
            memory_used_bytes=None if memory is None else float(memory.used),
            memory_total_bytes=None if memory is None else float(memory.total),
            pcie_tx_bytes_per_s=pcie_tx,
            pcie_rx_bytes_per_s=pcie_rx,
            nvlink_tx_bytes_per_s=nvlink_tx,
            nvlink_rx_bytes_per_s=nvlink_rx,
            temperature_c=None if temperature is None else float(temperature),
            power_w=None if power is None else power / 1000,
        )

    def _try_recover(self, device: _Device) -> None:
        """A lost GPU may come back after a reset: reopen it by index now and then."""
        if self._clock() - device.last_recovery_attempt < self.retry_interval_s:
            return
        device.last_recovery_attempt = self._clock()
        lib = self._lib
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(device.facts.nvml_index)
            uuid = _decode(lib.nvmlDeviceGetUUID(handle))
        except lib.NVMLError:
            return
        if uuid == device.facts.uuid:
            log.warning("GPU %d (%s) is back", device.facts.index, uuid)
            device.handle, device.lost = handle, False

    def _counter_rate(self, device: _Device, name: str, field: Any, scale: float) -> float | None:
        if field.nvmlReturn != self._lib.NVML_SUCCESS:
            return None
        key = (device.facts.index, name, field.scopeId)
        return self._rates.update(key, _field_number(field) * scale, field.timestamp / 1e6)

    def _read_pcie(self, device: _Device) -> tuple[float | None, float | None]:
        lib = self._lib
        if device.pcie_from_counters:
            fields = self._fields(device, [lib.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
                                           lib.NVML_FI_DEV_PCIE_COUNT_RX_BYTES])
            if fields is None:
                return None, None
            return (self._counter_rate(device, "pcie_tx", fields[0], 1.0),
                    self._counter_rate(device, "pcie_rx", fields[1], 1.0))
        # Fallback: blocks ~20 ms per call, which is why it only ever runs on the sampler thread.
        tx = self._query(device, "nvmlDeviceGetPcieThroughput", lib.NVML_PCIE_UTIL_TX_BYTES)
        rx = self._query(device, "nvmlDeviceGetPcieThroughput", lib.NVML_PCIE_UTIL_RX_BYTES)
        return (None if tx is None else tx * 1024.0, None if rx is None else rx * 1024.0)

    def _read_nvlink(self, device: _Device) -> tuple[float | None, float | None]:
        links = device.facts.nvlink_links
        if not links:
            return None, None
        lib = self._lib
        directions = (lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                      lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
        fields = self._fields(device, [(field, link) for field in directions
                                       for link in range(links)])
        if fields is None:
            return None, None
        totals: list[float | None] = []
        for position, name in enumerate(("nvlink_tx", "nvlink_rx")):
            rates = [self._counter_rate(device, name, field, 1024.0)  # counters are in KiB
                     for field in fields[position * links:(position + 1) * links]]
            known = [rate for rate in rates if rate is not None]
            totals.append(sum(known) if known else None)
        return totals[0], totals[1]


_READERS: weakref.WeakSet[NvmlReader] = weakref.WeakSet()


def _reset_readers_after_fork() -> None:
    for reader in list(_READERS):
        reader.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_readers_after_fork)
