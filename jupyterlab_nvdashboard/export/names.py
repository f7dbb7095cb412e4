"""The name contracts of ``/metrics`` (issue 46): which DCGM names, and which units, a
scrape carries.

- ``classic``: dcgm-exporter's names and units up to 4.8.x (``dcgm.FIELDS``), which the
  readings are turned into first. The default, so that boards, alerts and recording rules
  written for those exporters keep working after an upgrade of this server.
- ``dcgm47``: the names and units of DCGM 4.7 as dcgm-exporter 4.9.0 serves them, with
  4.10.0's ``DCGM_FI_PROF_*_BYTES_PER_SECOND``. Each is computed from its classic value by
  an exact conversion (a ratio is the percentage / 100, bytes are MiB x 2**20, hertz are
  MHz x 10**6), never from a rounded figure.
- ``both``: every family under each name, for a fleet that is upgrading; a name that did
  not change is sent once.

Every DCGM name carries DCGM's own quantity (value, unit, and the type dcgm-exporter gives
it) or is not sent; NVML's cumulative byte counters are the project's own
``nvdashboard_gpu_*_bytes_total`` series, sent in every set. docs/prometheus.md has the
table with the source of each name and field number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import METRICS_NAME_SETS as NAME_SETS
from ..config import Config
from .dcgm import FIELDS, KIB, MIB

CLASSIC, DCGM47, BOTH = NAME_SETS  # config.py validates the setting; this module means it
DEFAULT_NAME_SET = Config.metrics_names


OWN_PREFIX = "nvdashboard_"


@dataclass(frozen=True)
class ExportedField:
    """One family of a name set: its value is ``sum(values at positions) * factor /
    divisor`` of a GPU's values in ``dcgm.FIELDS`` order (None if any is unknown), cut to a
    whole number toward 0 where the field is ``whole`` (DCGM stores it as an int64)."""

    name: str
    kind: str  # "gauge" or "counter"
    help: str
    positions: tuple[int, ...]
    factor: float = 1.0
    divisor: float = 1.0
    whole: bool = False

    @property
    def own(self) -> bool:
        """One of the project's series, not a DCGM field: Prometheus' conventions (a
        counter's samples end in ``_total``, snake_case labels) rather than dcgm-exporter's."""
        return self.name.startswith(OWN_PREFIX)

    @property
    def sample_name(self) -> str:
        """dcgm-exporter names a counter's samples by its field, with no ``_total`` (its
        boards select on that); our own counters follow Prometheus' convention."""
        return self.name + "_total" if self.kind == "counter" and self.own else self.name

    def value(self, values: Sequence[float | None]) -> float | None:
        parts = [values[p] if p < len(values) else None for p in self.positions]
        if any(part is None for part in parts):
            return None
        value = sum(parts) * self.factor / self.divisor  # type: ignore[arg-type]
        return float(math.trunc(value)) if self.whole else value


_POSITION = {field.name: position for position, field in enumerate(FIELDS)}


def _renamed(name: str, *classic: str, text: str | None = None, factor: float = 1.0,
             divisor: float = 1.0) -> ExportedField:
    """DCGM 4.7's ``name`` for the classic field(s) ``classic``: their type, and their help
    unless the unit changed (``text``)."""
    first = FIELDS[_POSITION[classic[0]]]
    return ExportedField(name, first.kind, text or first.help,
                         tuple(_POSITION[c] for c in classic), factor, divisor)


