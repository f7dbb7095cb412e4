"""GPM activity and GPU health, on the simulated NVML: derived values, what a GPU without GPM
shows, MIG instances, throttle reasons in words, XID events, and the two dashboards."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time

import numpy as np
import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from jupyterlab_nvdashboard.apps.activity import ActivityDashboard, gpu_activity, without_gpm
from jupyterlab_nvdashboard.apps.health import (
    REASON_ROWS,
    TIMELINE_STREAM,
    HealthDashboard,
    HealthFeed,
    gpu_health,
    health_cells,
    health_feed,
    health_timeline,
    throttle_mark,
)
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.diagnosis import Diagnosis, Figure, Finding
from jupyterlab_nvdashboard.metrics.binding import binding_loader
from jupyterlab_nvdashboard.metrics.families import GPM_FAMILY, HEALTH_FAMILY, GpmReading
from jupyterlab_nvdashboard.metrics.gpm import CLOSEST_METRIC, NO_GPM_HARDWARE, GpmReader
from jupyterlab_nvdashboard.metrics.health import HealthReader, assess, clock_event_words
from jupyterlab_nvdashboard.metrics.host import HostReader
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader
from jupyterlab_nvdashboard.metrics.sampler import History, Sampler
from jupyterlab_nvdashboard.simnvml import SimulatedNvml
from jupyterlab_nvdashboard.simnvml.health import GPM_LOAD_SHARES
from jupyterlab_nvdashboard.simnvml.profiles import PROFILES
from tests.support.servers import get, in_process_server
from tests.support.stream_client import live_frames, open_stream, stream_url

# GpmReading field -> the simulator's stated share of the mean load (simnvml/health.py).
PERCENT_FIELDS = {
    "sm_activity_pct": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_activity_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "dram_bandwidth_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "fp64_activity_pct": "NVML_GPM_METRIC_FP64_UTIL",
    "fp32_activity_pct": "NVML_GPM_METRIC_FP32_UTIL",
    "fp16_activity_pct": "NVML_GPM_METRIC_FP16_UTIL",
}


class ManualClock:
    def __init__(self, start: float = 5000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def readers(profile: str, gpus: int = 2) -> tuple[SimulatedNvml, NvmlReader, GpmReader,
                                                  ManualClock]:
    clock = ManualClock()
    simulator = SimulatedNvml(gpus, profile=profile)
    simulator.set_clock(clock)
    nvml = NvmlReader(binding_loader(simulator.library), clock=clock)
    nvml.ensure_initialized()
    return simulator, nvml, GpmReader(nvml, every_s=1.0), clock


def two_gpm_passes(profile: str, seconds: float = 1.3, start_s: float = 8.0, gpus: int = 2
                   ) -> tuple[SimulatedNvml, NvmlReader, dict[int, GpmReading], float, float]:
    """GPM read at ``start_s`` and ``start_s + seconds`` of simulated time."""
    simulator, nvml, gpm, clock = readers(profile, gpus)
    origin = clock.now
    clock.now = origin + start_s
    first = gpm.read(nvml.read())
    assert first is not None and all(r == GpmReading(*[None] * 11) for r in first.values())
    clock.now = origin + start_s + seconds
    readings = gpm.read(nvml.read())
    assert readings is not None
    return simulator, nvml, readings, start_s, start_s + seconds


def test_each_gpm_metric_equals_the_profiles_stated_value() -> None:
    simulator, nvml, readings, t1, t2 = two_gpm_passes("h200")
    for gpu in (0, 1):
        reading = readings[gpu]
        mean = simulator.mean_load(gpu, t1, t2)
        assert 0.05 < mean < 0.95  # a load in between, so a wrong share cannot pass
        for field, metric in PERCENT_FIELDS.items():
            expected = 100 * GPM_LOAD_SHARES[metric] * mean
            assert getattr(reading, field) == pytest.approx(expected, abs=0.5), (gpu, field)
    assert readings[0].pcie_tx_bytes_per_s and readings[0].nvlink_rx_bytes_per_s


def test_gpm_pcie_rate_matches_the_counter_fields_over_the_same_interval() -> None:
    simulator, nvml, gpm, clock = readers("h200", gpus=1)
    clock.now += 3.0
    gpm.read(nvml.read())
    clock.now += 1.0
    gpus = nvml.read()
    reading = gpm.read(gpus)[0]
    assert reading.pcie_tx_bytes_per_s == pytest.approx(gpus[0].pcie_tx_bytes_per_s, rel=1e-6)
    assert reading.pcie_rx_bytes_per_s == pytest.approx(gpus[0].pcie_rx_bytes_per_s, rel=1e-6)
    assert reading.nvlink_tx_bytes_per_s == pytest.approx(gpus[0].nvlink_tx_bytes_per_s,
                                                          rel=1e-3)


def test_gpm_is_sampled_at_its_own_rate_not_every_pass() -> None:
    simulator, nvml, gpm, clock = readers("h200", gpus=1)
    for _ in range(10):  # ten reader passes 0.2 s apart: two seconds
        gpm.read(nvml.read())
        clock.now += 0.2
    assert simulator.calls["nvmlGpmSampleGet"] == 2
    assert simulator.calls["nvmlGpmSampleAlloc"] == 2  # one pair, reused


def test_gpm_that_answers_not_supported_is_asked_no_more_and_a_lost_gpu_frees_its_pair(
) -> None:
    simulator, nvml, gpm, clock = readers("h200")
    simulator.set_unsupported(["gpm"])
    for _ in range(5):
        readings = gpm.read(nvml.read())
        clock.now += 1.0
    assert readings == {0: GpmReading(*[None] * 11), 1: GpmReading(*[None] * 11)}
    assert simulator.calls["nvmlGpmSampleGet"] == 2  # once per GPU
    assert gpm.errors[0] == "not supported by this GPU or driver"
    simulator.set_unsupported([])
    simulator, nvml, gpm, clock = readers("h200")
    for _ in range(2):
        gpm.read(nvml.read())
        clock.now += 1.0
    simulator.lose_gpu(1)
    for _ in range(2):
        readings = gpm.read(nvml.read())
        clock.now += 1.0
    assert readings[1] == GpmReading(*[None] * 11) and readings[0].sm_activity_pct is not None
    assert simulator.calls["nvmlGpmSampleFree"] == 2  # the lost GPU's pair


def test_mig_instances_report_their_own_activity() -> None:
    simulator, nvml, readings, t1, t2 = two_gpm_passes("h100-mig")
    facts = nvml.facts
    assert [(f.kind, (f.mig or {}).get("gpu_instance_id")) for f in facts] == [
        ("gpu", None), ("mig", 1), ("mig", 5), ("gpu", None)]
    share = 100 * GPM_LOAD_SHARES["NVML_GPM_METRIC_SM_UTIL"]
    for row, instance in ((1, 1), (2, 5)):
        expected = share * simulator.mean_load(0, t1, t2, gpu_instance_id=instance)
        assert readings[row].sm_activity_pct == pytest.approx(expected, abs=0.5)
        assert readings[row].pcie_tx_bytes_per_s is None  # the GPU's, not the instance's
    assert abs(readings[1].sm_activity_pct - readings[2].sm_activity_pct) > 5
    # The MIG-enabled GPU as a whole: the instances weighted by their slices (3 and 2 of 7).
    whole = share * simulator.mean_load(0, t1, t2)
    assert readings[0].sm_activity_pct == pytest.approx(whole, abs=0.5)
    assert whole == pytest.approx((3 * readings[1].sm_activity_pct
                                   + 2 * readings[2].sm_activity_pct) / 7, abs=0.5)
    assert simulator.calls["nvmlGpmMigSampleGet"] == 4


def test_compute_instances_of_one_gpu_instance_do_not_each_claim_its_activity(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GPM samples a whole GPU instance (nvmlGpmMigSampleGet takes its ID): where it is
    split into two compute instances (two MIG devices), neither shows the instance's
    activity as its own; each says why, and a GPU instance alone still reports."""
    from jupyterlab_nvdashboard.metrics.gpm import gpm_unavailable_reason
    from jupyterlab_nvdashboard.simnvml.profiles import H100_MIG, MigSlot

    split = dataclasses.replace(H100_MIG, mig=(
        MigSlot("1c.3g.40gb", 1, 0, 3, 1, 20, 40_448),
        MigSlot("2c.3g.40gb", 1, 1, 3, 2, 40, 40_448),
        MigSlot("2g.20gb", 5, 0, 2, 2, 32, 20_096)))
    monkeypatch.setitem(PROFILES, "h100-mig-split", dataclasses.replace(
        PROFILES["h100-mig"], name="h100-mig-split", models=(split,)))
    _, nvml, readings, _, _ = two_gpm_passes("h100-mig-split", gpus=1)
    facts = nvml.facts
    assert [(f.mig or {}).get("gpu_instance_id") for f in facts] == [None, 1, 1, 5]
    assert len({f.uuid for f in facts}) == 4
    for row in (1, 2):
        assert readings[row].sm_activity_pct is None
        reason = gpm_unavailable_reason(facts[row], facts[0], {})
        assert reason and "2 compute instances" in reason
    assert readings[3].sm_activity_pct is not None
    assert gpm_unavailable_reason(facts[3], facts[0], {}) is None


