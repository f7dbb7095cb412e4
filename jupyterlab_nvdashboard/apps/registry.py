"""The single list of dashboards. Bokeh routes, ``/index.json`` and ``/`` come from it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..metrics import Metrics
from . import gpu, machine, workload
from .document import Component
from .sources import DashboardSources


@dataclass(frozen=True)
class Route:
    path: str
    title: str
    make_component: Callable[[DashboardSources], Component]
    needs_gpu: bool = True  # without a GPU the page shows the "no GPU" notice instead
    shows_gpu: bool = True  # draws GPU readings, so simulate mode labels it SIMULATED
    # Whether this machine can fill the dashboard; routes that cannot are left out of the index.
    available: Callable[[DashboardSources], bool] = lambda sources: bool(sources.metrics.facts)


def _reads_metrics(
    factory: Callable[[Metrics], Component],
) -> Callable[[DashboardSources], Component]:
    """A dashboard that reads the metrics alone."""
    return lambda sources: factory(sources.metrics)


def _has_nvlink(sources: DashboardSources) -> bool:
    return sources.metrics.has_nvlink


ROUTES: tuple[Route, ...] = (
    Route("/GPU-Utilization", "GPU Utilization", _reads_metrics(gpu.gpu_utilization)),
    Route("/GPU-Memory", "GPU Memory", _reads_metrics(gpu.gpu_memory)),
    Route("/GPU-Resources", "GPU Resources", _reads_metrics(gpu.gpu_resources)),
    Route("/PCIe-Throughput", "PCIe Throughput", _reads_metrics(gpu.pcie_throughput)),
    Route("/NVLink-Throughput", "NVLink Throughput", _reads_metrics(gpu.nvlink_throughput),
          available=_has_nvlink),
    Route("/NVLink-Timeline", "NVLink Timeline", _reads_metrics(gpu.nvlink_timeline),
          available=_has_nvlink),
    Route("/Machine-Resources", "Machine Resources", _reads_metrics(machine.machine_resources),
          needs_gpu=False, shows_gpu=False, available=lambda sources: True),
    Route("/Workload", "Embedding Workload", workload.workload_dashboard, needs_gpu=False,
          available=lambda sources: sources.workload is not None),
)


def available_routes(sources: DashboardSources) -> dict[str, str]:
    """The ``/index.json`` body: route -> title, for the dashboards this machine can fill."""
    return {route.path: route.title for route in ROUTES if route.available(sources)}
