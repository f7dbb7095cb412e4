"""The ``prometheus_client`` collector behind ``/metrics``, and its tornado handler.

One scrape takes one snapshot (``Scrape``) of what the server already holds: it never reads
hardware. The collector lives in a private registry, so nothing else (no process or
platform collector, no other library's metrics) leaks into the export.

Why OpenMetrics text: ``prometheus_client``'s classic text writer names every counter's
``# TYPE`` line ``<name>_total``, which would not match the DCGM counters' samples (they
keep their DCGM names, with no ``_total``), and Prometheus would then file them as untyped.
The OpenMetrics writer keeps the family's name as given, and Prometheus asks for it first.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tornado.web import HTTPError

from ..auth import Access, GuardedHandler
from ..metrics import HostReading
from .dcgm import HOSTNAME_LABEL, ExportedGpu, device_labels
from .names import DEFAULT_NAME_SET, exported_fields

# Host readings under nvdashboard_ names: (reading field, metric name, help).
HOST_METRICS = (
    ("cpu_pct", "nvdashboard_host_cpu_percent", "CPU busy, all cores (in %)."),
    ("memory_used_bytes", "nvdashboard_host_memory_used_bytes", "Host memory used (bytes)."),
    ("memory_total_bytes", "nvdashboard_host_memory_total_bytes", "Host memory (bytes)."),
    ("disk_read_bytes_per_s", "nvdashboard_host_disk_read_bytes_per_second",
     "Disk reads (bytes per second)."),
    ("disk_write_bytes_per_s", "nvdashboard_host_disk_write_bytes_per_second",
     "Disk writes (bytes per second)."),
    ("net_recv_bytes_per_s", "nvdashboard_host_network_receive_bytes_per_second",
     "Network received (bytes per second)."),
    ("net_sent_bytes_per_s", "nvdashboard_host_network_transmit_bytes_per_second",
     "Network sent (bytes per second)."),
)


DIAGNOSIS_METRIC = "nvdashboard_gpu_diagnosis"
DIAGNOSIS_HELP = ("Why this GPU is slow: 1 for the cause of its first finding over the last "
                  "2 minutes (idle, starved, launch-bound, memory-bound, pcie-bound, "
                  "throttled, compute-bound, ...), as /diagnosis.json says it.")


class HealthValue(NamedTuple):
    """One value; values of one name must carry the same label names."""

    name: str  # a counter's name without _total: prometheus_client adds it
    kind: str  # "gauge" or "counter"
    help: str
    value: float
    labels: dict[str, str] = {}


@dataclass
class Scrape:
    """What one scrape exports, taken at once."""

    gpus: list[ExportedGpu]
    hosts: list[tuple[str, HostReading]] = field(default_factory=list)
    health: list[HealthValue] = field(default_factory=list)
    # One label set per device for nvdashboard_gpu_diagnosis (``local.diagnosis_labels``).
    diagnoses: list[dict[str, str]] = field(default_factory=list)


def _known(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


class DcgmCollector:
    """Turns a ``Scrape`` into metric families; ``snapshot`` is called once per scrape.
    ``hostname_label`` names the host label (``hostname``, or the old ``Hostname``);
    ``name_set`` the DCGM names (``names.NAME_SETS``)."""

    def __init__(self, snapshot: Callable[[], Scrape],
                 hostname_label: str = HOSTNAME_LABEL,
                 name_set: str = DEFAULT_NAME_SET) -> None:
        self.snapshot, self.hostname_label = snapshot, hostname_label
        self.fields = exported_fields(name_set)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily, Metric

        scrape = self.snapshot()
        for dcgm in self.fields:
            # A DCGM family is named by its field and nothing is appended to that name.
            family = Metric(dcgm.name, dcgm.help, dcgm.kind)
            for gpu in scrape.gpus:
                value = dcgm.value(gpu.values)
                if _known(value):  # not available: left out, never 0
                    # Our own series carry the short label set the usage series carry.
                    labels = device_labels(gpu.identity, gpu.hostname, self.hostname_label) \
                        if dcgm.own else gpu.identity.labels(gpu.hostname, self.hostname_label)
                    family.add_sample(dcgm.sample_name, labels, value)
            if family.samples:
                yield family
        for attribute, name, text in HOST_METRICS:
            gauge = GaugeMetricFamily(name, text, labels=[self.hostname_label])
            for hostname, reading in scrape.hosts:
                value = getattr(reading, attribute)
                if _known(value):
                    gauge.add_metric([hostname], value)
            if gauge.samples:
                yield gauge
        if scrape.diagnoses:
            # Info-style: one series per device, its current first finding in ``cause``.
            family = Metric(DIAGNOSIS_METRIC, DIAGNOSIS_HELP, "gauge")
            for labels in scrape.diagnoses:
                family.add_sample(DIAGNOSIS_METRIC, {
                    self.hostname_label if name == HOSTNAME_LABEL else name: value
                    for name, value in labels.items()}, 1.0)
            yield family
        # Values of one name (the usage series: one per GPU or holder) are one family; a
        # MIG device's carry GPU_I_ID beside its GPU's labels, so each sample has its own.
        families: dict[str, Any] = {}
        for item in scrape.health:
            labels = {self.hostname_label if name == HOSTNAME_LABEL else name: value
                      for name, value in item.labels.items()}
            family = families.get(item.name)
            if family is None:
                family = families[item.name] = Metric(item.name, item.help, item.kind)
            family.add_sample(item.name + ("_total" if item.kind == "counter" else ""),
                              labels, item.value)
        yield from families.values()

def render(collector: DcgmCollector) -> tuple[bytes, str]:
    """The OpenMetrics text of one scrape, and its content type."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_LATEST


def import_prometheus_client() -> None:
    """Fail early, in one line, when ``--metrics`` is on without prometheus_client."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ImportError("--metrics needs prometheus_client: pip install "
                          "'jupyterlab-nvdashboard[metrics]'") from None


def allowed_without_token(remote_ip: str | None,
                          networks: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]
                          ) -> bool:
    if not remote_ip or not networks:
        return False
    try:
        address = ipaddress.ip_address(remote_ip.split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)


class MetricsHandler(GuardedHandler):
    """``/metrics``: the token, as every route, unless the scraper's address is allowed."""

    def initialize(self, access: Access, metrics_collector: DcgmCollector | None = None,
                   metrics_allow: Sequence[Any] = (), **_: object) -> None:
        super().initialize(access)
        self.collector, self.allow = metrics_collector, metrics_allow

    def prepare(self) -> None:
        if self.collector is None:
            raise HTTPError(404, reason="/metrics is off; start the server with --metrics")
        if not allowed_without_token(self.request.remote_ip, self.allow):
            self.access.require(self)
        elif (refusal := self.access.refusal(self)) is not None:
            # An allowed scraper address needs no token, but a foreign Host is still refused.
            raise HTTPError(403, reason=refusal)

    def get(self) -> None:
        assert self.collector is not None
        body, content_type = render(self.collector)
        self.set_header("Content-Type", content_type)
        self.set_header("Cache-Control", "no-store")
        self.write(body)
