"""GPU dashboards: utilization, memory, PCIe and NVLink bars, and the GPU timelines."""

from __future__ import annotations

from ..metrics import GpuFacts, GpuReading, Metrics
from .components import (
    GB,
    GIB,
    MEMORY_LEVELS,
    BarMetric,
    BarsFeed,
    Panel,
    Series,
    TimelineFeed,
    format_gb_per_s,
    format_memory,
    format_pct,
    gpu_color,
    gpu_total,
    gpu_value,
    scaled,
)


def _percent_scale(_: GpuFacts) -> float:
    return 100.0


def gpu_utilization(metrics: Metrics) -> BarsFeed:
    def read(reading: GpuReading) -> float | None:
        return reading.utilization_pct

    metric = BarMetric("utilization", read, _percent_scale,
                       lambda reading, _: format_pct(reading.utilization_pct))
    return BarsFeed(tuple(metrics.facts), (metric,), "GPU utilization (%)")


def gpu_memory(metrics: Metrics) -> BarsFeed:
    def describe(reading: GpuReading, facts: GpuFacts) -> str:
        used, total = reading.memory_used_bytes, facts.memory_total_bytes
        return f"{format_memory(used)} of {format_memory(total)}"

    metric = BarMetric("memory", lambda r: r.memory_used_bytes,
                       lambda facts: facts.memory_total_bytes, describe, MEMORY_LEVELS)
    return BarsFeed(tuple(metrics.facts), (metric,), "Memory used (% of each GPU's own total)")


def _throughput_bars(metrics: Metrics, kind: str) -> BarsFeed:
    def full_scale(facts: GpuFacts) -> float | None:
        return getattr(facts, f"{kind}_max_bytes_per_s")

    bars = []
    for direction in ("tx", "rx"):
        attribute = f"{kind}_{direction}_bytes_per_s"

        def read(reading: GpuReading, attribute: str = attribute) -> float | None:
            return getattr(reading, attribute)

        def describe(reading: GpuReading, _: GpuFacts, read=read) -> str:
            value = read(reading)
            # Without PCIe counters (drivers before R555) NVML samples 20 ms once a second.
            sampled = kind == "pcie" and reading.pcie_is_snapshot and value is not None
            return format_gb_per_s(value) + (" (20 ms sample)" if sampled else "")

        bars.append(BarMetric(direction.upper(), read, full_scale, describe))
    name = "PCIe" if kind == "pcie" else "NVLink"
    return BarsFeed(tuple(metrics.facts), tuple(bars),
                    f"{name} throughput (% of each GPU's own maximum; labels in GB/s)")


def pcie_throughput(metrics: Metrics) -> BarsFeed:
    return _throughput_bars(metrics, "pcie")


def nvlink_throughput(metrics: Metrics) -> BarsFeed:
    return _throughput_bars(metrics, "nvlink")


def _per_gpu_series(metrics: Metrics, prefix: str, attribute: str, unit: float = 1.0,
                    suffix: str = "", dash: str = "solid") -> list[Series]:
    return [
        Series(f"{prefix}{facts.index}", f"{facts.label}{suffix}", gpu_color(facts.index),
               scaled(gpu_value(facts.index, lambda r, a=attribute: getattr(r, a)), unit),
               gpu=facts.index, dash=dash)
        for facts in metrics.facts
    ]


def _link_series(metrics: Metrics, kind: str) -> list[Series]:
    """Each GPU's TX (solid) and RX (dashed) in its own colour, then the all-GPU sums,
    hidden until their legend entries are clicked."""
    facts = [f for f in metrics.facts if f.kind == "gpu"
             and (kind == "pcie" or f.nvlink_link_ids)]
    series = []
    for fact in facts:
        for direction, dash in (("tx", "solid"), ("rx", "dashed")):
            series.append(Series(
                f"{kind}_{direction}{fact.index}", f"{fact.label} {direction.upper()}",
                gpu_color(fact.index),
                scaled(gpu_value(fact.index, lambda r, a=f"{kind}_{direction}_bytes_per_s":
                                 getattr(r, a)), GB), gpu=fact.index, dash=dash))
    series += [
        Series(f"{kind}_{direction}", f"{direction.upper()} (all GPUs)", "#7f7f7f",
               scaled(gpu_total([f.index for f in facts],
                                lambda r, a=f"{kind}_{direction}_bytes_per_s": getattr(r, a)),
                      GB),
               dash=dash, visible=False)
        for direction, dash in (("tx", "solid"), ("rx", "dashed"))
    ]
    return series


def gpu_resources(metrics: Metrics) -> TimelineFeed:
    panels = [
        Panel("GPU utilization", "Utilization (%)",
              _per_gpu_series(metrics, "utilization", "utilization_pct"), y_max=100, unit="%"),
        Panel("GPU memory used", "Memory (GiB)",
              _per_gpu_series(metrics, "memory", "memory_used_bytes", GIB), unit="GiB"),
        Panel("PCIe throughput (TX solid, RX dashed)", "GB/s",
              _link_series(metrics, "pcie"), unit="GB/s"),
    ]
    if metrics.has_nvlink:
        panels.append(Panel("NVLink throughput (TX solid, RX dashed)", "GB/s",
                            _link_series(metrics, "nvlink"), unit="GB/s"))
    return TimelineFeed(tuple(panels))


def nvlink_timeline(metrics: Metrics) -> TimelineFeed:
    panels = (
        Panel("NVLink TX", "Throughput (GB/s)",
              _per_gpu_series(metrics, "nvlink_tx", "nvlink_tx_bytes_per_s", GB, suffix=" TX"),
              unit="GB/s"),
        Panel("NVLink RX", "Throughput (GB/s)",
              _per_gpu_series(metrics, "nvlink_rx", "nvlink_rx_bytes_per_s", GB, suffix=" RX",
                              dash="dashed"),
              unit="GB/s"),
    )
    return TimelineFeed(panels)
