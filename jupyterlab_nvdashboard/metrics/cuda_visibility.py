"""Which devices CUDA enumerates in this process, and in what order.

Pure logic, no NVML: the reader hands in what NVML said about each physical GPU.

CUDA's rules (CUDA C Programming Guide, "CUDA Environment Variables", and the MIG user guide):
- ``CUDA_DEVICE_ORDER=FASTEST_FIRST`` (the default) puts the device CUDA guesses is fastest
  first; the order of the rest is unspecified. ``PCI_BUS_ID`` orders by PCI bus ID, which is
  NVML's (and nvidia-smi's) index order. We guess "fastest" by compute capability, then
  cores x maximum SM clock, keeping PCI order between equals.
- A MIG-enabled GPU is not a CUDA device itself: CUDA enumerates its MIG devices instead.
- ``CUDA_VISIBLE_DEVICES`` is a comma-separated list of integers (positions in the order
  above), ``GPU-<uuid>`` prefixes and ``MIG-<uuid>`` (or the older
  ``MIG-GPU-<uuid>/<gpu instance>/<compute instance>``). The list stops at the first entry
  that names no device; an empty value hides every device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class MigEntry:
    uuid: str
    gpu_instance_id: int | None
    compute_instance_id: int | None


@dataclass(frozen=True)
class PhysicalGpu:
    nvml_index: int
    uuid: str
    # Larger is faster: (compute capability major, minor, cores x max SM clock); unknowns are 0.
    speed: tuple[int, int, int] = (0, 0, 0)
    mig_devices: tuple[MigEntry, ...] = field(default_factory=tuple)  # empty when MIG is off


def enumeration_order(gpus: Sequence[PhysicalGpu], device_order: str) -> list[str]:
    """UUIDs of what CUDA enumerates with no CUDA_VISIBLE_DEVICES, in CUDA's order."""
    ordered = list(gpus)
    if device_order != "PCI_BUS_ID":
        ordered.sort(key=lambda gpu: gpu.speed, reverse=True)  # stable: PCI order among equals
    uuids: list[str] = []
    for gpu in ordered:
        uuids.extend([mig.uuid for mig in gpu.mig_devices] or [gpu.uuid])
    return uuids


def _match(token: str, gpus: Sequence[PhysicalGpu]) -> list[str]:
    """The devices one ``GPU-``/``MIG-`` entry names (a unique prefix match)."""
    if token.startswith("MIG-GPU-"):  # R450/R460 form: MIG-GPU-<uuid>/<gi>/<ci>
        parent, _, rest = token[len("MIG-"):].partition("/")
        gi, _, ci = rest.partition("/")
        return [mig.uuid for gpu in gpus if gpu.uuid == parent for mig in gpu.mig_devices
                if f"{mig.gpu_instance_id}" == gi and f"{mig.compute_instance_id}" == ci]
    if token.startswith("MIG-"):
        found = [mig.uuid for gpu in gpus for mig in gpu.mig_devices
                 if mig.uuid.startswith(token)]
        return found if len(found) == 1 else []
    if token.startswith("GPU-"):
        found_gpus = [gpu for gpu in gpus if gpu.uuid.startswith(token)]
        if len(found_gpus) != 1:
            return []
        gpu = found_gpus[0]
        return [mig.uuid for mig in gpu.mig_devices] or [gpu.uuid]
    return []


def cuda_indices(gpus: Sequence[PhysicalGpu], cuda_visible_devices: str | None,
                 device_order: str = "FASTEST_FIRST") -> dict[str, int]:
    """UUID -> position CUDA gives that device; devices CUDA does not see are absent."""
    base = enumeration_order(gpus, device_order)
    if cuda_visible_devices is None:
        return {uuid: position for position, uuid in enumerate(base)}
    chosen: list[str] = []
    for token in (part.strip() for part in cuda_visible_devices.split(",")):
        if token.isdigit():
            named = [base[int(token)]] if int(token) < len(base) else []
        else:
            named = _match(token, gpus)
        if not named:
            break
        chosen.extend(uuid for uuid in named if uuid not in chosen)
    return {uuid: position for position, uuid in enumerate(chosen)}
