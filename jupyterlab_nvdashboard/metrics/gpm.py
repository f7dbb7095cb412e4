"""GPM activity (Hopper and later): what the SMs, tensor pipes and DRAM really did.

NVML's "GPU utilization" only says that at least one kernel was resident during the sample
period; GPM (GPU Performance Monitoring, nvml.h "GPM Functions", R520 and later) counts
what the hardware did. The reader keeps one pair of GPM sample buffers per GPU, and per MIG
GPU instance (``nvmlGpmMigSampleGet`` on the parent's handle). Every ``every_s`` (nvml.h asks
for more than 100 ms between the two samples; DCGM's profiling default is 1 s) it fills one
buffer, derives the metrics from it and the previous one with ``nvmlGpmMetricsGet``, and
keeps the newest buffer for next time. Every call goes through the NVML choke point in
``nvml.py``; a GPU without GPM (Ampere and older, a vGPU guest, an old driver or binding)
reports every metric as ``None`` and keeps all its other readings.

``GpmReader.read`` runs on the sampler's GPU reader thread after each pass (``sampler.py``);
its result goes into ``Sample.extra[GPM_FAMILY]`` (``families.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .families import GPM_FAMILY, GpmReading
from .nvml import GpuFacts, GpuReading, NvmlReader
from .session import MISSING, Device

GPM_EVERY_S = 1.0
MIB = 2**20
# GpmReading field -> (nvml.h metric, factor to the field's unit). Rates come in MiB/s.
GPM_METRICS: dict[str, tuple[str, float]] = {
    "sm_activity_pct": ("NVML_GPM_METRIC_SM_UTIL", 1.0),
    "sm_occupancy_pct": ("NVML_GPM_METRIC_SM_OCCUPANCY", 1.0),
    "tensor_activity_pct": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 1.0),
    "dram_bandwidth_pct": ("NVML_GPM_METRIC_DRAM_BW_UTIL", 1.0),
    "fp64_activity_pct": ("NVML_GPM_METRIC_FP64_UTIL", 1.0),
    "fp32_activity_pct": ("NVML_GPM_METRIC_FP32_UTIL", 1.0),
    "fp16_activity_pct": ("NVML_GPM_METRIC_FP16_UTIL", 1.0),
    "pcie_tx_bytes_per_s": ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", MIB),
    "pcie_rx_bytes_per_s": ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", MIB),
    "nvlink_tx_bytes_per_s": ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", MIB),
    "nvlink_rx_bytes_per_s": ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", MIB),
}
assert tuple(GPM_METRICS) == GpmReading._fields
NOT_AVAILABLE = GpmReading(*[None] * len(GpmReading._fields))
CLOSEST_METRIC = ("GPU utilization (/GPU-Utilization) comes closest, but it only says that "
                  "some kernel was running, not how much of the GPU it used")
NO_GPM_HARDWARE = ("GPM needs a Hopper or later data-centre GPU (H100, H200, GH200, B200) "
                   "and driver R520 or later")
NO_GPM_VGPU = "GPM is not available inside a vGPU guest"


def gpm_unavailable_reason(facts: GpuFacts, parent: GpuFacts | None,
                           unavailable: dict[str, str]) -> str | None:
    """Why this device row cannot report GPM, in words; None when it can."""
    physical = parent or facts
    if physical.virtualization == "vgpu":
        return NO_GPM_VGPU
    if physical.gpm_supported is None:
        return unavailable.get("gpm") or "this driver cannot say whether the GPU has GPM"
    if not physical.gpm_supported:
        return NO_GPM_HARDWARE
    mig = facts.mig or {}
    if facts.kind == "mig" and mig.get("gpu_instance_id") is None:
        return "NVML gave no GPU instance ID for this MIG device"
    if facts.kind == "mig" and mig.get("compute_instances", 1) > 1:
        return (f"GPM reads a whole GPU instance, and GPU instance {mig['gpu_instance_id']} "
                f"holds {mig['compute_instances']} compute instances: their activity cannot "
                "be told apart")
    return None


@dataclass
class _Pair:
    """Two GPM sample buffers: the one filled last time, and the one to fill next."""

    buffers: tuple[Any, Any]
    request: Any  # the nvmlGpmMetricsGet_t, reused
    fields: tuple[str, ...]  # the GpmReading field of each requested metric, in order
    filled: int | None = None  # which buffer holds the previous sample


class GpmReader:
    """Derives ``GpmReading`` per device row; call ``read`` from the GPU reader thread."""

    name = GPM_FAMILY

    def __init__(self, nvml: NvmlReader, every_s: float = GPM_EVERY_S) -> None:
        self.session = nvml.session  # the choke point (session.py)
        self.every_s = every_s
        self._devices: list[Device] | None = None
        self._lib: Any = None
        self._pairs: dict[int, _Pair] = {}
        self._latest: dict[int, GpmReading] | None = None
        self._last_pass = -math.inf
        # Row -> why a GPU that has GPM gave no reading (an NVML error), in words.
        self.errors: dict[int, str] = {}
        self._refused: set[int] = set()  # rows whose GPM calls answered NOT_SUPPORTED

    def read(self, gpus: tuple[GpuReading, ...] = ()) -> dict[int, GpmReading] | None:
        """The newest readings, refreshed every ``every_s``; None before NVML is up."""
        nvml = self.session
        devices = nvml.devices()
        if not devices:
            self._forget()
            return None
        if devices is not self._devices or nvml.library is not self._lib:
            self._forget()
            self._devices, self._lib = devices, nvml.library
        now = nvml.clock()
        if self._latest is None or now - self._last_pass >= self.every_s:
            self._last_pass = now
            self._latest = {device.facts.index: self._read_device(device, now)
                            for device in devices}
        return self._latest

    def _forget(self) -> None:
        """Free the buffers of devices that are gone (not after a fork: not ours to free)."""
        if self._lib is not None and self._lib is self.session.library:
            for index in list(self._pairs):
                self._drop(index)
        self._pairs, self._devices, self._lib, self._latest = {}, None, None, None
        self._refused = set()
        self._last_pass = -math.inf

    def _drop(self, index: int) -> None:
        pair = self._pairs.pop(index, None)
        for buffer in pair.buffers if pair else ():
            self.session.invoke("nvmlGpmSampleFree", buffer)

    def _supported(self, device: Device) -> bool:
        parent = device.parent.facts if device.parent is not None else None
        return gpm_unavailable_reason(device.facts, parent, {}) is None

    def _pair(self, device: Device) -> _Pair | None:
        index = device.facts.index
        if index in self._pairs:
            return self._pairs[index]
        nvml = self.session
        request_type = nvml.constant("c_nvmlGpmMetricsGet_t")
        version = nvml.constant("NVML_GPM_METRICS_GET_VERSION")
        ids = {field: nvml.constant(name) for field, (name, _) in GPM_METRICS.items()}
        fields = tuple(field for field, metric_id in ids.items() if metric_id is not None)
        if request_type is None or version is None or not fields:
            self.errors[index] = "this nvidia-ml-py cannot compute GPM metrics"
            return None
        buffers = [nvml.call("nvmlGpmSampleAlloc") for _ in range(2)]
        if None in buffers:
            self.errors[index] = "NVML could not allocate GPM sample buffers"
            return None
        request = request_type()
        request.version, request.numMetrics = version, len(fields)
        for position, field in enumerate(fields):
            request.metrics[position].metricId = ids[field]
        pair = self._pairs[index] = _Pair((buffers[0], buffers[1]), request, fields)
        return pair

    def _sample(self, device: Device, buffer: Any) -> Any:
        """Fill ``buffer`` for this device; None, or the error."""
        parent = device.parent
        if parent is None:
            _, error = self.session.invoke("nvmlGpmSampleGet", device.handle, buffer)
        else:
            instance = (device.facts.mig or {}).get("gpu_instance_id")
            _, error = self.session.invoke("nvmlGpmMigSampleGet", parent.handle, instance, buffer)
        return error

    def _read_device(self, device: Device, now: float) -> GpmReading:
        index = device.facts.index
        if device.lost or index in self._refused or not self._supported(device):
            self._drop(index)
            return NOT_AVAILABLE
        pair = self._pair(device)
        if pair is None:
            return NOT_AVAILABLE
        target = 0 if pair.filled is None else 1 - pair.filled
        error = self._sample(device, pair.buffers[target])
        if error is not None:
            self._failed(device, error)
            pair.filled = None  # the next pass starts a new pair
            return NOT_AVAILABLE
        previous, pair.filled = pair.filled, target
        if previous is None:
            return NOT_AVAILABLE  # one sample so far: the next pass derives the metrics
        request = pair.request
        request.sample1, request.sample2 = pair.buffers[previous], pair.buffers[target]
        _, error = self.session.invoke("nvmlGpmMetricsGet", request)
        if error is not None:
            self._failed(device, error)
            return NOT_AVAILABLE
        self.errors.pop(index, None)
        values: dict[str, float | None] = dict.fromkeys(GpmReading._fields)
        for position, field in enumerate(pair.fields):
            metric = request.metrics[position]
            value = float(metric.value)
            if metric.nvmlReturn == self.session.success_code and math.isfinite(value):
                values[field] = max(0.0, value) * GPM_METRICS[field][1]
        # Where the PCIe counters are too narrow to rate (links.py), these are its PCIe rates.
        device.gpm_pcie = (now, values["pcie_tx_bytes_per_s"], values["pcie_rx_bytes_per_s"])
        return GpmReading(**values)

    def _failed(self, device: Device, error: Any) -> None:
        nvml = self.session
        if isinstance(error, getattr(nvml.library, "NVMLError_GpuIsLost", ())):
            nvml.mark_lost(device.parent or device)
        code = getattr(error, "value", None)
        if error is MISSING or code in (nvml.constant("NVML_ERROR_NOT_SUPPORTED"),
                                         nvml.constant("NVML_ERROR_FUNCTION_NOT_FOUND")):
            self._refused.add(device.facts.index)  # it will not start answering: stop asking
        self.errors[device.facts.index] = nvml.reason(error, "GPM") or str(error) or \
            type(error).__name__
