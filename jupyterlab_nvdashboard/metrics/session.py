"""The one public choke point every NVML reading goes through.

``NvmlSession`` holds the loaded binding and the devices it shows, and is all a reading
family (core readings, links, GPM, health, processes) uses:

- ``query`` / ``invoke`` / ``call`` turn any NVML error into "not available" with a reason;
  a function the binding lacks (or whose unversioned wrapper refuses an older driver) is
  ``MISSING``; ``NOT_SUPPORTED`` is remembered per (function, arguments);
- ``constant`` looks a name up in the binding, else takes ``nvml.h``'s value for an
  ABI-stable one (``nvml_h.py``), so a missing name never switches a feature off;
- ``mark_lost`` marks a GPU (and its MIG devices) lost; the others go on;
- ``devices()`` and ``device(uuid)`` are the shown devices; ``epoch`` changes whenever they
  are enumerated again, and ``per_device()`` maps (keyed by UUID) lose the entries of a GPU
  no longer shown, in that one place (``set_devices``);
- ``observe`` hears of every call made through it, with its duration: what the reader asks
  of the driver, counted where it is asked (``benchmarks/monitor_gpu_cost.py``).
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from . import nvml_h
from .binding import binding_version
from .rates import CounterRates

log = logging.getLogger(__name__)

# A binding or driver that lacks a function: the reason is about the software, not the GPU.
MISSING = object()
# Reasons a metric is not available, in words, by NVML return code.
REASONS = {
    "NVML_ERROR_NOT_SUPPORTED": "not supported by this GPU or driver",
    "NVML_ERROR_NO_PERMISSION": "needs more permission than this process has",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "the driver is too old for this reading",
}
# Hears of one NVML call made through the session: (function name, seconds it took).
CallObserver = Callable[[str, float], None]
# Field value types (nvml.h nvmlValueType_t) and their widths in bits.
_VALUE_FIELDS = {0: ("dVal", 64), 1: ("uiVal", 32), 2: ("ulVal", 64), 3: ("ullVal", 64),
                 4: ("sllVal", 64), 5: ("siVal", 32), 6: ("usVal", 16)}


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
    # The NVLink rates come from NVML's data-only counters (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_*,
    # payload without protocol overhead, in KiB), the ones DCGM's NVLink throughput is made of;
    # False where only the newer byte counts (NVML_FI_DEV_NVLINK_COUNT_*_BYTES) answer, or none.
    nvlink_payload_counters: bool = False



def parent_facts(facts: Sequence[GpuFacts], fact: GpuFacts) -> GpuFacts | None:
    """The physical GPU a MIG device is part of, whose row holds its whole-GPU readings and
    facts (PCIe, NVLink, power, clocks, health, GPM support); None for a GPU."""
    if fact.parent is None:
        return None
    return next((each for each in facts if each.index == fact.parent), None)

@dataclass
class NvlinkFields:
    tx: int
    rx: int
    scale: float  # bytes per counter unit
    payload_only: bool  # nvml.h's THROUGHPUT_DATA_* fields: data, no protocol overhead


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
    # The PCIe counters answer 32 bits wide and the GPU has GPM: its PCIe rates (links.py).
    pcie_from_gpm: bool = False
    gpm_pcie: tuple[float, float | None, float | None] | None = None  # (monotonic, tx, rx)
    nvlink_fields: NvlinkFields | None = None
    # What will not start answering: a function the binding lacks (its name), or one call
    # that answered NOT_SUPPORTED ((function, arguments)): one unsupported clock domain or
    # threshold must not hide the others.
    skip: set[Any] = field(default_factory=set)
    unavailable: dict[str, str] = field(default_factory=dict)  # metric -> reason

    def skips(self, function: str, *args: Any) -> bool:
        """True when ``function`` (with these arguments) is known not to answer here."""
        skip = self.skip
        return bool(skip) and (function in skip or (skip_key(function, args) or False) in skip)


def skip_key(function: str, args: tuple[Any, ...]) -> Any:
    """What one call is remembered by: the function and its arguments, a list of field IDs
    as a tuple of them, so NOT_SUPPORTED for one list never switches off another."""
    key = (function, tuple(tuple(arg) if isinstance(arg, list) else arg for arg in args))
    try:
        hash(key)
    except TypeError:  # an argument with no identity of its own: never remembered
        return None
    return key


def decode(value: Any) -> Any:
    """Text from bytes a binding returns (older releases do not decode)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def numbers(struct: Any, *names: str) -> list[Any]:
    """The named numeric fields of a struct the binding returned, each read once, past the
    binding's per-attribute string hook (``_PrintableStructure.__getattribute__``, a Python
    call per read); any other object's by ``getattr``."""
    get = ctypes.Structure.__getattribute__ if isinstance(struct, ctypes.Structure) \
        else getattr
    return [get(struct, name) for name in names]


