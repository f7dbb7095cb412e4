"""The history store costs the server neither memory nor its event loop (issue 43, items 1.2,
1.4 and 1.5): an off store lets go of the samples it hears, a page's catch-up reads the
store on another thread, and /history.csv streams a month in bounded pieces, with a bound
on how many such reads run at once."""

from __future__ import annotations

import gc
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jupyterlab_nvdashboard.config import load_config
from jupyterlab_nvdashboard.metrics import GpuReading, History, HostReading
from jupyterlab_nvdashboard.store import HistoryStore
from tests.support.store_clock import ScriptedClock

START_S = 1_699_999_980.0
GPUS = 8
INTERVAL_S = 0.2  # the busy sampling interval: what fills memory fastest
HOUR_TICKS = int(3600 / INTERVAL_S)


@pytest.fixture
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nvdashboard-store-io-") as name:
        yield Path(name)


def tick(history: History, clock: ScriptedClock, step: int) -> None:
    """One sample of 8 GPUs with readings of its own, as the sampler makes each tick."""
    gpus = tuple(GpuReading(i, False, float(step % 100), 10.0 + i, 2e9 + step, 8e10, None,
                            1e6 + step, 2e6 + step, False, None, None, 50.0 + i, 250.0 + step)
                 for i in range(GPUS))
    history.append(clock.wall, gpus, HostReading(12.0 + step % 7, 4e9, 16e9, 0.0, 0.0, 0.0,
                                                 0.0), monotonic_s=clock.mono)
    clock.advance(INTERVAL_S)


def bytes_per_kept_sample() -> float:
    """What one tick's sample takes while something keeps it (measured, not assumed)."""
    clock, history, kept = ScriptedClock(START_S, 100.0), History(10), []
    history.add_listener(kept.append)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for step in range(300):
            tick(history, clock, step)
        return (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()


def test_an_off_store_fed_for_an_hour_holds_no_samples(folder: Path) -> None:
    path = folder / "history.sqlite"
    path.symlink_to(folder / "elsewhere.sqlite")  # one of the ways a store turns off
    clock = ScriptedClock(START_S, 5_000.0)
    store = HistoryStore(path, clock=clock, device_uuids=dict)
    history = History(10)
    store.attach(history)  # as the server composes it: before the store opens
    store.open()
    assert store.role == "off"
    hour_footprint = bytes_per_kept_sample() * HOUR_TICKS
    gc.collect()
    process = psutil.Process()
    before = process.memory_info().rss
    for step in range(HOUR_TICKS):  # an hour of 8 GPUs at 200 ms, on a scripted clock
        tick(history, clock, step)
    gc.collect()
    grown = process.memory_info().rss - before
    print(f"RSS grew {grown / 2**20:.1f} MiB over the hour; the hour's samples, kept, "
          f"would take {hour_footprint / 2**20:.1f} MiB")
    # Before: every sample stayed in the off store's queue (the hour's whole footprint).
    assert grown < hour_footprint / 4
    assert store.past(START_S, clock.wall, 5).samples == []
    store.close()


def test_a_proxy_server_with_a_store_configured_never_exits_idle_even_if_it_is_off(
        folder: Path) -> None:
    path = folder / "history.sqlite"
    path.symlink_to(folder / "elsewhere.sqlite")  # the store will turn off when opened
    proxy = ["--jupyter-proxy", "--unix-socket", str(folder / "s.sock"), "--store", str(path)]
    # The setting decides, not the outcome: an off store still asks for no hole.
    assert load_config(proxy, {}).idle_exit_s == 0
