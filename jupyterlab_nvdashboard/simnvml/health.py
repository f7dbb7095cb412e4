"""The simulated driver's GPM, health and event functions (a mixin of ``SimulatedNvml``).

What they answer, and where that comes from:

- **GPM** (nvml.h, "GPM Functions", R520 and later): only Hopper or newer fully supported
  GPUs, never inside a vGPU guest (``nvmlGpmQueryDeviceSupport``). A sample is an opaque
  buffer from ``nvmlGpmSampleAlloc``; ``nvmlGpmSampleGet`` fills it for a GPU and
  ``nvmlGpmMigSampleGet`` for one MIG GPU instance, on the parent GPU's handle (a MIG device
  handle is not accepted). ``nvmlGpmMetricsGet`` computes every requested metric from two
  samples, each with its own return code. Rates are in MiB/s.
- **The simulated truth, stated so tests can check derived values exactly.** A GPU's load
  ``L(t)`` is the same wave that drives its utilization (``utilization = 100 L``); a MIG GPU
  instance ``g`` has its own, ``L_g(t) = wave(t, 13 s, phase g)``, and a MIG-enabled GPU as a
  whole is the slice-weighted sum ``sum(slices_g / 7 * L_g)`` (idle slices count as 0). Over
  two samples at ``t1 < t2``, with ``M`` the mean of the load over ``[t1, t2]``::

      metric = 100 * GPM_LOAD_SHARES[metric] * M        (percent metrics)

  so SM activity stays well below utilization, as it does for real workloads that leave
  SMs idle while a kernel is resident. PCIe and NVLink rates are the byte counters' own
  growth over ``[t1, t2]`` (the same counters as the field values, never wrapped: GPM's are
  its own, however narrow the fields), in MiB/s. A GPU instance
  answers ``NVML_ERROR_NOT_SUPPORTED`` for the interconnect metrics (they belong to the GPU).
- **Health.** Clocks: SM ``max * (0.55 + 0.45 L)``, memory at its maximum; P0 under load,
  P8 when idle (``L < 0.05``). One GPU throttles (GPU 1, or GPU 0 alone): its SM clock is
  held at 80 %, it reports the SW power cap clocks-event reason, runs hot (60 + 33 L degrees
  C, so past its slowdown threshold at peak load, when it adds HW thermal slowdown) and at
  97-100 % of its power limit. GPU 0 has ECC errors (volatile 3 corrected; aggregate 41
  corrected, 1 uncorrected) and one remapped row pending. ``nvmlDeviceGetCurrentClocksEvent
  Reasons`` exists from R535 (the older ``...ThrottleReasons`` name stays). GeForce cards have
  no ECC, no row remapping and no events (nvml.h: "fully supported devices" only); fans
  exist only where the model has one; vGPU guests read no temperature thresholds.
- **XID events**: ``inject_xid`` queues one; an event set created with ``nvmlEventSetCreate``
  and registered with ``nvmlDeviceRegisterEvents`` (``nvmlEventTypeXidCriticalError``)
  delivers each event that happened after registration once, from ``nvmlEventSetWait_v2``.
  When nothing is pending the call waits its ``timeoutms`` (as the driver does) and raises
  ``NVMLError_Timeout``. ``event_wait_timeouts_ms`` records every timeout asked for.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from typing import Any

from . import nvml_h
from .handles import SimulatedHandle
from .nvml_h import NVML_SUCCESS, NVMLError
from .waves import wave_integral

E = nvml_h.ERROR_CODES
C = nvml_h.CONSTANTS
MIB = 2**20
MIG_SLICES = 7  # compute slices of a whole A100/H100 (MIG user guide)
MIG_LOAD_PERIOD_S = 13.0
IDLE_LOAD = 0.05
THROTTLED_CLOCK = 0.8
ECC_ERRORS = {  # (error type, counter type) -> count, on the GPU with ECC errors
    (C["NVML_MEMORY_ERROR_TYPE_CORRECTED"], C["NVML_VOLATILE_ECC"]): 3,
    (C["NVML_MEMORY_ERROR_TYPE_UNCORRECTED"], C["NVML_VOLATILE_ECC"]): 0,
    (C["NVML_MEMORY_ERROR_TYPE_CORRECTED"], C["NVML_AGGREGATE_ECC"]): 41,
    (C["NVML_MEMORY_ERROR_TYPE_UNCORRECTED"], C["NVML_AGGREGATE_ECC"]): 1,
}
REMAPPED_ROWS = (2, 1, 1, 0)  # correctable, uncorrectable, pending, failure occurred
CUDA_BY_DRIVER = {470: 11040, 535: 12020, 550: 12040, 570: 12080, 575: 12090}
# Each GPM percent metric as a share of the mean load (see the module docstring).
GPM_LOAD_SHARES = {
    "NVML_GPM_METRIC_GRAPHICS_UTIL": 1.0,
    "NVML_GPM_METRIC_SM_UTIL": 0.62,
    "NVML_GPM_METRIC_SM_OCCUPANCY": 0.41,
    "NVML_GPM_METRIC_INTEGER_UTIL": 0.12,
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": 0.35,
    "NVML_GPM_METRIC_DRAM_BW_UTIL": 0.48,
    "NVML_GPM_METRIC_FP64_UTIL": 0.03,
    "NVML_GPM_METRIC_FP32_UTIL": 0.22,
    "NVML_GPM_METRIC_FP16_UTIL": 0.09,
}
_PERCENT_IDS = {C[name]: share for name, share in GPM_LOAD_SHARES.items()}
_RATE_IDS = {C[name]: name for name in (
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC", "NVML_GPM_METRIC_PCIE_RX_PER_SEC",
    "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC")}
XID = C["nvmlEventTypeXidCriticalError"]
# The GPM metrics a scenario states, and its figure for each (scenarios.readings); the
# others (integer, FP64) keep the profile's load model.
SCENARIO_GPM_FIGURES = {
    "NVML_GPM_METRIC_GRAPHICS_UTIL": "utilization_pct", "NVML_GPM_METRIC_SM_UTIL": "sm_util_pct",
    "NVML_GPM_METRIC_SM_OCCUPANCY": "sm_occupancy_pct",
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": "any_tensor_util_pct",
    "NVML_GPM_METRIC_DRAM_BW_UTIL": "dram_bw_util_pct",
    "NVML_GPM_METRIC_FP32_UTIL": "fp32_util_pct",
    "NVML_GPM_METRIC_FP16_UTIL": "fp16_util_pct",
}
NO_INSTANCE = 0xFFFFFFFF


@dataclass
class _GpmSample:
    gpu: int
    instance: int | None  # MIG GPU instance ID
    time_s: float  # simulated elapsed seconds
    load_integral: float
    counters: dict[str, float]  # cumulative bytes per rate metric
    # Under a scenario: metric ID -> the integral of its percent since the start.
    played: dict[int, float] = field(default_factory=dict)


@dataclass
class _EventSet:
    registered: dict[int, tuple[int, float]] = field(default_factory=dict)  # gpu -> (mask, at)
    delivered: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class _Xid:
    number: int  # the event's ID
    gpu: int
    xid: int
    at_s: float  # simulated clock
    gpu_instance_id: int | None


class HealthSimulation:
    """GPM, health and XID events; mixed into ``SimulatedNvml`` (which provides ``_enter``,
    ``_gpus``, ``_load``, ``_elapsed``, ``_clock``, ``_pcie_bytes`` and ``_nvlink_bytes``)."""

    _gpus: list[Any]
    profile: Any

    def _init_health(self) -> None:
        self._gpm_samples: dict[int, tuple[ctypes.Array, _GpmSample | None]] = {}
        self._event_sets: dict[int, tuple[ctypes.Array, _EventSet]] = {}
        self._xids: list[_Xid] = []
        self.event_wait_timeouts_ms: list[int] = []

    # ----- test hooks -------------------------------------------------------------------
    def inject_xid(self, gpu: int, xid: int, after_s: float = 0.0,
                   gpu_instance_id: int | None = None) -> None:
        """GPU ``gpu`` reports XID ``xid`` ``after_s`` seconds from now."""
        self._xids.append(_Xid(len(self._xids), gpu, xid, self._clock() + after_s,
                               gpu_instance_id))

    def throttling_gpu(self) -> int:
        return 1 if len(self._gpus) > 1 else 0

    def ecc_gpu(self) -> int:
        return 0

    def mean_load(self, gpu: int, start_s: float, end_s: float,
                  gpu_instance_id: int | None = None) -> float:
        """The stated truth behind GPM: mean load of a GPU or GPU instance over elapsed
        seconds ``[start_s, end_s]`` of the simulation."""
        return (self._load_integral(self._gpus[gpu], gpu_instance_id, end_s)
                - self._load_integral(self._gpus[gpu], gpu_instance_id, start_s)) \
            / (end_s - start_s)

    # ----- the truth ----------------------------------------------------------------------
    def _load_integral(self, gpu: Any, instance: int | None, t: float) -> float:
        slots = gpu.model.mig
        if instance is not None:
            return wave_integral(t, MIG_LOAD_PERIOD_S, instance)
        if slots:
            return sum(slot.gpu_slices / MIG_SLICES
                       * wave_integral(t, MIG_LOAD_PERIOD_S, slot.gpu_instance_id)
                       for slot in slots)
        return wave_integral(t, 17.0, gpu.index)

    def _throttles(self, gpu: Any) -> bool:
        return gpu.index == self.throttling_gpu()

    def _temperature(self, gpu: Any) -> int:
        playing = self._playing(gpu)
        if playing is not None:
            return int(playing["temperature_c"])
        load = self._load(gpu)
        return (60 if self._throttles(gpu) else 35) + int(33 * load)

    def _power_mw(self, gpu: Any) -> int:
        playing = self._playing(gpu)
        if playing is not None:
            return int(1000 * (playing["power_w"] or 0.0))
        load = self._load(gpu)
        share = 0.97 + 0.03 * load if self._throttles(gpu) else 0.15 + 0.8 * load
        return int(gpu.model.power_limit_mw * share)

    def _gpm_supported(self, gpu: Any) -> bool:
        return (gpu.model.gpm and self.profile.driver_major >= 520
                and gpu.model.virtualization_mode != 2)

    def _enter_gpu(self, function: str, handle: Any) -> Any:
        gpu = self._enter(function, handle)
        assert gpu is not None
        return gpu

    # ----- GPM ------------------------------------------------------------------------------
    def nvmlGpmSampleAlloc(self) -> Any:  # noqa: N802 - the binding's names
        self._enter("nvmlGpmSampleAlloc")
        buffer = ctypes.create_string_buffer(16)
        self._gpm_samples[ctypes.addressof(buffer)] = (buffer, None)
        return ctypes.cast(buffer, nvml_h.GpmSample)

    def nvmlGpmSampleFree(self, sample: Any) -> None:  # noqa: N802
        self._enter("nvmlGpmSampleFree")
        if self._gpm_samples.pop(self._address(sample), None) is None:
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])

    @staticmethod
    def _address(sample: Any) -> int:
        return ctypes.cast(sample, ctypes.c_void_p).value or 0

    def _fill(self, sample: Any, gpu: Any, instance: int | None) -> Any:
        address = self._address(sample)
        if address not in self._gpm_samples:
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        now = self._elapsed()
        counters: dict[str, float] = {}
        if instance is None:
            active = [link for link in range(gpu.model.nvlink_link_count)
                      if link not in gpu.model.nvlink_down]
            counters = {
                # GPM keeps its own wide counters: the field values' width is not its.
                "NVML_GPM_METRIC_PCIE_TX_PER_SEC": self._pcie_bytes(gpu, 0, wide=True),
                "NVML_GPM_METRIC_PCIE_RX_PER_SEC": self._pcie_bytes(gpu, 1, wide=True),
                "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC": sum(
                    self._nvlink_bytes(gpu, 0, link) for link in active),
                "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC": sum(
                    self._nvlink_bytes(gpu, 1, link) for link in active),
            }
        played = {}
        if self.scenario is not None and instance is None:
            played = {C[metric]: self.scenario.integral(gpu.index, gpu.model, figure, now)
                      for metric, figure in SCENARIO_GPM_FIGURES.items()}
        self._gpm_samples[address] = (self._gpm_samples[address][0], _GpmSample(
            gpu.index, instance, now, self._load_integral(gpu, instance, now), counters,
            played))
        return sample

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:  # noqa: N802
        gpu = self._enter_gpu("nvmlGpmSampleGet", handle)
        if self.profile.driver_major < 520:
            raise NVMLError(E["NVML_ERROR_FUNCTION_NOT_FOUND"])
        if not self._gpm_supported(gpu):
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        return self._fill(sample, gpu, None)

    def nvmlGpmMigSampleGet(self, handle: Any, gpu_instance_id: int, sample: Any) -> Any:  # noqa: N802
        gpu = self._enter_gpu("nvmlGpmMigSampleGet", handle)
        if self.profile.driver_major < 520:
            raise NVMLError(E["NVML_ERROR_FUNCTION_NOT_FOUND"])
        if not self._gpm_supported(gpu):
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        if gpu_instance_id not in {slot.gpu_instance_id for slot in gpu.model.mig}:
            raise NVMLError(E["NVML_ERROR_NOT_FOUND" if gpu.model.mig
                              else "NVML_ERROR_INVALID_ARGUMENT"])
        return self._fill(sample, gpu, gpu_instance_id)

    def nvmlGpmMetricsGet(self, request: Any) -> Any:  # noqa: N802
        self._enter("nvmlGpmMetricsGet")
        if self.profile.driver_major < 520:
            raise NVMLError(E["NVML_ERROR_FUNCTION_NOT_FOUND"])
        if request.version != C["NVML_GPM_METRICS_GET_VERSION"] or \
                not 0 < request.numMetrics <= nvml_h.GPM_METRIC_MAX:
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        first = self._gpm_samples.get(self._address(request.sample1), (None, None))[1]
        second = self._gpm_samples.get(self._address(request.sample2), (None, None))[1]
        if first is None or second is None or (first.gpu, first.instance) != \
                (second.gpu, second.instance) or second.time_s <= first.time_s:
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        seconds = second.time_s - first.time_s
        mean = (second.load_integral - first.load_integral) / seconds
        for position in range(request.numMetrics):
            metric = request.metrics[position]
            metric.nvmlReturn, metric.value = NVML_SUCCESS, 0.0
            if metric.metricId in first.played:
                metric.value = (second.played[metric.metricId]
                                - first.played[metric.metricId]) / seconds
            elif metric.metricId in _PERCENT_IDS:
                metric.value = 100.0 * _PERCENT_IDS[metric.metricId] * mean
            elif _RATE_IDS.get(metric.metricId) in first.counters:
                name = _RATE_IDS[metric.metricId]
                metric.value = (second.counters[name] - first.counters[name]) / seconds / MIB
            elif metric.metricId in _RATE_IDS:
                metric.nvmlReturn = E["NVML_ERROR_NOT_SUPPORTED"]
            else:
                metric.nvmlReturn = E["NVML_ERROR_INVALID_ARGUMENT"]
        return request

    # ----- health ---------------------------------------------------------------------------
    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        self._enter("nvmlSystemGetCudaDriverVersion")
        major = self.profile.driver_major
        return CUDA_BY_DRIVER.get(major, max(v for d, v in CUDA_BY_DRIVER.items() if d <= major))

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:  # noqa: N802
        gpu = self._enter_gpu("nvmlDeviceGetClockInfo", handle)
        if not self._supports_argument("nvmlDeviceGetClockInfo", clock):
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        if clock == C["NVML_CLOCK_MEM"]:
            return gpu.model.max_memory_clock_mhz
        playing = self._playing(gpu)
        if playing is not None:
            return int(playing["sm_clock_mhz"])
        held = THROTTLED_CLOCK if self._throttles(gpu) else 1.0
        return int(gpu.model.max_sm_clock_mhz * (0.55 + 0.45 * self._load(gpu)) * held)

    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int:  # noqa: N802
        gpu = self._enter_gpu("nvmlDeviceGetPerformanceState", handle)
        playing = self._playing(gpu)
        busy = self._load(gpu) if playing is None else playing["utilization_pct"] / 100
        return C["NVML_PSTATE_0"] if busy >= IDLE_LOAD else C["NVML_PSTATE_8"]

    def _reasons(self, gpu: Any) -> int:
        playing = self._playing(gpu)
        if playing is not None:
            return int(playing["clock_event_reasons"])
        if self._throttles(gpu):
            reasons = C["nvmlClocksEventReasonSwPowerCap"]
            if self._temperature(gpu) >= gpu.model.temperature_slowdown_c:
                reasons |= C["nvmlClocksEventReasonHwThermalSlowdown"]
            return reasons
        return C["nvmlClocksEventReasonGpuIdle"] if self._load(gpu) < IDLE_LOAD else 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:  # noqa: N802
        gpu = self._enter_gpu("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if self.profile.driver_major < 535:
            raise NVMLError(E["NVML_ERROR_FUNCTION_NOT_FOUND"])
        return self._reasons(gpu)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:  # noqa: N802
        return self._reasons(self._enter_gpu("nvmlDeviceGetCurrentClocksThrottleReasons",
                                             handle))

    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int:  # noqa: N802
        gpu = self._enter_gpu("nvmlDeviceGetTemperatureThreshold", handle)
        if gpu.model.virtualization_mode == 2 or \
                not self._supports(gpu, "nvmlDeviceGetTemperature"):
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        thresholds = {C["NVML_TEMPERATURE_THRESHOLD_SHUTDOWN"]: gpu.model.temperature_shutdown_c,
                      C["NVML_TEMPERATURE_THRESHOLD_SLOWDOWN"]: gpu.model.temperature_slowdown_c}
        if threshold not in thresholds or \
                not self._supports_argument("nvmlDeviceGetTemperatureThreshold", threshold):
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        return thresholds[threshold]

    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:  # noqa: N802
        gpu = self._enter_gpu("nvmlDeviceGetFanSpeed", handle)
        if not gpu.model.fan:
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        return 30 + int(50 * self._load(gpu))

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:  # noqa: N802
        gpu = self._enter_gpu("nvmlDeviceGetTotalEccErrors", handle)
        if not gpu.model.fully_supported:  # GeForce: no ECC memory
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        if (error_type, counter_type) not in ECC_ERRORS:
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        return ECC_ERRORS[error_type, counter_type] if gpu.index == self.ecc_gpu() else 0

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:  # noqa: N802
        gpu = self._enter_gpu("nvmlDeviceGetRemappedRows", handle)
        if not gpu.model.fully_supported or gpu.model.compute_capability < (8, 0):
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])  # row remapping: Ampere and later
        return REMAPPED_ROWS if gpu.index == self.ecc_gpu() else (0, 0, 0, 0)

    # ----- events ---------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> Any:  # noqa: N802
        self._enter("nvmlEventSetCreate")
        buffer = ctypes.create_string_buffer(16)
        self._event_sets[ctypes.addressof(buffer)] = (buffer, _EventSet())
        return ctypes.cast(buffer, nvml_h.EventSet)

    def _event_set(self, handle: Any) -> _EventSet:
        found = self._event_sets.get(self._address(handle))
        if found is None:
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        return found[1]

    def nvmlEventSetFree(self, event_set: Any) -> None:  # noqa: N802
        self._enter("nvmlEventSetFree")
        self._event_set(event_set)
        del self._event_sets[self._address(event_set)]

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:  # noqa: N802
        gpu = self._enter_gpu("nvmlDeviceRegisterEvents", handle)
        if not gpu.model.fully_supported or event_types & ~XID:
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        target = self._event_set(event_set)
        target.registered[gpu.index] = (event_types, self._clock())

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:  # noqa: N802
        self._enter("nvmlEventSetWait_v2")
        target = self._event_set(event_set)
        self.event_wait_timeouts_ms.append(int(timeout_ms))
        now = self._clock()
        for event in self._xids:
            mask, since = target.registered.get(event.gpu, (0, now))
            if mask & XID and since <= event.at_s <= now and event.number not in target.delivered:
                target.delivered.add(event.number)
                instance = NO_INSTANCE if event.gpu_instance_id is None else event.gpu_instance_id
                data = nvml_h.EventData(eventType=XID, eventData=event.xid,
                                         gpuInstanceId=instance,
                                         computeInstanceId=NO_INSTANCE if instance == NO_INSTANCE
                                         else 0)
                data.device = SimulatedHandle(event.gpu)
                return data
        if timeout_ms > 0:
            time.sleep(timeout_ms / 1000)  # the driver waits that long for an event
        raise NVMLError(E["NVML_ERROR_TIMEOUT"])
