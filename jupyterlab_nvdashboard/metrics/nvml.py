"""The NVML reader: the only code that calls NVML.

- **Lifecycle.** Initialization is lazy, idempotent and repeated after ``fork``.
  ``NvmlState`` records why there is no GPU. A state without GPUs is retried slowly (a
  driver loaded later, a GPU made visible later), and a running reader rescans now and then
  for a hot-plugged GPU.
- **One choke point.** Every NVML function *and constant* is looked up through ``_invoke`` /
  ``_const``: a binding that lacks a name (an older nvidia-ml-py) or a driver that answers
  an error makes that one metric "not available", with a reason, and the server carries on.
  ``NVMLError_GpuIsLost`` marks that one GPU (and its MIG devices) lost; the others go on.
- **Devices.** Physical GPUs in nvidia-smi order, each MIG device right after its GPU.
  Which ones show, and their CUDA positions, follow ``CUDA_VISIBLE_DEVICES`` and
  ``CUDA_DEVICE_ORDER`` (``cuda_visibility.py``). Static facts are read once.
- **Rates.** PCIe and NVLink byte rates come from cumulative counters (``rates.py``: the
  counters' own timestamps checked against the monotonic clock, wrap by the field's width).
  Where a GPU has no PCIe counter fields (drivers before R555), ``read_slow`` takes a 20 ms
  ``nvmlDeviceGetPcieThroughput`` snapshot at most once a second per GPU, on the sampler's
  slow thread, and ``read`` reports it marked as a snapshot; the counters are tried again
  every ``PCIE_REPROBE_S``. Where the counters answer, their raw totals ride along
  (``GpuReading.pcie_*_bytes_total``, ``nvlink_bytes_total``): NVML's own, the same for
  every process that reads the GPU.
- **Only these devices.** ``only`` (or ``read_only`` later) limits the rows to some device
  UUIDs, so several processes on one host can share its GPUs with one reader each (the
  Dask worker plugin); ``cuda_positions`` still names every device CUDA shows this process.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from . import nvml_h
from .binding import binding_version, load_binding
from .cuda_visibility import MigEntry, PhysicalGpu, cuda_indices
from .rates import CounterRates

log = logging.getLogger(__name__)

# Bytes per second per lane, per direction, after line encoding.
_PCIE_LANE_BYTES_PER_S = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969e6, 5: 3938e6, 6: 7877e6}
# How often to try NVML again after it failed to start (the driver may load later).
REINIT_INTERVAL_S = 10.0
# How often to look again for GPUs when there were none, or for a hot-plugged GPU.
RESCAN_INTERVAL_S = 30.0
PCIE_SNAPSHOT_EVERY_S = 1.0  # the fallback blocks 20 ms per direction: at most once a second
PCIE_SNAPSHOT_STALE_S = 3.0
PCIE_REPROBE_S = 60.0
# A rate above this many times the link's maximum is a counter reset, not traffic.
_PLAUSIBLE_OVER_MAX = 1.5
_DEFAULT_MAX_LINKS = 18
# Field value types (nvml.h nvmlValueType_t) and their widths in bits.
_VALUE_FIELDS = {0: ("dVal", 64), 1: ("uiVal", 32), 2: ("ulVal", 64), 3: ("ullVal", 64),
                 4: ("sllVal", 64), 5: ("siVal", 32), 6: ("usVal", 16)}
_VIRTUALIZATION = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
# A binding or driver that lacks a function: the reason is about the software, not the GPU.
MISSING = object()


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

# Reasons a metric is not available, in words, by NVML return code.
_REASONS = {
    "NVML_ERROR_NOT_SUPPORTED": "not supported by this GPU or driver",
    "NVML_ERROR_NO_PERMISSION": "needs more permission than this process has",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "the driver is too old for this reading",
}
MIG_PARENT_UTILIZATION = ("not reported for the whole GPU while MIG is enabled; NVML gives "
                          "each MIG device's activity only through GPM (Hopper and later)")
MIG_PHYSICAL = "a reading of the whole physical GPU: see the parent GPU's row"


class GpuFacts(NamedTuple):
    """Static facts about one device row, read once. ``None`` means not available."""

    index: int  # this device's row in the server's list (GPUs and MIG devices)
    label: str  # nvidia-smi's identity: "GPU 2", or "GPU 0 · MIG 1" (GPU instance 1 of GPU 0)
    kind: str  # "gpu" or "mig"
    parent: int | None  # row of the parent GPU, for a MIG device
    nvml_index: int  # nvidia-smi's GPU index (the parent's, for a MIG device)
    cuda_index: int | None  # position CUDA gives it in this process; None: CUDA doesn't see it
    name: str
    uuid: str
    memory_total_bytes: int | None
    memory_api: str  # "v2" (used excludes reserved, as nvidia-smi) or "v1" (used includes it)
    pcie_max_generation: int | None
    pcie_max_width: int | None
    pcie_max_bytes_per_s: float | None  # one direction
    nvlink_link_ids: tuple[int, ...]  # the active links' IDs (there can be gaps)
    nvlink_max_bytes_per_s: float | None  # one direction, all active links together
    power_limit_w: float | None
    mig_enabled: bool
    mig: dict[str, int] | None  # a MIG device's instance IDs and slices
    virtualization: str  # "none", "passthrough", "vgpu" (a guest), "host_vgpu", ...
    gpm_supported: bool | None
    pci_bus_id: str | None = None  # "00000000:18:00.0" (nvmlPciInfo_t.busId); a MIG device's GPU's


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


@dataclass
class _NvlinkFields:
    tx: int
    rx: int
    scale: float  # bytes per counter unit


@dataclass
class Device:
    facts: GpuFacts
    handle: Any
    parent: Device | None = None
    mig_position: int | None = None  # its index among the parent's MIG handles
    lost: bool = False
    last_recovery_attempt: float = 0.0
    memory_version: Any = None  # nvmlMemory_v2 when the binding and driver have it
    pcie_counters: tuple[int, int] | None = None  # field IDs, when the counters answer
    pcie_snapshot_supported: bool = False
    pcie_reprobe_at: float = 0.0
    pcie_snapshot: tuple[float, float | None, float | None] | None = None  # (monotonic, tx, rx)
    nvlink_fields: _NvlinkFields | None = None
    # What will not start answering: a function the binding lacks (its name), or one call
    # that answered NOT_SUPPORTED ((function, arguments)): one unsupported clock domain or
    # threshold must not hide the others.
    skip: set[Any] = field(default_factory=set)
    unavailable: dict[str, str] = field(default_factory=dict)  # metric -> reason

    def skips(self, function: str, *args: Any) -> bool:
        """True when ``function`` (with these arguments) is known not to answer here."""
        return function in self.skip or _skip_key(function, args) in self.skip


def _skip_key(function: str, args: tuple[Any, ...]) -> Any:
    try:
        hash(args)
    except TypeError:  # a list of field IDs: its own return codes say what is supported
        return (function, None)
    return (function, args)


def _decode(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _cuda_version(value: Any) -> str:
    """nvmlSystemGetCudaDriverVersion's 12080 as CUDA writes it: '12.8' ('' if unknown)."""
    return f"{value // 1000}.{value % 1000 // 10}" if isinstance(value, int) and value > 0 else ""


