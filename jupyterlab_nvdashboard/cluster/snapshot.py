"""What a worker tells the scheduler about its GPUs: static facts once, live values per
heartbeat. Small, versioned, keyed by GPU UUID.

Version 2 has two messages:

* the **identity** (the worker's start-up report, sent again only when the GPUs it reads
  change): ``{"v": 2, "host": HOSTNAME, "e": EPOCH, "gpus": [ID_ROW, ...]}`` with
  ``ID_ROW = [key, gpu, uuid, model, pci_bus_id, gpu_instance_id, gpu_instance_profile]``
  (KEY: the GPU's UUID, a MIG device's own UUID), plus ``"sim": true`` when the worker
  reads the simulated driver (``NVDASHBOARD_SIMULATE``; absent means real GPUs);
* the **live snapshot** of each heartbeat: ``{"v": 2, "e": EPOCH, "t": UNIX_S,
  "gpus": [[lost, *values], ...]}``, the rows in the identity's order and the values in
  ``export.dcgm.FIELDS`` order (None: not available). The first snapshot after a change
  also carries the identity under ``"id"``.

EPOCH names one identity of one worker: a live snapshot is read only with the identity of
the same epoch. Values are rounded to what their units need, so msgpack (the heartbeat's
encoding) sends small integers where it can: the ``DCGM_FI_PROF_*`` ratios travel as whole
thousandths and the byte rates as whole KiB/s. A reader refuses a version it does not know,
in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..export.dcgm import FIELDS, ExportedGpu, GpuIdentity

VERSION = 2


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


class NodeIdentity(NamedTuple):
    hostname: str
    epoch: str
    gpus: tuple[GpuIdentity, ...]
    simulated: bool = False  # read from the simulated driver, not real hardware


class NodeSnapshot(NamedTuple):
    hostname: str
    time_s: float
    gpus: dict[str, ExportedGpu]  # by key (UUID)


def encode_identity(hostname: str, epoch: str, gpus: Sequence[GpuIdentity],
                    simulated: bool = False) -> dict[str, Any]:
    identity: dict[str, Any] = {
        "v": VERSION, "host": hostname, "e": epoch,
        "gpus": [[g.key, g.gpu, g.uuid, g.model_name, g.pci_bus_id, g.gpu_instance_id,
                  g.gpu_instance_profile] for g in gpus]}
    if simulated:
        identity["sim"] = True
    return identity


def encode(epoch: str, time_s: float, gpus: Sequence[ExportedGpu],
           identity: dict[str, Any] | None = None) -> dict[str, Any]:
    """The live snapshot of ``gpus``, in the identity's order; ``identity`` rides along
    on the first one after a change."""
    payload: dict[str, Any] = {
        "v": VERSION, "e": epoch, "t": round(time_s, 3),
        "gpus": [[gpu.lost, *(_compact(value, scale)
                              for value, scale in zip(gpu.values, SCALES, strict=True))]
                 for gpu in gpus]}
    if identity is not None:
        payload["id"] = identity
    return payload


def _check_version(payload: Any, what: str) -> None:
    if not isinstance(payload, Mapping) or payload.get("v") != VERSION:
        raise ValueError(f"not a version-{VERSION} nvdashboard {what}")


def decode_identity(payload: Any) -> NodeIdentity:
    """Raises ValueError (one line) for anything that is not a version-2 identity."""
    _check_version(payload, "identity")
    try:
        gpus = []
        for key, gpu, uuid, model, bus, instance, profile in payload["gpus"]:
            gpus.append(GpuIdentity(int(gpu), str(uuid), str(model),
                                    None if bus is None else str(bus),
                                    None if instance is None else int(instance),
                                    None if profile is None else str(profile),
                                    None if key == uuid else str(key)))
        return NodeIdentity(str(payload["host"]), str(payload["e"]), tuple(gpus),
                            payload.get("sim") is True)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"malformed nvdashboard identity: {error}") from None


def decode(payload: Any, identity: NodeIdentity) -> NodeSnapshot:
    """The live snapshot read with its identity. Raises ValueError (one line) for anything
    that is not a version-2 snapshot of that identity."""
    _check_version(payload, "snapshot")
    if str(payload.get("e")) != identity.epoch:
        raise ValueError(f"snapshot of identity {payload.get('e')!r}, not {identity.epoch!r}")
    try:
        rows = list(payload["gpus"])
        if len(rows) != len(identity.gpus):
            raise ValueError(f"{len(rows)} rows for {len(identity.gpus)} GPUs")
        time_s = float(payload["t"])
        gpus = {}
        for labels, row in zip(identity.gpus, rows, strict=True):
            values = tuple(None if v is None else float(v) / scale
                           for v, scale in zip(row[1:1 + len(FIELDS)], SCALES, strict=False))
            values += (None,) * (len(FIELDS) - len(values))
            gpus[labels.key] = ExportedGpu(identity.hostname, labels, bool(row[0]), values)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise ValueError(f"malformed nvdashboard snapshot: {error}") from None
    return NodeSnapshot(identity.hostname, time_s, gpus)
