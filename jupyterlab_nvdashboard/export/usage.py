"""GPU usage on ``/metrics`` (issue 28, items 4 and 5): how long each GPU has been unused,
GPU memory held x time, time held and time held without GPU work, per GPU always and,
opted in (``--metrics-per-user N``), per user and Jupyter kernel.

The totals are integrals this server keeps from its process passes (``diagnosis/idle.py``:
memory held x the time between two passes). NVML has no counter of memory held, so here a
reader's own integral is the only way; it restarts at 0 with the server, which Prometheus'
``increase()`` and ``rate()`` take as a counter reset. docs/prometheus.md has the
PromQL for GPU-hours and idle GPU-hours per user, and what the per-user labels cost.

Labels: the per-GPU series carry the DCGM series' ``gpu``, ``UUID`` and host label (a MIG
device also its ``GPU_I_ID``, as ``nvdashboard_gpu_diagnosis``); the per-user ones carry
``user``, ``kernel`` (the Jupyter kernel id; empty for processes outside any kernel),
``hostname``, ``gpu`` and ``UUID``, and no more (issue 28): a MIG device's holders are
summed into their GPU's series.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ..diagnosis.idle import DeviceTrack, unused_for
from ..metrics import GpuFacts
from .collector import HealthValue
from .dcgm import HOSTNAME_LABEL, device_labels, identities

PREFIX = "nvdashboard_"
# (name without _total, kind, help) of each series, per GPU and per user.
UNUSED = ("gpu_unused_seconds", "gauge",
          "Seconds since this GPU last did work (by its utilization or SM activity; without "
          "either, since a process last held it), counted from this server's start.")
GPU_TOTALS = (
    ("gpu_memory_held_byte_seconds", "counter",
     "GPU memory held by processes x seconds, since this server started."),
    ("gpu_held_seconds", "counter",
     "Seconds at least one process held this GPU, since this server started."),
    ("gpu_idle_held_seconds", "counter",
     "Seconds at least one process held this GPU while it did no work, since this server "
     "started."),
)
USER_HELD = ("user_gpu_memory_held_bytes", "gauge",
             "GPU memory the user's kernel (with its children) holds on this GPU now.")
USER_IDLE = ("user_gpu_idle_seconds", "gauge",
             "Seconds the user's kernel has held this GPU without GPU work (0 while it "
             "works or runs a cell; absent when it cannot be told).")
USER_TOTALS = (
    ("user_gpu_memory_held_byte_seconds", "counter",
     "GPU memory held by the user's kernel x seconds, since this server started."),
    ("user_gpu_held_seconds", "counter",
     "Seconds the user's kernel held this GPU, since this server started."),
    ("user_gpu_idle_held_seconds", "counter",
     "Seconds the user's kernel held this GPU without GPU work, since this server started."),
)
DROPPED = ("user_gpu_series_dropped", "gauge",
           "Per-user series left out by the --metrics-per-user bound (the smallest holders).")


class HolderUsage(NamedTuple):
    """One holder's usage of one device row, as the pages keep it (``apps/usage.py``)."""

    user: str
    kernel: str  # Jupyter kernel id; "" outside any kernel
    row: int
    held_bytes: float  # now
    idle_s: float | None  # now: 0 working, None cannot be told
    byte_seconds: float
    held_s: float
    idle_held_s: float


def _value(spec: tuple[str, str, str], value: float, labels: dict[str, str]) -> HealthValue:
    name, kind, text = spec
    return HealthValue(PREFIX + name, kind, text, value, labels)


def usage_series(devices: Mapping[int, DeviceTrack], holders: Sequence[HolderUsage],
                 facts: Sequence[GpuFacts], hostname: str, now_s: float,
                 per_user: int = 0) -> list[HealthValue]:
    """The usage series of one scrape. ``per_user``: how many (user, kernel, GPU) series
    at most (0: none), the largest holders first."""
    ids = identities(facts)
    out = []
    for row, track in sorted(devices.items()):
        identity = ids.get(row)
        if identity is None:
            continue
        labels = device_labels(identity, hostname)
        out.append(_value(UNUSED, unused_for(track, now_s)[0], labels))
        for spec, value in zip(GPU_TOTALS, (track.byte_seconds, track.held_s,
                                            track.idle_held_s), strict=True):
            out.append(_value(spec, value, labels))
    if per_user <= 0:
        return out
    # One series per (user, kernel, GPU): a MIG device's holders count on their GPU.
    summed: dict[tuple[str, str, int, str], list[float | None]] = {}
    for holder in holders:
        identity = ids.get(holder.row)
        if identity is None:
            continue
        key = (holder.user, holder.kernel, identity.gpu, identity.uuid)
        values = [holder.held_bytes, holder.idle_s, holder.byte_seconds, holder.held_s,
                  holder.idle_held_s]
        if key in summed:
            before = summed[key]
            # Idle on both is idle for the shorter time; unknown on either is unknown.
            idle = None if before[1] is None or holder.idle_s is None else \
                min(before[1], holder.idle_s)
            values = [a + b for a, b in zip(before[:1], values[:1], strict=True)] + [idle] + \
                [a + b for a, b in zip(before[2:], values[2:], strict=True)]  # type: ignore[operator]
        summed[key] = values
    ranked = sorted(summed.items(), key=lambda item: -(item[1][0] or 0.0))
    for (user, kernel, gpu, uuid), values in ranked[:per_user]:
        labels = {"user": user, "kernel": kernel, HOSTNAME_LABEL: hostname, "gpu": str(gpu),
                  "UUID": uuid}
        out.append(_value(USER_HELD, values[0] or 0.0, labels))
        if values[1] is not None:
            out.append(_value(USER_IDLE, values[1], labels))
        for spec, value in zip(USER_TOTALS, values[2:], strict=True):
            out.append(_value(spec, value or 0.0, labels))
    out.append(_value(DROPPED, float(max(0, len(ranked) - per_user)), {HOSTNAME_LABEL:
                                                                         hostname}))
    return out
