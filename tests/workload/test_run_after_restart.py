"""A finished run's verdict and its GPU window, recalled from the history store after a
restart: the new server's in-memory history holds none of the run, the store does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.apps.workload import WorkloadDashboard, workload_feed
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.metrics import GpuReading, History, HostReading
from jupyterlab_nvdashboard.runs.service import WorkloadService
from jupyterlab_nvdashboard.store import HistoryStore
from tests.support.store_clock import ScriptedClock

RUN_START = 1_799_999_940.0  # epoch seconds, a whole minute


def event(kind: str, time_s: float, **fields: Any) -> dict[str, Any]:
    return {"event": kind, "run_id": "before-restart", "time": time_s, **fields}


def test_a_finished_runs_verdict_and_gpu_after_a_restart(tmp_path: Path) -> None:
    store_path = tmp_path / "store" / "history.sqlite"
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=2, profile="h200")),
                             environ={})
    metrics.nvml.ensure_initialized()  # the facts, without the sampler's threads
    facts = metrics.facts
    uuids = {fact.index: fact.uuid for fact in facts}
    # The first server: five minutes of GPU 1 busy at 97 %, GPU 0 idle, written to the store.
    clock = ScriptedClock(RUN_START, 1000.0)
    first = HistoryStore(store_path, clock=clock, device_uuids=lambda: uuids)
    first.open()
    history = History(10_000)
    first.attach(history)
    host = HostReading(10.0, 1e9, 2e9, 0.0, 0.0, 0.0, 0.0)
    for _ in range(300 * 5):
        gpus = tuple(GpuReading(i, False, 97.0 if i == 1 else 0.0, 40.0, 3e10, 1.4e11, None,
                                1e8, 1e8, False, 0.0, 0.0, 60.0, 600.0) for i in (0, 1))
        history.append(clock.wall, gpus, host, monotonic_s=clock.mono)
        clock.advance(0.2)
    first.stop()  # the first server stops; the run finished before it did
    runs = tmp_path / "runs"
    runs.mkdir()
    pinned = {"uuid": facts[1].uuid, "index": 1, "visible": ""}
    with open(runs / "run.jsonl", "w") as events:
        for item in [event("start", RUN_START, path="numpy", device="gpu", preset="ci",
                           pid=4242, config={"batch": 256}, iterations=200, warmup=3,
                           gpu=pinned),
                     event("warmup_end", RUN_START + 10),
                     *[event("iteration", RUN_START + 10 + i, iteration=i, ms=800.0,
                             samples_per_s=300.0, loss=0.5) for i in range(1, 201)],
                     event("end", RUN_START + 211, iterations=200, median_ms=800.0,
                           interrupted=False)]:
            events.write(json.dumps(item) + "\n")
    # The restarted server, an hour later: an empty in-memory history, the same store.
    later = ScriptedClock(RUN_START + 3600, 1000.0)
    store = HistoryStore(store_path, clock=later, device_uuids=lambda: uuids)
    store.open()
    sources = DashboardSources(metrics, WorkloadService(runs), store=store)
    page = WorkloadDashboard(sources, workload_feed(metrics), clock=later)
    page.service.watcher.poll()
    page.refresh()
    [row] = page._rows
    assert row["run"] == "before-restart"
    assert row["gpu_rows"] == (1,)  # its GPU window: the GPU it ran on ...
    assert row["gpu_util_pct"] == 97  # ... and that GPU's readings over its timed part
    assert "GPU 1" in row["verdict"] and row["cause"] != "not-judged", row["verdict"]
    assert "SIMULATED GPU 1" in page.gpu_heading.text
    store.close()
