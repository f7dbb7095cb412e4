"""The sampler under NVML faults (simulated): slow calls, a GPU lost and reset, a late init.

In every case the tick keeps its pace for the metrics that work, the Bokeh event loop
stays responsive, and open dashboards recover by themselves. Timing is asserted here on
purpose: keeping the tick is the behaviour under test.
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
from tests.support.bokeh_client import open_session
from tests.support.servers import get, in_process_server
from tests.support.stream_client import live_frames, open_stream

INTERVAL_S = 0.1


def _index_latencies(url: str, stop: threading.Event, out: list[float]) -> None:
    for _ in range(400):  # bounded: at most 400 requests
        if stop.is_set():
            return
        started = time.monotonic()
        assert get(url + "/index.json")[0] == 200
        out.append(time.monotonic() - started)
        time.sleep(0.05)


def test_slow_nvml_keeps_tick_and_event_loop() -> None:
    with in_process_server(gpus=2, interval_s=INTERVAL_S) as server:
        time.sleep(0.5)
        history = server.metrics.history
        first = history.last_seq
        stop, latencies = threading.Event(), []
        poller = threading.Thread(target=_index_latencies, args=(server.url, stop, latencies))
        poller.start()
        server.simulator.set_call_delay(0.3)  # every NVML call now takes 300 ms
        time.sleep(3.0)
        slow = history.since(first)
        server.simulator.set_call_delay(0.0)
        # The GPU reader may be inside a slow pass (2 GPUs x ~6 calls x 0.3 s); then fresh.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            latest = history.latest()
            if latest and latest.gpu_age_s is not None and latest.gpu_age_s < 0.5 \
                    and latest.gpus[0].utilization_pct is not None:
                break
            time.sleep(0.1)
        stop.set()
        poller.join(30)

    ticks = [s.time_s for s in slow]
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert len(slow) >= 0.8 * 3.0 / INTERVAL_S, len(slow)  # the tick kept its pace
    assert max(gaps) < 3 * INTERVAL_S, max(gaps)
    assert all(s.host.memory_used_bytes is not None for s in slow)  # host metrics fresh
    stale = [s for s in slow if s.gpu_age_s and s.gpu_age_s > 1.0]
    assert stale and all(s.gpus[0].utilization_pct is None for s in stale)  # shown as gaps
    assert latest.gpus[0].utilization_pct is not None and latest.gpu_age_s < 0.5
    latencies.sort()
    assert latencies and latencies[-1] < 0.25, latencies[-5:]  # never waited for NVML


def test_lost_gpu_comes_back_after_reset_and_dashboard_recovers() -> None:
    with in_process_server(gpus=2, interval_s=INTERVAL_S, retry_interval_s=0.3) as server:
        history = server.metrics.history

        def wait_for(condition, seconds: float = 5.0):  # noqa: ANN001, ANN202
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                latest = history.latest()
                if latest is not None and condition(latest):
                    return latest
                time.sleep(0.05)
            raise AssertionError("condition not reached")

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
        assert bars.frames[-1].rows.text["y"][0].startswith("GPU 0")
        info = json.loads(get(server.url + "/info.json")[1])
        assert info["nvml_state"] == "ok" and info["gpu_count"] == 2
        assert "/GPU-Utilization" in json.loads(get(server.url + "/index.json")[1])
        samples = server.metrics.history.since(-1)
        gaps = [b.time_s - a.time_s for a, b in zip(samples, samples[1:], strict=False)]
        # A tick that waited for the GPU reader would wait out a slow pass (2 GPUs x ~6 calls
        # x 0.3 s); a busy machine delays a tick by tenths of a second at most.
        assert max(gaps) < 1.0, max(gaps)  # host ticks never waited for NVML
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