def _field_number(field_value: Any) -> tuple[float, int]:
    """The numeric value of an nvmlFieldValue_t and its width in bits."""
    name, bits = _VALUE_FIELDS.get(field_value.valueType, ("ullVal", 64))
    return float(getattr(field_value.value, name)), bits


class DeviceStates(dict):  # type: ignore[type-arg]
    """Per-device state keyed by UUID, or by a tuple whose first element is a UUID."""

    __hash__ = object.__hash__  # held in the reader's weak set by identity

    def retain(self, uuids: set[str]) -> None:
        for key in list(self):
            if (key[0] if isinstance(key, tuple) else key) not in uuids:
                del self[key]


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
        self._lock = threading.RLock()
        self._lib: Any = None
        self._devices: list[Device] = []
        self._physical_count = 0
        self._rates = CounterRates()
        # Per-device state of the reading families, keyed by UUID (see per_device).
        self._per_device: weakref.WeakSet[DeviceStates] = weakref.WeakSet()
        # Changes whenever the shown devices are enumerated again (start, rescan, re-init).
        self.epoch = 0
        self._logged: set[tuple[str, Any]] = set()
        self._last_init_attempt = -float("inf")
        self._last_rescan = 0.0
        self._success: Any = 0
        # How often to retry a failed init and to reopen a lost GPU (tests shorten it).
        self.retry_interval_s = REINIT_INTERVAL_S
        self.rescan_interval_s = RESCAN_INTERVAL_S
        self.state = NvmlState.UNINITIALIZED
        self.message = STATE_MESSAGES[self.state]
        self.versions: dict[str, str] = {}
        _READERS.add(self)

    # ----- lifecycle ------------------------------------------------------------------
    def ensure_initialized(self) -> NvmlState:
        """Start NVML once; later calls return the cached state."""
        with self._lock:
            if self.state is NvmlState.UNINITIALIZED:
                self._initialize()
            return self.state

    def retry_if_due(self) -> None:
        """Now and then: start NVML again while it is down, or look for new GPUs."""
        with self._lock:
            now = self._clock()
            if self.state in (NvmlState.OK, NvmlState.NO_DEVICES):
                # NVML is up: only the GPUs can change (hot plug, a driver seeing one more).
                if now - self._last_rescan >= self.rescan_interval_s:
                    self._last_rescan = now
                    count = self.call("nvmlDeviceGetCount")
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
        self._lock = threading.RLock()
        self._lib = None
        self._devices = []
        self._rates = CounterRates()
        self._set_state(NvmlState.UNINITIALIZED)

    def read_only(self, uuids: Collection[str] | None) -> None:
        """Read only the devices with these UUIDs from now on (None: every visible one);
        a change enumerates the devices again (a new ``epoch``)."""
        chosen = None if uuids is None else frozenset(uuids)
        with self._lock:
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
        self._devices = []
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
        if self._lib is not None and self._lib is not lib:
            self._logged.clear()
        self._lib = lib
        # Checked for every field value of every tick: looked up once per library
        # (nvml.h has NVML_SUCCESS = 0 in every release).
        self._success = self.constant("NVML_SUCCESS") or 0
        self.versions = {
            "driver": str(self.call("nvmlSystemGetDriverVersion") or ""),
            "nvml": str(self.call("nvmlSystemGetNVMLVersion") or ""),
            "binding": binding_version(lib),
            "cuda_driver": _cuda_version(self.call("nvmlSystemGetCudaDriverVersion")),
        }
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

    # ----- the choke point ------------------------------------------------------------
    def constant(self, name: str) -> Any:
        """An NVML constant: the binding's, else nvml.h's value for an ABI-stable one, else
        None (logged once)."""
        value = getattr(self._lib, name, None)
        if value is None:
            value = nvml_h.VALUES.get(name)
            if value is None:
                self.log_once(name, "missing", f"nvidia-ml-py {self.versions.get('binding', '')}"
                              f" has no {name}")
        return value

    def invoke(self, function: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """(value, None) or (None, the NVMLError / MISSING). Never raises for NVML's sake."""
        lib = self._lib
        method = getattr(lib, function, None)
        if method is None:
            self.log_once(function, "missing", "not in this nvidia-ml-py")
            return None, MISSING
        try:
            return _decode(method(*args, **kwargs)), None
        except getattr(lib, "NVMLError", Exception) as error:
            return None, error
        except TypeError as error:  # an older binding without this argument
            self.log_once(function, "signature", error)
            return None, MISSING
        except getattr(lib, "NVMLLibraryMismatchError", ()) as error:
            # An unversioned wrapper that refuses a driver older than the binding.
            self.log_once(function, "mismatch", error)
            return None, MISSING

    def call(self, function: str, *args: Any) -> Any:
        """A call that needs no device; None when it fails."""
        value, _ = self.invoke(function, *args)
        return value

    def query(self, device: Device, function: str, *args: Any, metric: str | None = None,
               normal_errors: tuple[str, ...] = (), **kwargs: Any) -> Any:
        """A device call; any error is None for this metric only, with its reason kept.

        ``normal_errors`` are NVML error names that only mean "nothing to report now" for
        this call (NOT_FOUND from nvmlDeviceGetProcessUtilization: no sample since the
        given time): None, with nothing logged or marked unavailable."""
        if device.lost or device.skips(function, *args):
            return None
        value, error = self.invoke(function, device.handle, *args, **kwargs)
        if error is None:
            if metric is not None:
                device.unavailable.pop(metric, None)
            return value
        if isinstance(error, getattr(self._lib, "NVMLError_GpuIsLost", ())):
            self.mark_lost(device)
            return None
        reason = self.reason(error, function)
        code = getattr(error, "value", None)
        if code is not None and any(code == self.constant(name) for name in normal_errors):
            return None
        if error is MISSING or code == self.constant("NVML_ERROR_NOT_SUPPORTED") or \
                code == self.constant("NVML_ERROR_FUNCTION_NOT_FOUND"):
            # It will not start answering: stop asking every tick.
            device.skip.add(function if error is MISSING else _skip_key(function, args))
        else:
            self.log_once(function, code, error)
        if metric is not None and reason:
            device.unavailable.setdefault(metric, reason)
        return None

    def reason(self, error: Any, function: str) -> str:
        if error is MISSING:
            binding = self.versions.get("binding") or "this version"
            return f"nvidia-ml-py {binding} cannot call {function}; a newer nvidia-ml-py can"
        code = getattr(error, "value", None)
        for name, words in _REASONS.items():
            if code is not None and code == self.constant(name):
                return words
        return ""

    def log_once(self, function: str, code: Any, error: object) -> None:
        if (function, code) not in self._logged:
            self._logged.add((function, code))
            log.info("NVML %s is not available: %s", function, error)

    def mark_lost(self, device: Device) -> None:
        physical = device.parent or device
        for each in [physical, *(d for d in self._devices if d.parent is physical)]:
            if not each.lost:
                log.warning("%s (%s) is lost", each.facts.label, each.facts.uuid)
            each.lost = True
            each.last_recovery_attempt = self._clock()
            each.pcie_snapshot = None
            self._rates.forget(each.facts.uuid)

    def fields(self, device: Device, field_ids: Sequence[Any]) -> list[Any] | None:
        """Field values, or None; each value's own nvmlReturn is checked by the caller."""
        values = self.query(device, "nvmlDeviceGetFieldValues", list(field_ids))
        return None if values is None else list(values)

    def succeeded(self, field_value: Any) -> bool:
        return field_value.nvmlReturn == self._success

    # ----- devices --------------------------------------------------------------------
    def _enumerate(self) -> None:
        """Open every physical GPU and MIG device this process should show."""
        self._last_rescan = self._clock()
        count = self.call("nvmlDeviceGetCount")
        if not isinstance(count, int):
            self._set_state(NvmlState.ERROR, "nvmlDeviceGetCount failed")
            return
        self._physical_count = count
        opened: list[tuple[Device, list[Device]]] = []
        for nvml_index in range(count):
            handle, error = self.invoke("nvmlDeviceGetHandleByIndex", nvml_index)
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
        self._devices = rows
        self._device_list_changed(rows)
        if rows:
            self._set_state(NvmlState.OK)
        elif only is not None and visible:
            self._set_state(NvmlState.NO_DEVICES, "another process reads this one's GPUs")
        elif self._cuda_visible_devices is not None and count:
            self._set_state(NvmlState.NO_DEVICES,
                            f"CUDA_VISIBLE_DEVICES={self._cuda_visible_devices!r} hides them")
        else:
            self._set_state(NvmlState.NO_DEVICES)

    def _device_list_changed(self, rows: list[Device]) -> None:
        """The one reset: state of a GPU no longer shown goes, whoever keeps it."""
        shown = {device.facts.uuid for device in rows}
        self._rates.retain(shown)
        for states in list(self._per_device):
            states.retain(shown)
        self.epoch += 1

    def per_device(self) -> DeviceStates:
        """A map for a family's per-device state, keyed by UUID (or a tuple starting with
        one); entries of a GPU that is no longer shown are dropped at re-enumeration."""
        states = DeviceStates()
        self._per_device.add(states)
        return states

    def _new_device(self, handle: Any, nvml_index: int, kind: str,
                    parent: Device | None = None) -> Device:
        name = f"GPU {nvml_index}"
        facts = GpuFacts(0, name, kind, None, nvml_index, None, name, "", None, "v1", None, None,
                         None, (), None, None, False, None, "none", None)
        device = Device(facts, handle, parent=parent)
        uuid = self.query(device, "nvmlDeviceGetUUID") or ""
        device.facts = facts._replace(name=self.query(device, "nvmlDeviceGetName") or name,
                                      uuid=uuid)
        return device

    def _open_mig_devices(self, gpu: Device) -> list[Device]:
        mode = self.query(gpu, "nvmlDeviceGetMigMode")
        enabled = self.constant("NVML_DEVICE_MIG_ENABLE")
        if not mode or enabled is None or mode[0] != enabled:
            return []
        gpu.facts = gpu.facts._replace(mig_enabled=True)
        migs = []
        parent_mib = self._total_mib(gpu)
        for position in range(self.query(gpu, "nvmlDeviceGetMaxMigDeviceCount") or 0):
            handle, error = self.invoke("nvmlDeviceGetMigDeviceHandleByIndex", gpu.handle,
                                         position)
            if error is not None:  # NOT_FOUND: an empty slot
                continue
            mig = self._new_device(handle, gpu.facts.nvml_index, "mig", parent=gpu)
            mig.mig_position = position
            gi = self.query(mig, "nvmlDeviceGetGpuInstanceId")
            ci = self.query(mig, "nvmlDeviceGetComputeInstanceId")
            attributes = self.query(mig, "nvmlDeviceGetAttributes")
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
        return migs

    def _total_mib(self, gpu: Device) -> float:
        memory = self.query(gpu, "nvmlDeviceGetMemoryInfo")
        return 0.0 if memory is None else int(memory.total) / 2**20

    def _speed(self, gpu: Device) -> tuple[int, int, int]:
        """What CUDA's FASTEST_FIRST guess is made of; 0 where NVML won't say."""
        if self._cuda_device_order == "PCI_BUS_ID":
            return (0, 0, 0)
        major, minor = self.query(gpu, "nvmlDeviceGetCudaComputeCapability") or (0, 0)
        cores = self.query(gpu, "nvmlDeviceGetNumGpuCores") or 0
        sm_clock = self.constant("NVML_CLOCK_SM")
        clock = self.query(gpu, "nvmlDeviceGetMaxClockInfo", sm_clock) \
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
        pci = self.query(device.parent or device, "nvmlDeviceGetPciInfo")
        bus_id = _decode(getattr(pci, "busId", None)) if pci is not None else None
        facts = facts._replace(pci_bus_id=bus_id or None)
        if device.parent is not None:
            for metric in ("temperature", "power", "pcie", "nvlink"):
                device.unavailable[metric] = MIG_PHYSICAL
            device.facts = facts
            return device
        generation = self.query(device, "nvmlDeviceGetMaxPcieLinkGeneration", metric="pcie")
        width = self.query(device, "nvmlDeviceGetMaxPcieLinkWidth", metric="pcie")
        pcie_max = None
        if generation in _PCIE_LANE_BYTES_PER_S and width:
            pcie_max = _PCIE_LANE_BYTES_PER_S[generation] * width
        power_limit = self.query(device, "nvmlDeviceGetEnforcedPowerLimit", metric="power")
        mode = self.query(device, "nvmlDeviceGetVirtualizationMode")
        gpm = self.query(device, "nvmlGpmQueryDeviceSupport", metric="gpm")
        facts = facts._replace(
            pcie_max_generation=generation, pcie_max_width=width, pcie_max_bytes_per_s=pcie_max,
            power_limit_w=None if power_limit is None else power_limit / 1000,
            virtualization=_VIRTUALIZATION.get(mode, "none") if mode is not None else "none",
            gpm_supported=None if gpm is None else bool(gpm.isSupportedDevice),
        )
        device.facts = facts
        links, nvlink_max = self._probe_nvlink(device)
        device.facts = facts._replace(nvlink_link_ids=links, nvlink_max_bytes_per_s=nvlink_max)
        self._probe_pcie(device)
        if facts.mig_enabled:
            device.unavailable["utilization"] = MIG_PARENT_UTILIZATION
            device.skip.add(_skip_key("nvmlDeviceGetUtilizationRates", ()))
        return device

    def _probe_memory(self, device: Device) -> Any:
        """Memory v2 where the binding and driver have it (used then matches nvidia-smi)."""
        version = getattr(self._lib, "nvmlMemory_v2", None)
        if version is not None:
            memory, error = self.invoke("nvmlDeviceGetMemoryInfo", device.handle,
                                         version=version)
            if error is None:
                device.memory_version = version
                return memory
        return self.query(device, "nvmlDeviceGetMemoryInfo", metric="memory")

    def _probe_pcie(self, device: Device, now: float | None = None) -> None:
        """Use the PCIe byte counters if they answer; otherwise the 20 ms snapshot."""
        tx, rx = (self.constant("NVML_FI_DEV_PCIE_COUNT_TX_BYTES"),
                  self.constant("NVML_FI_DEV_PCIE_COUNT_RX_BYTES"))
        device.pcie_reprobe_at = (self._clock() if now is None else now) + PCIE_REPROBE_S
        if tx is not None and rx is not None:
            values = self.fields(device, [tx, rx])
            if values and all(self.succeeded(value) for value in values):
                device.pcie_counters = (tx, rx)
                device.unavailable.pop("pcie", None)
                return
        device.pcie_counters = None
        tx_kind = self.constant("NVML_PCIE_UTIL_TX_BYTES")
        device.pcie_snapshot_supported = not device.skips("nvmlDeviceGetPcieThroughput", tx_kind)
        if not device.pcie_snapshot_supported:
            device.unavailable.setdefault("pcie", _REASONS["NVML_ERROR_NOT_SUPPORTED"])

    def _probe_nvlink(self, device: Device) -> tuple[tuple[int, ...], float | None]:
        """Active link IDs (gaps kept), their summed speed, and which byte fields answer."""
        # nvmlDeviceGetNvLinkState answers an nvmlEnableState_t (nvml.h), not a link state.
        enabled = self.constant("NVML_FEATURE_ENABLED")
        not_supported = self.constant("NVML_ERROR_NOT_SUPPORTED")
        invalid = self.constant("NVML_ERROR_INVALID_ARGUMENT")
        count_field = self.constant("NVML_FI_DEV_NVLINK_LINK_COUNT")
        counted = self.fields(device, [count_field])
        links = int(_field_number(counted[0])[0]) if counted and \
            self.succeeded(counted[0]) else None
        active = []
        for link in range(links if links is not None else
                          self.constant("NVML_NVLINK_MAX_LINKS") or _DEFAULT_MAX_LINKS):
            state, error = self.invoke("nvmlDeviceGetNvLinkState", device.handle, link)
            code = getattr(error, "value", None)
            if error is None:
                if state == enabled:
                    active.append(link)
                continue
            if code == invalid:  # past this GPU's last link (nvml.h: link >= the link count)
                break
            if isinstance(error, getattr(self._lib, "NVMLError_GpuIsLost", ())):
                self.mark_lost(device)
                break
            if error is MISSING or code == not_supported:  # no NVLink on this GPU
                device.unavailable.setdefault("nvlink", _REASONS["NVML_ERROR_NOT_SUPPORTED"])
                break
            self.log_once("nvmlDeviceGetNvLinkState", code, error)
        if not active:
            device.unavailable.setdefault("nvlink", "this GPU has no active NVLink")
            return (), None
        device.unavailable.pop("nvlink", None)
        # NVML_FI_DEV_NVLINK_GET_SPEED works on Hopper, where the old SPEED_MBPS_L* fields don't.
        speed_field = self.constant("NVML_FI_DEV_NVLINK_GET_SPEED")
        speeds = self.fields(device, [(speed_field, link) for link in active]) \
            if speed_field is not None else None
        good = [_field_number(v)[0] for v in speeds or [] if self.succeeded(v)]
        total = sum(good) * 1e6 if good else None  # NVML reports MB/s per link
        # The throughput fields (KiB) where they answer, else the newer byte counts.
        for tx_name, rx_name, scale in (
            ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
             1024.0),
            ("NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES", "NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES", 1.0),
        ):
            tx, rx = self.constant(tx_name), self.constant(rx_name)
            if tx is None or rx is None:
                continue
            probe = self.fields(device, [(tx, active[0]), (rx, active[0])])
            if probe and all(self.succeeded(value) for value in probe):
                device.nvlink_fields = _NvlinkFields(tx, rx, scale)
                break
        if device.nvlink_fields is None:
            device.unavailable["nvlink"] = "no NVLink byte counter answers on this driver"
        return tuple(active), total

    @property
    def facts(self) -> list[GpuFacts]:
        return [device.facts for device in self._devices]

    def unavailable(self) -> dict[int, dict[str, str]]:
        """Row -> {metric: why it is not available}, as learned so far."""
        return {device.facts.index: dict(device.unavailable) for device in self._devices}

    # ----- for the sibling reading families (gpm.py, health.py), on the reader thread -----
    def devices(self) -> list[Device]:
        """The shown devices; the list is replaced, never changed, when the GPUs change."""
        with self._lock:
            return self._devices if self.state is NvmlState.OK else []

    def clock(self) -> float:
        return self._clock()

    @property
    def success_code(self) -> Any:
        return self._success

    @property
    def library(self) -> Any:
        """The loaded NVML module (or the simulator's); None before a successful init."""
        return self._lib

    # ----- per-tick readings ----------------------------------------------------------
    def read(self) -> tuple[GpuReading, ...]:
        """Read every shown device once (never blocks on the PCIe fallback)."""
        with self._lock:
            if self.state is not NvmlState.OK:
                return ()
            devices = self._devices
        return tuple(self._read_device(device) for device in devices)

    def read_slow(self) -> None:
        """Refresh the 20 ms PCIe snapshots that are due; call from a thread of its own."""
        with self._lock:
            devices = self._devices if self.state is NvmlState.OK else []
        tx_kind, rx_kind = self.constant("NVML_PCIE_UTIL_TX_BYTES"), \
            self.constant("NVML_PCIE_UTIL_RX_BYTES")
        for device in devices:
            if device.lost or device.pcie_counters is not None or \
                    not device.pcie_snapshot_supported or tx_kind is None or rx_kind is None:
                continue
            last, started = device.pcie_snapshot, self._clock()
            # The slow thread runs once a second; the slack keeps its jitter from skipping
            # every other pass, while extra calls (a hand-driven tick) still wait their turn.
            if last is not None and started - last[0] < PCIE_SNAPSHOT_EVERY_S - 0.25:
                continue
            tx = self.query(device, "nvmlDeviceGetPcieThroughput", tx_kind, metric="pcie")
            rx = self.query(device, "nvmlDeviceGetPcieThroughput", rx_kind, metric="pcie")
            if tx is None and rx is None and device.skips("nvmlDeviceGetPcieThroughput", tx_kind):
                device.pcie_snapshot_supported = False
                continue
            device.pcie_snapshot = (started, None if tx is None else tx * 1024.0,
                                    None if rx is None else rx * 1024.0)  # NVML gives KB/s

    def _read_device(self, device: Device) -> GpuReading:
        index = device.facts.index
        if device.lost:
            self._try_recover(device)
            if device.lost:
                return GpuReading.unavailable(index, lost=True)
        now = self._clock()
        utilization = self.query(device, "nvmlDeviceGetUtilizationRates", metric="utilization")
        if device.memory_version is not None:
            memory = self.query(device, "nvmlDeviceGetMemoryInfo", metric="memory",
                                 version=device.memory_version)
        else:
            memory = self.query(device, "nvmlDeviceGetMemoryInfo", metric="memory")
        temperature = power = None
        pcie: _Pcie = (None, None, False, None, None)
        nvlink: _Nvlink = (None, None, None)
        if device.parent is None:
            sensor = self.constant("NVML_TEMPERATURE_GPU")
            temperature = self.query(device, "nvmlDeviceGetTemperature", sensor,
                                      metric="temperature") if sensor is not None else None
            power = self.query(device, "nvmlDeviceGetPowerUsage", metric="power")
            pcie, nvlink = self._read_links(device, now)
        if device.lost:
            return GpuReading.unavailable(index, lost=True)
        reserved = getattr(memory, "reserved", None) if device.memory_version else None
        return GpuReading(
            index=index,
            lost=False,
            utilization_pct=None if utilization is None else float(utilization.gpu),
            memory_utilization_pct=None if utilization is None else float(utilization.memory),
            memory_used_bytes=None if memory is None else float(memory.used),
            memory_total_bytes=None if memory is None else float(memory.total),
            memory_reserved_bytes=None if reserved is None else float(reserved),
            pcie_tx_bytes_per_s=pcie[0],
            pcie_rx_bytes_per_s=pcie[1],
            pcie_is_snapshot=pcie[2],
            nvlink_tx_bytes_per_s=nvlink[0],
            nvlink_rx_bytes_per_s=nvlink[1],
            temperature_c=None if temperature is None else float(temperature),
            power_w=None if power is None else power / 1000,
            pcie_tx_bytes_total=pcie[3],
            pcie_rx_bytes_total=pcie[4],
            nvlink_bytes_total=nvlink[2],
        )

    def _try_recover(self, device: Device) -> None:
        """A lost GPU may come back after a reset: reopen it by index now and then."""
        if self._clock() - device.last_recovery_attempt < self.retry_interval_s:
            return
        device.last_recovery_attempt = self._clock()
        parent = device.parent
        if parent is not None:
            if not parent.lost and device.mig_position is not None:
                handle, error = self.invoke("nvmlDeviceGetMigDeviceHandleByIndex",
                                             parent.handle, device.mig_position)
                if error is None and self.call("nvmlDeviceGetUUID", handle) == device.facts.uuid:
                    device.handle, device.lost = handle, False
            return
        handle, error = self.invoke("nvmlDeviceGetHandleByIndex", device.facts.nvml_index)
        if error is None and self.call("nvmlDeviceGetUUID", handle) == device.facts.uuid:
            log.warning("%s (%s) is back", device.facts.label, device.facts.uuid)
            device.handle, device.lost = handle, False

    def _read_links(self, device: Device, now: float) -> tuple[_Pcie, _Nvlink]:
        """PCIe and NVLink rates from one field-values call (plus the PCIe snapshot)."""
        requested: list[Any] = []
        counters = device.pcie_counters
        if counters is None and now >= device.pcie_reprobe_at:
            self._probe_pcie(device, now)  # a driver update or a transient failure
            counters = device.pcie_counters
        if counters is not None:
            requested += list(counters)
        links = device.facts.nvlink_link_ids
        fields = device.nvlink_fields
        if fields is not None:
            requested += [(fields.tx, link) for link in links] + \
                [(fields.rx, link) for link in links]
        values = self.fields(device, requested) if requested else None
        pcie: _Pcie = (None, None, False, None, None)
        if counters is not None:
            if values is None:
                pass
            elif not (self.succeeded(values[0]) and self.succeeded(values[1])):
                self._probe_pcie(device, now)  # the counters stopped answering: fall back
            else:
                limit = device.facts.pcie_max_bytes_per_s
                pcie = (self._rate(device, "pcie_tx", values[0], now, 1.0, limit),
                        self._rate(device, "pcie_rx", values[1], now, 1.0, limit), False,
                        _field_number(values[0])[0], _field_number(values[1])[0])
            values = None if values is None else values[2:]
        else:
            snapshot = device.pcie_snapshot
            fresh = snapshot is not None and now - snapshot[0] <= PCIE_SNAPSHOT_STALE_S
            if fresh and snapshot:
                pcie = (snapshot[1], snapshot[2], True, None, None)
        nvlink: _Nvlink = (None, None, None)
        if fields is not None and values is not None:
            per_link = (device.facts.nvlink_max_bytes_per_s or 0) / max(1, len(links)) or None
            totals: list[float | None] = []
            for position, name in enumerate(("nvlink_tx", "nvlink_rx")):
                rates = [self._rate(device, name, value, now, fields.scale, per_link)
                         for value in values[position * len(links):(position + 1) * len(links)]]
                # A link without a rate (its counter reset, or it failed) makes the total
                # unknown: a partial sum would draw a dip that never happened.
                totals.append(None if None in rates else sum(rates))  # type: ignore[arg-type]
            counted = values[:2 * len(links)]
            total = sum(_field_number(value)[0] for value in counted) * fields.scale \
                if counted and all(self.succeeded(value) for value in counted) else None
            nvlink = (totals[0], totals[1], total)
        return pcie, nvlink

    def _rate(self, device: Device, name: str, value: Any, now: float, scale: float,
              limit: float | None) -> float | None:
        key = (device.facts.uuid, name, value.scopeId)
        if not self.succeeded(value):
            return self._rates.update(key, None, now)
        number, bits = _field_number(value)
        ceiling = None if not limit else limit * _PLAUSIBLE_OVER_MAX / scale
        rate = self._rates.update(key, number, now, source_time_s=value.timestamp / 1e6,
                                  width_bits=bits, max_rate=ceiling)
        return None if rate is None else rate * scale


# (tx, rx bytes/s, 20 ms snapshot?, tx, rx bytes total) and (tx, rx bytes/s, bytes total).
_Pcie = tuple[float | None, float | None, bool, float | None, float | None]
_Nvlink = tuple[float | None, float | None, float | None]

_READERS: weakref.WeakSet[NvmlReader] = weakref.WeakSet()


def _reset_readers_after_fork() -> None:
    for reader in list(_READERS):
        reader.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_readers_after_fork)
