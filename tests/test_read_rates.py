"""Each reading family is read at the pace its consumers need (issue 47, item 4).

The one table (``metrics/demand.py``) against what the consumers do: no page repaints less
often than before, each route draws nothing from a family the table does not read for it,
a bars page costs at most 60 NVML calls a second on 4 simulated GPUs (counted per pass on
a hand-driven clock, not timed), ``/metrics`` still exports every family in every scrape,
and the idle judgment and the diagnosis still see a process pass once a second while a
process holds a GPU.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from jupyterlab_nvdashboard.apps.live import REPLACE_REDRAW_MS
from jupyterlab_nvdashboard.apps.registry import ROUTES, ROUTES_BY_PATH, RouteFeeds
from jupyterlab_nvdashboard.export.dcgm import exported_gpus
from jupyterlab_nvdashboard.metrics import History, Metrics, Sample
from jupyterlab_nvdashboard.metrics.binding import binding_loader
from jupyterlab_nvdashboard.metrics.demand import (
    AT_WORK,
    CORE,
    EVERYTHING,
    HOLDING,
    QUIET_S,
    READS,
    read_intervals,
)
from jupyterlab_nvdashboard.metrics.families import GPM_FAMILY, HEALTH_FAMILY, PROCESS_FAMILY
from jupyterlab_nvdashboard.metrics.gpm import GpmReader
from jupyterlab_nvdashboard.metrics.health import HealthReader
from jupyterlab_nvdashboard.metrics.host import HostReader
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader
from jupyterlab_nvdashboard.metrics.processes import ProcessReader
from jupyterlab_nvdashboard.metrics.sampler import Sampler
from jupyterlab_nvdashboard.runs.watcher import RunsWatcher
from jupyterlab_nvdashboard.simnvml import SimulatedNvml, SimulatedProcess
from tests.support.servers import get, in_process_server
from tests.support.stream_client import open_stream
from tests.support.waiting import until

FAST_S, RESTING_S = 0.2, 2.0  # the defaults (config.py)
FAMILIES = (GPM_FAMILY, HEALTH_FAMILY, PROCESS_FAMILY)
GIB = 2**30


class Clock:
    """The one clock of the readers and the simulated driver, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def hand_driven(gpus: int = 4, profile: str = "mixed") -> tuple[Sampler, SimulatedNvml, Clock]:
    """The server's sampler and families (``metrics.build_metrics``), on a clock of our own."""
    clock = Clock()
    simulator = SimulatedNvml(gpus, profile=profile)
    simulator.set_clock(clock)
    nvml = NvmlReader(binding_loader(simulator.library), clock=clock)
    families = [GpmReader(nvml), HealthReader(nvml), ProcessReader(nvml, clock=clock)]
    sampler = Sampler(nvml, HostReader(), History(10_000), FAST_S, RESTING_S, families)
    nvml.ensure_initialized()
    return sampler, simulator, clock


def passes(sampler: Sampler, clock: Clock, seconds: float) -> list[Sample]:
    """The samples of ``seconds`` of the reader thread's passes, one per current interval,
    each read by hand as the threads would (``tick`` reads the GPUs without threads)."""
    made = []
    end = clock.now + seconds
    while clock.now < end - 1e-9:
        made.append(sampler.tick())
        clock.now += sampler.current_interval_s
    return made


def calls_per_second(consumers: set[str] | None, seconds: float = 20.0) -> float:
    sampler, simulator, clock = hand_driven()
    sampler.set_consumers(consumers)
    passes(sampler, clock, 5.0)  # start-up and the static facts are not what we count
    before = simulator.total_calls
    passes(sampler, clock, seconds)
    return (simulator.total_calls - before) / seconds


def test_the_table_names_real_routes_and_consumers() -> None:
    pages = [name for name in READS if name.startswith("/")]
    assert pages and all(name in ROUTES_BY_PATH for name in pages), pages
    assert HOLDING in READS


def test_a_bars_page_costs_at_most_60_nvml_calls_a_second() -> None:
    # 4 simulated GPUs: 20 calls per core pass, 17 per health pass, 16 per process pass.
    # Read for any page (as every page was before), that is over 200 a second.
    assert calls_per_second(None) > 150
    bars = calls_per_second({"/GPU-Utilization"})
    assert bars <= 60
    # A process on a GPU: its passes (and GPM) once a second come on top, still under 60.
    assert calls_per_second({"/GPU-Utilization", HOLDING}) <= 60
    # Nobody watching reads no more than a bars page.
    assert calls_per_second(set()) <= bars