# DCGM 4.7's names, from secondary sources (NVIDIA's DCGM field-identifier reference as
# summarised, dcgm-exporter 4.9.0 and 4.10.0 release notes): the ratio, byte and hertz
# fields' new IDs (1603, 1604, 1613, 1614, 1626-1628) are not in any NVIDIA header stored
# here, whose newest (DCGM 4.6.0's dcgm_fields.h) gives the renamed same-ID fields
# (150, 155, 230, 395, 1002-1008) and names field 203 DCGM_FI_DEV_GPU_UTIL_RATIO while it
# still holds an integer percent. docs/prometheus.md keeps the sources per row.
DCGM47_FIELDS: tuple[ExportedField, ...] = (
    _renamed("DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_GPU_UTIL",
             text="GPU utilization (ratio 0..1).", divisor=100.0),
    _renamed("DCGM_FI_DEV_MEMORY_UTIL_RATIO", "DCGM_FI_DEV_MEM_COPY_UTIL",
             text="Memory utilization (ratio 0..1).", divisor=100.0),
    _renamed("DCGM_FI_DEV_FB_USED_BYTES", "DCGM_FI_DEV_FB_USED",
             text="Framebuffer memory used (in bytes).", factor=MIB),
    _renamed("DCGM_FI_DEV_FB_FREE_BYTES", "DCGM_FI_DEV_FB_FREE",
             text="Framebuffer memory free (in bytes).", factor=MIB),
    _renamed("DCGM_FI_DEV_FB_RESERVED_BYTES", "DCGM_FI_DEV_FB_RESERVED",
             text="Framebuffer memory reserved (in bytes).", factor=MIB),
    _renamed("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_GPU_TEMP"),
    _renamed("DCGM_FI_DEV_BOARD_POWER_WATTS", "DCGM_FI_DEV_POWER_USAGE"),
    _renamed("DCGM_FI_DEV_SM_CLOCK_HERTZ", "DCGM_FI_DEV_SM_CLOCK",
             text="SM clock frequency (in Hz).", factor=1e6),
    _renamed("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "DCGM_FI_DEV_MEM_CLOCK",
             text="Memory clock frequency (in Hz).", factor=1e6),
    _renamed("DCGM_FI_DEV_ROW_REMAP_FAILED", "DCGM_FI_DEV_ROW_REMAP_FAILURE"),
    _renamed("DCGM_FI_PROF_SM_UTIL_RATIO", "DCGM_FI_PROF_SM_ACTIVE"),
    _renamed("DCGM_FI_PROF_SM_OCCUPANCY_RATIO", "DCGM_FI_PROF_SM_OCCUPANCY"),
    _renamed("DCGM_FI_PROF_TENSOR_UTIL_RATIO", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    _renamed("DCGM_FI_PROF_DRAM_UTIL_RATIO", "DCGM_FI_PROF_DRAM_ACTIVE"),
    _renamed("DCGM_FI_PROF_FP64_UTIL_RATIO", "DCGM_FI_PROF_PIPE_FP64_ACTIVE"),
    _renamed("DCGM_FI_PROF_FP32_UTIL_RATIO", "DCGM_FI_PROF_PIPE_FP32_ACTIVE"),
    _renamed("DCGM_FI_PROF_FP16_UTIL_RATIO", "DCGM_FI_PROF_PIPE_FP16_ACTIVE"),
    _renamed("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", "DCGM_FI_PROF_PCIE_TX_BYTES"),
    _renamed("DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", "DCGM_FI_PROF_PCIE_RX_BYTES"),
    _renamed("DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND", "DCGM_FI_PROF_NVLINK_TX_BYTES"),
    _renamed("DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND", "DCGM_FI_PROF_NVLINK_RX_BYTES"),
    _renamed("DCGM_FI_DEV_XID_ERROR", "DCGM_FI_DEV_XID_ERRORS"),
    _renamed("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    # DCGM 4.7's NVLink throughput (field 1648, a secondary source: no NVIDIA header stored
    # here reaches 4.7): NVML's data-only counters, KiB/s x 1024, both directions, all
    # links. Not the DCGM_FI_PROF_NVLINK_* rates, which count protocol headers too.
    ExportedField("DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", "gauge",
                  "NVLink data throughput, all links, transmitted and received "
                  "(bytes per second).", (_POSITION["nvlink_payload_bytes_per_second"],)),
)
# DCGM's field 449 (dcgm_fields.h, DCGM 4.6.0: DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL, old name
# DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, unit MB/s): DcgmCacheManager's ReadAndCacheNvLinkBandwidth
# takes NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX + _TX over all links (KiB), their change per
# second, divides it by 1000 and stores an int64. dcgm-exporter types it "counter".
NVLINK_BANDWIDTH_TOTAL = ExportedField(
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
    "NVLink data throughput, all links, transmitted and received (in MB/s, as DCGM computes "
    "it: KiB per second / 1000).", (_POSITION["nvlink_payload_bytes_per_second"],),
    divisor=KIB * 1000, whole=True)
# The fields the classic set sends as they are: every value under a DCGM name.
CLASSIC_FIELDS: tuple[ExportedField, ...] = tuple(
    ExportedField(field.name, field.kind, field.help, (position,))
    for position, field in enumerate(FIELDS) if field.name.startswith("DCGM_FI_")
) + (NVLINK_BANDWIDTH_TOTAL,)
# NVML's own cumulative counters, in bytes, in every set: Prometheus can rate() them.
OWN_FIELDS: tuple[ExportedField, ...] = (
    ExportedField(OWN_PREFIX + "gpu_pcie_transmit_bytes", "counter",
                  "Bytes transmitted over PCIe, NVML's own counter "
                  "(NVML_FI_DEV_PCIE_COUNT_TX_BYTES; it wraps at the field's width).",
                  (_POSITION["pcie_tx_kibibytes_total"],), factor=KIB),
    ExportedField(OWN_PREFIX + "gpu_pcie_receive_bytes", "counter",
                  "Bytes received over PCIe, NVML's own counter "
                  "(NVML_FI_DEV_PCIE_COUNT_RX_BYTES; it wraps at the field's width).",
                  (_POSITION["pcie_rx_kibibytes_total"],), factor=KIB),
    ExportedField(OWN_PREFIX + "gpu_nvlink_bytes", "counter",
                  "Bytes transmitted and received over NVLink, all active links, NVML's own "
                  "counters.", (_POSITION["nvlink_bytes_total"],)),
)


def exported_fields(name_set: str) -> tuple[ExportedField, ...]:
    """The families of ``name_set``, and our own counters: each name once."""
    if name_set == CLASSIC:
        return CLASSIC_FIELDS + OWN_FIELDS
    if name_set == DCGM47:
        return DCGM47_FIELDS + OWN_FIELDS
    if name_set == BOTH:
        classic = {field.name for field in CLASSIC_FIELDS}
        return CLASSIC_FIELDS + tuple(f for f in DCGM47_FIELDS if f.name not in classic) + \
            OWN_FIELDS
    raise ValueError(f"metrics names must be one of {', '.join(NAME_SETS)}, got {name_set!r}")
