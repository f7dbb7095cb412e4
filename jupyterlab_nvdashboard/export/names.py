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

docs/prometheus.md has the table with the source of each name. The project's own
``nvdashboard_*`` series keep their names in every set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..config import METRICS_NAME_SETS as NAME_SETS
from ..config import Config
from .dcgm import FIELDS, MIB

CLASSIC, DCGM47, BOTH = NAME_SETS  # config.py validates the setting; this module means it
DEFAULT_NAME_SET = Config.metrics_names


@dataclass(frozen=True)
class ExportedField:
    """One family of a name set: its value is ``sum(values at positions) * factor /
    divisor`` of a GPU's values in ``dcgm.FIELDS`` order (None if any is unknown)."""

    name: str
    kind: str  # "gauge" or "counter"
    help: str
    positions: tuple[int, ...]
    factor: float = 1.0
    divisor: float = 1.0

    def value(self, values: Sequence[float | None]) -> float | None:
        parts = [values[p] if p < len(values) else None for p in self.positions]
        if any(part is None for part in parts):
            return None
        return sum(parts) * self.factor / self.divisor  # type: ignore[arg-type]


_POSITION = {field.name: position for position, field in enumerate(FIELDS)}


def _renamed(name: str, *classic: str, text: str | None = None, factor: float = 1.0,
             divisor: float = 1.0) -> ExportedField:
    """DCGM 4.7's ``name`` for the classic field(s) ``classic``: their type, and their help
    unless the unit changed (``text``)."""
    first = FIELDS[_POSITION[classic[0]]]
    return ExportedField(name, first.kind, text or first.help,
                         tuple(_POSITION[c] for c in classic), factor, divisor)


# DCGM 4.7's names (NVIDIA's DCGM field-identifier reference; dcgm-exporter 4.9.0 and
# 4.10.0 release notes). The ratio fields are new field IDs with a new unit (1613, 1614),
# the byte and hertz fields likewise (1603, 1604, 1626-1628, 1648); the rest are the same
# field under its new name, with its type and unit.
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
    # DCGM keeps fields 200 and 201 under these names (deprecated, not renamed).
    _renamed("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT"),
    _renamed("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT"),
    # DCGM 4.7 names the NVLink total a rate (all links, both directions), not a counter:
    # the sum of the two directions' rates, as the classic set sends them.
    _renamed("DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", "DCGM_FI_PROF_NVLINK_TX_BYTES",
             "DCGM_FI_PROF_NVLINK_RX_BYTES", text="NVLink throughput, all links, transmitted "
             "and received (bytes per second)."),
)
CLASSIC_FIELDS: tuple[ExportedField, ...] = tuple(
    ExportedField(field.name, field.kind, field.help, (position,))
    for position, field in enumerate(FIELDS))


def exported_fields(name_set: str) -> tuple[ExportedField, ...]:
    """The families of ``name_set``: each name once."""
    if name_set == CLASSIC:
        return CLASSIC_FIELDS
    if name_set == DCGM47:
        return DCGM47_FIELDS
    if name_set == BOTH:
        classic = {field.name for field in CLASSIC_FIELDS}
        return CLASSIC_FIELDS + tuple(f for f in DCGM47_FIELDS if f.name not in classic)
    raise ValueError(f"metrics names must be one of {', '.join(NAME_SETS)}, got {name_set!r}")
