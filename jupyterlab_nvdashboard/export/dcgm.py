"""The DCGM exporter's metric names, types, units and labels, filled from our readings.

Names, types and units follow NVIDIA's dcgm-exporter up to 4.8 (``etc/default-counters.csv``
and ``etc/dcp-metrics-included.csv``): the classic set, from which ``names.py`` computes DCGM
4.7's. The stock Grafana board built on them works unchanged:
memory in MiB, power in W, clocks in MHz, the ``DCGM_FI_PROF_*`` activities as ratios 0..1,
interconnect rates in bytes per second. A value we cannot read (``None``) is left out of the
export; it is never sent as 0.

**A DCGM name carries DCGM's quantity, or is not sent.** ``FIELDS`` is the list of values one
device row gives (the heartbeat's wire format too): where the classic set sends a value as it
is, it carries its DCGM name; the rest carry names of their own, and ``names.py`` says which
exported family is made of them. NVML's cumulative byte counters are our own series
(``nvdashboard_gpu_{pcie,nvlink}_*_bytes_total``): every process reading a GPU exports the
same value and a server restart does not reset them, so Prometheus' ``rate()`` is right
whoever reported. DCGM's ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`` (field 449) is a rate in
MB/s, made of NVML's data-only NVLink counters (``nvlink_payload_bytes_per_second`` here),
and ``DCGM_FI_DEV_PCIE_{TX,RX}_THROUGHPUT`` (200, 201) are never sent: DCGM answers "not
supported" for them (``DcgmCacheManager.cpp``, DCGM 4.6.0).

**Labels** are dcgm-exporter's: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``
and ``hostname`` (spelled ``Hostname`` before dcgm-exporter's change #655, May 2026; boards
that still select on it get it with ``--metrics-hostname-label Hostname``).

This module knows no ``prometheus_client``: it turns readings into plain lists, which the
collector exports and which the Dask worker plugin sends on its heartbeat (``cluster/``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..metrics import GpuFacts, GpuReading, Sample, parent_facts
from ..metrics.families import (
    GPM_FAMILY,
    HEALTH_FAMILY,
    GpmReading,
    HealthReading,
    device_reading,
)

MIB = 2**20
GIB = 2**30
KIB = 1024.0
# dcgm-exporter's host label: "hostname" since its change #655; "Hostname" before.
HOSTNAME_LABEL = "hostname"
OLD_HOSTNAME_LABEL = "Hostname"


@dataclass(frozen=True)
class DcgmField:
    name: str
    kind: str  # "gauge" or "counter", as dcgm-exporter declares it
    help: str


# The order is part of the heartbeat snapshot format (cluster/snapshot.py, version 1).
GAUGES: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    DcgmField("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    DcgmField("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    DcgmField("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    DcgmField("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    DcgmField("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    DcgmField("DCGM_FI_PROF_SM_ACTIVE", "gauge",
              "The ratio of cycles an SM has at least 1 warp assigned."),
    DcgmField("DCGM_FI_PROF_SM_OCCUPANCY", "gauge",
              "The ratio of number of warps resident on an SM."),
    DcgmField("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
              "Ratio of cycles the tensor (HMMA) pipe is active."),
    DcgmField("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
              "Ratio of cycles the device memory interface is active sending or receiving data."),
    DcgmField("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge",
              "Ratio of cycles the fp64 pipes are active."),
    DcgmField("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge",
              "Ratio of cycles the fp32 pipes are active."),
    DcgmField("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge",
              "Ratio of cycles the fp16 pipes are active."),
    DcgmField("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
              "The rate of data transmitted over the PCIe bus, in bytes per second."),
    DcgmField("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
              "The rate of data received over the PCIe bus, in bytes per second."),
    DcgmField("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge",
              "The rate of data transmitted over NVLink, in bytes per second."),
    DcgmField("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge",
              "The rate of data received over NVLink, in bytes per second."),
    DcgmField("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
)
# NVML's own cumulative counters, exported under our names (``names.OWN_FIELDS``). The PCIe
# ones travel in KiB, as the heartbeats of earlier releases sent them.
COUNTERS: tuple[DcgmField, ...] = (
    DcgmField("pcie_tx_kibibytes_total", "counter",
              "NVML's PCIe transmit byte counter (NVML_FI_DEV_PCIE_COUNT_TX_BYTES), in KiB."),
    DcgmField("pcie_rx_kibibytes_total", "counter",
              "NVML's PCIe receive byte counter (NVML_FI_DEV_PCIE_COUNT_RX_BYTES), in KiB."),
    DcgmField("nvlink_bytes_total", "counter",
              "NVML's NVLink byte counters, transmitted and received, all active links."),
)
# After the counters, so that a Dask worker of an earlier release, whose heartbeat rows end
# with the counters, is still read right (the missing values are None).
EVENTS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge",
              "Bitmask of the reasons the clocks are held down (NVML clocks-event reasons)."),
)
# After the events, for the same reason: what DCGM's NVLink throughput fields are made of.
LINKS: tuple[DcgmField, ...] = (
    DcgmField("nvlink_payload_bytes_per_second", "gauge",
              "NVLink data (payload) throughput, transmitted and received, all active links, "
              "from NVML's NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_* counters (bytes per second)."),
)
FIELDS = GAUGES + COUNTERS + EVENTS + LINKS


class GpuIdentity(NamedTuple):
    """The labels dcgm-exporter puts on a GPU's series (a MIG device: its GPU's, plus its own)."""

    gpu: int  # nvidia-smi's index
    uuid: str  # a MIG device carries its GPU's UUID, as in dcgm-exporter
    model_name: str
    pci_bus_id: str | None
    gpu_instance_id: int | None = None  # MIG only
    gpu_instance_profile: str | None = None  # MIG only, e.g. "3g.40gb"
    mig_uuid: str | None = None  # the MIG device's own UUID (our history key)

    @property
    def key(self) -> str:
        """One GPU or MIG device, across the cluster."""
        return self.mig_uuid or self.uuid

    def labels(self, hostname: str, hostname_label: str = HOSTNAME_LABEL) -> dict[str, str]:
        labels = {"gpu": str(self.gpu), "UUID": self.uuid, "pci_bus_id": self.pci_bus_id or "",
                  "device": f"nvidia{self.gpu}", "modelName": self.model_name,
                  hostname_label: hostname}
        if self.gpu_instance_id is not None:
            labels["GPU_I_ID"] = str(self.gpu_instance_id)
            labels["GPU_I_PROFILE"] = self.gpu_instance_profile or ""
        return labels


def device_labels(identity: GpuIdentity, hostname: str,
                  hostname_label: str = HOSTNAME_LABEL) -> dict[str, str]:
    """``gpu``, ``UUID`` and the host label as the DCGM series have them, and a MIG
    device's ``GPU_I_ID``: the short set the nvdashboard_gpu_* series carry."""
    labels = {"gpu": str(identity.gpu), "UUID": identity.uuid, hostname_label: hostname}
    if identity.gpu_instance_id is not None:
        labels["GPU_I_ID"] = str(identity.gpu_instance_id)
    return labels


