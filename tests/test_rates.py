"""Rates are counter deltas over the real elapsed time, whatever the tick length."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from jupyterlab_nvdashboard.metrics.binding import binding_loader, load_binding
from jupyterlab_nvdashboard.metrics.host import HostReader
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader
from jupyterlab_nvdashboard.metrics.rates import HOLD_S, CounterRates
from jupyterlab_nvdashboard.simnvml import SimulatedNvml

# Irregular tick times (seconds) and the counter values read at them.
JITTERED_TIMES = [100.0, 100.13, 100.41, 100.47, 101.2, 101.25]
COUNTERS = [0, 1_300, 4_100, 4_700, 12_000, 12_500]
EXPECTED = [(b - a) / (tb - ta) for a, b, ta, tb in
            zip(COUNTERS, COUNTERS[1:], JITTERED_TIMES, JITTERED_TIMES[1:], strict=False)]


def test_counter_rates_use_real_elapsed_time() -> None:
    rates = CounterRates()
    results = [rates.update("x", value, t) for value, t in zip(COUNTERS, JITTERED_TIMES,
                                                                 strict=True)]
    assert results[0] is None
    assert results[1:] == pytest.approx(EXPECTED, rel=1e-12)


def test_counter_reset_and_unrefreshed_counter() -> None:
    rates = CounterRates()
    rates.update("x", 1000, 1.0, source_time_s=1.0)
    assert rates.update("x", 3000, 2.0, source_time_s=2.0) == 2000
    # Not refreshed by its source (same value, same timestamp): repeat the rate for a while...
    assert rates.update("x", 3000, 2.5, source_time_s=2.0) == 2000
    # ...but never longer than HOLD_S of monotonic time: a frozen counter is not live.
    assert rates.update("x", 3000, 2.0 + HOLD_S + 0.1, source_time_s=2.0) is None
    assert rates.update("x", 10, 5.0, source_time_s=5.0) is None  # 64-bit went back: reset
    assert rates.update("x", 110, 6.0, source_time_s=6.0) == 100  # and counts again after
    assert rates.update("x", None, 7.0) is None


def test_32_bit_counter_wraps_by_its_width() -> None:
    rates = CounterRates()
    top = 2**32
    rates.update("x", top - 2500, 0.5, width_bits=32)
    assert rates.update("x", top - 500, 1.0, width_bits=32) == 4000
    assert rates.update("x", 1500, 1.5, width_bits=32) == 4000  # 2000 bytes across the wrap
    # A wrap that would mean more than the link can carry is a reset instead.
    rates.update("y", top - 500, 1.0, width_bits=32, max_rate=1e6)
    assert rates.update("y", top - 10_000, 2.0, width_bits=32, max_rate=1e6) is None


def test_a_reset_of_a_narrow_counter_with_no_known_maximum_is_no_wrap() -> None:
    """50 MB/s on a 32-bit counter that resets: read as a wrap, it would be 6.4 GB/s (its
    whole range over one interval). No maximum is known: the counter's own pace tells."""
    rates = CounterRates()
    value, rate = 3_000_000_000, 50e6
    for t in (0.0, 0.67, 1.34):
        rates.update("x", value + rate * t, t, width_bits=32)
    assert rates.update("x", rate * 0.2, 2.01, width_bits=32) is None  # reset, 0.2 s ago
    assert rates.update("x", rate * 0.87, 2.68, width_bits=32) == pytest.approx(rate)
    # A wrap before any rate is known cannot be told from a reset: no rate, not a wrong one.
    rates.update("y", 2**32 - 500, 1.0, width_bits=32)
    assert rates.update("y", 1500, 1.5, width_bits=32) is None


def test_rates_survive_a_lost_gpu_forgotten_while_the_reader_updates() -> None:
    """The slow thread forgets a lost GPU's counters (mark_lost) while the GPU thread
    updates others: neither sees a dictionary change size under it."""
    import sys
    import threading

    rates = CounterRates()
    for n in range(20_000):
        rates.update(("gpu-0", "pcie_tx", n), n, 1.0)
    stop, errors = threading.Event(), []

    def reader() -> None:
        n = 0
        while not stop.is_set():
            rates.update(("gpu-1", "pcie_tx", n), n, 1.0)
            n += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # thread switches inside one pass over the keys
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(20):
            try:
                rates.forget("gpu-2")
                rates.retain({"gpu-0", "gpu-1"})
            except RuntimeError as error:
                errors.append(error)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert errors == []


def test_an_ntp_step_does_not_freeze_or_distort_a_rate() -> None:
    rates = CounterRates()
    rates.update("x", 0, 100.0, source_time_s=5_000.0)
    # The wall clock (NVML's timestamps) steps back an hour; 0.2 s really passed.
    assert rates.update("x", 2_000, 100.2, source_time_s=1_400.2) == pytest.approx(10_000)
    # Forward by a minute: still the monotonic 0.2 s, not 60 s.
    assert rates.update("x", 4_000, 100.4, source_time_s=1_460.4) == pytest.approx(10_000)
    # Sane timestamps are preferred: they say when the value was really sampled.
    assert rates.update("x", 6_000, 100.65, source_time_s=1_460.6) == pytest.approx(10_000)


