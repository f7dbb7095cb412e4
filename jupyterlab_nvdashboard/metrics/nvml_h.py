"""ABI-stable values from NVIDIA's ``nvml.h``, for a binding that predates a name.

The driver answers by value: a field ID, an enum or a clocks-event bit means the same in
every release. So when an older nvidia-ml-py lacks the *name* (12.535.161 has no
``NVML_FI_DEV_PCIE_COUNT_TX_BYTES`` and no ``NVML_NVLINK_STATE_ACTIVE``), the reader uses
the header's value instead (as nvitop does), and a missing name never switches a feature
off. Only values the header has never changed are listed; ``NVML_NVLINK_MAX_LINKS`` grew
from 18 to 36 and is not one of them.
"""

from __future__ import annotations

VALUES: dict[str, int] = {
    # nvmlReturn_t
    "NVML_SUCCESS": 0, "NVML_ERROR_UNINITIALIZED": 1, "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3, "NVML_ERROR_NO_PERMISSION": 4, "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_INSUFFICIENT_SIZE": 7, "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_TIMEOUT": 10, "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13, "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_UNKNOWN": 999,
    # nvmlEnableState_t: what nvmlDeviceGetNvLinkState and nvmlDeviceGetMigMode answer
    "NVML_FEATURE_DISABLED": 0, "NVML_FEATURE_ENABLED": 1,
    "NVML_DEVICE_MIG_DISABLE": 0, "NVML_DEVICE_MIG_ENABLE": 1,
    # field IDs (nvmlFieldValue_t.fieldId)
    "NVML_FI_DEV_NVLINK_LINK_COUNT": 91,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX": 138, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX": 139,
    "NVML_FI_DEV_NVLINK_GET_SPEED": 164,
    "NVML_FI_DEV_PCIE_COUNT_TX_BYTES": 197, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES": 198,
    "NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES": 202, "NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES": 204,
    # nvmlValueType_t
    "NVML_VALUE_TYPE_DOUBLE": 0, "NVML_VALUE_TYPE_UNSIGNED_INT": 1,
    "NVML_VALUE_TYPE_UNSIGNED_LONG": 2, "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": 3,
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": 4, "NVML_VALUE_TYPE_SIGNED_INT": 5,
    # enums passed as arguments
    "NVML_PCIE_UTIL_TX_BYTES": 0, "NVML_PCIE_UTIL_RX_BYTES": 1,
    "NVML_CLOCK_GRAPHICS": 0, "NVML_CLOCK_SM": 1, "NVML_CLOCK_MEM": 2,
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN": 0, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN": 1,
    "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_VOLATILE_ECC": 0, "NVML_AGGREGATE_ECC": 1,
    "NVML_PSTATE_0": 0, "NVML_PSTATE_8": 8, "NVML_PSTATE_UNKNOWN": 32,
    "NVML_GPU_VIRTUALIZATION_MODE_NONE": 0, "NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH": 1,
    "NVML_GPU_VIRTUALIZATION_MODE_VGPU": 2, "NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU": 3,
    "NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA": 4,
    # struct versions
    "nvmlMemory_v2": 0x02000028, "NVML_GPM_SUPPORT_VERSION": 1,
    "NVML_GPM_METRICS_GET_VERSION": 1,
    # nvmlGpmMetricId_t
    "NVML_GPM_METRIC_GRAPHICS_UTIL": 1, "NVML_GPM_METRIC_SM_UTIL": 2,
    "NVML_GPM_METRIC_SM_OCCUPANCY": 3, "NVML_GPM_METRIC_INTEGER_UTIL": 4,
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": 5, "NVML_GPM_METRIC_DRAM_BW_UTIL": 10,
    "NVML_GPM_METRIC_FP64_UTIL": 11, "NVML_GPM_METRIC_FP32_UTIL": 12,
    "NVML_GPM_METRIC_FP16_UTIL": 13,
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC": 20, "NVML_GPM_METRIC_PCIE_RX_PER_SEC": 21,
    "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC": 60, "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC": 61,
    # clocks-event ("throttle" before R535) reason bits, and event types
    "nvmlClocksEventReasonGpuIdle": 0x1, "nvmlClocksEventReasonApplicationsClocksSetting": 0x2,
    "nvmlClocksEventReasonSwPowerCap": 0x4, "nvmlClocksEventReasonHwSlowdown": 0x8,
    "nvmlClocksEventReasonSyncBoost": 0x10, "nvmlClocksEventReasonSwThermalSlowdown": 0x20,
    "nvmlClocksEventReasonHwThermalSlowdown": 0x40,
    "nvmlClocksEventReasonHwPowerBrakeSlowdown": 0x80,
    "nvmlClocksEventReasonDisplayClockSetting": 0x100,
    "nvmlEventTypeNone": 0, "nvmlEventTypeXidCriticalError": 0x8,
}
