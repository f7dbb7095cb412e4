"""``dask worker tcp://SCHEDULER:8786 --preload jupyterlab_nvdashboard.cluster.preload``:
installs ``GpuMetricsPlugin`` on the worker as it starts."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


async def dask_setup(worker: Any) -> None:
    try:
        from .plugin import GpuMetricsPlugin

        await worker.plugin_add(GpuMetricsPlugin())
    except Exception:  # a preload error would stop the worker from starting
        log.exception("nvdashboard: the GPU plugin could not be added")