class ExportedGpu(NamedTuple):
    """One GPU (or MIG device) as ``/metrics`` shows it: ``values`` in ``FIELDS`` order."""

    hostname: str
    identity: GpuIdentity
    lost: bool
    values: tuple[float | None, ...]


def mig_profile(device: GpuFacts, gpu: GpuFacts | None) -> str | None:
    """A MIG device's profile as NVIDIA names it ("3g.40gb"), from the MIG attributes the
    reader holds: its GPU slices, and its memory slices (eighths of the GPU) times the GPU's
    memory in whole GiB, rounded up as NVIDIA's names are (141 for an H200's 140.4 GiB).
    Without those attributes, what follows " MIG " in the device's name; else None."""
    mig = device.mig or {}
    slices, memory_slices = mig.get("gpu_slices"), mig.get("memory_slices")
    total = gpu.memory_total_bytes if gpu is not None else None
    if slices and memory_slices and total:
        gib = math.floor(memory_slices * math.ceil(total / GIB) / 8 + 0.5)
        return f"{slices}g.{gib}gb"
    before, found, profile = device.name.rpartition(" MIG ")
    return profile.strip() or None if found and before else None


def identities(facts: Sequence[GpuFacts]) -> dict[int, GpuIdentity]:
    """Row -> labels; a MIG device takes its GPU's name, UUID and bus ID."""
    out = {}
    for f in facts:
        parent = parent_facts(facts, f)
        if f.kind == "mig" and parent is not None:
            profile = mig_profile(f, parent)
            out[f.index] = GpuIdentity(
                f.nvml_index, parent.uuid, parent.name, parent.pci_bus_id,
                (f.mig or {}).get("gpu_instance_id"), profile, f.uuid)
        else:
            out[f.index] = GpuIdentity(f.nvml_index, f.uuid, f.name, f.pci_bus_id)
    return out


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100.0


def _mib(value: float | None) -> float | None:
    return None if value is None else value / MIB