def routes_feeds() -> tuple[RouteFeeds, Metrics]:
    """Every route's feed over the 8-GPU H200 profile (NVLink and GPM: every route)."""
    sampler, _, clock = hand_driven(gpus=8, profile="h200")
    metrics = Metrics(sampler, None)
    passes(sampler, clock, 3.0)
    return RouteFeeds(metrics), metrics


@pytest.mark.parametrize("route", [route.path for route in ROUTES])
def test_no_page_repaints_less_often_than_before(route: str) -> None:
    """A route the table names is read at least as often as it repaints; any other one as
    every page was read before."""
    everything = read_intervals(None, FAST_S, RESTING_S)
    intervals = read_intervals({route}, FAST_S, RESTING_S)
    if route not in READS:
        assert intervals == everything
        return
    feeds, _ = routes_feeds()
    feed = feeds(route)
    assert feed is not None
    repaint_s = REPLACE_REDRAW_MS / 1000 if feed.mode == "replace" else FAST_S
    assert intervals[CORE] <= repaint_s
    for family in READS[route]:  # the other families it draws: as often as before
        if family != CORE:
            assert intervals[family] <= everything[family], family


def same_rows(left: object, right: object) -> bool:
    if left.text != right.text or left.numeric.keys() != right.numeric.keys():  # type: ignore[attr-defined]
        return False
    return all(np.array_equal(left.numeric[key], right.numeric[key], equal_nan=True)  # type: ignore[attr-defined]
               for key in left.numeric)  # type: ignore[attr-defined]


@pytest.mark.parametrize("route", sorted(name for name in READS if name.startswith("/")))
def test_a_route_draws_nothing_from_a_family_it_is_not_read_for(route: str) -> None:
    """What a page of ``route`` shows is the same without the families the table does not
    read for it: nothing it draws is lost when they are read more slowly."""
    sampler, simulator, clock = hand_driven(gpus=8, profile="h200")
    simulator.set_processes([SimulatedProcess(0, 4242, 8 * GIB, sm_pct=60)])
    metrics = Metrics(sampler, None)
    samples = passes(sampler, clock, 6.0)
    assert all(family in samples[-1].extra for family in (GPM_FAMILY, HEALTH_FAMILY))
    feed = RouteFeeds(metrics)(route)
    assert feed is not None
    unread = [family for family in FAMILIES if family not in READS[route]]
    without = [Sample(s.seq, s.time_s, s.gpus, s.host, s.gpu_age_s,
                      {k: v for k, v in s.extra.items() if k not in unread}, s.monotonic_s)
               for s in samples]
    assert same_rows(feed.rows(samples), feed.rows(without))


def exported_pattern(sampler: Sampler, sample: Sample) -> list[list[bool]]:
    """Which values ``/metrics`` exports for each GPU from ``sample`` (True: a value)."""
    return [[value is not None for value in gpu.values]
            for gpu in exported_gpus("host", sampler.nvml.facts, sample)]


def test_a_family_read_less_often_is_in_every_sample_and_exported() -> None:
    """With a bars page open and a GPU at work, health and GPM are read once per idle
    interval; every sample still carries the newest of each, so a scrape exports what it
    did before."""
    everything, _, clock = hand_driven(profile="h200")
    before = exported_pattern(everything, passes(everything, clock, 4.0)[-1])
    assert before and all(any(gpu) for gpu in before)
    sampler, simulator, clock = hand_driven(profile="h200")
    sampler.set_consumers({"/GPU-Utilization", AT_WORK})  # h200's GPUs are busy
    passes(sampler, clock, 2.0)  # GPM derives its first reading from two samples
    read = simulator.calls["nvmlDeviceGetPerformanceState"]
    samples = passes(sampler, clock, 10.0)
    assert len(samples) == 10  # one pass a second
    # Health read every other pass (the idle interval, 2 s), not every pass as before.
    assert simulator.calls["nvmlDeviceGetPerformanceState"] - read == 5 * 4
    for sample in samples:
        assert HEALTH_FAMILY in sample.extra and GPM_FAMILY in sample.extra
        assert exported_pattern(sampler, sample) == before


def scrape(url: str) -> str:
    status, body = get(url + "/metrics")
    assert status == 200
    return body.decode()


