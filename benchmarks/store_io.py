"""What long reads of the history store cost the rest of the server (issue 43, items 1.4, 1.5).

    python benchmarks/store_io.py [--rounds 3] [--parts stall,csv] [--pages 10] [--csvs 10]
        [--days 30] [--csv-days 30] [--quiet-s 10] [--baseline REV] [--store FILE]
        [--json FILE]

A store of ``--days`` of 8 simulated GPUs (readings that vary every sample: the last day in
5-second buckets, the rest in 1-minute ones; ``tests/support/store_fill.py``) is filled once,
ending now (``--store FILE`` reuses one, filled if missing). Each round starts a real server
(``--simulate 8``, a sample every 200 ms) over a copy of it, from this tree (and with
``--baseline REV`` from that revision too, in turn), with a probe on its event loop: a
callback every 5 ms that notes each time it ran late (the loop was busy elsewhere). Then:

1. **stall**: ``--pages`` pages open the 7-day window of /GPU-Resources at once. Printed:
   the event loop's longest stall from the first open until every page had its first frame
   (target 50 ms), and that wall time. Beside it, the longest stall over ``--quiet-s``
   (10 s) just before, with nothing asked of the server: on a loaded machine the loop also
   waits for a core.
2. **csv**: ``--csvs`` clients read ``/history.csv`` over ``--csv-days`` at once, each
   reading as fast as it can and keeping nothing. The server's RSS is sampled every 0.1 s.
   Printed: its peak above what it was just before (target 100 MiB), the loop's longest
   stall meanwhile, the wall time until the last answer ended, and the answers' statuses.

Median and range (min-max) over the rounds. The machine is a shared 2-core VM: wall times
include waiting for a core, and the load average at the start is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.figures import summary  # noqa: E402
from benchmarks.harness import file_by_signal, stop  # noqa: E402
from benchmarks.revision import revision_worktree  # noqa: E402
from tests.support.servers import free_port  # noqa: E402
from tests.support.store_fill import DAY_S, fill_store  # noqa: E402
from tests.support.stream_client import StreamClient, stream_url  # noqa: E402

GPUS = 8
TOKEN = "store-io-benchmark-token-0123456789"
HEADERS = {"Authorization": f"token {TOKEN}"}
PROBE_PERIOD_S = 0.005
QUIET_S = 10.0  # how long the floor of the loop's stalls is measured (``--quiet-s``)
WEEK_S = 7 * DAY_S

# Run in the server's process, from the tree measured: the server's own main(), with a
# probe on its event loop added where make_server returns. On SIGUSR1 it writes each late
# run of the probe, (monotonic time, seconds late), to the file named first.
SERVE_WITH_PROBE = f"""
import json, signal, sys, time
from tornado.ioloop import PeriodicCallback
import jupyterlab_nvdashboard.server as served

PERIOD_S = {PROBE_PERIOD_S}
late = []
made = served.make_server

def make_server(*args, **kwargs):
    server = made(*args, **kwargs)
    last = [time.monotonic()]

    def probe():
        now = time.monotonic()
        if now - last[0] > 2 * PERIOD_S:
            late.append((now, now - last[0] - PERIOD_S))
        last[0] = now

    PeriodicCallback(probe, PERIOD_S * 1000).start()
    return server

def dump(signum, frame):
    with open(sys.argv[1] + ".part", "w") as file:
        json.dump(late, file)
    import os
    os.replace(sys.argv[1] + ".part", sys.argv[1])

