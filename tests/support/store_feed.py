"""A history store fed on a scripted clock, as the sampler would feed it: what the store's
unit tests (``test_store*.py``) drive by hand, with no server and no waiting."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from jupyterlab_nvdashboard.metrics import GpuReading, History, HostReading
from jupyterlab_nvdashboard.store import HistoryStore
from tests.support.store_clock import ScriptedClock

START_S = 1_699_999_980.0  # a multiple of 60: bucket edges are easy to reason about
DAY_S = 86400.0
# The UUID of each device row (what the server hands the store from the NVML facts).
UUIDS = {0: "GPU-0a0a0a0a-0000-4000-8000-000000000000",
         1: "GPU-1b1b1b1b-0000-4000-8000-000000000001"}


def gpu(index: int, utilization: float | None) -> GpuReading:
    return GpuReading(index, False, utilization, 10.0, 2e9, 8e10, None, 1e6, 2e6, False, None,
                      None, 50.0, 250.0)


HOST = HostReading(12.0, 4e9, 16e9, 0.0, 0.0, 0.0, 0.0)


class Feeder:
    """Appends samples to a history the store listens to, as the sampler would, stepping the
    writer every ``batch_s`` of monotonic time."""

    def __init__(self, store: HistoryStore, clock: ScriptedClock, interval_s: float = 1.0):
        self.store, self.clock, self.interval_s = store, clock, interval_s
        self.history = History(100_000)
        store.attach(self.history)
        self.last_step = clock.mono

    def run(self, seconds: float, value=lambda t: 50.0) -> None:
        for _ in range(int(round(seconds / self.interval_s))):
            self.history.append(self.clock.wall, (gpu(0, value(self.clock.wall)), gpu(1, 7.0)),
                                HOST, monotonic_s=self.clock.mono)
            self.clock.advance(self.interval_s)
            if self.clock.mono - self.last_step >= self.store.batch_s:
                self.store.step()
                self.last_step = self.clock.mono


def stored(path: Path, tier: int) -> list[tuple[int, int]]:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return connection.execute("SELECT start_s, samples FROM buckets WHERE tier=? "
                                  "ORDER BY start_s", (tier,)).fetchall()


def open_writer(path: Path, clock: ScriptedClock, **kwargs: float) -> HistoryStore:
    store = HistoryStore(path, clock=clock, device_uuids=lambda: UUIDS, **kwargs)
    store.open()
    assert store.role == "writer", store.problem
    return store
