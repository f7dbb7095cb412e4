"""A history store filled with days of varying GPUs, through the writer's own code path on a
scripted clock: what the store's benchmarks and its tests read from."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from jupyterlab_nvdashboard.metrics import GpuReading, History, HostReading
from jupyterlab_nvdashboard.store import HistoryStore
from tests.support.simulated_devices import simulated_device_uuids
from tests.support.store_clock import ScriptedClock

DAY_S = 86400.0


def fill_store(path: Path, seed: int = 0, days: float = 30, end_s: float | None = None,
               gpus: int = 8, fine_days: float = 1.0, profile: str = "h200") -> float:
    """A store at ``path`` of ``days`` of ``gpus`` GPUs whose readings vary every sample
    (random walks plus noise, which compress worse than real idle GPUs), ending at ``end_s``
    (default: now). The size depends on the buckets, not on the samples in them: the last
    ``fine_days`` get one sample per 5-second bucket, the days before one per minute (their
    5-second buckets are pruned to 24 hours as it goes, as they would be). Returns the
    seconds it took. Its series are keyed by the UUIDs of ``--simulate gpus
    --simulate-profile profile``, the server that reads it."""
    rng = np.random.default_rng(seed)
    end = time.time() if end_s is None else end_s
    clock = ScriptedClock(end - days * DAY_S)
    uuids = simulated_device_uuids(gpus, profile)
    store = HistoryStore(path, clock=clock, device_uuids=lambda: uuids)
    store.open()
    history = History(10)
    store.attach(history)
    level = rng.uniform(0, 100, gpus)
    started = time.perf_counter()
    step = 0
    while clock.wall < end:
        step += 1
        level = np.clip(level + rng.normal(0, 3, gpus), 0, 100)
        noise = rng.normal(0, 1, (gpus, 6))
        readings = tuple(GpuReading(
            i, False, float(level[i]), float(level[i] * 0.4 + noise[i, 0]),
            float(4e10 + level[i] * 1e9 + noise[i, 1] * 1e6), 1.4e11, 5e8,
            float(abs(noise[i, 2]) * 1e9), float(abs(noise[i, 3]) * 1e9), False,
            float(level[i] * 1e8), float(level[i] * 1e8), float(40 + level[i] * 0.3),
            float(100 + level[i] * 6 + noise[i, 4])) for i in range(gpus))
        host = HostReading(float(rng.uniform(0, 100)), float(rng.uniform(1e10, 2e10)), 1e11,
                           float(rng.uniform(0, 1e8)), float(rng.uniform(0, 1e8)),
                           float(rng.uniform(0, 1e7)), float(rng.uniform(0, 1e7)))
        history.append(clock.wall, readings, host, monotonic_s=clock.mono)
        every = 5.0 if clock.wall >= end - fine_days * DAY_S else 60.0
        clock.advance(every)
        if step % 720 == 0:  # many samples per batch: the file is the same
            store.step()
    store.stop()
    return time.perf_counter() - started