served.make_server = make_server
signal.signal(signal.SIGUSR1, dump)
sys.exit(served.main(sys.argv[2:]))
"""


def get(port: int, path: str, timeout_s: float = 30) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request("GET", path, headers=HEADERS)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


class ProbedServer:
    """A server of ``tree`` over ``store`` with the loop probe; ``stalls`` reads the probe."""

    def __init__(self, tree: Path, store: Path, folder: Path) -> None:
        self.port = free_port()
        self.probe_file = folder / f"probe-{self.port}.json"
        args = [str(self.port), "--simulate", str(GPUS), "--simulate-profile", "h200",
                "--interval", "0.2", "--store", str(store)]
        env = {**os.environ, "NVDASHBOARD_TOKEN": TOKEN, "PYTHONPATH": str(tree)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVE_WITH_PROBE, str(self.probe_file), *args],
            cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                info = json.loads(get(self.port, "/info.json")[1])
                if not info["reading_gpus"] and (info["store"] or {}).get("role") == "writer":
                    return
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("the server did not start with its store")

    def longest_stall_s(self, start: float, end: float) -> float:
        """The loop's longest stall between two ``time.monotonic()`` readings of this
        machine (the same clock in every process)."""
        late = file_by_signal(self.process, self.probe_file, 30,
                              "the server's probe did not answer", poll_s=0.05)
        # A stall that ends after ``start`` began at most its length before.
        return max([seconds for at, seconds in late if start <= at <= end + 1.0], default=0.0)

    def stop(self) -> None:
        stop(self.process, 30)


async def open_page(port: int, window_s: float) -> int:
    """A page of /GPU-Resources on ``window_s``: the rows of its first frame."""
    request = HTTPRequest(stream_url(f"http://127.0.0.1:{port}", "/GPU-Resources",
                                     window_s=window_s), headers=HEADERS,
                          request_timeout=300)
    connection = await websocket_connect(request, max_message_size=256 * 1024 * 1024)
    page = StreamClient(connection)
    try:
        frame = await page.receive(300)
    finally:
        page.close()
    return len(frame.rows.numeric["time"])


def quiet_stall_ms(server: ProbedServer, quiet_s: float) -> float:
    """The loop's longest stall over ``quiet_s`` with nothing asked of the server: what
    the machine's load alone costs it (the floor of the figures above it)."""
    started = time.monotonic()
    time.sleep(quiet_s)
    return server.longest_stall_s(started, time.monotonic()) * 1e3


def stall_round(server: ProbedServer, pages: int, quiet_s: float) -> dict[str, float]:
    async def open_all() -> list[int]:
        return await asyncio.gather(*(open_page(server.port, WEEK_S) for _ in range(pages)))

    quiet = quiet_stall_ms(server, quiet_s)
    started = time.monotonic()
    rows = asyncio.run(open_all())
    ended = time.monotonic()
    if min(rows) == 0:
        raise RuntimeError("a page's first frame had no rows")
    return {"stall_ms": server.longest_stall_s(started, ended) * 1e3,
            "quiet_stall_ms": quiet, "wall_s": ended - started, "rows": float(min(rows))}


def csv_round(server: ProbedServer, csvs: int, seconds: float,
              quiet_s: float) -> dict[str, float]:
    answers: list[tuple[int, int]] = []

    def read_csv() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=1200)
        try:
            connection.request("GET", f"/history.csv?seconds={seconds:.0f}", headers=HEADERS)
            response = connection.getresponse()
            size = 0
            while chunk := response.read(1 << 16):
                size += len(chunk)
            answers.append((response.status, size))
        except (OSError, http.client.HTTPException) as error:
            print(f"    a CSV failed: {error!r}", flush=True)
            answers.append((0, 0))
        finally:
            connection.close()

    process = psutil.Process(server.process.pid)
    quiet = quiet_stall_ms(server, quiet_s)
    idle = process.memory_info().rss
    readers = [threading.Thread(target=read_csv) for _ in range(csvs)]
    started = time.monotonic()
    for reader in readers:
        reader.start()
    peak = idle
    while any(reader.is_alive() for reader in readers):
        peak = max(peak, process.memory_info().rss)
        time.sleep(0.1)
    ended = time.monotonic()
    ok = [size for status, size in answers if status == 200]
    return {"rss_above_idle_mib": (peak - idle) / 2**20, "idle_rss_mib": idle / 2**20,
            "stall_ms": server.longest_stall_s(started, ended) * 1e3,
            "quiet_stall_ms": quiet, "wall_s": ended - started, "answered_200": float(len(ok)),
            "answered_429": float(sum(status == 429 for status, _ in answers)),
            "answered_otherwise": float(sum(status not in (200, 429) for status, _ in answers)),
            "mib_each": (statistics.median(ok) if ok else 0.0) / 2**20}


