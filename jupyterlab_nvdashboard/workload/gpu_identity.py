"""Which GPU a workload run is on, written into its ``start`` event so the dashboard judges
that GPU and no other.

The run does not parse ``CUDA_VISIBLE_DEVICES``: it records the value as it was set
(``visible``), and the server resolves it against its own devices with the one parser of
that variable (``metrics/cuda_visibility.py``: integers, ``GPU-`` UUID prefixes, ``MIG-``
UUIDs and the older ``MIG-GPU-<uuid>/<gi>/<ci>`` form). Beside it, in order of trust: the GPU
the dashboard's launcher pinned the run to (it sets ``CUDA_VISIBLE_DEVICES`` to that GPU's
UUID and names it in ``NVDASHBOARD_RUN_GPU``); for a GPU run, the UUID of CUDA device 0 as
the CUDA driver reports it (``cuDeviceGetUuid``, through ctypes, so no framework is needed).
The index is the dashboard's row, known only for a pinned run.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

from .config import cuda_visible_devices, pinned_gpu


def run_gpu(device: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``{"uuid": str | None, "index": int | None, "visible": str | None}`` of the run."""
    visible = cuda_visible_devices(environ)
    pinned = pinned_gpu(environ)
    if pinned is not None:
        return {**pinned, "visible": visible}
    uuid = cuda_device0_uuid() if device == "gpu" else None
    return {"uuid": uuid, "index": None, "visible": visible}


def cuda_device0_uuid() -> str | None:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` of CUDA device 0, or None without one."""
    return cuda_device_uuid(0)


def cuda_device_uuid(ordinal: int) -> str | None:
    """The UUID of CUDA device ``ordinal`` (what a sharded run's rank ``ordinal`` uses)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        device = ctypes.c_int()
        raw = (ctypes.c_ubyte * 16)()
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
            return None
        if cuda.cuDeviceGetUuid(raw, device) != 0:
            return None
    except (OSError, AttributeError):
        return None
    text = bytes(raw).hex()
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
