"""Which GPU a workload run is on, written into its ``start`` event so the dashboard judges
that GPU and no other.

In order of trust: the GPU the dashboard's launcher pinned the run to (it sets
``CUDA_VISIBLE_DEVICES`` to that GPU's UUID and names it in ``NVDASHBOARD_RUN_GPU``); a
``GPU-<uuid>`` first in ``CUDA_VISIBLE_DEVICES``; for a GPU run, the UUID of CUDA device 0
as the CUDA driver reports it (``cuDeviceGetUuid``, through ctypes, so no framework is
needed). The index is the dashboard's row, known only for a pinned run; the server finds
the row of any other run from its UUID.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

from .config import cuda_visible_devices, pinned_gpu


def run_gpu(device: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``{"uuid": str | None, "index": int | None}`` of the run's GPU."""
    pinned = pinned_gpu(environ)
    if pinned is not None:
        return pinned
    first = (cuda_visible_devices(environ) or "").split(",")[0].strip()
    if first.startswith(("GPU-", "MIG-")):
        return {"uuid": first, "index": None}
    return {"uuid": cuda_device0_uuid() if device == "gpu" else None, "index": None}


def cuda_device0_uuid() -> str | None:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` of CUDA device 0, or None without one."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        device = ctypes.c_int()
        raw = (ctypes.c_ubyte * 16)()
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), 0) != 0:
            return None
        if cuda.cuDeviceGetUuid(raw, device) != 0:
            return None
    except (OSError, AttributeError):
        return None
    text = bytes(raw).hex()
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