def gauge_values(reading: GpuReading, gpm: GpmReading | None,
                 health: HealthReading | None) -> list[float | None]:
    """The ``GAUGES`` of one device row, in order; None where not available."""
    if reading.lost:
        return [None] * len(GAUGES)
    used, total = reading.memory_used_bytes, reading.memory_total_bytes
    reserved = reading.memory_reserved_bytes
    # Memory v2 reports reserved apart from used; with v1 it is inside used.
    free = None if used is None or total is None else max(0.0, total - used - (reserved or 0.0))
    g, h = gpm, health
    # GPM measures the interconnect where it runs; the counter rates stand in elsewhere.
    pcie_tx = g.pcie_tx_bytes_per_s if g and g.pcie_tx_bytes_per_s is not None \
        else reading.pcie_tx_bytes_per_s
    pcie_rx = g.pcie_rx_bytes_per_s if g and g.pcie_rx_bytes_per_s is not None \
        else reading.pcie_rx_bytes_per_s
    nvlink_tx = g.nvlink_tx_bytes_per_s if g and g.nvlink_tx_bytes_per_s is not None \
        else reading.nvlink_tx_bytes_per_s
    nvlink_rx = g.nvlink_rx_bytes_per_s if g and g.nvlink_rx_bytes_per_s is not None \
        else reading.nvlink_rx_bytes_per_s
    failure = None if h is None or h.remapped_rows_failed is None else float(h.remapped_rows_failed)
    return [
        reading.utilization_pct, reading.memory_utilization_pct, _mib(used), _mib(free),
        _mib(reserved), reading.temperature_c, reading.power_w,
        h.sm_clock_mhz if h else None, h.memory_clock_mhz if h else None, failure,
        _ratio(g.sm_activity_pct) if g else None, _ratio(g.sm_occupancy_pct) if g else None,
        _ratio(g.tensor_activity_pct) if g else None, _ratio(g.dram_bandwidth_pct) if g else None,
        _ratio(g.fp64_activity_pct) if g else None, _ratio(g.fp32_activity_pct) if g else None,
        _ratio(g.fp16_activity_pct) if g else None,
        pcie_tx, pcie_rx, nvlink_tx, nvlink_rx,
        _last_xid(h),
    ]


def _last_xid(health: HealthReading | None) -> float | None:
    """As dcgm-exporter: the newest XID this server has seen, 0 for none; None (left out)
    without health readings."""
    if health is None:
        return None
    events = getattr(health, "xid_events", ())
    return float(events[-1].xid) if events else 0.0


def counter_values(reading: GpuReading) -> list[float | None]:
    """The ``COUNTERS`` of one device row: NVML's own totals, None where it has none."""
    if reading.lost:
        return [None] * len(COUNTERS)
    tx, rx = reading.pcie_tx_bytes_total, reading.pcie_rx_bytes_total
    return [None if tx is None else tx / KIB, None if rx is None else rx / KIB,
            reading.nvlink_bytes_total]


def link_values(reading: GpuReading, facts: GpuFacts | None) -> list[float | None]:
    """The ``LINKS`` of one device row: the NVLink payload rate, both directions, where the
    rates come from NVML's data-only counters; None where another counter (with protocol
    overhead, or of another quantity) or nothing stands behind them: never a stand-in."""
    if reading.lost or facts is None or not facts.nvlink_payload_counters:
        return [None] * len(LINKS)
    tx, rx = reading.nvlink_tx_bytes_per_s, reading.nvlink_rx_bytes_per_s
    return [None if tx is None or rx is None else tx + rx]


def event_values(reading: GpuReading, health: HealthReading | None) -> list[float | None]:
    """The ``EVENTS`` of one device row: NVML's clocks-event reasons, as the health
    readings hold them."""
    if reading.lost or health is None or health.clock_event_reasons is None:
        return [None] * len(EVENTS)
    return [float(health.clock_event_reasons)]


def exported_gpus(hostname: str, facts: Sequence[GpuFacts],
                  sample: Sample | None) -> list[ExportedGpu]:
    """Every device row of this machine, from its newest sample."""
    if sample is None:
        return []
    labels = identities(facts)
    facts_by_row = {each.index: each for each in facts}
    out = []
    for reading in sample.gpus:
        identity = labels.get(reading.index)
        if identity is None:
            continue
        health = device_reading(sample.extra, HEALTH_FAMILY, reading.index, HealthReading)
        values = gauge_values(
            reading, device_reading(sample.extra, GPM_FAMILY, reading.index, GpmReading),
            health)
        values += counter_values(reading) + event_values(reading, health) + \
            link_values(reading, facts_by_row.get(reading.index))
        out.append(ExportedGpu(hostname, identity, reading.lost, tuple(values)))
    return out