def test_a100_mig_instances_cannot_report_gpm() -> None:
    simulator, nvml, readings, _, _ = two_gpm_passes("a100-mig")
    assert all(reading == GpmReading(*[None] * 11) for reading in readings.values())
    assert simulator.calls["nvmlGpmSampleGet"] == simulator.calls["nvmlGpmMigSampleGet"] == 0


@pytest.mark.parametrize("profile", ["a100-535", "consumer", "vgpu"])
def test_gpus_without_gpm_report_none_and_keep_everything_else(profile: str) -> None:
    simulator, nvml, readings, _, _ = two_gpm_passes(profile)
    assert all(reading == GpmReading(*[None] * 11) for reading in readings.values())
    gpus = nvml.read()
    assert all(reading.memory_used_bytes is not None for reading in gpus)
    health = HealthReader(nvml).read(gpus)
    assert health is not None and all(h.sm_clock_mhz is not None for h in health.values())


def test_a_gpu_without_gpm_shows_the_notice_and_keeps_every_other_metric() -> None:
    config = Config(simulation=SimulationConfig(gpu_count=2, profile="mixed"))
    metrics = create_metrics(config, environ={})
    metrics.nvml.ensure_initialized()
    for _ in range(3):
        metrics.sampler.tick()
    lacking = without_gpm(metrics)
    assert [(fact.index, reason) for fact, reason in lacking] == [(1, NO_GPM_HARDWARE)]
    feed = gpu_activity(metrics)
    dashboard = ActivityDashboard(DashboardSources(metrics), feed)
    assert dashboard.notice is not None
    text = dashboard.notice.text
    assert "GPU 1" in text and "cannot report SM activity" in text
    assert CLOSEST_METRIC.split(" (")[0] in text  # names the closest metric
    keys = {series.key for series in feed.series}
    assert "gpm0_sm_activity_pct" in keys and "gpm1_sm_activity_pct" not in keys
    assert "closest1" in keys  # utilization drawn instead, labelled as the closest metric
    sample = metrics.history.latest()
    assert sample is not None
    gpu1 = sample.gpus[1]
    assert None not in (gpu1.utilization_pct, gpu1.memory_used_bytes, gpu1.temperature_c,
                        gpu1.power_w, gpu1.pcie_tx_bytes_per_s, gpu1.nvlink_tx_bytes_per_s)
    assert sample.extra[GPM_FAMILY][1] == GpmReading(*[None] * 11)
    assert sample.extra[HEALTH_FAMILY][1].sm_clock_mhz is not None
    rows = feed.rows(metrics.history.window(60))
    assert not math.isnan(rows.numeric["closest1"][-1])
    assert math.isnan(rows.numeric["gpm0_sm_activity_pct"][0])  # one GPM sample: no value yet


