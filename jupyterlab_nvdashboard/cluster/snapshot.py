"""The snapshot a worker sends with each heartbeat: small, versioned, keyed by GPU UUID.

Version 1 is a dict ``{"v": 1, "host": HOSTNAME, "t": UNIX_S, "gpus": {KEY: ROW}}`` where
KEY is the GPU's UUID (a MIG device's own UUID) and ROW is::

    [gpu, uuid, model, pci_bus_id, gpu_instance_id, gpu_instance_profile, lost, *values]

with the values in ``export.dcgm.FIELDS`` order (None: not available). Values are rounded to
what their units need, so msgpack (the heartbeat's encoding) sends small integers where it
can: the ``DCGM_FI_PROF_*`` ratios travel as whole thousandths and the byte rates as whole
KiB/s. About 200 bytes per GPU, 250 with every GPM field. A reader refuses a version it
does not know.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..export.dcgm import FIELDS, ExportedGpu, GpuIdentity

VERSION = 1
_IDENTITY_FIELDS = 6


def _wire_scale(name: str) -> float:
    if name.startswith("DCGM_FI_PROF_") and name.endswith("_BYTES"):
        return 1 / 1024  # bytes per second, sent in whole KiB/s
    if name.startswith("DCGM_FI_PROF_"):
        return 1000.0  # ratios 0..1, sent in whole thousandths
    return 1.0


SCALES = tuple(_wire_scale(field.name) for field in FIELDS)


def _compact(value: float | None, scale: float) -> float | int | None:
    if value is None:
        return None
    if scale != 1.0:
        return int(round(value * scale))
    if abs(value) >= 100 or float(value).is_integer():
        return int(round(value))  # MiB, MHz, bytes per second, KiB: whole units
    return round(value, 3)  # ratios and small readings


def encode(hostname: str, time_s: float, gpus: Sequence[ExportedGpu]) -> dict[str, Any]:
    rows = {}
    for gpu in gpus:
        identity = gpu.identity
        rows[identity.key] = [identity.gpu, identity.uuid, identity.model_name,
                              identity.pci_bus_id, identity.gpu_instance_id,
                              identity.gpu_instance_profile, gpu.lost,
                              *(_compact(value, scale)
                                for value, scale in zip(gpu.values, SCALES, strict=True))]
    return {"v": VERSION, "host": hostname, "t": round(time_s, 3), "gpus": rows}


class NodeSnapshot(NamedTuple):
    hostname: str
    time_s: float
    gpus: dict[str, ExportedGpu]  # by key (UUID)


def decode(payload: Mapping[str, Any]) -> NodeSnapshot:
    """Raises ValueError (one line) for anything that is not a version-1 snapshot."""
    if not isinstance(payload, Mapping) or payload.get("v") != VERSION:
        raise ValueError(f"not a version-{VERSION} nvdashboard snapshot")
    try:
        hostname, time_s = str(payload["host"]), float(payload["t"])
        gpus = {}
        for key, row in dict(payload["gpus"]).items():
            gpu, uuid, model, bus, instance, profile, lost = row[:_IDENTITY_FIELDS + 1]
            values = tuple(None if v is None else float(v) / scale for v, scale in
                           zip(row[_IDENTITY_FIELDS + 1:_IDENTITY_FIELDS + 1 + len(FIELDS)],
                               SCALES, strict=False))
            values += (None,) * (len(FIELDS) - len(values))
            identity = GpuIdentity(int(gpu), str(uuid), str(model), bus,
                                   None if instance is None else int(instance), profile,
                                   None if key == uuid else str(key))
            gpus[str(key)] = ExportedGpu(hostname, identity, bool(lost), values)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"malformed nvdashboard snapshot: {error}") from None
    return NodeSnapshot(hostname, time_s, gpus)
