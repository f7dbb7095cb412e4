"""The machine dashboard: CPU, memory, disk and network from psutil, as timelines."""

from __future__ import annotations

from collections.abc import Callable

from ..metrics import Metrics, Sample
from .components import GIB, MB, Panel, Series, TimelineFeed, scaled


def _host(attribute: str) -> Callable[[Sample], float | None]:
    def read(sample: Sample) -> float | None:
        value: float | None = getattr(sample.host, attribute)
        return value

    return read


def machine_resources(metrics: Metrics) -> TimelineFeed:
    panels = (
        Panel("CPU", "CPU (% of all cores)", [Series("cpu", "CPU", "#1f77b4", _host("cpu_pct"))],
              y_max=100, unit="%"),
        # The total is drawn too (a flat line), so "used" reads against it.
        Panel("Memory", "Memory (GiB)", [
            Series("memory", "used", "#2ca02c", scaled(_host("memory_used_bytes"), GIB)),
            Series("memory_total", "total", "#7f7f7f", scaled(_host("memory_total_bytes"), GIB),
                   dash="dashed"),
        ], unit="GiB"),
        Panel("Disk", "Throughput (MB/s)", [
            Series("disk_read", "read", "#9467bd", scaled(_host("disk_read_bytes_per_s"), MB)),
            Series("disk_write", "write", "#8c564b", scaled(_host("disk_write_bytes_per_s"), MB)),
        ], unit="MB/s"),
        Panel("Network", "Throughput (MB/s)", [
            Series("net_recv", "received", "#17becf", scaled(_host("net_recv_bytes_per_s"), MB)),
            Series("net_sent", "sent", "#e377c2", scaled(_host("net_sent_bytes_per_s"), MB)),
        ], unit="MB/s"),
    )
    return TimelineFeed(panels)
