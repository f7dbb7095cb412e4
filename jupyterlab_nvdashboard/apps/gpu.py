"""GPU dashboards: utilization, memory, PCIe and NVLink bars, and the GPU timelines.

The timelines also draw each GPU the history store knows only by its row before an upgrade
(``before_upgrade``: ``store/upgraded_rows.py``) as a device of its own, "GPU N (before
upgrade)", in a colour no GPU of today has: its lines have values in the long windows only,
where the store's buckets are drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..metrics import GpuFacts, GpuReading, Metrics, Sample
from ..store.buckets import before_upgrade_label, before_upgrade_readings
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


def _before_upgrade_value(row: int, read: Callable[[GpuReading], float | None]
                          ) -> Callable[[Sample], float | None]:
    """Read one metric of the GPU known only by ``row`` before the upgrade."""
    def value(sample: Sample) -> float | None:
        for reading in before_upgrade_readings(sample):
            if reading.index == row:
                return read(reading)
        return None

    return value


def _before_upgrade_series(metrics: Metrics, before_upgrade: Sequence[int], prefix: str,
                           attribute: str, unit: float, suffix: str, dash: str
                           ) -> list[Series]:
    """A series per GPU from before the upgrade, keyed and named apart from today's GPU of
    that row, coloured after all of today's GPUs; no GPU filter hides it (it is none of
    them)."""
    return [
        Series(f"{prefix}_before_upgrade{row}", f"{before_upgrade_label(row)}{suffix}",
               gpu_color(len(metrics.facts) + position),
               scaled(_before_upgrade_value(row, lambda r, a=attribute: getattr(r, a)), unit),
               dash=dash)
        for position, row in enumerate(before_upgrade)
    ]


def _per_gpu_series(metrics: Metrics, prefix: str, attribute: str, unit: float = 1.0,
                    suffix: str = "", dash: str = "solid", before_upgrade: Sequence[int] = ()
                    ) -> list[Series]:
    return [
        Series(f"{prefix}{facts.index}", f"{facts.label}{suffix}", gpu_color(facts.index),
               scaled(gpu_value(facts.index, lambda r, a=attribute: getattr(r, a)), unit),
               gpu=facts.index, dash=dash)
        for facts in metrics.facts
    ] + _before_upgrade_series(metrics, before_upgrade, prefix, attribute, unit, suffix, dash)


def _link_series(metrics: Metrics, kind: str, before_upgrade: Sequence[int] = ()
                 ) -> list[Series]:
    """Each GPU's TX (solid) and RX (dashed) in its own colour (those from before the
    upgrade after them), then the all-GPU sums of today's GPUs, hidden until their legend
    entries are clicked."""
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
    for direction, dash in (("tx", "solid"), ("rx", "dashed")):
        series += _before_upgrade_series(metrics, before_upgrade, f"{kind}_{direction}",
                                         f"{kind}_{direction}_bytes_per_s", GB,
                                         f" {direction.upper()}", dash)
    series += [
        Series(f"{kind}_{direction}", f"{direction.upper()} (all GPUs)", "#7f7f7f",
               scaled(gpu_total([f.index for f in facts],
                                lambda r, a=f"{kind}_{direction}_bytes_per_s": getattr(r, a)),
                      GB),
               dash=dash, visible=False)
        for direction, dash in (("tx", "solid"), ("rx", "dashed"))
    ]
    return series


def gpu_resources(metrics: Metrics, before_upgrade: Sequence[int] = ()) -> TimelineFeed:
    """``before_upgrade``: the rows of the GPUs the store knows only by their row before an
    upgrade (``HistoryStore.rows_before_upgrade``)."""
    panels = [
        Panel("GPU utilization", "Utilization (%)",
              _per_gpu_series(metrics, "utilization", "utilization_pct",
                              before_upgrade=before_upgrade), y_max=100, unit="%"),
        Panel("GPU memory used", "Memory (GiB)",
              _per_gpu_series(metrics, "memory", "memory_used_bytes", GIB,
                              before_upgrade=before_upgrade), unit="GiB"),
        Panel("PCIe throughput (TX solid, RX dashed)", "GB/s",
              _link_series(metrics, "pcie", before_upgrade), unit="GB/s"),
    ]
    if metrics.has_nvlink:
        panels.append(Panel("NVLink throughput (TX solid, RX dashed)", "GB/s",
                            _link_series(metrics, "nvlink", before_upgrade), unit="GB/s"))
    return TimelineFeed(tuple(panels))


def nvlink_timeline(metrics: Metrics, before_upgrade: Sequence[int] = ()) -> TimelineFeed:
    """``before_upgrade`` as in ``gpu_resources``."""
    panels = (
        Panel("NVLink TX", "Throughput (GB/s)",
              _per_gpu_series(metrics, "nvlink_tx", "nvlink_tx_bytes_per_s", GB, suffix=" TX",
                              before_upgrade=before_upgrade),
              unit="GB/s"),
        Panel("NVLink RX", "Throughput (GB/s)",
              _per_gpu_series(metrics, "nvlink_rx", "nvlink_rx_bytes_per_s", GB, suffix=" RX",
                              dash="dashed", before_upgrade=before_upgrade),
              unit="GB/s"),
    )
    return TimelineFeed(panels)
