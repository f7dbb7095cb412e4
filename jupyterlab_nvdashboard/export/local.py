"""The scrape of this server's own GPUs and host, from one history snapshot."""

from __future__ import annotations

from collections.abc import Callable

from ..metrics import Metrics
from .collector import HealthValue, Scrape
from .dcgm import PcieByteCounters, exported_gpus


class LocalScrape:
    """Called once per scrape, on the event loop: takes the samples since the last scrape
    in one ``History.since`` call, integrates them into the byte counters and exports the
    newest."""

    def __init__(self, metrics: Metrics, hostname: str,
                 health: Callable[[], list[HealthValue]] = list) -> None:
        self.metrics, self.hostname, self.health = metrics, hostname, health
        self.counters = PcieByteCounters()
        self._seq = -1

    def __call__(self) -> Scrape:
        samples = self.metrics.history.since(self._seq)
        if samples:
            self._seq = samples[-1].seq
            self.counters.add(samples)
        latest = samples[-1] if samples else self.metrics.history.latest()
        gpus = exported_gpus(self.hostname, self.metrics.facts, latest, self.counters)
        hosts = [(self.hostname, latest.host)] if latest is not None else []
        return Scrape(gpus, hosts, self.health())
