"""The runs folder, file by hostile file: the one parser, the watcher, the table, pruning.

Each case broke ``/Workload`` or the folder once: a ``config.batch`` string (500 on every
load), a 400-digit ``ms`` (the parser raised and its chunk was lost), a file replaced by a
shorter one (stale events), two files with one ``run_id`` (lost points), foreign ``.jsonl``
files pruned at start-up, a symlink followed by a write, NaN iterations from the panel.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from jupyterlab_nvdashboard.apps.workload import panel_iterations, summary_row
from jupyterlab_nvdashboard.runs.service import WorkloadService, append_missing_end, is_run_file
from jupyterlab_nvdashboard.runs.watcher import RunsWatcher
from jupyterlab_nvdashboard.workload.events import EventWriter, new_run_id, parse_event
from tests.support.bokeh_client import BokehSession, document_models, open_session
from tests.support.servers import cli_server, get, server_output

NOW = time.time()


def _event(kind: str, run_id: str, **fields: Any) -> str:
    return json.dumps({"event": kind, "run_id": run_id, "time": NOW, **fields})


def _start(run_id: str, **fields: Any) -> str:
    return _event("start", run_id, path="plugin", device="cpu", preset="ci", pid=os.getpid(),
                  config={"batch": 64}, iterations=5, warmup=1, **fields)


def _iterations(run_id: str, count: int) -> list[str]:
    return [_event("iteration", run_id, iteration=i + 1, ms=1.0 + i, samples_per_s=100.0,
                   loss=0.5) for i in range(count)]


def _huge_ms(run_id: str) -> str:
    """An iteration whose ``ms`` is a 400-digit integer (json.dumps cannot write one)."""
    return _event("iteration", run_id, ms="HUGE").replace('"HUGE"', "9" * 400)


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


HOSTILE_VALUES: list[Any] = [
    "9" * 400, -(10**400), 10**400, 1e308, -1e308, float("nan"), float("inf"), True, "64",
    [], {}, None, -1, 0, 2**63, "\u202e", "x" * 100_000,
]


def test_the_parser_never_raises_and_checks_every_field_range() -> None:
    rng = random.Random(18)
    valid = [json.loads(line) for line in
             [_start("r"), *_iterations("r", 2), _event("warmup_end", "r"),
              _event("end", "r", iterations=2, median_ms=1.0, interrupted=False)]]
    for _ in range(3000):
        record = dict(rng.choice(valid))
        for name in rng.sample(sorted({*record, "config", "gpu", "ms", "pid",
                                       "pid_start_ticks"}), 2):
            record[name] = rng.choice(HOSTILE_VALUES)
        if rng.random() < 0.3:
            record["config"] = {rng.choice(["batch", "seed", "tf32", "dtype", "new"]):
                                rng.choice(HOSTILE_VALUES)}
        line = json.dumps(record).replace('"' + "9" * 400 + '"', "9" * 400)
        for data in (line, line.encode(), line.encode()[: rng.randint(0, len(line))],
                     bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))):
            event = parse_event(data)  # must not raise
            assert event is None or isinstance(event, dict)
    # Out of range or the wrong type: the whole line is bad.
    for bad in ['{"event": "iteration", "run_id": "r", "time": 1.0, "ms": ' + "9" * 400 + "}",
                '{"event": "iteration", "run_id": "r", "time": 1.0, "ms": -1}',
                '{"event": "iteration", "run_id": "r", "time": -5, "ms": 1}',
                '{"event": "iteration", "run_id": "", "time": 1.0, "ms": 1}',
                _start("r").replace('"batch": 64', '"batch": "64"'),
                _start("r").replace('"batch": 64', '"batch": 0'),
                _start("r").replace(f'"pid": {os.getpid()}', '"pid": 99999999999'),
                _start("r", pid_start_ticks=-1), _start("r", pid_start_ticks="12"),
                '{"event": "end", "run_id": "r", "time": 1.0, "peak_host_memory_bytes": -1}']:
        assert parse_event(bad) is None, bad
    assert parse_event(_start("r"))["config"] == {"batch": 64}
    assert parse_event(_start("r", pid_start_ticks=12))["pid_start_ticks"] == 12
    assert parse_event(b"\xff\xfe{}") is None and parse_event(b"[" * 60_000) is None


def test_a_huge_number_costs_only_its_own_line(tmp_path: Path) -> None:
    run_id = new_run_id()
    huge = _huge_ms(run_id)
    _write(tmp_path / f"{run_id}.jsonl", [_start(run_id), huge, *_iterations(run_id, 3)])
    watcher = RunsWatcher(tmp_path)
    watcher.poll()
    (run,) = watcher.runs()
    assert len(run.iterations) == 3 and run.bad_lines == 1 and run.batch == 64


def test_a_replaced_or_truncated_file_is_read_again_from_scratch(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _write(path, [_start("r"), *_iterations("r", 5)])
    watcher = RunsWatcher(tmp_path)
    watcher.poll()
    assert len(watcher.runs()[0].iterations) == 5
    replacement = tmp_path / "new.tmp"
    _write(replacement, [_start("r2"), *_iterations("r2", 1)])
    os.replace(replacement, path)  # another inode, shorter
    watcher.poll()
    (run,) = watcher.runs()
    assert run.run_id == "r2" and len(run.iterations) == 1
    # Same inode, truncated and rewritten longer than before: still no stale event kept.
    with open(path, "r+") as handle:
        handle.truncate(0)
    watcher.poll()
    _write(path, [_start("r3"), *_iterations("r3", 8)])
    watcher.poll()
    (run,) = watcher.runs()
    assert run.run_id == "r3" and len(run.iterations) == 8


def test_the_table_never_raises_on_a_run_the_parser_let_through(tmp_path: Path) -> None:
    _write(tmp_path / "r.jsonl", [_start("r"), *_iterations("r", 2)])
    watcher = RunsWatcher(tmp_path)
    watcher.poll()
    (run,) = watcher.runs()
    run.start["config"] = {"batch": "not a number"}  # what the old parser let through
    row = summary_row(run, [run], [], (), True, NOW)
    assert row["status"] == "cannot summarize" and row["run"] == "r"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0, -5, 2.5, 10**400, "10",
                                   None, True, 1e9])
def test_bad_panel_iterations_are_refused(value: Any) -> None:
    assert panel_iterations(value) is None
    assert panel_iterations(200) == 200 and panel_iterations(200.0) == 200


def _project_run(folder: Path, age_s: float) -> Path:
    run_id = new_run_id()[:-8] + os.urandom(4).hex()
    path = folder / f"{run_id}.jsonl"
    _write(path, [_start(run_id)])
    os.utime(path, (NOW - age_s, NOW - age_s))
    return path


def test_pruning_touches_only_this_projects_files_and_logs_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    foreign = []
    for i in range(205):
        path = tmp_path / f"other-{i:03d}.jsonl"
        path.write_text('{"event": "start", "run_id": "x", "time": 1.0}\n')
        foreign.append(path)
    # A run-id name without the project's start event for that run id, and a symlink.
    impostor = tmp_path / "20200101-000000-deadbeef.jsonl"
    impostor.write_text('{"hello": "world"}\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = _project_run(elsewhere, 10_000)
    link = tmp_path / target.name
    link.symlink_to(target)
    own = [_project_run(tmp_path, 1000 - i) for i in range(5)]  # own[0] is the oldest
    for path in [*foreign, impostor]:
        os.utime(path, (NOW - 50_000, NOW - 50_000))
    service = WorkloadService(tmp_path, keep_runs=3)
    with caplog.at_level("INFO", logger="jupyterlab_nvdashboard.runs.service"):
        service.start()
        service.stop()
    assert all(path.exists() for path in [*foreign, impostor, link, target, *own[2:]])
    assert not own[0].exists() and not own[1].exists()
    assert any("deleted 2 run files" in record.getMessage() for record in caplog.records)
    assert is_run_file(own[4]) and not is_run_file(link) and not is_run_file(impostor)


def test_no_write_follows_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "20260101-000000-0badf00d.jsonl"
    link.symlink_to(victim)
    with pytest.raises(OSError):
        append_missing_end(link, "r", "killed by SIGKILL")
    with pytest.raises(OSError):
        EventWriter(link, "r")
    assert victim.read_text() == "precious\n"


async def _status_after(session: BokehSession, events: list[dict]) -> str:
    await session.send("PATCH-DOC", {"events": events})
    async with asyncio.timeout(10):
        while True:
            message = await session.receive()
            for event in message.content.get("events", []) \
                    if message.msgtype == "PATCH-DOC" else []:
                if event.get("attr") == "text" and "not started" in str(event.get("new")):
                    return str(event["new"])


def test_hostile_run_files_keep_every_route_up_with_no_traceback(tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    _write(runs_dir / "batch-string.jsonl",
           [_start("a").replace('"batch": 64', '"batch": "64"'), *_iterations("a", 3)])
    _write(runs_dir / "huge-ms.jsonl",
           [_start("b"), _huge_ms("b"), *_iterations("b", 4)])
    # Two files, one run_id: each keeps its own points on the plot.
    _write(runs_dir / "same-1.jsonl", [_start("same"), *_iterations("same", 3)])
    _write(runs_dir / "same-2.jsonl", [_start("same"), *_iterations("same", 2)])
    with cli_server(["--simulate", "1", "--runs-dir", str(runs_dir)]) as (url, process):

        async def check() -> tuple[int, str]:
            session = await open_session(url, "/Workload")
            models = list(document_models(session.document))
            count = next(m for m in models if m.get("name") == "Spinner")
            start = next(m for m in models if m.get("name") == "Button"
                         and m.get("attributes", {}).get("label") == "Start")
            # What BokehJS sends for a Spinner holding NaN, then the click.
            nan = {"kind": "ModelChanged", "model": {"id": count["id"]}, "attr": "value",
                   "new": {"type": "number", "value": "nan"}}
            click = {"kind": "MessageSent", "msg_type": "bokeh_event",
                     "msg_data": {"type": "event", "name": "button_click",
                                  "values": {"type": "map",
                                             "entries": [["model", {"id": start["id"]}]]}}}
            status = await _status_after(session, [nan, click])
            await asyncio.sleep(2.5)  # a couple of the page's refreshes
            session.close()
            again = await open_session(url, "/Workload")
            points = [m for m in document_models(again.document)
                      if m.get("name") == "ColumnDataSource"
                      and "ms" in json.dumps(m.get("attributes", {}).get("data", {}))[:2000]]
            again.close()
            size = 0  # one source per preset (a run whose start line is bad has none)
            for source in points:
                data = source["attributes"]["data"]
                entries = dict(data.get("entries", [])) if isinstance(data, dict) else {}
                ms = entries.get("ms", [])
                size += len(ms) if isinstance(ms, list) else \
                    len(ms.get("array", {}).get("data", ""))
            return size, status

        points, status = asyncio.run(check())
        for route in ["/Workload", "/", "/index.json", "/info.json"]:
            assert get(url + route)[0] == 200, route
        output = server_output(process)
    assert "iterations must be a whole number" in status, status
    assert "Traceback" not in output, output[-3000:]
    assert points >= 3 + 4 + 3 + 2, points


def test_every_preset_start_event_parses() -> None:
    # The workload's own settings must always pass the parser's typed check.
    from jupyterlab_nvdashboard.workload.config import PRESETS, make_config

    for name, preset in PRESETS.items():
        for config in (preset, make_config(name, batch=1, seed=0)):
            line = _start("r").replace('{"batch": 64}', json.dumps(config.to_dict()))
            event = parse_event(line)
            assert event is not None and event["config"] == config.to_dict(), name
    zero_layers = _start("r").replace('"batch": 64', '"batch": 64, "hidden_layers": 0')
    assert parse_event(zero_layers)["config"]["hidden_layers"] == 0


def _run_of(run_id: str, pid: int, start_ticks: int | None, age_s: float = 0.0) -> str:
    fields = {} if start_ticks is None else {"pid_start_ticks": start_ticks}
    return json.dumps({"event": "start", "run_id": run_id, "time": NOW - age_s,
                       "path": "plugin", "device": "cpu", "preset": "ci", "pid": pid,
                       "config": {"batch": 64}, "iterations": 5, "warmup": 1, **fields})


def test_a_reused_pid_finds_the_run_that_process_is_now(tmp_path: Path) -> None:
    """Without a start time (a run file of an earlier release), a killed run's closing
    event goes to the newest run of that PID that has not ended."""
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    _write(old, [_run_of("old", 4242, None, age_s=600), *_iterations("old", 5),
                 _event("end", "old", iterations=5)])
    watcher = RunsWatcher(tmp_path)
    watcher.poll()  # the old run is followed first
    _write(new, [_run_of("new", 4242, None), *_iterations("new", 2)])
    watcher.poll()
    assert watcher.file_of(4242) == (new, "new")


def test_a_reused_pid_never_gets_another_runs_closing_event(tmp_path: Path) -> None:
    """The closing event goes to the run of that very process, PID and start time: an older
    run that had the PID and never ended (killed while no server watched) gets nothing."""
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    _write(old, [_run_of("old", 4242, 1000, age_s=600), *_iterations("old", 2)])
    # The process that has PID 4242 now wrote its own end, then exited with status 1.
    _write(new, [_run_of("new", 4242, 90_000), *_iterations("new", 2),
                 _event("end", "new", iterations=2, error="boom")])
    service = WorkloadService(tmp_path)
    service.watcher.poll()
    assert service.watcher.file_of(4242, 90_000) == (new, "new")
    assert service.watcher.file_of(4242, 1000) == (old, "old")
    assert service.watcher.file_of(4242, 5) is None  # a process neither run was
    before = {path: path.read_text() for path in (old, new)}
    service._run_exited(4242, 90_000, 1, "boom")
    assert {path: path.read_text() for path in (old, new)} == before
    # Killed with SIGKILL, the old run's own process gets its closing event, the new none.
    service._run_exited(4242, 1000, -9, "")
    assert old.read_text().splitlines()[-1].startswith('{"event": "end", "run_id": "old"')
    assert "killed by SIGKILL" in old.read_text() and new.read_text() == before[new]
