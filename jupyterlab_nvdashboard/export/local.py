"""The scrape of this server's own GPUs and host, from one history snapshot."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..diagnosis import Diagnosis
from ..metrics import GpuFacts, Metrics, Sample
from .collector import HealthValue, Scrape
from .dcgm import HOSTNAME_LABEL, ExportedGpu, device_labels, exported_gpus, identities


class GpuExport:
    """This machine's GPUs in DCGM's terms, from the newest sample (its counters are
    NVML's own, so nothing accumulates here). Shared by the scrape and a Dask worker's
    heartbeat snapshot."""

    def __init__(self, metrics: Metrics, hostname: str) -> None:
        self.metrics, self.hostname = metrics, hostname

    def newest(self) -> tuple[Sample | None, list[ExportedGpu]]:
        latest = self.metrics.history.latest()
        return latest, exported_gpus(self.hostname, self.metrics.facts, latest)


def diagnosis_labels(diagnoses: Sequence[Diagnosis], facts: Sequence[GpuFacts],
                     hostname: str, hostname_label: str = HOSTNAME_LABEL
                     ) -> list[dict[str, str]]:
    """The label sets of ``nvdashboard_gpu_diagnosis``: each device's ``gpu`` and ``UUID`` as
    the DCGM series have them (a MIG device: its GPU's, and its ``GPU_I_ID``), and
    ``cause``."""
    ids = identities(facts)
    out = []
    for diagnosis in diagnoses:
        identity = ids.get(diagnosis.row)
        if identity is None:
            continue
        out.append({**device_labels(identity, hostname, hostname_label),
                    "cause": diagnosis.cause})
    return out


class LocalScrape:
    """Called once per scrape, on the event loop."""

    def __init__(self, metrics: Metrics, hostname: str,
                 health: Callable[[], list[HealthValue]] = list,
                 diagnoses: Callable[[], Sequence[Diagnosis]] = list) -> None:
        self.export, self.hostname, self.health = GpuExport(metrics, hostname), hostname, health
        self.diagnoses, self.facts = diagnoses, lambda: metrics.facts

    def __call__(self) -> Scrape:
        latest, gpus = self.export.newest()
        hosts = [(self.hostname, latest.host)] if latest is not None else []
        return Scrape(gpus, hosts, self.health(),
                      diagnosis_labels(self.diagnoses(), self.facts(), self.hostname))