class FakeCounters:
    """psutil-shaped counters that the test advances to known values."""

    def __init__(self) -> None:
        self.step = 0

    def disk(self) -> SimpleNamespace:
        return SimpleNamespace(read_bytes=COUNTERS[self.step], write_bytes=2 * COUNTERS[self.step])

    def net(self) -> SimpleNamespace:
        return SimpleNamespace(bytes_recv=3 * COUNTERS[self.step], bytes_sent=COUNTERS[self.step])

    def clock(self) -> float:
        return JITTERED_TIMES[self.step]


def test_host_disk_and_network_rates_at_jittered_ticks() -> None:
    fake = FakeCounters()
    reader = HostReader(disk_io=fake.disk, net_io=fake.net, clock=fake.clock)
    readings = []
    for step in range(len(COUNTERS)):
        fake.step = step
        readings.append(reader.read())
    assert readings[0].disk_read_bytes_per_s is None
    for reading, expected in zip(readings[1:], EXPECTED, strict=True):
        assert reading.disk_read_bytes_per_s == pytest.approx(expected, rel=1e-12)
        assert reading.disk_write_bytes_per_s == pytest.approx(2 * expected, rel=1e-12)
        assert reading.net_recv_bytes_per_s == pytest.approx(3 * expected, rel=1e-12)
        assert reading.net_sent_bytes_per_s == pytest.approx(expected, rel=1e-12)


def test_host_cpu_percent_from_own_counters() -> None:
    times = iter([
        SimpleNamespace(user=10.0, system=5.0, idle=85.0, iowait=0.0),
        SimpleNamespace(user=13.0, system=6.0, idle=86.0, iowait=0.0),  # 4 busy of 5
    ])
    Times = type("Times", (tuple,), {})  # sum() must see every field, like psutil's namedtuple

    def cpu_times() -> tuple:
        t = next(times)
        value = Times((t.user, t.system, t.idle, t.iowait))
        value.idle, value.iowait = t.idle, t.iowait  # type: ignore[attr-defined]
        return value

    reader = HostReader(cpu_times=cpu_times)
    assert reader.read().cpu_pct is None
    assert reader.read().cpu_pct == pytest.approx(80.0)


def test_pcie_and_nvlink_rates_from_simulated_counters_at_jittered_ticks() -> None:
    simulator = SimulatedNvml(gpu_count=2)
    clock_value = [JITTERED_TIMES[0]]
    simulator.set_clock(lambda: clock_value[0])
    reader = NvmlReader(binding_loader(simulator.library), clock=lambda: clock_value[0])
    reader.ensure_initialized()
    lib = load_binding(simulator.library)
    previous = None
    for t in JITTERED_TIMES:
        clock_value[0] = t
        # What the counters hold at t, read straight from the simulator's own fields.
        handle = lib.nvmlDeviceGetHandleByIndex(1)
        pcie = lib.nvmlDeviceGetFieldValues(handle, [lib.NVML_FI_DEV_PCIE_COUNT_TX_BYTES])
        links = reader.facts[1].nvlink_link_ids
        nvlink = lib.nvmlDeviceGetFieldValues(
            handle, [(lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link) for link in links])
        now = (pcie[0].value.ullVal, sum(f.value.ullVal for f in nvlink) * 1024)
        reading = reader.read()[1]
        if previous is None:
            assert reading.pcie_tx_bytes_per_s is None
        else:
            elapsed = t - previous[0]
            assert reading.pcie_tx_bytes_per_s == pytest.approx(
                (now[0] - previous[1][0]) / elapsed, rel=1e-9)
            assert reading.nvlink_rx_bytes_per_s == pytest.approx(
                (now[1] - previous[1][1]) / elapsed, rel=1e-9)
        previous = (t, now)


def test_an_all_gpu_total_is_unknown_while_one_gpus_rate_is() -> None:
    """The pages' "all GPUs" line follows the one rule for a sum with unknown parts (the
    links' totals and a run's exchange follow it too): it never dips to the known part."""
    from jupyterlab_nvdashboard.apps.gpu import gpu_resources
    from jupyterlab_nvdashboard.composition import create_metrics
    from jupyterlab_nvdashboard.config import Config, SimulationConfig
    from jupyterlab_nvdashboard.metrics import GpuReading, HostReading, Sample

    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=2)), environ={})
    metrics.nvml.ensure_initialized()
    feed = gpu_resources(metrics)
    known = GpuReading.unavailable(0, lost=False)._replace(pcie_tx_bytes_per_s=3e9)
    unknown = GpuReading.unavailable(1, lost=False)
    host = HostReading(*([None] * len(HostReading._fields)))
    rows = feed.rows([Sample(0, 1000.0, (known, unknown), host),
                      Sample(1, 1000.2, (known, unknown._replace(pcie_tx_bytes_per_s=1e9)),
                             host)]).numeric
    assert rows["pcie_tx0"][0] == pytest.approx(3.0)
    assert math.isnan(rows["pcie_tx"][0]) and rows["pcie_tx"][1] == pytest.approx(4.0)