def test_a_utilization_page_reads_slowly_but_metrics_and_processes_stay_fresh() -> None:
    """A real server at the default paces: one /GPU-Utilization page makes the sampler read
    the core pass once a second and health at the idle pace; ``/metrics`` exports every
    family in each scrape; with a process on a GPU, every sample carries a process pass
    (once a second) for the idle judgment and the diagnosis."""
    with in_process_server(gpus=4, profile="h200", interval_s=FAST_S,
                           idle_interval_s=RESTING_S, metrics_enabled=True) as server:
        server.wait_until_gpus_read()
        sampler = server.metrics.sampler
        until(lambda: sampler.idle, "the sampler rests with nobody watching", 30)
        # GPM derives its first figures from two of its samples (two idle intervals; the
        # first reading is all "not available"): a scrape before that rightly has no PROF
        # series.
        def gpm_figures() -> bool:
            latest = server.metrics.history.latest()
            gpm = latest.extra.get(GPM_FAMILY, {}) if latest is not None else {}
            return bool(gpm) and all(g.sm_activity_pct is not None for g in gpm.values())

        until(gpm_figures, "the first GPM figures", 30)

        async def watch() -> None:
            stream = await open_stream(server.url, "/GPU-Utilization")
            try:
                # The profile's GPUs are busy (no process listed): at work.
                until(lambda: sampler.consumers == {"/GPU-Utilization", AT_WORK},
                      "the server names the open page", 30)
                assert sampler.current_interval_s == 1.0
                assert sampler.read_intervals[HEALTH_FAMILY] == RESTING_S
                for _ in range(3):
                    text = scrape(server.url)
                    for name in ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_UTIL",
                                 "DCGM_FI_PROF_SM_ACTIVE"):
                        assert f"{name}{{" in text, name
                server.simulator.set_processes([SimulatedProcess(1, 4242, 8 * GIB)])
                until(lambda: HOLDING in (sampler.consumers or ()),
                      "the server sees the process", 30)
                assert sampler.read_intervals[PROCESS_FAMILY] == 1.0
                seq = server.metrics.history.last_seq + 1  # from the next pass on
                until(lambda: len(server.metrics.history.since(seq)) >= 4, "4 samples", 30)
                made = server.metrics.history.since(seq)
                assert all(PROCESS_FAMILY in sample.extra for sample in made)
                assert all(4242 in {p.pid for p in sample.extra[PROCESS_FAMILY]}
                           for sample in made)
            finally:
                stream.close()

        asyncio.run(watch())
        until(lambda: sampler.idle, "the sampler rests again once the page left", 30)
        assert sampler.current_interval_s == RESTING_S


def test_a_timeline_page_reads_every_family_it_draws_at_the_sampling_interval() -> None:
    sampler, simulator, clock = hand_driven(profile="h200")
    sampler.set_consumers({"/GPU-Resources", "/GPU-Activity"})
    assert sampler.current_interval_s == FAST_S
    samples = passes(sampler, clock, 4.0)
    assert len(samples) == 20 and all(GPM_FAMILY in s.extra for s in samples)
    # An unknown consumer (a further stream of a page) is read as every page was.
    sampler.set_consumers({"/GPU-Health/timeline"})
    assert sampler.read_intervals == read_intervals(None, FAST_S, RESTING_S)
    assert {family: sampler.read_intervals[family] for family in EVERYTHING} == \
        {CORE: FAST_S, HEALTH_FAMILY: FAST_S, GPM_FAMILY: 1.0, PROCESS_FAMILY: 1.0}


