"""CPU, memory, disk and network readings from psutil.

CPU % is computed from this reader's own previous ``cpu_times()``, never from psutil's
process-wide baseline (which any other caller of ``cpu_percent`` would reset). Disk and
network byte rates divide counter deltas by the real elapsed monotonic time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import psutil

from .rates import CounterRates


class HostReading(NamedTuple):
    """One tick's machine readings. ``None`` means not available."""

    cpu_pct: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    disk_read_bytes_per_s: float | None
    disk_write_bytes_per_s: float | None
    net_recv_bytes_per_s: float | None
    net_sent_bytes_per_s: float | None


def _safe(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except (OSError, RuntimeError, AttributeError):
        return None


class HostReader:
    def __init__(
        self,
        cpu_times: Callable[[], Any] = psutil.cpu_times,
        virtual_memory: Callable[[], Any] = psutil.virtual_memory,
        disk_io: Callable[[], Any] = psutil.disk_io_counters,
        net_io: Callable[[], Any] = psutil.net_io_counters,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cpu_times, self._virtual_memory = cpu_times, virtual_memory
        self._disk_io, self._net_io, self._clock = disk_io, net_io, clock
        self._rates = CounterRates()
        self._previous_cpu: tuple[float, float] | None = None

    def _cpu_pct(self) -> float | None:
        times = _safe(self._cpu_times)
        if times is None:
            return None
        idle = times.idle + getattr(times, "iowait", 0.0)
        total = sum(times)
        previous, self._previous_cpu = self._previous_cpu, (idle, total)
        if previous is None or total <= previous[1]:
            return None
        busy = (total - previous[1]) - (idle - previous[0])
        return max(0.0, min(100.0, 100.0 * busy / (total - previous[1])))

    def read(self) -> HostReading:
        now = self._clock()
        memory = _safe(self._virtual_memory)
        disk = _safe(self._disk_io)
        net = _safe(self._net_io)

        def rate(name: str, counters: Any, attribute: str) -> float | None:
            value = None if counters is None else getattr(counters, attribute, None)
            return self._rates.update(name, value, now)

        return HostReading(
            cpu_pct=self._cpu_pct(),
            memory_used_bytes=None if memory is None else float(memory.total - memory.available),
            memory_total_bytes=None if memory is None else float(memory.total),
            disk_read_bytes_per_s=rate("disk_read", disk, "read_bytes"),
            disk_write_bytes_per_s=rate("disk_write", disk, "write_bytes"),
            net_recv_bytes_per_s=rate("net_recv", net, "bytes_recv"),
            net_sent_bytes_per_s=rate("net_sent", net, "bytes_sent"),
        )
