"""What ``nvml.h`` says: return codes and their ``nvmlErrorString`` texts, constant values,
field IDs, and the structures this driver keeps for itself.

Written from NVIDIA's ``nvml.h``, not from nvidia-ml-py: the simulated driver must not
inherit the binding's (or the reader's) view of NVML. The real binding's own structures
reach the driver through ``library.py``, which copies these values into them by field name.
"""

from __future__ import annotations

import ctypes

# ----- return codes (nvml.h, nvmlReturn_t) and nvmlErrorString texts -------------------
NVML_SUCCESS = 0
# code: (nvml.h name after NVML_ERROR_, class-name suffix as the binding builds it,
#        nvmlErrorString text)
_ERRORS: dict[int, tuple[str, str, str]] = {
    1: ("UNINITIALIZED", "Uninitialized", "Uninitialized"),
    2: ("INVALID_ARGUMENT", "InvalidArgument", "Invalid Argument"),
    3: ("NOT_SUPPORTED", "NotSupported", "Not Supported"),
    4: ("NO_PERMISSION", "NoPermission", "Insufficient Permissions"),
    5: ("ALREADY_INITIALIZED", "AlreadyInitialized", "Already Initialized"),
    6: ("NOT_FOUND", "NotFound", "Not Found"),
    7: ("INSUFFICIENT_SIZE", "InsufficientSize", "Insufficient Size"),
    9: ("DRIVER_NOT_LOADED", "DriverNotLoaded", "Driver Not Loaded"),
    10: ("TIMEOUT", "Timeout", "Timeout"),
    12: ("LIBRARY_NOT_FOUND", "LibraryNotFound", "NVML Shared Library Not Found"),
    13: ("FUNCTION_NOT_FOUND", "FunctionNotFound", "Function Not Found"),
    15: ("GPU_IS_LOST", "GpuIsLost", "GPU is lost"),
    16: ("RESET_REQUIRED", "ResetRequired", "GPU requires restart"),
    25: ("ARGUMENT_VERSION_MISMATCH", "ArgumentVersionMismatch",
         "Argument version mismatch"),
    999: ("UNKNOWN", "Unknown", "Unknown Error"),
}
ERROR_CODES = {f"NVML_ERROR_{name}": code for code, (name, _, _) in _ERRORS.items()}
ERROR_SUFFIXES = {suffix: code for code, (_, suffix, _) in _ERRORS.items()}


class NVMLError(Exception):
    """Raised inside the driver to return ``value`` (an ``nvmlReturn_t``) from a C call."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return error_string(self.value)


def error_string(code: int) -> str:
    """``nvmlErrorString``."""
    known = _ERRORS.get(code)
    return known[2] if known else "Unknown Error"


# ----- structures (nvml.h layouts) -------------------------------------------------------
class FieldValueUnion(ctypes.Union):
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong),
                ("siVal", ctypes.c_int), ("usVal", ctypes.c_ushort)]


class FieldValue(ctypes.Structure):
    """nvmlFieldValue_t. ``timestamp`` is CPU time in microseconds since 1970."""

    _fields_ = [("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32),
                ("timestamp", ctypes.c_int64), ("latencyUsec", ctypes.c_int64),
                ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", FieldValueUnion)]


class Memory(ctypes.Structure):
    """nvmlMemory_t: ``used`` includes the memory the driver reserves."""

    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    """nvmlMemory_v2_t: ``used`` excludes ``reserved``, as nvidia-smi shows them."""

    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong),
                ("reserved", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class DeviceAttributes(ctypes.Structure):
    """nvmlDeviceAttributes_t, as a MIG device reports it."""

    _fields_ = [("multiprocessorCount", ctypes.c_uint), ("sharedCopyEngineCount", ctypes.c_uint),
                ("sharedDecoderCount", ctypes.c_uint), ("sharedEncoderCount", ctypes.c_uint),
                ("sharedJpegCount", ctypes.c_uint), ("sharedOfaCount", ctypes.c_uint),
                ("gpuInstanceSliceCount", ctypes.c_uint),
                ("computeInstanceSliceCount", ctypes.c_uint),
                ("memorySizeMB", ctypes.c_ulonglong)]


class ProcessUtilizationSample(ctypes.Structure):
    """nvmlProcessUtilizationSample_t: ``timeStamp`` is CPU time in microseconds."""

    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong),
                ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint),
                ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class GpmSupport(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("isSupportedDevice", ctypes.c_uint)]


class PciInfo(ctypes.Structure):
    """nvmlPciInfo_t: ``busId`` is "domain:bus:device.function", 8 hex digits of domain."""

    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class GpmSampleStruct(ctypes.Structure):
    """nvmlGpmSample_t is an opaque pointer: what it points to is the driver's business."""


GpmSample = ctypes.POINTER(GpmSampleStruct)


class MetricInfo(ctypes.Structure):
    _fields_ = [("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p),
                ("unit", ctypes.c_char_p)]


class GpmMetric(ctypes.Structure):
    """nvmlGpmMetric_t: one metric's ID in, its own return code and value out."""

    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", ctypes.c_double), ("metricInfo", MetricInfo)]


GPM_METRIC_MAX = 98  # nvml.h NVML_GPM_METRIC_MAX in the 12.x headers (it grew later)


class GpmMetricsGet(ctypes.Structure):
    """nvmlGpmMetricsGet_t: the caller fills version, numMetrics, the two samples and IDs."""

    _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint),
                ("sample1", GpmSample), ("sample2", GpmSample),
                ("metrics", GpmMetric * GPM_METRIC_MAX)]