def test_with_no_gpu_at_work_health_and_gpm_rest_but_every_sample_carries_them() -> None:
    """Nobody watching and no GPU at work (no holder, none busy): health and GPM are read
    every ``QUIET_S``, the process lists still once per idle interval (how a new holder is
    noticed); every sample carries the newest health and GPM reading, so a scrape exports
    every family as before. Once a GPU is at work, both are back at the idle interval."""
    sampler, simulator, clock = hand_driven(profile="h200")
    simulator.set_scenario("idle")
    sampler.set_consumers(set())
    assert sampler.idle
    passes(sampler, clock, 2 * QUIET_S)  # GPM derives its first reading from two samples
    health = simulator.calls["nvmlDeviceGetPerformanceState"]
    gpm = simulator.calls["nvmlGpmSampleGet"]
    listed = simulator.calls["nvmlDeviceGetComputeRunningProcesses_v3"]
    samples = passes(sampler, clock, 60.0)
    assert len(samples) == 60 / RESTING_S
    # 4 GPUs: at most one health and one GPM reading each per QUIET_S (5 in 60 s, one of
    # them on the boundary), against 30 each at the idle interval.
    assert simulator.calls["nvmlDeviceGetPerformanceState"] - health <= 5 * 4
    assert simulator.calls["nvmlGpmSampleGet"] - gpm <= 5 * 4
    assert simulator.calls["nvmlDeviceGetComputeRunningProcesses_v3"] - listed == 30 * 4
    assert all(PROCESS_FAMILY in sample.extra for sample in samples)
    for sample in samples:
        assert HEALTH_FAMILY in sample.extra and GPM_FAMILY in sample.extra
        assert all(any(gpu) for gpu in exported_pattern(sampler, sample))
    sampler.set_consumers({AT_WORK})  # what the server names once a process holds a GPU
    assert sampler.idle
    health = simulator.calls["nvmlDeviceGetPerformanceState"]
    passes(sampler, clock, 10.0)
    assert simulator.calls["nvmlDeviceGetPerformanceState"] - health == 5 * 4


def test_the_server_names_a_gpu_at_work_only_while_one_is() -> None:
    """A real server, nobody watching: on an idle machine health rests at ``QUIET_S``; a
    process on a GPU brings it back to the idle interval within a few passes, and its
    leaving lets it rest again. A busy GPU that no process list shows counts as at work."""
    with in_process_server(gpus=4, profile="h200", interval_s=FAST_S,
                           idle_interval_s=RESTING_S, scenario="idle") as server:
        server.wait_until_gpus_read()
        sampler = server.metrics.sampler
        until(lambda: sampler.consumers == frozenset(), "nobody watching, nothing at work",
              30)
        assert sampler.idle and sampler.read_intervals[HEALTH_FAMILY] == QUIET_S
        assert sampler.read_intervals[PROCESS_FAMILY] == RESTING_S
        server.simulator.set_processes([SimulatedProcess(1, 4242, 8 * GIB)])
        until(lambda: AT_WORK in (sampler.consumers or ()), "the server sees the holder", 30)
        assert sampler.idle and sampler.read_intervals[HEALTH_FAMILY] == RESTING_S
        assert HOLDING not in sampler.consumers  # no page open
        server.simulator.set_processes([])
        until(lambda: sampler.consumers == frozenset(), "the holder left", 30)
        server.simulator.set_scenario("compute-bound")
        until(lambda: AT_WORK in (sampler.consumers or ()), "a busy GPU, no holder", 30)


def test_nobody_watching_the_runs_are_followed_at_the_resting_pace() -> None:
    """The runs folder was listed twice a second whatever was open. Nobody watching, it is
    followed once per idle interval; an open page brings it back to twice a second at
    once, and leaving lets it rest again."""
    with in_process_server(gpus=1, interval_s=FAST_S, idle_interval_s=RESTING_S) as server:
        server.wait_until_gpus_read()
        watcher = server.sources.workload.watcher  # type: ignore[attr-defined]
        until(lambda: server.metrics.sampler.idle and watcher.poll_s == RESTING_S,
              "the runs rest with nobody watching", 30)
        polls = watcher._polls
        time.sleep(4 * RESTING_S)
        assert watcher._polls - polls <= 5  # 4 at the idle interval; 16 at 0.5 s

        async def watch() -> None:
            stream = await open_stream(server.url, "/GPU-Utilization")
            try:
                until(lambda: watcher.poll_s == 0.5, "a page: the runs followed again", 30)
            finally:
                stream.close()

        asyncio.run(watch())
        until(lambda: watcher.poll_s == RESTING_S, "the runs rest again", 30)


def test_a_resting_watcher_polls_at_once_for_a_run_that_exited(tmp_path: Path) -> None:
    """A run's exit waits for the watcher's polls (``WorkloadService._run_exited``): at a
    slow pace they come at once, not at the next pace."""
    watcher = RunsWatcher(tmp_path, poll_s=30.0)
    watcher.start()
    try:
        until(lambda: watcher._polls >= 1, "the first poll", 10)
        started = time.monotonic()
        watcher.wait_for_poll(timeout_s=10.0)
        assert watcher._polls >= 3
        assert time.monotonic() - started < 2.0
    finally:
        watcher.stop()
