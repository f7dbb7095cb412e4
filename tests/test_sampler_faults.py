"""The sampler under NVML faults (simulated): slow calls, a GPU lost and reset, a late init.

In every case the tick carries on for the metrics that work, the Bokeh event loop stays
responsive, and open dashboards recover by themselves. Nothing here is timed: a hung NVML
call is held until the test releases it, and what must happen meanwhile is counted.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pynvml

from jupyterlab_nvdashboard.metrics.binding import binding_loader
from jupyterlab_nvdashboard.metrics.host import HostReader
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader
from jupyterlab_nvdashboard.metrics.sampler import History, Sampler
from jupyterlab_nvdashboard.simnvml import SimulatedNvml
from tests.support.bar_rows import bar_rows
from tests.support.bokeh_client import open_session
from tests.support.servers import get, in_process_server
from tests.support.stream_client import live_frames, open_stream
from tests.support.waiting import until

INTERVAL_S = 0.1


# Ticks that must happen while NVML hangs: at one tick per 0.1 s, a tick that waited for NVML
# would never make them (the hang lasts until the test releases it).
TICKS_WHILE_HUNG = 20


def test_a_hung_nvml_keeps_tick_and_event_loop() -> None:
    with in_process_server(gpus=2, interval_s=INTERVAL_S) as server:
        server.wait_until_gpus_read()
        history, simulator = server.metrics.history, server.simulator
        simulator.hang_calls()
        try:
            until(lambda: simulator.hung_calls, "a reader thread waits inside NVML")
            first = history.last_seq
            stale_after_s = server.metrics.sampler.stale_after_s(INTERVAL_S)
            # The readings go stale, and the tick carries on: the newest sample shows the
            # GPUs as gaps, the host's metrics fresh.
            until(lambda: len(history.since(first)) >= TICKS_WHILE_HUNG and
                   (history.latest().gpu_age_s or 0) > stale_after_s,
                   f"{TICKS_WHILE_HUNG} ticks, the last with stale GPU readings")
            # The event loop answers while NVML is still hung.
            answers = [get(server.url + "/index.json")[0] for _ in range(5)]
            still_hung = simulator.hung_calls
            ticked = history.since(first)
        finally:
            simulator.hang_calls(False)
        fresh = until(lambda: (latest := history.latest()) and latest.gpu_age_s is not None
                       and latest.gpu_age_s <= stale_after_s
                       and latest.gpus[0].utilization_pct is not None and latest,
                       "a fresh GPU reading after the hang")

    assert answers == [200] * 5 and still_hung
    assert all(s.host.memory_used_bytes is not None for s in ticked)  # host metrics fresh
    stale = [s for s in ticked if s.gpu_age_s and s.gpu_age_s > stale_after_s]
    assert stale and all(s.gpus[0].utilization_pct is None for s in stale)  # shown as gaps
    assert fresh.gpus[0].utilization_pct is not None


def test_lost_gpu_comes_back_after_reset_and_dashboard_recovers() -> None:
    with in_process_server(gpus=2, interval_s=INTERVAL_S, retry_interval_s=0.3) as server:
        history = server.metrics.history

        def wait_for(condition, seconds: float = 5.0):  # noqa: ANN001, ANN202
            return until(lambda: (latest := history.latest()) is not None
                         and condition(latest) and latest, "condition not reached", seconds)

        async def watch() -> tuple[int, int]:
            page = await open_stream(server.url, "/GPU-Resources")
            server.simulator.lose_gpu(1)
            await asyncio.to_thread(wait_for, lambda s: s.gpus[1].lost)
            lost_seq = history.last_seq
            rows_while_lost = 0
            for _ in range(5):
                rows_while_lost += (await page.receive(5)).header["rows"]
            server.simulator.restore_gpu(1)
            back = await asyncio.to_thread(
                wait_for, lambda s: not s.gpus[1].lost and s.gpus[1].utilization_pct is not None)
            assert back.seq > lost_seq
            rows_after = 0
            for _ in range(5):
                rows_after += (await page.receive(5)).header["rows"]
            page.close()
            return rows_while_lost, rows_after

        rows_while_lost, rows_after = asyncio.run(watch())
        assert rows_while_lost >= 3 and rows_after >= 3
        info = json.loads(get(server.url + "/info.json")[1])
        assert [device["lost"] for device in info["devices"]] == [False, False]
        assert all(not r.lost for r in history.latest().gpus)


def test_nvml_init_fails_first_then_dashboards_fill_themselves() -> None:
    simulator = SimulatedNvml(gpu_count=2)
    simulator.set_init_error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED, times=2)
    with in_process_server(gpus=2, simulator=simulator, interval_s=INTERVAL_S,
                           retry_interval_s=0.5) as server:
        assert json.loads(get(server.url + "/info.json")[1])["nvml_state"] == "driver_not_loaded"

        async def watch() -> tuple[str, bool]:
            session = await open_session(server.url, "/GPU-Utilization")
            notice = json.dumps(session.document)
            told_to_reload = False
            deadline = time.monotonic() + 10
            while not told_to_reload and time.monotonic() < deadline:
                message = await asyncio.wait_for(session.receive(), 5)
                told_to_reload = (message.msgtype == "PATCH-DOC"
                                  and "gpus-appeared" in json.dumps(message.content))
            session.close()
            return notice, told_to_reload

        notice, told_to_reload = asyncio.run(watch())
        assert "No NVIDIA GPU or driver was found" in notice
        # The open page is told to reload itself (its script reloads on that change); the
        # reloaded page streams the GPU bars.
        assert told_to_reload
        bars = asyncio.run(live_frames(server.url, "/GPU-Utilization", wanted=1))
        assert bar_rows(bars.frames[-1].rows.text["html"][0])[0][0]["gpu"].startswith("GPU 0")
        info = json.loads(get(server.url + "/info.json")[1])
        assert info["nvml_state"] == "ok" and info["gpu_count"] == 2
        assert "/GPU-Utilization" in json.loads(get(server.url + "/index.json")[1])
        samples = server.metrics.history.since(-1)
        # While the driver was not loaded, the tick went on with the host's metrics.
        without_driver = [sample for sample in samples if not sample.gpus]
        assert without_driver
        assert all(s.host.memory_used_bytes is not None for s in without_driver)
        assert samples[-1].gpus and samples[-1].gpus[0].utilization_pct is not None



def test_a_stop_while_the_readers_are_starting_raises_nothing_and_leaves_none(monkeypatch) -> None:  # noqa: ANN001
    # Ctrl-C right after start-up: the server's stop runs while the sampler, on its own
    # thread, is starting its reader threads. A stop that joined a reader not started yet
    # raised "cannot join thread before it is started" and the server exited with code 1.
    simulator = SimulatedNvml(2, profile="h200")
    sampler = Sampler(NvmlReader(binding_loader(simulator.library)), HostReader(),
                      History(5), INTERVAL_S)
    stop_errors: list[BaseException] = []

    def stop_sampler() -> None:
        try:
            sampler.stop()
        except BaseException as error:  # noqa: BLE001 - what the test looks for
            stop_errors.append(error)

    stopper = threading.Thread(target=stop_sampler)
    readers: list[threading.Thread] = []
    start_thread = threading.Thread.start

    def start_with_a_stop_arriving(thread: threading.Thread) -> None:
        if thread is not stopper:
            readers.append(thread)
            if stopper.ident is None:
                stopper.start()  # the stop arrives while the first reader is being started
                stopper.join(0.5)
        start_thread(thread)

    monkeypatch.setattr(threading.Thread, "start", start_with_a_stop_arriving)
    sampler.start()
    monkeypatch.setattr(threading.Thread, "start", start_thread)
    stopper.join(10)
    assert not stopper.is_alive() and stop_errors == []
    assert readers, "the sampler started no reader thread"
    for reader in readers:
        reader.join(10)
    assert not [reader.name for reader in readers if reader.is_alive()]