def test_throttle_reasons_decode_into_words() -> None:
    assert clock_event_words(0) == [] and clock_event_words(None) == []
    assert clock_event_words(0x4 | 0x40) == [
        "software power cap: at its power limit", "hardware thermal slowdown: too hot"]
    assert clock_event_words(0x1 | 0x4, throttling_only=True) == [
        "software power cap: at its power limit"]
    simulator, nvml, _, _ = readers("mixed")
    health = HealthReader(nvml).read(nvml.read())
    throttling = health[simulator.throttling_gpu()]
    assert throttling.clock_event_reasons and throttling.clock_event_reasons & 0x4
    assert assess(throttling)["clocks"].startswith("clocks held down: software power cap")
    assert "software power cap" in health_cells(throttling)["reasons"]
    assert simulator.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 2


def test_an_ecc_mark_warns_about_what_is_wrong_in_words_never_about_zero() -> None:
    """"0 uncorrected ECC errors since the driver loaded, 1 in its lifetime" read as a
    warning about zero (issue 44): the mark names the count that is wrong and what it means."""
    simulator, nvml, _, _ = readers("mixed")
    reading = HealthReader(nvml).read(nvml.read())[0]
    old_fault = assess(reading._replace(ecc_volatile_uncorrected=0,
                                        ecc_aggregate_uncorrected=1))["ecc"]
    assert old_fault.startswith("1 uncorrected ECC error in this GPU's lifetime, none since "
                                "the driver loaded"), old_fault
    assert "0 uncorrected" not in old_fault
    new_fault = assess(reading._replace(ecc_volatile_uncorrected=2,
                                        ecc_aggregate_uncorrected=5))["ecc"]
    assert new_fault.startswith("2 uncorrected ECC errors since the driver loaded (5 in its "
                                "lifetime): GPU memory lost data"), new_fault
    assert "ecc" not in assess(reading._replace(ecc_volatile_uncorrected=0,
                                                ecc_aggregate_uncorrected=0))


