"""Bad input and security against the standalone server (``python -m ...server``).

A bounded, seeded fuzz of paths, query strings, headers and websocket frames (random,
truncated and oversized Bokeh protocol messages): no 500, no traceback in a response, no
crash, no traceback or megabyte line in the server's log, and another open dashboard keeps
getting updates. Every non-GET method on every
route is refused and changes nothing; the server binds 127.0.0.1 by default and never
spawns a process. Clients that send their headers slowly are cut off, and connections past
the cap are answered 503 at once, while the server keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import string
import time
from urllib.parse import quote, urlsplit

import psutil
import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from jupyterlab_nvdashboard.apps.components import TimelineFeed
from jupyterlab_nvdashboard.apps.registry import ROUTES
from jupyterlab_nvdashboard.bokeh_patches import LOG_LINE_LIMIT
from jupyterlab_nvdashboard.http_edge import EVERY_RESPONSE, connection_cap
from tests.support.bokeh_client import auth_headers, fetch_token, open_session
from tests.support.servers import cli_server, get, server_output
from tests.support.stream_client import open_stream
from tests.support.waiting import until

SEED = 20261129
EVIL = "http://evil.example"
# What an HTTP client will put in a header value (no CR, LF or other control characters).
HEADER_SAFE = string.ascii_letters + string.digits + string.punctuation + " "


def _no_children(process) -> None:  # noqa: ANN001
    assert psutil.Process(process.pid).children(recursive=True) == []


def _raw_http(url: str, data: bytes) -> bytes:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(data)
        chunks = []
        try:
            for _ in range(100):  # bounded
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except TimeoutError:
            pass
    return b"".join(chunks)


def _random_text(rng: random.Random, size: int) -> str:
    alphabet = string.printable + "éü中\u202e%/..;"
    return "".join(rng.choice(alphabet) for _ in range(size))


async def _fuzz_http(url: str, rng: random.Random) -> list[str]:
    problems: list[str] = []
    client = AsyncHTTPClient()
    routes = ["/", "/index.json", "/info.json", *[r.path for r in ROUTES]]
    paths = [
        "/..%2f..%2fetc/passwd", "/static/../../etc/passwd", "/%00", "/GPU-Utilization/ws",
        "/GPU-Utilization/autoload.js", "/GPU-Utilization/metadata", "/" + "A" * 8000,
        "/static/js/" + "x" * 300, "//", "/index.json/../info.json", "/%ff%fe",
    ]
    for _ in range(120):
        base = rng.choice(routes)
        kind = rng.randrange(4)
        if kind == 0:
            path = base + "/" + quote(_random_text(rng, rng.randrange(1, 60)), safe="/%")
        elif kind == 1:
            path = base + "?" + quote(_random_text(rng, rng.randrange(1, 200)), safe="=&%")
        elif kind == 2:
            path = base + "?theme=" + quote(_random_text(rng, 40)) + "&bokeh-session-id=" \
                + quote(_random_text(rng, 30))
        else:
            path = base
        paths.append(path)
    for path in paths:
        # With the token, so the fuzz reaches the handlers behind the access check.
        headers = auth_headers()
        if rng.random() < 0.5:
            headers = {**headers,
                "Cookie": "".join(rng.choice(HEADER_SAFE) for _ in range(3000)),
                "X-Forwarded-For": "1.2.3.4, " + "9" * 50,
                "Accept-Language": "zz" * 200,
                "Bokeh-Session-Id": "x" * 500,
                "Origin": EVIL,
            }
        try:
            response = await client.fetch(HTTPRequest(url + path, headers=headers,
                                                      request_timeout=15), raise_error=False)
        except (HTTPClientError, OSError, ValueError) as error:
            problems.append(f"{path[:80]}: {error!r}")
            continue
        body = response.body or b""
        if response.code >= 500 or b"Traceback" in body:
            problems.append(f"{path[:80]}: {response.code} {body[:200]!r}")
    # Malformed HTTP on a raw socket.
    for data in (b"GET / HTTP/1.1\r\n\r\n", b"GET /\x00\xff HTTP/1.1\r\nHost: x\r\n\r\n",
                 b"GARBAGE\r\n\r\n", b"GET /index.json HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Length: 99999999\r\n\r\nabc", b"\x16\x03\x01\x02\x00\x01",
                 b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X: " + b"y" * 70000 + b"\r\n\r\n"):
        reply = await asyncio.to_thread(_raw_http, url, data)
        if reply.startswith(b"HTTP/1.1 5") or b"Traceback" in reply:
            problems.append(f"raw {data[:40]!r}: {reply[:120]!r}")
    return problems


def _bokeh_frames(rng: random.Random) -> list[list[str | bytes]]:
    """Message sequences a hostile or broken client could send."""
    header = {"msgid": "1", "msgtype": "PATCH-DOC"}
    big = "x" * (3 * 1024 * 1024)
    return [
        [_random_text(rng, 200)],  # not JSON at all
        [json.dumps(header)],  # truncated: header only
        [json.dumps(header), "{}"],  # truncated: no content
        [json.dumps({**header, "num_buffers": 3}), "{}", "{}"],  # promised buffers never sent
        [json.dumps(header), "{}", "{not json"],
        [json.dumps({"msgid": "2", "msgtype": "NO-SUCH-TYPE"}), "{}", "{}"],
        [json.dumps(header), "{}", json.dumps({"events": [{"kind": "ModelChanged",
                                                           "model": {"id": "nope"},
                                                           "attr": "start", "new": 1}]})],
        [json.dumps(header), "{}", json.dumps({"events": big})],  # oversized
        [json.dumps({"msgid": "3", "msgtype": "PULL-DOC-REQ"}), "{}", "{}"] * 50,  # flood
        [b"\x00\xff" * 1000],  # binary garbage
        [json.dumps({**header, "num_buffers": 1}), "{}", "{}", json.dumps({"id": "b"}),
         b"\x00" * 10],
    ]


async def _fuzz_websocket(url: str, rng: random.Random) -> list[str]:
    problems: list[str] = []
    for frames in _bokeh_frames(rng):
        token = await fetch_token(url, "/GPU-Utilization")
        request = HTTPRequest("ws" + url[len("http"):] + "/GPU-Utilization/ws",
                              headers=auth_headers({"Origin": url}))
        connection = await websocket_connect(request, subprotocols=["bokeh", token],
                                             max_message_size=16 * 1024 * 1024)
        try:
            for frame in frames:
                await connection.write_message(frame, binary=isinstance(frame, bytes))
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:  # read whatever comes back, briefly
                try:
                    reply = await asyncio.wait_for(connection.read_message(), 0.3)
                except asyncio.TimeoutError:
                    continue
                if reply is None:
                    break
                if isinstance(reply, str) and "Traceback" in reply:
                    problems.append(f"traceback sent back: {reply[:200]}")
        except Exception:  # noqa: BLE001, S110 - the server may close on us; that is fine
            pass
        finally:
            connection.close()
    return problems


def test_fuzz_paths_queries_headers_and_frames() -> None:
    rng = random.Random(SEED)
    with cli_server(["--simulate", "2", "--interval", "0.2"]) as (url, process):

        async def run() -> tuple[list[str], int]:
            watcher = await open_stream(url, "/GPU-Resources")
            rows = {"count": 0}

            async def keep_reading() -> None:
                for _ in range(10_000):  # bounded
                    rows["count"] += (await watcher.receive(30)).header["rows"]

            reader = asyncio.ensure_future(keep_reading())
            problems = await _fuzz_http(url, rng)
            _no_children(process)
            problems += await _fuzz_websocket(url, rng)
            _no_children(process)
            before = rows["count"]
            # A timeline page gets one frame per repaint (TimelineFeed.refresh_s), so wait
            # for two repaints: a shorter wait can fall between two frames.
            await asyncio.sleep(2 * TimelineFeed.refresh_s + 0.5)
            assert not reader.done(), reader.exception()
            reader.cancel()
            watcher.close()
            return problems, rows["count"] - before

        problems, rows_after_fuzz = asyncio.run(run())
        assert not problems, problems[:10]
        assert rows_after_fuzz >= 3  # the other session kept getting updates
        assert process.poll() is None
        assert get(url + "/GPU-Resources")[0] == 200
        _no_children(process)
        log_lines = server_output(process).splitlines()
        assert not [line for line in log_lines if "Traceback" in line]
        assert max(map(len, log_lines)) < 2 * LOG_LINE_LIMIT + 50  # one short line per error


def _route_urls(url: str) -> list[str]:
    urls = [url + path for path in ("/", "/index.json", "/info.json",
                                    "/static/js/bokeh.min.js")]
    for route in ROUTES:
        urls += [url + route.path, url + route.path + "/ws", url + route.path + "/autoload.js",
                 url + route.path + "/metadata"]
    return urls


def _settings(url: str) -> dict:
    """What /info.json says about the server's configuration and devices, without the
    running activity counters (NVML calls, stream publishes, the history store's writes,
    size and CPU) that move on their own. It waits for the store to take its role (it starts
    as "starting", then opens the file as the writer or a reader)."""
    info = until(lambda: _info_once_the_store_has_its_role(url), "the store takes its role")
    info.pop("nvml_calls", None)
    info.pop("sampler_idle", None)
    info["stream"] = {key: value for key, value in info.get("stream", {}).items()
                      if key != "publishes"}
    if info.get("store"):
        info["store"] = {key: value for key, value in info["store"].items()
                         if key not in STORE_ACTIVITY}
    return info


# The store's own counters: its writer thread moves them whatever a request does.
STORE_ACTIVITY = ("size_bytes", "batches", "buckets_written", "writer_cpu_s")


def _info_once_the_store_has_its_role(url: str) -> dict | None:
    info = json.loads(get(url + "/info.json")[1])
    return None if (info.get("store") or {}).get("role") == "starting" else info


@pytest.mark.parametrize("origin", [None, EVIL])
def test_no_route_accepts_a_state_changing_method(origin: str | None) -> None:
    methods = ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
    with cli_server(["--simulate", "2"]) as (url, process):
        before = _settings(url)
        index_before = get(url + "/index.json")[1]

        async def attempts() -> list[tuple[str, str, int]]:
            client = AsyncHTTPClient()
            results = []
            for target in _route_urls(url):
                for method in methods:
                    headers = auth_headers({"Origin": origin} if origin else {})
                    body = None if method in ("OPTIONS", "DELETE") else b'{"interval_s": 0.05}'
                    response = await client.fetch(HTTPRequest(
                        target, method=method, headers=headers, body=body,
                        allow_nonstandard_methods=True, request_timeout=15), raise_error=False)
                    assert b"Traceback" not in (response.body or b"")
                    results.append((method, target, response.code))
            return results

        results = asyncio.run(attempts())
        refused = {403, 404, 405}
        # autoload.js answers a CORS preflight with an empty 204 and no CORS headers
        # (bokeh_patches), so a browser still refuses any cross-origin use of it.
        preflight = [r for r in results if r[0] == "OPTIONS" and r[1].endswith("/autoload.js")]
        assert all(code == 204 for _, _, code in preflight), preflight
        assert all(code in refused for r in results if r not in preflight
                   for code in [r[2]]), [r for r in results if r[2] not in refused]
        after = _settings(url)
        assert after == before and get(url + "/index.json")[1] == index_before
        _no_children(process)


def test_standalone_binds_loopback_by_default_and_refuses_cross_origin_websocket() -> None:
    with cli_server(["--simulate", "1"]) as (url, process):
        listening = [c for c in psutil.Process(process.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN]
        assert listening and all(c.laddr.ip == "127.0.0.1" for c in listening), listening

        async def attempt(origin: str) -> None:
            session = await open_session(url, "/GPU-Utilization", origin=origin)
            session.close()

        asyncio.run(attempt(url))
        with pytest.raises(Exception) as refused:
            asyncio.run(attempt(EVIL))
        assert "403" in str(refused.value) or "closed" in str(refused.value).lower()
        _no_children(process)


def test_autoload_js_is_not_readable_cross_origin() -> None:
    with cli_server(["--simulate", "1"]) as (url, _):
        async def fetch() -> tuple[int, dict]:
            response = await AsyncHTTPClient().fetch(
                url + "/GPU-Utilization/autoload.js?bokeh-autoload-element=x",
                headers=auth_headers({"Origin": EVIL}), raise_error=False)
            return response.code, dict(response.headers)

        code, headers = asyncio.run(fetch())
        assert code == 200  # same-origin embedding still works
        assert not any(name.lower().startswith("access-control-") for name in headers), headers


class SlowClients:
    """``count`` connections that each send a request line, then one header line per
    ``trickle()``, never the blank line that ends the headers, and carry no token."""

    def __init__(self, url: str, count: int) -> None:
        parts = urlsplit(url)
        self.open: list[socket.socket] = []
        self.answers: list[bytes] = []  # what the server said before it closed one
        for _ in range(count):
            sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
            sock.sendall(b"GET /info.json HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            sock.setblocking(False)
            self.open.append(sock)

    def trickle(self) -> int:
        """One more header line on each connection still open; how many are."""
        still = []
        for sock in self.open:
            try:
                answer = sock.recv(4096)
            except BlockingIOError:  # nothing to read: still open, as far as we can see
                try:
                    sock.send(b"X-Slow: 1\r\n")
                    still.append(sock)
                    continue
                except OSError:
                    answer = b""
            except OSError:
                answer = b""
            self.answers.append(answer)
            sock.close()
        self.open = still
        return len(still)

    def close(self) -> None:
        for sock in self.open:
            sock.close()


def test_clients_that_send_their_headers_slowly_are_cut_off() -> None:
    with cli_server(["--simulate", "1"]) as (url, process):
        slow = SlowClients(url, 200)
        try:
            # A line a second from each: the headers never end, and the server closes them.
            until(lambda: slow.trickle() == 0, "the server closes every slow connection",
                  every_s=1.0)
            assert slow.answers == [b""] * 200  # closed without a word: no request was read
            assert get(url + "/info.json")[0] == 200
        finally:
            slow.close()
        assert "Traceback" not in server_output(process)


def test_connections_past_the_cap_are_refused_at_once_and_the_server_carries_on() -> None:
    limit = 128  # open files: the cap is half, so the server keeps descriptors of its own
    cap = connection_cap(limit)
    with cli_server(["--simulate", "1"], open_files_limit=limit) as (url, process):
        # The start-up checks' connections closed on the server's side too: none but ours
        # counts against the cap.
        until(lambda: all(c.status == psutil.CONN_LISTEN for c in
                          psutil.Process(process.pid).net_connections(kind="tcp")),
              "the server holds no connection")
        held = SlowClients(url, cap)
        extra = SlowClients(url, 10)
        try:
            until(lambda: extra.trickle() == 0, "the server answers the ones past the cap")
            assert all(answer.startswith(b"HTTP/1.1 503 ") for answer in extra.answers)
            for name, value in EVERY_RESPONSE.items():
                assert all(f"{name}: {value}".encode() in a for a in extra.answers), name
            assert held.trickle() == cap  # the ones it holds are still open
            status, _ = get(url + "/info.json")  # and so is a browser, until some close
            assert status == 503
            # Once the slow ones are cut off, the server answers again.
            until(lambda: held.trickle() == 0, "the slow connections are cut off",
                  every_s=1.0)
            assert get(url + "/info.json")[0] == 200
        finally:
            held.close()
            extra.close()
        output = server_output(process)
        assert output.count("the most this server holds") == 1, output  # one line
        assert "Traceback" not in output
