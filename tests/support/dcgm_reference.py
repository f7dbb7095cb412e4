"""NVIDIA dcgm-exporter's own list of field names and Prometheus types, for the tests.

Read off ``etc/default-counters.csv`` (the fields dcgm-exporter exports by default) and the
DCP section of ``etc/dcp-metrics-included.csv`` (the ``DCGM_FI_PROF_*`` fields) in the
NVIDIA/dcgm-exporter repository; the NVLink byte rates are DCP gauges of the same kind.
A name we export must be in this list with the same type.
"""

DCGM_REFERENCE = {
    # default-counters.csv
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "counter",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "gauge",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
    # Field 112 under its name before DCGM 4.7 (dcgm_fields.h, DCGM 4.6.0: deprecated alias
    # of DCGM_FI_DEV_CLOCKS_EVENT_REASONS); dcgm-exporter exports it as a gauge when listed.
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "gauge",
    # dcp-metrics-included.csv
    "DCGM_FI_DEV_FB_RESERVED": "gauge",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gauge",
    "DCGM_FI_PROF_SM_ACTIVE": "gauge",
    "DCGM_FI_PROF_SM_OCCUPANCY": "gauge",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "gauge",
    "DCGM_FI_PROF_DRAM_ACTIVE": "gauge",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": "gauge",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": "gauge",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": "gauge",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "gauge",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "gauge",
    "DCGM_FI_PROF_NVLINK_TX_BYTES": "gauge",
    "DCGM_FI_PROF_NVLINK_RX_BYTES": "gauge",
}
# The labels dcgm-exporter puts on every GPU series (its Grafana board selects on them).
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname"}
