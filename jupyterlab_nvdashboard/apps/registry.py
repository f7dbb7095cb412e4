"""The single list of dashboards. Bokeh routes, ``/index.json`` and ``/`` come from it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..metrics import Metrics
from . import gpu, machine, workload
from .document import Component


@dataclass(frozen=True)
class Route:
    path: str
    title: str
    make_component: Callable[[Metrics], Component]
    needs_gpu: bool = True  # without a GPU the page shows the "no GPU" notice instead
    shows_gpu: bool = True  # draws GPU readings, so simulate mode labels it SIMULATED
    # Whether this machine can fill the dashboard; routes that cannot are left out of the index.
    available: Callable[[Metrics], bool] = lambda metrics: bool(metrics.facts)


def _has_nvlink(metrics: Metrics) -> bool:
    return metrics.has_nvlink


ROUTES: tuple[Route, ...] = (
    Route("/GPU-Utilization", "GPU Utilization", gpu.gpu_utilization),
    Route("/GPU-Memory", "GPU Memory", gpu.gpu_memory),
    Route("/GPU-Resources", "GPU Resources", gpu.gpu_resources),
    Route("/PCIe-Throughput", "PCIe Throughput", gpu.pcie_throughput),
    Route("/NVLink-Throughput", "NVLink Throughput", gpu.nvlink_throughput, available=_has_nvlink),
    Route("/NVLink-Timeline", "NVLink Timeline", gpu.nvlink_timeline, available=_has_nvlink),
    Route("/Machine-Resources", "Machine Resources", machine.machine_resources, needs_gpu=False,
          shows_gpu=False,
          available=lambda metrics: True),
    Route("/Workload", "Embedding Workload", workload.workload_dashboard, needs_gpu=False,
          available=lambda metrics: metrics.workload is not None),
)


def available_routes(metrics: Metrics) -> dict[str, str]:
    """The ``/index.json`` body: route -> title, for the dashboards this machine can fill."""
    return {route.path: route.title for route in ROUTES if route.available(metrics)}