@contextlib.contextmanager
def trees(baseline: str | None, folder: Path) -> Iterator[dict[str, Path]]:
    if baseline is None:
        yield {"this tree": ROOT}
        return
    with revision_worktree(baseline, folder) as tree:
        yield {"this tree": ROOT, baseline: tree}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parts", default="stall,csv")
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--csvs", type=int, default=10)
    parser.add_argument("--days", type=float, default=30, help="days the store holds")
    parser.add_argument("--csv-days", type=float, default=30, help="days each CSV asks for")
    parser.add_argument("--quiet-s", type=float, default=QUIET_S,
                        help="seconds the floor of the loop's stalls is measured over")
    parser.add_argument("--baseline", metavar="REV", help="also measure git REV, in turn")
    parser.add_argument("--store", type=Path, help="a filled store to reuse (filled if "
                        "missing); default: a new one, removed afterwards")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    parts = args.parts.split(",")
    folder = Path(tempfile.mkdtemp(prefix="nvdashboard-store-io-"))
    try:
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
              f"{GPUS} simulated GPUs; python {sys.version.split()[0]}", flush=True)
        filled = args.store or folder / "filled" / "history.sqlite"
        if not filled.exists():
            took = fill_store(filled, days=args.days)
            print(f"filled {args.days:g} days in {took:.0f} s", flush=True)
        figures: dict[str, dict[str, list[dict[str, float]]]] = {}
        with trees(args.baseline, folder) as measured:
            for round_number in range(args.rounds):
                names = list(measured) if round_number % 2 == 0 else list(reversed(measured))
                for name in names:
                    store = (folder / f"round{round_number}-{list(measured).index(name)}"
                             / "history.sqlite")
                    store.parent.mkdir()
                    shutil.copyfile(filled, store)
                    server = ProbedServer(measured[name], store, folder)
                    try:
                        for part in parts:
                            got = (stall_round(server, args.pages, args.quiet_s)
                                   if part == "stall" else
                                   csv_round(server, args.csvs, args.csv_days * DAY_S,
                                             args.quiet_s))
                            figures.setdefault(name, {}).setdefault(part, []).append(got)
                            print(f"  round {round_number}, {name}, {part}: "
                                  + ", ".join(f"{k} {v:.1f}" for k, v in got.items()),
                                  flush=True)
                    finally:
                        server.stop()
                        shutil.rmtree(store.parent, ignore_errors=True)
        report(figures, args)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=1))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def report(figures: dict[str, dict[str, list[dict[str, float]]]],
           args: argparse.Namespace) -> None:
    quiet_s = args.quiet_s
    for name, parts in figures.items():
        print(f"{name}:")
        if "stall" in parts:
            rounds = parts["stall"]
            print(f"  {args.pages} pages open the 7-day window: the loop's longest stall "
                  f"{summary([r['stall_ms'] for r in rounds], 'ms', 1)} (target 50 ms; over "
                  f"{quiet_s:g} s with nothing asked of it "
                  f"{summary([r['quiet_stall_ms'] for r in rounds], 'ms', 1)}); all "
                  f"first frames in {summary([r['wall_s'] for r in rounds], 's', 1)}")
        if "csv" in parts:
            rounds = parts["csv"]
            print(f"  {args.csvs} CSVs of {args.csv_days:g} days at once: RSS above idle "
                  f"{summary([r['rss_above_idle_mib'] for r in rounds], 'MiB', 1)} (target "
                  f"100 MiB; idle {summary([r['idle_rss_mib'] for r in rounds], 'MiB', 1)}); "
                  f"the loop's longest stall {summary([r['stall_ms'] for r in rounds], 'ms', 1)}"
                  f" (over {quiet_s:g} s with nothing asked of it "
                  f"{summary([r['quiet_stall_ms'] for r in rounds], 'ms', 1)}); all done in "
                  f"{summary([r['wall_s'] for r in rounds], 's', 1)}; answers "
                  f"200: {[int(r['answered_200']) for r in rounds]}, 429: "
                  f"{[int(r['answered_429']) for r in rounds]}, "
                  f"{summary([r['mib_each'] for r in rounds], 'MiB', 1)} each")


if __name__ == "__main__":
    main()