class EventSetStruct(ctypes.Structure):
    """nvmlEventSet_t is an opaque pointer too."""


EventSet = ctypes.POINTER(EventSetStruct)


class EventData(ctypes.Structure):
    """nvmlEventData_t. ``device`` is a device handle (here a simulated one, set apart)."""

    _fields_ = [("eventType", ctypes.c_ulonglong), ("eventData", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]
    device: object = None


# ----- constants (nvml.h values) ----------------------------------------------------------
FIELD_IDS = {
    "NVML_FI_DEV_NVLINK_LINK_COUNT": 91,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX": 138,  # KiB, per link (scopeId)
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX": 139,
    "NVML_FI_DEV_NVLINK_GET_SPEED": 164,  # MB/s, per link
    "NVML_FI_DEV_PCIE_COUNT_TX_BYTES": 197,
    "NVML_FI_DEV_PCIE_COUNT_RX_BYTES": 198,
    "NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES": 202,  # bytes, per link
    "NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES": 204,
}
# nvml.h NVML_GPM_METRIC_* (the ones the simulated H100/H200 answers).
GPM_METRIC_IDS = {
    "NVML_GPM_METRIC_GRAPHICS_UTIL": 1, "NVML_GPM_METRIC_SM_UTIL": 2,
    "NVML_GPM_METRIC_SM_OCCUPANCY": 3, "NVML_GPM_METRIC_INTEGER_UTIL": 4,
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": 5, "NVML_GPM_METRIC_DRAM_BW_UTIL": 10,
    "NVML_GPM_METRIC_FP64_UTIL": 11, "NVML_GPM_METRIC_FP32_UTIL": 12,
    "NVML_GPM_METRIC_FP16_UTIL": 13,
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC": 20, "NVML_GPM_METRIC_PCIE_RX_PER_SEC": 21,  # MiB/s
    "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC": 60, "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC": 61,
}
# nvml.h clocks-event reasons (named "throttle" reasons before R535): a bit mask.
CLOCKS_EVENT_REASONS = {
    "nvmlClocksEventReasonGpuIdle": 0x1, "nvmlClocksEventReasonApplicationsClocksSetting": 0x2,
    "nvmlClocksEventReasonSwPowerCap": 0x4, "nvmlClocksEventReasonHwSlowdown": 0x8,
    "nvmlClocksEventReasonSyncBoost": 0x10, "nvmlClocksEventReasonSwThermalSlowdown": 0x20,
    "nvmlClocksEventReasonHwThermalSlowdown": 0x40,
    "nvmlClocksEventReasonHwPowerBrakeSlowdown": 0x80,
    "nvmlClocksEventReasonDisplayClockSetting": 0x100,
}
CONSTANTS: dict[str, int] = {
    "NVML_SUCCESS": NVML_SUCCESS,
    **ERROR_CODES,
    **FIELD_IDS,
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_PCIE_UTIL_TX_BYTES": 0, "NVML_PCIE_UTIL_RX_BYTES": 1,
    "NVML_CLOCK_GRAPHICS": 0, "NVML_CLOCK_SM": 1, "NVML_CLOCK_MEM": 2,
    "NVML_VALUE_TYPE_DOUBLE": 0, "NVML_VALUE_TYPE_UNSIGNED_INT": 1,
    "NVML_VALUE_TYPE_UNSIGNED_LONG": 2, "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": 3,
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": 4, "NVML_VALUE_TYPE_SIGNED_INT": 5,
    "NVML_FEATURE_DISABLED": 0, "NVML_FEATURE_ENABLED": 1,
    "NVML_NVLINK_STATE_INACTIVE": 0, "NVML_NVLINK_STATE_ACTIVE": 1,
    # nvmlNvlinkVersion_t
    "NVML_NVLINK_VERSION_3_0": 4, "NVML_NVLINK_VERSION_4_0": 6, "NVML_NVLINK_VERSION_5_0": 7,
    "NVML_DEVICE_MIG_DISABLE": 0, "NVML_DEVICE_MIG_ENABLE": 1,
    "NVML_GPU_VIRTUALIZATION_MODE_NONE": 0, "NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH": 1,
    "NVML_GPU_VIRTUALIZATION_MODE_VGPU": 2, "NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU": 3,
    "NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA": 4,
    "nvmlMemory_v2": 0x02000028,
    "NVML_GPM_SUPPORT_VERSION": 1,
    **GPM_METRIC_IDS,
    "NVML_GPM_METRICS_GET_VERSION": 1,
    "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN": 0, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN": 1,
    "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_VOLATILE_ECC": 0, "NVML_AGGREGATE_ECC": 1,
    "NVML_PSTATE_0": 0, "NVML_PSTATE_8": 8, "NVML_PSTATE_UNKNOWN": 32,
    **CLOCKS_EVENT_REASONS,
    **{name.replace("Event", "Throttle"): bit for name, bit in CLOCKS_EVENT_REASONS.items()},
    "nvmlEventTypeXidCriticalError": 0x8, "nvmlEventTypeNone": 0,
}