def test_the_clock_events_quote_the_diagnosis_of_the_same_gpu_word_for_word() -> None:
    """Health's table and /diagnosis.json come from one reading (issue 44): a GPU whose
    clocks are free at this moment, but that the diagnosis finds throttled by hardware
    thermal slowdown over its window, is marked with that very finding; and under the
    throttled-thermal scenario the server's own diagnosis is what the table says."""
    simulator, nvml, _, _ = readers("mixed")
    cool = HealthReader(nvml).read(nvml.read())[0]._replace(clock_event_reasons=0x20)
    finding = Finding("throttled", "throttled: hardware thermal slowdown: too hot (61%); "
                      "software thermal slowdown: too hot for these clocks (100%)",
                      (Figure("time with clocks held down", 100.0, "%", 600),),
                      "clock-events", "check cooling")
    cells = health_cells(cool, throttled=finding)
    assert cells["reasons"] == "now: software thermal slowdown: too hot for these clocks"
    assert cells["reasons_mark"] == throttle_mark(finding)
    assert "hardware thermal slowdown: too hot (61%)" in cells["reasons_mark"]

    metrics = create_metrics(Config(simulation=SimulationConfig(
        gpu_count=2, profile="mixed", scenario="throttled-thermal")), environ={})
    metrics.nvml.ensure_initialized()
    for _ in range(8):
        metrics.sampler.tick()
    sources = DashboardSources(metrics)
    feed = health_feed(sources)
    marks = feed.rows(metrics.history.window(60)).text["reasons_mark"]
    served = {d.row: d for d in sources.diagnoses.current()}
    for position, fact in enumerate(feed.gpus):
        diagnosis: Diagnosis = served[fact.index]
        [throttled] = [f for f in diagnosis.findings if f.cause == "throttled"]
        assert marks[position] == throttle_mark(throttled)
        assert "hardware thermal slowdown" in marks[position]


def test_an_old_driver_and_binding_read_the_older_throttle_reasons_call() -> None:
    simulator, nvml, _, _ = readers("consumer")  # 470 driver, nvidia-ml-py 11.470
    health = HealthReader(nvml).read(nvml.read())
    assert health[1].clock_event_reasons == 0x4
    assert simulator.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 0  # not in 11.470
    assert simulator.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2


