"""GPU dashboards: utilization, memory, PCIe and NVLink bars, and the GPU timelines."""

from __future__ import annotations

from ..metrics import GpuFacts, GpuReading, Metrics
from .components import (
    GB,
    GIB,
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
                       lambda facts: facts.memory_total_bytes, describe)
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
                    suffix: str = "") -> list[Series]:
    return [
        Series(f"{prefix}{facts.index}", f"{facts.label}{suffix}", gpu_color(facts.index),
               scaled(gpu_value(facts.index, lambda r, a=attribute: getattr(r, a)), unit))
        for facts in metrics.facts
    ]


def _total_series(kind: str) -> list[Series]:
    return [
        Series(f"{kind}_{direction}", f"{direction.upper()} (all GPUs)", color,
               scaled(gpu_total(lambda r, a=f"{kind}_{direction}_bytes_per_s": getattr(r, a)), GB))
        for direction, color in (("tx", "#1f77b4"), ("rx", "#ff7f0e"))
    ]


def gpu_resources(metrics: Metrics) -> TimelineFeed:
    panels = [
        Panel("GPU utilization", "Utilization (%)",
              _per_gpu_series(metrics, "utilization", "utilization_pct"), y_max=100, unit="%"),
        Panel("GPU memory used", "Memory (GiB)",
              _per_gpu_series(metrics, "memory", "memory_used_bytes", GIB), unit="GiB"),
        Panel("PCIe throughput", "Throughput (GB/s)", _total_series("pcie"), unit="GB/s"),
    ]
    if metrics.has_nvlink:
        panels.append(Panel("NVLink throughput", "Throughput (GB/s)", _total_series("nvlink"),
                            unit="GB/s"))
    return TimelineFeed(tuple(panels))


def nvlink_timeline(metrics: Metrics) -> TimelineFeed:
    panels = (
        Panel("NVLink TX", "Throughput (GB/s)",
              _per_gpu_series(metrics, "nvlink_tx", "nvlink_tx_bytes_per_s", GB, suffix=" TX"),
              unit="GB/s"),
        Panel("NVLink RX", "Throughput (GB/s)",
              _per_gpu_series(metrics, "nvlink_rx", "nvlink_rx_bytes_per_s", GB, suffix=" RX"),
              unit="GB/s"),
    )
    return TimelineFeed(panels)
