"""The Bokeh server over real HTTP and websockets, with simulated NVML."""

from __future__ import annotations

import asyncio
import json
import time

import pynvml
import pytest

from jupyterlab_nvdashboard.apps.registry import ROUTES
from jupyterlab_nvdashboard.metrics import SimulatedNvml
from tests.support.bokeh_client import open_session, streamed_rows
from tests.support.servers import get, in_process_server

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

        async def machine_updates() -> int:
            session = await open_session(server.url, "/Machine-Resources")
            rows = 0
            deadline = time.monotonic() + 5
            while rows < 3 and time.monotonic() < deadline:
                rows += streamed_rows(await asyncio.wait_for(session.receive(), 5))
            session.close()
            return rows

        assert asyncio.run(machine_updates()) >= 3


async def _call_rate_with_viewers(server, viewers: int, seconds: float) -> tuple[float, list[int]]:
    sessions = [await open_session(server.url, "/GPU-Resources") for _ in range(viewers)]
    await asyncio.sleep(0.5)  # let every session settle into its periodic callback
    for session in sessions:
        session.messages.clear()
    calls_before, started = server.simulator.total_calls, time.monotonic()

    async def drain(session) -> None:
        try:
            while True:
                await session.receive()
        except (asyncio.CancelledError, ConnectionError):
            pass

    readers = [asyncio.ensure_future(drain(session)) for session in sessions]
    await asyncio.sleep(seconds)
    rate = (server.simulator.total_calls - calls_before) / (time.monotonic() - started)
    for reader in readers:
        reader.cancel()
    received = [sum(streamed_rows(m) for m in session.messages) for session in sessions]
    for session in sessions:
        session.close()
    return rate, received


def test_nvml_cost_does_not_grow_with_viewers() -> None:
    with in_process_server(gpus=4) as server:
        one_rate, one_received = asyncio.run(_call_rate_with_viewers(server, 1, 3.0))
        eight_rate, eight_received = asyncio.run(_call_rate_with_viewers(server, 8, 3.0))
    assert one_rate > 0
    assert abs(eight_rate - one_rate) / one_rate < 0.10, (one_rate, eight_rate)
    assert all(rows > 0 for rows in one_received + eight_received), eight_received


def test_lost_gpu_degrades_alone_and_server_keeps_serving() -> None:
    with in_process_server(gpus=4) as server:
        time.sleep(0.5)
        server.simulator.lose_gpu(1)
        time.sleep(0.5)
        before = server.metrics.history.latest()
        time.sleep(1.0)
        after = server.metrics.history.latest()
        assert before is not None and after is not None and after.seq > before.seq
        assert after.gpus[1].lost and after.gpus[1].utilization_pct is None
        for index in (0, 2, 3):
            assert not after.gpus[index].lost
            assert after.gpus[index].memory_used_bytes != before.gpus[index].memory_used_bytes
        info = json.loads(get(server.url + "/info.json")[1])
        assert [device["lost"] for device in info["devices"]] == [False, True, False, False]
        for route in ALL_ROUTES:
            assert get(server.url + route)[0] == 200
        assert "GPU lost" in document_json(server.url, "/GPU-Utilization")


def test_cross_origin_websocket_is_refused() -> None:
    with in_process_server(gpus=1) as server:
        async def attempt(origin: str) -> None:
            session = await open_session(server.url, "/GPU-Utilization", origin=origin)
            session.close()

        asyncio.run(attempt(server.url))  # same origin works
        with pytest.raises(Exception) as refused:
            asyncio.run(attempt("http://evil.example"))
        assert "403" in str(refused.value) or "closed" in str(refused.value).lower()