def field_reading(field_value: Any) -> tuple[int, int, float, int, float]:
    """(return code, scope, value, width in bits, timestamp in seconds) of one
    ``nvmlFieldValue_t``, each read once. The binding's structs hook every attribute read to
    decode strings; these fields are numbers, so the reader reads them past that hook: it
    is most of a pass's cost on an 18-link GPU."""
    get = ctypes.Structure.__getattribute__ if isinstance(field_value, ctypes.Structure) \
        else getattr
    name, bits = _VALUE_FIELDS.get(get(field_value, "valueType"), ("ullVal", 64))
    return (get(field_value, "nvmlReturn"), get(field_value, "scopeId"),
            float(getattr(get(field_value, "value"), name)), bits,
            get(field_value, "timestamp") / 1e6)


class DeviceStates(dict):  # type: ignore[type-arg]
    """Per-device state keyed by UUID, or by a tuple whose first element is a UUID."""

    __hash__ = object.__hash__  # held in the reader's weak set by identity

    def retain(self, uuids: set[str]) -> None:
        for key in list(self):
            if (key[0] if isinstance(key, tuple) else key) not in uuids:
                del self[key]


class NvmlSession:
    """The loaded binding, the shown devices and the rules for calling NVML."""

    def __init__(self, lib: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self._lib = lib
        self._clock = clock
        self.lock = threading.RLock()
        self._devices: list[Device] = []
        self._logged: set[tuple[str, Any]] = set()
        # Checked for every field value of every tick: looked up once per library
        # (nvml.h has NVML_SUCCESS = 0 in every release).
        self._success: Any = getattr(lib, "NVML_SUCCESS", 0)
        self.versions: dict[str, str] = {"binding": binding_version(lib)}
        # Cumulative-counter rates, per device (keyed by UUID first).
        self.rates = CounterRates()
        self._per_device: weakref.WeakSet[DeviceStates] = weakref.WeakSet()
        # Changes whenever the shown devices are enumerated again (start, rescan, re-init).
        self.epoch = 0
        self._observer: CallObserver | None = None

    @property
    def library(self) -> Any:
        """The loaded nvidia-ml-py module; None before a successful start."""
        return self._lib

    def attach(self, lib: Any) -> None:
        """Use ``lib`` (a started binding) from now on."""
        if self._lib is not None and lib is not self._lib:
            self._logged.clear()
        self._lib = lib
        self._success = self.constant("NVML_SUCCESS") or 0
        self.versions = {"binding": binding_version(lib)}

    def reset(self) -> None:
        """Forget the library and the devices (a forked child must not reuse handles)."""
        self.lock = threading.RLock()
        self._lib = None
        self.rates = CounterRates()
        self.set_devices([])

    @property
    def success_code(self) -> Any:
        return self._success

    def clock(self) -> float:
        return self._clock()

    # ----- devices --------------------------------------------------------------------
    def devices(self) -> list[Device]:
        """The shown devices; the list is replaced, never changed, when the GPUs change."""
        return self._devices

    def device(self, uuid: str) -> Device | None:
        return next((device for device in self._devices if device.facts.uuid == uuid), None)

    def set_devices(self, rows: list[Device]) -> None:
        """The one reset: state of a GPU no longer shown goes, whoever keeps it."""
        shown = {device.facts.uuid for device in rows}
        self._devices = rows
        self.rates.retain(shown)
        for states in list(self._per_device):
            states.retain(shown)
        self.epoch += 1

    def per_device(self) -> DeviceStates:
        """A map for per-device state, keyed by UUID (or a tuple starting with one);
        entries of a GPU that is no longer shown are dropped at re-enumeration."""
        states = DeviceStates()
        self._per_device.add(states)
        return states

    # ----- the choke point ------------------------------------------------------------
    def observe(self, observer: CallObserver | None) -> None:
        """Call ``observer(function, seconds)`` after every NVML call made through this
        session, failed ones included, on the calling thread; None stops it. It measures
        what the reader asks of the driver, so it must be quick and must not raise."""
        self._observer = observer

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
        observer = self._observer
        started = time.perf_counter() if observer is not None else 0.0
        try:
            value = method(*args, **kwargs)
        except getattr(lib, "NVMLError", Exception) as error:
            return None, error
        except TypeError as error:  # an older binding without this argument
            self.log_once(function, "signature", error)
            return None, MISSING
        except getattr(lib, "NVMLLibraryMismatchError", ()) as error:
            # An unversioned wrapper that refuses a driver older than the binding.
            self.log_once(function, "mismatch", error)
            return None, MISSING
        finally:
            if observer is not None:
                observer(function, time.perf_counter() - started)
        return decode(value), None

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
            key = function if error is MISSING else skip_key(function, args)
            if key is not None:
                device.skip.add(key)
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
        for name, words in REASONS.items():
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
            self.rates.forget(each.facts.uuid)

    def fields(self, device: Device, field_ids: Sequence[Any]) -> list[Any] | None:
        """Field values, or None; each value's own nvmlReturn is checked by the caller."""
        values = self.query(device, "nvmlDeviceGetFieldValues", list(field_ids))
        return None if values is None else list(values)

    def succeeded(self, field_value: Any) -> bool:
        return field_value.nvmlReturn == self._success
