"""The simulated driver's C ABI: what ``libnvidia-ml.so.1`` exports, as the real binding sees it.

nvidia-ml-py looks every function up by its C symbol on one module-level library object
(``getattr(nvmlLib, "nvmlDeviceGetCount_v2")``) and calls it with ctypes arguments: values,
``byref`` out-parameters, caller-allocated buffers and arrays. ``SimulatedLibrary`` is such
an object. Each method here is one symbol of ``nvml.h``, with its C signature: it reads its
inputs, asks the simulated machine (``machine.py``), writes the out-parameters and returns
an ``nvmlReturn_t``. So the binding's own code runs unchanged over it: which symbol and
struct version it picks, its two-call size protocol, its field-value arrays and its error
classes are the real release's.

Conventions taken from ``nvml.h``:
- handles (``nvmlDevice_t``, ``nvmlGpmSample_t``, ``nvmlEventSet_t``) are opaque pointers the
  driver writes and the caller passes back (``handles.py``);
- strings go into a caller buffer of a stated size (``NVML_ERROR_INSUFFICIENT_SIZE`` when
  too small);
- lists (running processes, process samples) take the array size in and give the count
  out: a too-small array (or NULL) answers ``NVML_ERROR_INSUFFICIENT_SIZE`` with the count
  needed, and an empty list answers success with a count of 0;
- a versioned struct (``nvmlMemory_v2_t``, ``nvmlGpmSupport_t``) whose ``version`` the driver
  does not know answers ``NVML_ERROR_ARGUMENT_VERSION_MISMATCH``;
- a symbol the driver release does not export is simply absent (``AttributeError``), which
  the binding turns into ``NVML_ERROR_FUNCTION_NOT_FOUND``.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import types
from collections.abc import Callable
from typing import Any

from .handles import SimulatedHandle, address_of, handle_from, write_pointer
from .nvml_h import ERROR_CODES, NVML_SUCCESS, NVMLError, error_string

E = ERROR_CODES
MEMORY_V2_VERSION = 0x02000028  # nvml.h nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2)
GPM_SUPPORT_VERSION = 1  # nvml.h NVML_GPM_SUPPORT_VERSION
NOT_AVAILABLE_ULL = 0xFFFFFFFFFFFFFFFF  # nvml.h NVML_VALUE_NOT_AVAILABLE, unsigned long long
# Symbols and the first driver branch that exports them (nvml.h "@since" notes and the
# driver release notes); everything else is in every driver the profiles model.
SYMBOL_SINCE = {
    "nvmlDeviceGetMemoryInfo_v2": 510,
    "nvmlDeviceGetComputeRunningProcesses_v3": 510,
    "nvmlDeviceGetGraphicsRunningProcesses_v3": 510,
    "nvmlDeviceGetMPSComputeRunningProcesses_v3": 510,
    "nvmlGpmQueryDeviceSupport": 520, "nvmlGpmSampleAlloc": 520, "nvmlGpmSampleFree": 520,
    "nvmlGpmSampleGet": 520, "nvmlGpmMigSampleGet": 520, "nvmlGpmMetricsGet": 520,
    "nvmlDeviceGetCurrentClocksEventReasons": 535,
}


def _target(argument: Any) -> Any:
    """The object behind a ``byref(...)`` argument, or the argument itself (an array)."""
    return getattr(argument, "_obj", argument)


def _number(argument: Any) -> int:
    """A C integer argument, given as a ctypes value or a plain int."""
    return int(getattr(argument, "value", argument))


def _copy_fields(source: Any, target: Any) -> None:
    """Copy every field the two structures share, by name (the binding's struct may be newer)."""
    for name in _shared_fields(type(source), type(target)):
        setattr(target, name, getattr(source, name))


@functools.cache
def _shared_fields(source: type, target: type) -> tuple[str, ...]:
    """The fields ``_copy_fields`` copies, in the source's order, worked out once per pair."""
    names = {name for name, *_ in getattr(target, "_fields_", ())}
    return tuple(name for name, *_ in getattr(source, "_fields_", ()) if name in names
                 and name != "version")


def _c_function(method: Callable[..., None]) -> Callable[..., int]:
    """Turn a method that raises NVMLError(code) into one that returns the code, as C does."""

    def call(self: SimulatedLibrary, *arguments: Any) -> int:
        try:
            method(self, *arguments)
        except NVMLError as error:
            return error.value
        return NVML_SUCCESS

    call.__name__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class SimulatedLibrary:
    """One simulated ``libnvidia-ml.so.1``; ``exports()`` is what to hand nvidia-ml-py."""

    def __init__(self, machine: Any) -> None:  # a SimulatedNvml (machine.py)
        self._machine = machine
        self._sized: dict[tuple[str, int], list[Any]] = {}  # a list sized but not yet read
        self._sized_lock = threading.Lock()

    def exports(self) -> types.SimpleNamespace:
        """The symbols this driver release exports, as a loaded library object.

        A symbol newer than the simulated driver is absent, as from a real older
        ``libnvidia-ml.so.1``."""
        major = self._machine.profile.driver_major
        symbols = {name: getattr(self, name) for name in dir(type(self))
                   if name.startswith("nvml") and SYMBOL_SINCE.get(name, 0) <= major}
        return types.SimpleNamespace(**symbols)

    # ----- helpers --------------------------------------------------------------------
    @staticmethod
    def _handle(pointer: Any) -> SimulatedHandle:
        handle = handle_from(pointer)
        if handle is None:
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        return handle

    @staticmethod
    def _write_string(buffer: Any, size: Any, text: str) -> None:
        data = text.encode()
        if len(data) + 1 > _number(size):
            raise NVMLError(E["NVML_ERROR_INSUFFICIENT_SIZE"])
        buffer.value = data

    def _scalar(self, function: str, device: Any, out: Any, *inputs: Any) -> None:
        value = getattr(self._machine, function)(self._handle(device),
                                                 *[_number(i) for i in inputs])
        _target(out).value = int(value)

    def _list(self, key: str, device: Any, count: Any, array: Any,
              read: Callable[[], list[Any]], fill: Callable[[Any, Any], None]) -> None:
        """nvml.h's two-call protocol: size with a NULL or short array, then fill it."""
        counter = _target(count)
        cache_key = (key, address_of(device))
        with self._sized_lock:
            items = self._sized.pop(cache_key, None)
        if items is None:
            items = read()
        if array is None or counter.value < len(items):
            counter.value = len(items)
            if items:
                with self._sized_lock:  # the caller comes back with an array this size
                    self._sized[cache_key] = items
                raise NVMLError(E["NVML_ERROR_INSUFFICIENT_SIZE"])
            return
        for slot, item in zip(array, items, strict=False):
            fill(slot, item)
        counter.value = len(items)

    # ----- system ---------------------------------------------------------------------
    @_c_function
    def nvmlInitWithFlags(self, flags: Any) -> None:
        self._machine.nvmlInit()

    @_c_function
    def nvmlInit_v2(self) -> None:
        self._machine.nvmlInit()

    @_c_function
    def nvmlShutdown(self) -> None:
        self._machine.nvmlShutdown()

    def nvmlErrorString(self, result: Any) -> bytes:  # returns char*, not a code
        return error_string(_number(result)).encode()

    @_c_function
    def nvmlSystemGetDriverVersion(self, buffer: Any, size: Any) -> None:
        self._write_string(buffer, size, self._machine.nvmlSystemGetDriverVersion())

    @_c_function
    def nvmlSystemGetNVMLVersion(self, buffer: Any, size: Any) -> None:
        self._write_string(buffer, size, self._machine.nvmlSystemGetNVMLVersion())

    @_c_function
    def nvmlSystemGetCudaDriverVersion(self, out: Any) -> None:
        _target(out).value = self._machine.nvmlSystemGetCudaDriverVersion()

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    @_c_function
    def nvmlDeviceGetCount_v2(self, out: Any) -> None:
        _target(out).value = self._machine.nvmlDeviceGetCount()

    @_c_function
    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> None:
        handle = self._machine.nvmlDeviceGetHandleByIndex(_number(index))
        write_pointer(_target(out), handle.token)

    # ----- identity and static facts ----------------------------------------------------
    @_c_function
    def nvmlDeviceGetName(self, device: Any, buffer: Any, size: Any) -> None:
        self._write_string(buffer, size, self._machine.nvmlDeviceGetName(self._handle(device)))

    @_c_function
    def nvmlDeviceGetUUID(self, device: Any, buffer: Any, size: Any) -> None:
        self._write_string(buffer, size, self._machine.nvmlDeviceGetUUID(self._handle(device)))

    @_c_function
    def nvmlDeviceGetPciInfo_v3(self, device: Any, out: Any) -> None:
        _copy_fields(self._machine.nvmlDeviceGetPciInfo(self._handle(device)), _target(out))

    @_c_function
    def nvmlDeviceGetCudaComputeCapability(self, device: Any, major: Any, minor: Any) -> None:
        found = self._machine.nvmlDeviceGetCudaComputeCapability(self._handle(device))
        _target(major).value, _target(minor).value = found

    @_c_function
    def nvmlDeviceGetNumGpuCores(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetNumGpuCores", device, out)

    @_c_function
    def nvmlDeviceGetMinorNumber(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetMinorNumber", device, out)

    @_c_function
    def nvmlDeviceGetMaxClockInfo(self, device: Any, clock: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetMaxClockInfo", device, out, clock)

    @_c_function
    def nvmlDeviceGetClockInfo(self, device: Any, clock: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetClockInfo", device, out, clock)

    @_c_function
    def nvmlDeviceGetVirtualizationMode(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetVirtualizationMode", device, out)

    @_c_function
    def nvmlDeviceGetMaxPcieLinkGeneration(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetMaxPcieLinkGeneration", device, out)

    @_c_function
    def nvmlDeviceGetMaxPcieLinkWidth(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetMaxPcieLinkWidth", device, out)

    @_c_function
    def nvmlDeviceGetCurrPcieLinkGeneration(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetCurrPcieLinkGeneration", device, out)

    @_c_function
    def nvmlDeviceGetCurrPcieLinkWidth(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetCurrPcieLinkWidth", device, out)

    @_c_function
    def nvmlDeviceGetEnforcedPowerLimit(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetEnforcedPowerLimit", device, out)

    @_c_function
    def nvmlGpmQueryDeviceSupport(self, device: Any, out: Any) -> None:
        support = _target(out)
        if support.version != GPM_SUPPORT_VERSION:
            raise NVMLError(E["NVML_ERROR_ARGUMENT_VERSION_MISMATCH"])
        found = self._machine.nvmlGpmQueryDeviceSupport(self._handle(device))
        support.isSupportedDevice = found.isSupportedDevice

    # ----- MIG ------------------------------------------------------------------------
    @_c_function
    def nvmlDeviceGetMigMode(self, device: Any, current: Any, pending: Any) -> None:
        found = self._machine.nvmlDeviceGetMigMode(self._handle(device))
        _target(current).value, _target(pending).value = found

    @_c_function
    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetMaxMigDeviceCount", device, out)

    @_c_function
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: Any, out: Any) -> None:
        handle = self._machine.nvmlDeviceGetMigDeviceHandleByIndex(self._handle(device),
                                                                   _number(index))
        write_pointer(_target(out), handle.token)

    @_c_function
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, device: Any, out: Any) -> None:
        handle = self._machine.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self._handle(device))
        write_pointer(_target(out), handle.token)

    @_c_function
    def nvmlDeviceIsMigDeviceHandle(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceIsMigDeviceHandle", device, out)

    @_c_function
    def nvmlDeviceGetGpuInstanceId(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetGpuInstanceId", device, out)

    @_c_function
    def nvmlDeviceGetComputeInstanceId(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetComputeInstanceId", device, out)

    @_c_function
    def nvmlDeviceGetAttributes_v2(self, device: Any, out: Any) -> None:
        _copy_fields(self._machine.nvmlDeviceGetAttributes(self._handle(device)), _target(out))

    # ----- readings -------------------------------------------------------------------
    @_c_function
    def nvmlDeviceGetMemoryInfo(self, device: Any, out: Any) -> None:
        _copy_fields(self._machine.nvmlDeviceGetMemoryInfo(self._handle(device)), _target(out))

    @_c_function
    def nvmlDeviceGetMemoryInfo_v2(self, device: Any, out: Any) -> None:
        memory = _target(out)
        if memory.version != MEMORY_V2_VERSION:
            raise NVMLError(E["NVML_ERROR_ARGUMENT_VERSION_MISMATCH"])
        _copy_fields(self._machine.nvmlDeviceGetMemoryInfo(self._handle(device),
                                                           version=MEMORY_V2_VERSION), memory)

    @_c_function
    def nvmlDeviceGetUtilizationRates(self, device: Any, out: Any) -> None:
        _copy_fields(self._machine.nvmlDeviceGetUtilizationRates(self._handle(device)),
                     _target(out))

    @_c_function
    def nvmlDeviceGetTemperature(self, device: Any, sensor: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetTemperature", device, out, sensor)

    @_c_function
    def nvmlDeviceGetPowerUsage(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetPowerUsage", device, out)

    @_c_function
    def nvmlDeviceGetPcieThroughput(self, device: Any, counter: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetPcieThroughput", device, out, counter)

    @_c_function
    def nvmlDeviceGetNvLinkState(self, device: Any, link: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetNvLinkState", device, out, link)

    @_c_function
    def nvmlDeviceGetNvLinkVersion(self, device: Any, link: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetNvLinkVersion", device, out, link)

    @_c_function
    def nvmlDeviceGetFieldValues(self, device: Any, count: Any, values: Any) -> None:
        self._machine.nvmlDeviceGetFieldValues(self._handle(device), _target(values),
                                               _number(count))

    # ----- health -----------------------------------------------------------------------
    @_c_function
    def nvmlDeviceGetPerformanceState(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetPerformanceState", device, out)

    @_c_function
    def nvmlDeviceGetCurrentClocksEventReasons(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetCurrentClocksEventReasons", device, out)

    @_c_function
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetCurrentClocksThrottleReasons", device, out)

    @_c_function
    def nvmlDeviceGetTemperatureThreshold(self, device: Any, threshold: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetTemperatureThreshold", device, out, threshold)

    @_c_function
    def nvmlDeviceGetFanSpeed(self, device: Any, out: Any) -> None:
        self._scalar("nvmlDeviceGetFanSpeed", device, out)

    @_c_function
    def nvmlDeviceGetTotalEccErrors(self, device: Any, error_type: Any, counter_type: Any,
                                    out: Any) -> None:
        self._scalar("nvmlDeviceGetTotalEccErrors", device, out, error_type, counter_type)

    @_c_function
    def nvmlDeviceGetRemappedRows(self, device: Any, corrected: Any, uncorrected: Any,
                                  pending: Any, failure: Any) -> None:
        found = self._machine.nvmlDeviceGetRemappedRows(self._handle(device))
        for out, value in zip((corrected, uncorrected, pending, failure), found, strict=True):
            _target(out).value = value

    # ----- GPM --------------------------------------------------------------------------
    @_c_function
    def nvmlGpmSampleAlloc(self, out: Any) -> None:
        write_pointer(_target(out), address_of(self._machine.nvmlGpmSampleAlloc()))

    @_c_function
    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._machine.nvmlGpmSampleFree(sample)

    @_c_function
    def nvmlGpmSampleGet(self, device: Any, sample: Any) -> None:
        self._machine.nvmlGpmSampleGet(self._handle(device), sample)

    @_c_function
    def nvmlGpmMigSampleGet(self, device: Any, gpu_instance_id: Any, sample: Any) -> None:
        self._machine.nvmlGpmMigSampleGet(self._handle(device), _number(gpu_instance_id), sample)

    @_c_function
    def nvmlGpmMetricsGet(self, request: Any) -> None:
        self._machine.nvmlGpmMetricsGet(_target(request))

    # ----- events -----------------------------------------------------------------------
    @_c_function
    def nvmlEventSetCreate(self, out: Any) -> None:
        write_pointer(_target(out), address_of(self._machine.nvmlEventSetCreate()))

    @_c_function
    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._machine.nvmlEventSetFree(event_set)

    @_c_function
    def nvmlDeviceRegisterEvents(self, device: Any, event_types: Any, event_set: Any) -> None:
        self._machine.nvmlDeviceRegisterEvents(self._handle(device), _number(event_types),
                                               event_set)

    @_c_function
    def nvmlEventSetWait_v2(self, event_set: Any, out: Any, timeout_ms: Any) -> None:
        event = self._machine.nvmlEventSetWait_v2(event_set, _number(timeout_ms))
        data = _target(out)
        _copy_fields(event, data)
        device_type = dict((name, kind) for name, kind, *_ in type(data)._fields_)["device"]
        data.device = ctypes.cast(ctypes.c_void_p(event.device.token), device_type)

    # ----- processes --------------------------------------------------------------------
    def _running(self, function: str, device: Any, count: Any, array: Any) -> None:
        handle = self._handle(device)

        def fill(slot: Any, process: Any) -> None:
            slot.pid = process.pid
            slot.usedGpuMemory = NOT_AVAILABLE_ULL if process.usedGpuMemory is None \
                else int(process.usedGpuMemory)
            slot.gpuInstanceId = process.gpuInstanceId
            slot.computeInstanceId = process.computeInstanceId

        self._list(function, device, count, array,
                   lambda: getattr(self._machine, function)(handle), fill)

    @_c_function
    def nvmlDeviceGetProcessUtilization(self, device: Any, array: Any, count: Any,
                                        last_seen_us: Any) -> None:
        handle, since = self._handle(device), _number(last_seen_us)
        self._list("nvmlDeviceGetProcessUtilization", device, count, array,
                   lambda: self._machine.nvmlDeviceGetProcessUtilization(handle, since),
                   lambda slot, sample: _copy_fields(sample, slot))


def _running_processes(symbol: str) -> Callable[..., int]:
    @_c_function
    def call(self: SimulatedLibrary, device: Any, count: Any, array: Any) -> None:
        self._running(symbol, device, count, array)

    call.__name__ = symbol
    return call


# nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses_v2 and _v3: one protocol.
for _kind in ("Compute", "Graphics", "MPSCompute"):
    for _version in ("_v2", "_v3"):
        _symbol = f"nvmlDeviceGet{_kind}RunningProcesses{_version}"
        setattr(SimulatedLibrary, _symbol, _running_processes(_symbol))
