"""The Bokeh server over real HTTP and websockets, with simulated NVML."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import pynvml
import pytest

from jupyterlab_nvdashboard.apps.components import reading_time
from jupyterlab_nvdashboard.apps.live import TIMELINE_REDRAW_MS
from jupyterlab_nvdashboard.apps.registry import ROUTES
from jupyterlab_nvdashboard.simnvml import SimulatedNvml
from tests.support.bar_rows import bar_rows
from tests.support.bokeh_client import open_session
from tests.support.servers import get, in_process_server
from tests.support.stream_client import count_live_frames, live_frames, open_stream
from tests.support.waiting import until

ALL_ROUTES = [route.path for route in ROUTES]


def document_json(url: str, route: str) -> str:
    """The document a new browser session of ``route`` would receive, as JSON text."""

    async def pull() -> str:
        session = await open_session(url, route)
        session.close()
        return json.dumps(session.document)

    return asyncio.run(pull())


def test_every_route_serves_a_bokeh_page_with_local_relative_resources() -> None:
    with in_process_server(gpus=4) as server:
        index = json.loads(get(server.url + "/index.json")[1])
        assert list(index) == ALL_ROUTES
        for route in ["/", "/index.json", "/info.json", *index]:
            status, body = get(server.url + route)
            assert status == 200, route
        for route in index:
            page = get(server.url + route)[1].decode()
            assert 'src="static/js/bokeh.min.js' in page, route
            assert "cdn." not in page and "https://" not in page, route
            assert "SIMULATED" in page or route == "/Machine-Resources", route
        assert get(server.url + "/static/js/bokeh.min.js")[0] == 200


def test_unknown_route_and_malformed_query_are_handled() -> None:
    with in_process_server(gpus=1) as server:
        status, body = get(server.url + "/No-Such-Dashboard")
        assert status == 404 and b"Traceback" not in body
        status, body = get(server.url + "/GPU-Utilization?theme=%ff%fe<script>&theme=dark")
        assert status == 200 and b"<script>&" not in body
        status, body = get(server.url + "/GPU-Utilization?theme=dark")
        assert status == 200 and b"#20262b" in body


def test_info_json_describes_devices() -> None:
    with in_process_server(gpus=2) as server:
        info = json.loads(get(server.url + "/info.json")[1])
        assert info["simulated"] is True and info["gpu_count"] == 2
        assert info["nvml_state"] == "ok" and info["interval_s"] == pytest.approx(0.1)
        assert [device["index"] for device in info["devices"]] == [0, 1]
        assert {"name", "uuid", "memory_total_bytes", "nvlink_link_ids", "label", "cuda_index",
                "unavailable"} <= set(info["devices"][0])


def test_nvlink_routes_absent_without_nvlink() -> None:
    simulator = SimulatedNvml(gpu_count=2)
    simulator.set_unsupported(["nvlink"])
    with in_process_server(gpus=2, simulator=simulator) as server:
        index = json.loads(get(server.url + "/index.json")[1])
        assert "/NVLink-Throughput" not in index and "/NVLink-Timeline" not in index
        assert "/GPU-Resources" in index


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
                                  pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
                                  pynvml.NVML_ERROR_NO_PERMISSION])
def test_init_failure_still_serves_machine_dashboard(code: int) -> None:
    simulator = SimulatedNvml(gpu_count=2)
    simulator.set_init_error(code)
    with in_process_server(gpus=2, simulator=simulator) as server:
        info = json.loads(get(server.url + "/info.json")[1])
        expected = {pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "driver_not_loaded",
                    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "library_not_found",
                    pynvml.NVML_ERROR_NO_PERMISSION: "no_permission"}[code]
        assert info["nvml_state"] == expected and info["gpu_count"] == 0
        assert json.loads(get(server.url + "/index.json")[1]) == {
            "/Machine-Resources": "Machine Resources", "/Workload": "Embedding Workload"}
        assert get(server.url + "/Machine-Resources")[0] == 200
        notice = document_json(server.url, "/GPU-Utilization")
        assert "No NVIDIA GPU or driver was found" in notice and expected.split("_")[0] in notice

        assert count_live_frames(server.url, "/Machine-Resources") >= 3


# The sampler's own threads (metrics/sampler.py): the tick reads NVML too.
SAMPLER_THREADS = {"nvdashboard-gpu-reader", "nvdashboard-slow-reader", "nvdashboard-sampler"}


async def _watch(server, viewers: int, frames_each: int) -> tuple[Counter, int, list[int]]:
    """Open ``viewers`` pages (Bokeh session + stream) and read ``frames_each`` frames on
    each; returns the NVML calls (by function) and GPU passes the sampler made meanwhile, and
    how many rows each page received."""
    simulator, sampler = server.simulator, server.metrics.sampler
    # Start-up reads NVML on its own thread, then starts the reader threads; on a busy
    # machine it may still be going: the pages are watched once the reader has run.
    deadline = time.monotonic() + 60
    while sampler.gpu_reads < 3 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    by_function_before = Counter(simulator.calls)
    calls_before = sum(simulator.calls_by_thread[name] for name in SAMPLER_THREADS)
    reads_before = sampler.gpu_reads
    outside_before = sum(simulator.calls_by_thread.values()) - calls_before
    sessions = [await open_session(server.url, "/GPU-Resources") for _ in range(viewers)]
    streams = [await open_stream(server.url, "/GPU-Resources") for _ in range(viewers)]
    for _ in range(frames_each):
        for stream in streams:
            await stream.receive()
    calls = sum(simulator.calls_by_thread[name] for name in SAMPLER_THREADS) - calls_before
    reads = sampler.gpu_reads - reads_before
    outside = sum(simulator.calls_by_thread.values()) - calls - calls_before
    assert outside == outside_before, f"{outside - outside_before} NVML calls outside the sampler"
    received = [len(stream.column("time")) for stream in streams]
    for page in [*sessions, *streams]:
        page.close()
    return Counter(simulator.calls) - by_function_before, reads, received


def test_a_timeline_page_gets_one_frame_per_repaint_with_every_row_since_the_last() -> None:
    """A timeline repaints at most every TIMELINE_REDRAW_MS: the frames come about that
    often, not once per tick, and together they still carry every sample in order."""
    with in_process_server(gpus=2) as server:
        client = asyncio.run(live_frames(server.url, "/GPU-Resources", wanted=3, timeout_s=30))
        live = client.frames[1:]
        assert len(live) == 3
        interval_s = server.config.interval_s
        redraw_s = TIMELINE_REDRAW_MS / 1000
        for frame in live[1:]:  # the first live frame may follow the catch-up at once
            assert frame.header["rows"] >= 0.8 * redraw_s / interval_s, frame.header
        times = client.column("time")
        steps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert all(step > 0 for step in steps)
        assert max(steps) < 3 * interval_s * 1000 + 1000, "a sample is missing between frames"


def test_nvml_cost_does_not_grow_with_viewers() -> None:
    """Pages never call NVML: every call comes from the sampler's threads, and a GPU pass
    costs the same number of calls with one page open as with eight."""
    with in_process_server(gpus=4) as server:
        one_calls, one_reads, one_received = asyncio.run(_watch(server, 1, 10))
        eight_calls, eight_reads, eight_received = asyncio.run(_watch(server, 8, 10))
    assert one_reads >= 5 and eight_reads >= 5
    # The readings made in every pass, told from the once-a-second and slower ones by the
    # counts themselves: on a busy machine a window holds fewer passes but as many seconds,
    # so the slower readings' share of a pass depends on the machine, not on the pages. A
    # reading made in every pass is a whole number of calls a pass (one per GPU, or one);
    # a family read at its own pace (health, GPM: demand.py) on most passes but not all is
    # not, in either window (it counted as "every pass" while it made one call or more a
    # pass: 35.4 against 36.0 calls, full run 7, on a loaded machine).
    def whole(calls: int, reads: int) -> bool:
        return calls >= reads and abs(calls / reads - round(calls / reads)) < 0.05

    every_pass = {function for function in one_calls | eight_calls
                  if whole(one_calls[function], one_reads)
                  and whole(eight_calls[function], eight_reads)}
    per_pass_one = sum(one_calls[function] for function in every_pass) / one_reads
    per_pass_eight = sum(eight_calls[function] for function in every_pass) / eight_reads
    # A window may cut one pass in two.
    assert abs(per_pass_eight - per_pass_one) <= per_pass_one / min(one_reads, eight_reads), (
        per_pass_one, per_pass_eight)
    assert all(rows >= 10 for rows in one_received + eight_received), eight_received


def test_lost_gpu_degrades_alone_and_server_keeps_serving() -> None:
    with in_process_server(gpus=4) as server:
        history = server.metrics.history
        until(lambda: history.latest() is not None, "a first sample")
        server.simulator.lose_gpu(1)
        # Waited for as samples, which a loaded machine takes late: the first that reads
        # GPU 1 as lost, and then a later one.
        before = until(lambda: (latest := history.latest()) and latest.gpus[1].lost and latest,
                       "a sample with GPU 1 lost")
        after = until(lambda: (latest := history.latest()).seq > before.seq + 5 and latest,
                      "five more samples")
        assert after.gpus[1].lost and after.gpus[1].utilization_pct is None
        for index in (0, 2, 3):
            assert not after.gpus[index].lost
            assert after.gpus[index].memory_used_bytes != before.gpus[index].memory_used_bytes
        info = json.loads(get(server.url + "/info.json")[1])
        assert [device["lost"] for device in info["devices"]] == [False, True, False, False]
        for route in ALL_ROUTES:
            assert get(server.url + route)[0] == 200
        bars = asyncio.run(live_frames(server.url, "/GPU-Utilization", wanted=0))
        rows, _ = bar_rows(bars.frames[0].rows.text["html"][0])
        assert [row["value"] == "GPU lost" for row in rows] == [False, True, False, False]
        # Each bar's hover says which reading it is: a time of day of this run's samples.
        read_at = {row["title"].rpartition("reading of ")[2] for row in rows}
        assert len(read_at) == 1 and read_at <= {
            reading_time(s.time_s) for s in history.window(server.metrics.history_s)}


def test_cross_origin_websocket_is_refused() -> None:
    with in_process_server(gpus=1) as server:
        async def attempt(origin: str) -> None:
            session = await open_session(server.url, "/GPU-Utilization", origin=origin)
            session.close()

        asyncio.run(attempt(server.url))  # same origin works
        with pytest.raises(Exception) as refused:
            asyncio.run(attempt("http://evil.example"))
        assert "403" in str(refused.value) or "closed" in str(refused.value).lower()