@pytest.mark.parametrize("profile", list(PROFILES))
def test_every_profile_has_health_readings_and_a_throttling_gpu(profile: str) -> None:
    simulator, nvml, _, _ = readers(profile)
    health = HealthReader(nvml).read(nvml.read())
    physical = [fact.index for fact in nvml.facts if fact.kind == "gpu"]
    assert health is not None and sorted(health) == physical
    marks = [assess(reading) for reading in health.values()]
    assert any("clocks" in mark for mark in marks)
    if PROFILES[profile].models[0].fully_supported:  # GeForce cards have no ECC memory
        assert health[physical[0]].ecc_aggregate_corrected == 41
        assert any("ecc" in mark for mark in marks)
    else:
        assert all(reading.ecc_aggregate_corrected is None for reading in health.values())


def test_health_reads_static_facts_once_and_ecc_at_its_own_rate() -> None:
    simulator, nvml, _, clock = readers("h200", gpus=1)
    health = HealthReader(nvml, slow_every_s=5.0)
    for _ in range(20):  # 4 s of passes
        health.read(nvml.read())
        clock.now += 0.2
    assert simulator.calls["nvmlDeviceGetTemperatureThreshold"] == 2
    assert simulator.calls["nvmlDeviceGetMaxClockInfo"] == 2 + 1  # + the reader's own probe
    assert simulator.calls["nvmlDeviceGetTotalEccErrors"] == 4
    assert simulator.calls["nvmlDeviceGetClockInfo"] == 2 * 20


def hand_driven(profile: str = "h200", history: int = 5) -> tuple[SimulatedNvml, Sampler]:
    simulator = SimulatedNvml(2, profile=profile)
    nvml = NvmlReader(binding_loader(simulator.library))
    sampler = Sampler(nvml, HostReader(), History(history), 0.2,
                      families=[GpmReader(nvml), HealthReader(nvml)])
    nvml.ensure_initialized()
    return simulator, sampler


def test_an_xid_event_is_in_the_next_tick_and_stays_listed() -> None:
    simulator, sampler = hand_driven()
    sampler.tick()  # the event set is registered on the first pass
    simulator.inject_xid(1, 79)
    sample = sampler.tick()
    events = sample.extra[HEALTH_FAMILY][1].xid_events
    assert [event.xid for event in events] == [79]
    assert sample.extra[HEALTH_FAMILY][0].xid_events == ()
    for _ in range(12):  # more ticks than the history holds
        sample = sampler.tick()
    assert sample.extra[HEALTH_FAMILY][1].xid_events == events
    assert "GPU has fallen off the bus" in health_cells(sample.extra[HEALTH_FAMILY][1])["xid"]


def test_the_event_set_is_polled_without_waiting() -> None:
    simulator, sampler = hand_driven()
    sampler.tick()
    simulator.inject_xid(0, 48)
    simulator.inject_xid(0, 63)
    for _ in range(10):
        sampler.tick()
    timeouts = simulator.event_wait_timeouts_ms
    # Each pass polls until the set is empty: one call per event, plus one per pass.
    assert len(timeouts) == 11 + 2 and max(timeouts) <= 1  # never waits past 1 ms
    assert set(timeouts) == {0}
    assert [e.xid for e in sampler.history.latest().extra[HEALTH_FAMILY][0].xid_events] == \
        [48, 63]


def test_a_failing_family_costs_only_its_own_key() -> None:
    simulator, sampler = hand_driven()

    class Broken:
        name = "broken"

        def read(self, gpus: tuple) -> object:
            raise RuntimeError("a bug")

    sampler.families = (*sampler.families, Broken())
    sample = sampler.tick()
    assert sample.gpus and set(sample.extra) == {GPM_FAMILY, HEALTH_FAMILY}


def test_xid_fault_spec() -> None:
    simulator = SimulatedNvml(2)
    with pytest.raises(ValueError, match="xid needs GPU:XID@SECONDS"):
        simulator.apply_fault_spec("xid=7:79")
    simulator.apply_fault_spec("xid=1:79@0|0:48")
    assert len(simulator._xids) == 2  # noqa: SLF001


