"""A simulated NVML library that behaves like ``pynvml`` for the subset nvdashboard uses.

The NVML reader loads an instance of ``SimulatedNvml`` in place of the ``pynvml`` module
in simulate mode and in tests, so the production code path is what gets exercised.
It reuses pynvml's own constants, error classes and ctypes structures (importing
pynvml never touches the driver), so errors look exactly like the real ones.

Test hooks: ``set_unsupported``, ``inject_error``, ``lose_gpu``, ``restore_gpu``,
``set_init_error``, ``set_call_delay``, ``set_clock`` and the ``calls`` counter.
The same faults can be given as a spec string (``NVDASHBOARD_SIMULATE_FAULTS``)::

    lose=1@5            GPU 1 is lost 5 seconds after nvmlInit
    init=DriverNotLoaded  nvmlInit raises NVMLError_DriverNotLoaded
    unsupported=nvlink  NVLink fields report NVML_ERROR_NOT_SUPPORTED
    slow=0.3            every call takes 0.3 s
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pynvml as _pynvml

NVML_NVLINK_LINKS = 18
NVLINK_LINK_MBPS = 26_562  # per link per direction, as an H100/H200 reports
_UINT_MAX = 0xFFFFFFFF

# Named groups a fault spec can mark unsupported.
FEATURE_GROUPS: dict[str, tuple[str, ...]] = {
    "nvlink": ("nvlink",),
    "pcie_counters": ("pcie_counters",),
    "pcie": ("pcie_counters", "nvmlDeviceGetPcieThroughput"),
    "power": ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit"),
    "temperature": ("nvmlDeviceGetTemperature",),
}

_NVLINK_FIELDS = {
    _pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT,
    _pynvml.NVML_FI_DEV_NVLINK_GET_SPEED,
    _pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    _pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
}
_PCIE_COUNTER_FIELDS = {
    _pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
    _pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
}


@dataclass
class _Device:
    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    pcie_generation: int
    pcie_width: int
    power_limit_mw: int
    lost_at: float | None = None  # simulated-clock time the GPU disappears


@dataclass(frozen=True)
class SimulatedHandle:
    index: int


def _wave(t: float, period_s: float, phase: float) -> float:
    """0..1, smooth, so the charts look alive and stay deterministic."""
    return 0.5 + 0.5 * math.sin(2 * math.pi * t / period_s + phase)


def _wave_integral(t: float, period_s: float, phase: float) -> float:
    """Integral of _wave from 0 to t, so counters are exact for any read time."""
    omega = 2 * math.pi / period_s
    return 0.5 * t - 0.5 * (math.cos(omega * t + phase) - math.cos(phase)) / omega


class SimulatedNvml:
    """Stands in for the ``pynvml`` module: same function names, constants and errors."""

    def __init__(self, gpu_count: int = 4, nvlink: bool = True) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self._clock: Callable[[], float] = time.time
        self._initialized = 0
        self._init_errors: list[int] = []
        self._injected: list[tuple[str, int | None, int, int | None]] = []
        self._unsupported: set[str] = set() if nvlink else {"nvlink"}
        self._delay_s = 0.0
        self._start = self._clock()
        self._devices = [self._make_device(i) for i in range(gpu_count)]

    # ----- module-like attribute access: constants, errors, structures -------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "NVMLError", "c_nvml", "nvmlExceptionClass")):
            return getattr(_pynvml, name)
        raise AttributeError(name)

    @staticmethod
    def _make_device(index: int) -> _Device:
        # Odd GPUs are a smaller model, so per-GPU scales are exercised.
        large = index % 2 == 0
        return _Device(
            index=index,
            name="NVIDIA H200" if large else "NVIDIA A100-SXM4-80GB",
            uuid=f"GPU-5151{index:04d}-0000-4000-8000-{index:012d}",
            memory_total_bytes=(143_771 if large else 81_920) * 1024 * 1024,
            pcie_generation=5 if large else 4,
            pcie_width=16,
            power_limit_mw=700_000 if large else 400_000,
        )

    # ----- test hooks -----------------------------------------------------------------
    def set_clock(self, clock: Callable[[], float]) -> None:
        """Use ``clock`` (seconds) for readings and field timestamps."""
        self._clock = clock
        self._start = clock()

    def set_unsupported(self, features: Iterable[str]) -> None:
        """Mark feature groups (see FEATURE_GROUPS), function names or 'nvlink' unsupported."""
        expanded: set[str] = set()
        for feature in features:
            expanded.update(FEATURE_GROUPS.get(feature, (feature,)))
        self._unsupported = expanded

    def inject_error(
        self, function: str, error_code: int, gpu: int | None = None, times: int | None = None
    ) -> None:
        """Make ``function`` raise NVMLError(error_code), for one GPU or all, N times or forever."""
        with self._lock:
            self._injected.append((function, gpu, error_code, times))

    def clear_errors(self) -> None:
        with self._lock:
            self._injected.clear()
            self._init_errors.clear()

    def set_init_error(self, error_code: int | None, times: int | None = None) -> None:
        """nvmlInit raises ``error_code`` (the next ``times`` calls, or until cleared)."""
        with self._lock:
            self._init_errors = [] if error_code is None else [error_code] * (times or 1_000_000)

    def lose_gpu(self, index: int, after_s: float = 0.0) -> None:
        """GPU ``index`` falls off the bus ``after_s`` seconds from now."""
        self._devices[index].lost_at = self._clock() + after_s

    def restore_gpu(self, index: int) -> None:
        """The GPU comes back, as after a reset: new handles work again."""
        self._devices[index].lost_at = None

    def set_call_delay(self, seconds: float) -> None:
        """Every device call takes this long, like a driver that is busy."""
        self._delay_s = seconds

    @property
    def total_calls(self) -> int:
        with self._lock:
            return sum(self.calls.values())

    def apply_fault_spec(self, spec: str) -> None:
        """Apply faults written as ``lose=1@5,init=DriverNotLoaded,unsupported=nvlink``."""
        unsupported: list[str] = []
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key, _, value = item.partition("=")
            if key == "lose":
                gpu, _, after = value.partition("@")
                self.lose_gpu(int(gpu), float(after or 0))
            elif key == "init":
                classes = _pynvml.NVMLError._valClassMapping.items()
                codes = {cls.__name__: code for code, cls in classes}
                if f"NVMLError_{value}" not in codes:
                    raise ValueError(f"unknown NVML error {value!r} in fault spec")
                self.set_init_error(codes[f"NVMLError_{value}"])
            elif key == "unsupported":
                unsupported.extend(value.split("|"))
            elif key == "slow":
                self.set_call_delay(float(value))
            else:
                raise ValueError(f"unknown fault {key!r} (use lose, init, unsupported or slow)")
        if unsupported:
            self.set_unsupported(set(unsupported) | self._unsupported)

    # ----- internals ------------------------------------------------------------------
    def _enter(self, function: str, handle: SimulatedHandle | None = None) -> _Device | None:
        with self._lock:
            self.calls[function] += 1
            for position, (name, gpu, code, times) in enumerate(self._injected):
                if name == function and (gpu is None or handle is None or gpu == handle.index):
                    if times is not None:
                        if times <= 1:
                            self._injected.pop(position)
                        else:
                            self._injected[position] = (name, gpu, code, times - 1)
                    raise _pynvml.NVMLError(code)
        if self._delay_s:
            time.sleep(self._delay_s)
        if function != "nvmlInit" and not self._initialized:
            raise _pynvml.NVMLError(_pynvml.NVML_ERROR_UNINITIALIZED)
        if function in self._unsupported:
            raise _pynvml.NVMLError(_pynvml.NVML_ERROR_NOT_SUPPORTED)
        if handle is None:
            return None
        device = self._devices[handle.index]
        if self._is_lost(device):
            raise _pynvml.NVMLError(_pynvml.NVML_ERROR_GPU_IS_LOST)
        return device

    def _is_lost(self, device: _Device) -> bool:
        return device.lost_at is not None and self._clock() >= device.lost_at

    def _elapsed(self) -> float:
        return self._clock() - self._start

    def _utilization(self, device: _Device) -> int:
        return int(round(100 * _wave(self._elapsed(), 17.0, device.index)))

    def _pcie_bytes(self, device: _Device, direction: int) -> int:
        peak = 8e9 if direction == 0 else 12e9
        return int(peak * _wave_integral(self._elapsed(), 11.0 + direction, device.index))

    def _nvlink_kib(self, device: _Device, direction: int, link: int) -> int:
        peak = 20e9 / NVML_NVLINK_LINKS
        t = self._elapsed()
        return int(peak * _wave_integral(t, 9.0 + direction, device.index + link / 7) / 1024)

    # ----- the pynvml API -------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        self._enter("nvmlInit")
        with self._lock:
            if self._init_errors:
                raise _pynvml.NVMLError(self._init_errors.pop())
            self._initialized += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._enter("nvmlShutdown")
        with self._lock:
            self._initialized = max(0, self._initialized - 1)

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        self._enter("nvmlSystemGetDriverVersion")
        return "560.35.03-simulated"

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetCount")
        return len(self._devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimulatedHandle:  # noqa: N802
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self._devices):
            raise _pynvml.NVMLError(_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self._is_lost(self._devices[index]):
            raise _pynvml.NVMLError(_pynvml.NVML_ERROR_GPU_IS_LOST)
        return SimulatedHandle(index)

    def nvmlDeviceGetName(self, handle: SimulatedHandle) -> str:  # noqa: N802
        return self._enter("nvmlDeviceGetName", handle).name  # type: ignore[union-attr]

    def nvmlDeviceGetUUID(self, handle: SimulatedHandle) -> str:  # noqa: N802
        return self._enter("nvmlDeviceGetUUID", handle).uuid  # type: ignore[union-attr]

    def nvmlDeviceGetMemoryInfo(self, handle: SimulatedHandle) -> Any:  # noqa: N802
        device = self._enter("nvmlDeviceGetMemoryInfo", handle)
        assert device is not None
        total = device.memory_total_bytes
        used = int(total * (0.1 + 0.8 * _wave(self._elapsed(), 23.0, device.index)))
        return _pynvml.c_nvmlMemory_t(total=total, free=total - used, used=used)

    def nvmlDeviceGetUtilizationRates(self, handle: SimulatedHandle) -> Any:  # noqa: N802
        device = self._enter("nvmlDeviceGetUtilizationRates", handle)
        assert device is not None
        gpu = self._utilization(device)
        return _pynvml.c_nvmlUtilization_t(gpu=gpu, memory=gpu // 2)

    def nvmlDeviceGetTemperature(self, handle: SimulatedHandle, sensor: int) -> int:  # noqa: N802
        device = self._enter("nvmlDeviceGetTemperature", handle)
        assert device is not None
        return 35 + self._utilization(device) // 3

    def nvmlDeviceGetPowerUsage(self, handle: SimulatedHandle) -> int:  # noqa: N802
        device = self._enter("nvmlDeviceGetPowerUsage", handle)
        assert device is not None
        return int(device.power_limit_mw * (0.15 + 0.8 * self._utilization(device) / 100))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimulatedHandle) -> int:  # noqa: N802
        device = self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)
        assert device is not None
        return device.power_limit_mw

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: SimulatedHandle) -> int:  # noqa: N802
        device = self._enter("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        assert device is not None
        return device.pcie_generation

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: SimulatedHandle) -> int:  # noqa: N802
        device = self._enter("nvmlDeviceGetMaxPcieLinkWidth", handle)
        assert device is not None
        return device.pcie_width

    def nvmlDeviceGetPcieThroughput(self, handle: SimulatedHandle, counter: int) -> int:  # noqa: N802
        device = self._enter("nvmlDeviceGetPcieThroughput", handle)
        assert device is not None
        peak = 8e9 if counter == 0 else 12e9
        return int(peak * _wave(self._elapsed(), 11.0 + counter, device.index) / 1024)  # KB/s

    def nvmlDeviceGetNvLinkState(self, handle: SimulatedHandle, link: int) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetNvLinkState", handle)
        if "nvlink" in self._unsupported:
            raise _pynvml.NVMLError(_pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < _pynvml.NVML_NVLINK_MAX_LINKS:
            raise _pynvml.NVMLError(_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _pynvml.NVML_NVLINK_STATE_ACTIVE if link < NVML_NVLINK_LINKS else 0

    def nvmlDeviceGetFieldValues(self, handle: SimulatedHandle, field_ids: list) -> Any:  # noqa: N802
        device = self._enter("nvmlDeviceGetFieldValues", handle)
        assert device is not None
        values = (_pynvml.c_nvmlFieldValue_t * len(field_ids))()
        timestamp_us = int(self._clock() * 1e6)
        for slot, requested in zip(values, field_ids, strict=True):
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            slot.fieldId, slot.scopeId, slot.timestamp = field_id, scope, timestamp_us
            slot.nvmlReturn = _pynvml.NVML_SUCCESS
            slot.valueType = _pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            value = self._field_value(device, field_id, scope)
            if value is None:
                slot.nvmlReturn = _pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                slot.value.ullVal = value
        return values

    def _field_value(self, device: _Device, field_id: int, scope: int) -> int | None:
        if field_id in _NVLINK_FIELDS and "nvlink" in self._unsupported:
            return None
        if field_id in _PCIE_COUNTER_FIELDS and "pcie_counters" in self._unsupported:
            return None
        link_in_range = scope < NVML_NVLINK_LINKS
        if field_id == _pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return NVML_NVLINK_LINKS
        if field_id == _pynvml.NVML_FI_DEV_NVLINK_GET_SPEED:
            return NVLINK_LINK_MBPS if link_in_range else None
        if field_id in (
            _pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            _pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        ):
            direction = int(field_id == _pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
            if scope == _UINT_MAX:
                return sum(self._nvlink_kib(device, direction, link)
                           for link in range(NVML_NVLINK_LINKS))
            return self._nvlink_kib(device, direction, scope) if link_in_range else None
        if field_id == _pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES:
            return self._pcie_bytes(device, 0)
        if field_id == _pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES:
            return self._pcie_bytes(device, 1)
        return None
