"""The runs directory cannot hurt the server: random and hostile run files, before the server
starts and while it runs, with a /Workload page open. No traceback, every route answers, and
the server's memory stays bounded (a symlink to /dev/zero is never read)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
from pathlib import Path

import psutil
import pytest

from jupyterlab_nvdashboard.runs.service import WorkloadService
from jupyterlab_nvdashboard.runs.watcher import MAX_RUNS
from tests.support.bokeh_client import open_session
from tests.support.servers import cli_server, get, server_output

VALUES = [None, True, -1, 0, 1.5, 1e308, "x", "", [], {}, [1, {"a": 2}], {"ms": 1}, "9" * 400]
KINDS = ["start", "warmup_step", "warmup_end", "iteration", "end", "bogus", None, 7]
FIELDS = ["run_id", "time", "ms", "iteration", "loss", "samples_per_s", "path", "device",
          "preset", "pid", "pid_start_ticks", "config", "gpu", "median_ms",
          "peak_device_memory_bytes", "interrupted", "error", "iterations", "step", "warmup"]
MEMORY_SLACK_BYTES = 300e6  # far below what reading /dev/zero or a 20 MB line would cost


def random_event(rng: random.Random) -> dict:
    event = {"event": rng.choice(KINDS), "run_id": rng.choice(["r", "", 5, None]),
             "time": rng.choice([100.0 + rng.random(), "x", None, -5])}
    for name in rng.sample(FIELDS, rng.randint(0, len(FIELDS))):
        event[name] = rng.choice(VALUES)
    if rng.random() < 0.3:
        del event[rng.choice(list(event))]
    return event


def random_line(rng: random.Random) -> bytes:
    choice = rng.random()
    if choice < 0.6:
        return json.dumps(random_event(rng)).encode() + b"\n"
    if choice < 0.75:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300))) + b"\n"
    if choice < 0.85:
        return b"[" * rng.randint(1, 50_000) + b"\n"  # deep nesting
    if choice < 0.95:
        return b'{"event": "iteration", "ms": 1, "x": "' + b"y" * rng.randint(1, 200_000) + b'"}\n'
    return b'{"event": "start", "time": 1'  # torn: no end


def hostile_directory(runs_dir: Path, rng: random.Random) -> None:
    """The files that used to stop, hang or bloat the server."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    (runs_dir / "bad-time.jsonl").write_text('{"event": "start", "run_id": "a", "time": "x"}\n')
    (runs_dir / "no-ms.jsonl").write_text(
        '{"event": "start", "run_id": "b", "time": 1.0, "path": "plugin"}\n'
        '{"event": "iteration", "run_id": "b", "time": 2.0}\n')
    (runs_dir / "huge-line.jsonl").write_bytes(b'{"event": "start", "x": "' + b"z" * 20_000_000)
    os.mkfifo(runs_dir / "fifo.jsonl")
    (runs_dir / "zero.jsonl").symlink_to("/dev/zero")
    (runs_dir / "dir.jsonl").mkdir()
    (runs_dir / "dangling.jsonl").symlink_to(runs_dir / "nowhere")
    for i in range(5):
        with open(runs_dir / f"random-{i}.jsonl", "wb") as handle:
            handle.writelines(random_line(rng) for _ in range(200))


def fuzz_while_running(runs_dir: Path, rng: random.Random, stop: threading.Event) -> None:
    count = 0
    while not stop.is_set():
        path = runs_dir / f"live-{count % (MAX_RUNS + 3)}.jsonl"
        try:
            with open(path, "ab") as handle:
                handle.writelines(random_line(rng) for _ in range(50))
        except OSError:
            pass
        if count % 17 == 0 and path.exists():
            path.unlink()  # files vanish under the watcher, too
        count += 1
        stop.wait(0.02)


async def watch_workload_page(url: str, seconds: float) -> int:
    """A /Workload page open while the files change: its refresh runs every second."""
    session = await open_session(url, "/Workload")
    received = 0
    try:
        async with asyncio.timeout(seconds):
            while True:
                await session.receive()
                received += 1
    except TimeoutError:
        pass
    finally:
        await session.aclose()
    return received


def routes_answer(url: str) -> list[str]:
    status, body = get(url + "/index.json")
    assert status == 200
    failed = []
    for route in [*json.loads(body), "/info.json", "/", "/history.csv?seconds=5"]:
        status, _ = get(url + route)
        if status != 200:
            failed.append(f"{route}: {status}")
    return failed


def test_hostile_run_files_before_start_and_while_running(tmp_path: Path) -> None:
    rng = random.Random(10)
    runs_dir = tmp_path / "runs"
    hostile_directory(runs_dir, rng)
    stop = threading.Event()
    # Files keep changing while the server starts, and while a page is open.
    writer = threading.Thread(target=fuzz_while_running, args=(runs_dir, rng, stop))
    writer.start()
    try:
        with cli_server(["--simulate", "2", "--interval", "0.1", "--runs-dir",
                         str(runs_dir)]) as (url, process):
            memory = psutil.Process(process.pid)
            assert routes_answer(url) == [], server_output(process)[-3000:]
            before = memory.memory_info().rss
            received = asyncio.run(watch_workload_page(url, 8.0))
            assert routes_answer(url) == []
            grown = memory.memory_info().rss - before
            output = server_output(process)
    finally:
        stop.set()
        writer.join()
    print(f"server RSS {before / 1e6:.0f} MB before the page, grew {grown / 1e6:.1f} MB")
    assert received > 0
    assert grown < MEMORY_SLACK_BYTES, f"server grew by {grown / 1e6:.0f} MB"
    assert "Traceback" not in output, output[-3000:]


def unusable_dirs(tmp_path: Path) -> list[Path]:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    # Cannot be made (a file is in the way), not a directory, under a read-only filesystem.
    dirs = [blocker / "runs", Path("/dev/null"), Path("/proc/1/no-such-dir")]
    if os.geteuid() != 0:  # root writes anywhere, so only others meet a read-only directory
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        dirs.append(locked)
    return dirs


def test_an_unusable_runs_directory_disables_only_the_run_panel(tmp_path: Path) -> None:
    for runs_dir in unusable_dirs(tmp_path):
        with cli_server(["--simulate", "2", "--runs-dir", str(runs_dir)]) as (url, process):
            assert routes_answer(url) == []
            session = asyncio.run(pull_workload_document(url))
            assert "run panel disabled: cannot use the runs directory" in session
            output = server_output(process)
        assert "Traceback" not in output and "run panel disabled" in output


async def pull_workload_document(url: str) -> str:
    session = await open_session(url, "/Workload")
    await session.aclose()
    return json.dumps(session.document)


@pytest.mark.parametrize("seed", range(3))
def test_the_watcher_and_summaries_survive_random_files(tmp_path: Path, seed: int) -> None:
    """In process, quickly: any file content makes runs the summary can always judge."""
    from jupyterlab_nvdashboard.apps.workload import native_baseline, run_progress, summarize
    from tests.workload.test_verdict import facts, timeline

    rng = random.Random(seed)
    hostile_directory(tmp_path, rng)
    service = WorkloadService(tmp_path)
    for _ in range(30):
        service.watcher.poll()  # 1 MiB per file per poll: the 20 MB line takes many polls
    runs = service.watcher.runs()
    assert runs and sum(run.bad_lines for run in runs) > 0
    samples = timeline(90.0, 110.0, utilization={0: 50.0}, count=2)
    for run in runs:
        summarize(run, samples, facts()[:2], True, native_baseline(runs, run), 120.0)
        for now in (0.0, 105.0, 1e9):  # the progress line too, at any time
            assert run_progress(run, now).html()