def test_health_feed_rows_have_one_row_per_gpu_with_marks() -> None:
    simulator, sampler = hand_driven("mixed", history=10)
    sampler.tick()
    simulator.inject_xid(0, 79)
    sampler.tick()
    feed = HealthFeed(tuple(sampler.nvml.facts))
    rows = feed.rows(sampler.history.window(60))
    assert rows.count == 2 and rows.text["gpu"][0].startswith("GPU 0")
    assert "XID 79" in rows.text["xid"][0] and "XID 79" in rows.text["xid_mark"][0]
    assert rows.text["power_mark"][1].startswith("at its power limit")
    assert rows.text["rows_mark"][0].startswith("a row remapping is pending")
    assert rows.numeric["power_pct"][1] >= 97


def test_xid_reaches_gpu_health_and_versions_reach_info_json() -> None:
    with in_process_server(gpus=2, profile="h200") as server:
        info = json.loads(get(server.url + "/info.json")[1])
        assert info["nvml_versions"]["cuda_driver"] == "12.8"
        index = json.loads(get(server.url + "/index.json")[1])
        assert {"/GPU-Activity", "/GPU-Health"} <= set(index)
        for route in ("/GPU-Activity", "/GPU-Health"):
            assert get(server.url + route)[0] == 200
        history = server.metrics.history
        deadline = time.monotonic() + 30
        while history.last_seq < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # the event set is registered on the first pass
        server.simulator.inject_xid(1, 79)
        injected_at = history.last_seq

        def listed(frame_text: list[str]) -> bool:
            return "XID 79" in frame_text[1]

        seen_at = None
        while seen_at is None and time.monotonic() < deadline:
            for sample in history.since(injected_at):
                health = sample.extra.get(HEALTH_FAMILY) or {}
                if 1 in health and health[1].xid_events:
                    seen_at = sample.seq
                    break
            time.sleep(0.05)
        # Counted exactly on a hand-driven sampler above; here the threads add jitter.
        assert seen_at is not None
        client = asyncio.run(live_frames(server.url, "/GPU-Health", wanted=2))
        assert all(listed(frame.rows.text["xid"]) for frame in client.frames)
        later = history.last_seq
        while history.last_seq < later + 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        client = asyncio.run(live_frames(server.url, "/GPU-Health", wanted=1))
        assert listed(client.frames[-1].rows.text["xid"])  # still listed, ten ticks later


def _newest(history, seq: int):  # noqa: ANN001, ANN202
    return next(sample for sample in history.window(600) if sample.seq == seq)


async def _timeline_pages(server, pages: int, frames: int) -> None:  # noqa: ANN001
    """Pages of /GPU-Health's timelines: the same bytes for all, one encode per frame, and
    rows that are the history's health readings (NaN where not available)."""
    route = f"/GPU-Health/{TIMELINE_STREAM}"
    streams = [await open_stream(server.url, route) for _ in range(pages)]
    table = await open_stream(server.url, "/GPU-Health")  # the table streams beside them
    newest = max(stream.seq for stream in streams)
    for stream in streams:
        while stream.seq < newest:
            await stream.receive()
    stats, family = server.broadcaster.stats, f"{route}@120s"

    def counts() -> tuple[int, int]:  # on the server's loop: never mid-publish
        return stats.encodes.get(family, 0), server.broadcaster.families[(route, 120.0)].seq

    encodes_before, published_before = await asyncio.to_thread(server.on_loop, counts)
    received = 0
    while received < frames:
        for stream in streams:
            await stream.receive()
        received += streams[0].seq > published_before
    encodes_after, published_after = await asyncio.to_thread(server.on_loop, counts)
    for stream in streams:
        while stream.seq < published_after:
            await stream.receive()
    assert "temperature_pct" in table.frames[0].rows.numeric  # the table's own stream
    for page in [*streams, table]:
        page.close()
    raw = [[frame.raw for frame in stream.frames[-frames:]] for stream in streams]
    assert all(page == raw[0] for page in raw), "pages got different frames"
    live = [frame for frame in streams[0].frames
            if published_before < frame.header["seq"] <= published_after]
    assert encodes_after - encodes_before == len(live) >= frames  # one encode per frame
    # The pages draw every few seconds: a frame carries all the rows since the last one.
    refresh_s = gpu_health(server.metrics).timeline.refresh_s
    assert refresh_s >= 1.0
    for frame in live[1:]:
        assert frame.header["rows"] >= 0.5 * refresh_s / server.config.interval_s, frame.header
    # Each row is the history's reading at that time: power not available on this card is
    # NaN, never 0; the power cap is the reason on every GPU, and no other.
    history = server.metrics.history
    for frame in live[-3:]:
        sample = _newest(history, frame.header["seq"])
        health = sample.extra[HEALTH_FAMILY]
        rows = frame.rows.numeric
        assert rows["time"][-1] == sample.time_s * 1000
        for gpu in (0, 1):
            assert rows[f"temperature_c{gpu}"][-1] == health[gpu].temperature_c
            assert rows[f"sm_clock_mhz{gpu}"][-1] == health[gpu].sm_clock_mhz
            assert rows[f"sm_clock_max_mhz{gpu}"][-1] == health[gpu].sm_clock_max_mhz
            assert health[gpu].power_w is None and math.isnan(rows[f"power_w{gpu}"][-1])
            assert math.isnan(rows[f"power_limit_w{gpu}"][-1])
            on = [row for row in range(len(REASON_ROWS))
                  if math.isfinite(rows[f"reasons{gpu}_{row}"][-1])]
            assert [REASON_ROWS[row] for row in on] == ["power cap (SW)"]


def test_health_timelines_come_from_the_history_once_per_tick_for_every_page() -> None:
    with in_process_server(gpus=2, profile="consumer", scenario="throttled-power") as server:
        server.wait_until_gpus_read()
        asyncio.run(_timeline_pages(server, pages=3, frames=3))

        async def without_token() -> int:  # the second stream is guarded like the first
            request = HTTPRequest(stream_url(server.url, f"/GPU-Health/{TIMELINE_STREAM}"),
                                  headers={"Origin": server.url})
            try:
                (await websocket_connect(request)).close()
            except HTTPClientError as error:
                return error.code
            return 101

        assert asyncio.run(without_token()) == 403


def test_health_timeline_rows_say_which_reason_was_on_when_and_gap_when_unknown() -> None:
    """A throttle's reason, at the time it was on, in the reasons rows; a GPU without
    temperature or power readings (vGPU), or a sample without health readings, is NaN."""
    simulator, sampler = hand_driven("vgpu", history=20)
    feed = health_timeline(sampler.nvml.facts)
    simulator.set_scenario("compute-bound")
    sampler.tick()
    simulator.set_scenario("throttled-power")
    sampler.tick()
    simulator.set_scenario("throttled-thermal")
    sampler.tick()
    samples = sampler.history.window(60)
    without = dataclasses.replace(samples[-1], extra={})  # a tick with no health reading
    rows = feed.rows([*samples, without]).numeric

    def reasons(gpu: int, at: int) -> list[str]:
        return [name for row, name in enumerate(REASON_ROWS)
                if math.isfinite(rows[f"reasons{gpu}_{row}"][at])]

    for gpu in (0, 1):
        assert reasons(gpu, 0) == ["none: full speed"]
        assert reasons(gpu, 1) == ["power cap (SW)"]
        # Too hot for the hardware (HW thermal slowdown, a kind of HW slowdown in nvml.h) in
        # part of each spell, too hot for the driver's clocks all through it.
        hot = samples[2].extra[HEALTH_FAMILY][gpu].clock_event_reasons & 0x40
        assert reasons(gpu, 2) == ["HW slowdown: thermal, power brake"] * bool(hot) + [
            "thermal slowdown (SW)"]
        assert reasons(gpu, 3) == []  # no reading: a gap, not "none"
        for key in (f"temperature_c{gpu}", f"temperature_slowdown_c{gpu}",
                    f"power_w{gpu}", f"power_limit_w{gpu}"):
            assert np.isnan(rows[key]).all(), key  # vGPU: not available, never 0
        assert np.isfinite(rows[f"sm_clock_mhz{gpu}"][:3]).all()
        assert math.isnan(rows[f"sm_clock_mhz{gpu}"][3])


def test_the_near_a_limit_chart_has_only_readings_where_higher_is_worse() -> None:
    """The SM clock (higher is better) is not on the "100 = at the limit" chart: it is on the
    timeline against its maximum. The chart says what 100 means for each bar. Its bars are
    HTML the page draws from the rows (tests/test_browser_gpu_health.py checks them), so the
    page's only canvas is its timelines'."""
    from bokeh.plotting import figure

    from jupyterlab_nvdashboard.apps.health import HealthDashboard

    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=2, profile="mixed")),
                             environ={})
    metrics.nvml.ensure_initialized()
    metrics.sampler.tick()
    feed = gpu_health(metrics)
    assert set(feed.rows(metrics.history.window(60)).numeric) == {"temperature_pct",
                                                                   "power_pct"}
    dashboard = HealthDashboard(DashboardSources(metrics), feed)
    assert list(dashboard.root.select({"type": figure})) == [dashboard.timeline.plot]
    assert dashboard.root.select_one({"name": "limit-bars"}) is dashboard.limit_bars
    title = dashboard.root.select_one({"name": "limit-title"}).text
    assert "100 = at the limit" in title and "slowdown threshold" in title \
        and "power limit" in title
    # Its legend is HTML in that title, in the bars' colours: a legend in the canvas would be
    # drawn again at every update.
    from bokeh.models import Legend

    assert not list(dashboard.root.select({"type": Legend}))
    assert "temperature, % of its slowdown threshold" in title and "#d62728" in title
    assert "power, % of its power limit" in title and "#ff7f0e" in title


@pytest.mark.parametrize("route", ["/GPU-Health", "/GPU-Activity"])
def test_timeline_panels_are_bands_of_one_figure_each_one_multiline(route: str) -> None:
    """A repaint costs BokehJS per figure (its axes measured and painted) and per renderer
    of the streamed source (five glyph views each, shown or not): every panel is a band of
    one figure, each band's series, in their colours and dashes, are the rows of one
    MultiLine mapped into the band's own slice, and the streamed source has one renderer,
    the unseen hover line."""
    from bokeh.models import GlyphRenderer, MultiLine
    from bokeh.plotting import figure

    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=4, profile="mixed")),
                             environ={})
    metrics.nvml.ensure_initialized()
    metrics.sampler.tick()
    sources = DashboardSources(metrics)
    if route == "/GPU-Health":
        timeline = HealthDashboard(sources, gpu_health(metrics)).timeline
    else:
        timeline = ActivityDashboard(sources, gpu_activity(metrics)).timeline
    assert timeline is not None
    assert len(timeline.feed.panels) >= 4
    assert len(list(timeline.root.select({"type": figure}))) == 1
    renderers = list(timeline.root.select({"type": GlyphRenderer}))
    streamed = [r for r in renderers if r.data_source is timeline.source]
    assert len(streamed) == 1
    multilines = {tuple(r.data_source.data["key"]): r for r in renderers
                  if isinstance(r.glyph, MultiLine)}
    assert len(multilines) == len(timeline.feed.panels)
    slices = []
    for panel in timeline.feed.panels:
        renderer = multilines[tuple(series.key for series in panel.series)]
        data = renderer.data_source.data
        assert data["color"] == [series.color for series in panel.series]
        assert data["dash"] == [series.dash for series in panel.series]
        slices.append((renderer.coordinates.y_target.start, renderer.coordinates.y_target.end))
    assert all(bottom < top for bottom, top in slices)
    for (_, top), (bottom, _) in zip(slices[1:], slices, strict=False):
        assert top < bottom  # each band below the one before it, none overlapping
    assert sum(len(panel.series) for panel in timeline.feed.panels) > 2 * len(multilines)
