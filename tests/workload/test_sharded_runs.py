"""Sharded runs as a user starts and sees them: the CLI's events (shards, ranks, bytes per
step), its one-line errors, the parser, and the /Workload row (expected vs measured, the
communication-bound verdict, every GPU or shard named)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from jupyterlab_nvdashboard.apps.workload import panel_shards, summarize
from jupyterlab_nvdashboard.metrics import GpuReading, HostReading, Sample
from jupyterlab_nvdashboard.runs.exchange import CPU_WHY, communication_finding
from jupyterlab_nvdashboard.runs.watcher import Run
from jupyterlab_nvdashboard.workload import build_command, read_events
from jupyterlab_nvdashboard.workload.config import make_config
from jupyterlab_nvdashboard.workload.data import make_pool
from jupyterlab_nvdashboard.workload.events import parse_event
from jupyterlab_nvdashboard.workload.sharded import BYTE_KINDS, placement_for
from tests.workload.test_sharded import expected_bytes, mlp_bytes
from tests.workload.test_verdict import facts

ROOT = Path(__file__).resolve().parents[2]
HOST = HostReading(*([None] * len(HostReading._fields)))


def _env(tmp_path):
    env = dict(os.environ, NVDASHBOARD_RUNS_DIR=str(tmp_path / "runs"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _cli(tmp_path, *args, timeout=120):
    cmd = [sys.executable, "-m", "jupyterlab_nvdashboard.workload", *args]
    return subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True,
                          timeout=timeout)


def test_cli_gloo_run_names_its_ranks_and_reports_the_bytes_of_every_step(tmp_path):
    pytest.importorskip("torch")
    events_file = tmp_path / "run.jsonl"
    done = _cli(tmp_path, "--path", "numpy", "--preset", "ci", "--iterations", "4",
                "--warmup", "1", "--shards", "2", "--events", str(events_file))
    assert done.returncode == 0, done.stderr
    events = read_events(events_file)
    start, warm = events[0], events[2]  # after its one warm-up iteration's event
    assert start["shards"]["count"] == 2 and start["shards"]["backend"] == "auto"
    assert warm["event"] == "warmup_end" and warm["shards"]["backend"] == "gloo"
    ranks = warm["shards"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["pid"] == start["pid"]
    assert len({r["pid"] for r in ranks}) == 2
    assert not psutil.pid_exists(ranks[1]["pid"])  # rank 1 ended with the run
    cfg = make_config("ci")
    pool = make_pool(cfg)
    iterations = [e for e in events if e["event"] == "iteration"]
    for n, event in enumerate(iterations):
        want = expected_bytes(cfg, pool, 1 + n, placement_for(cfg, 2), mlp_bytes(cfg))
        assert event["exchange_bytes"] == sum(want.values())
        assert 0 <= event["exchange_ms"] <= event["ms"]
    end = events[-1]
    assert set(BYTE_KINDS) | {"total"} == set(end["exchange"])
    assert end["exchange"]["keys"] > 0 and end["exchange"]["all_reduce"] > 0


@pytest.mark.parametrize("args,message", [
    (["--path", "plugin", "--shards", "2"], "--shards runs on the numpy and cupy-plugin"),
    (["--path", "numpy", "--preset", "ci", "--shards", "3"], "must be a multiple of --shards 3"),
    (["--path", "numpy", "--shards", "0"], "0 is out of range [1, 64]"),
    (["--path", "numpy", "--backend", "gloo"], "--placement and --backend need --shards"),
    (["--path", "numpy", "--shards", "2", "--backend", "nccl"], "use it with --path cupy-plugin"),
    (["--path", "numpy", "--shards", "2", "--placement", "rows"], "invalid choice"),
])
def test_bad_shard_arguments_are_one_line(tmp_path, args, message):
    done = _cli(tmp_path, *args, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_loopback_cli_run_is_marked_emulated(tmp_path):
    events_file = tmp_path / "run.jsonl"
    done = _cli(tmp_path, "--path", "numpy", "--preset", "ci", "--iterations", "2",
                "--warmup", "0", "--shards", "4", "--backend", "loopback",
                "--events", str(events_file))
    assert done.returncode == 0, done.stderr
    warm = read_events(events_file)[1]
    assert warm["shards"]["emulated"] is True and len(warm["shards"]["ranks"]) == 4


def test_build_command_takes_shards_and_placement_within_range():
    argv = build_command({"path": "numpy", "preset": "ci", "iterations": 5, "shards": 4,
                          "placement": "field"})
    assert argv[-4:] == ["--shards", "4", "--placement", "field"]
    for bad in (0, 65, True, "2", 2.0):
        with pytest.raises(ValueError, match="shards"):
            build_command({"path": "numpy", "preset": "ci", "iterations": 5, "shards": bad})
    with pytest.raises(ValueError, match="placement"):
        build_command({"path": "numpy", "preset": "ci", "iterations": 5, "placement": "x"})
    assert [panel_shards(v) for v in (1, 8, 9, 0, 2.5, float("nan"), "4", True)] == \
        [1, 8, None, None, None, None, None, None]


def test_the_parser_checks_the_shard_fields():
    base = {"event": "warmup_end", "run_id": "r", "time": 10.0}
    good = {**base, "shards": {"count": 2, "placement": "key", "backend": "gloo",
                               "emulated": False,
                               "ranks": [{"rank": 0, "pid": 10}, {"rank": 1, "pid": 11}]}}
    assert parse_event(json.dumps(good))["shards"]["ranks"][1]["pid"] == 11
    for shards in ({"count": 0}, {"count": 1000}, {"count": 2, "ranks": "x"},
                   {"count": 2, "ranks": [{"rank": -1}]}, {"count": 2, "emulated": "yes"}):
        assert parse_event(json.dumps({**base, "shards": shards})) is None
    it = {"event": "iteration", "run_id": "r", "time": 10.0, "ms": 5.0}
    assert parse_event(json.dumps({**it, "exchange_bytes": 100, "exchange_ms": 1.0}))
    assert parse_event(json.dumps({**it, "exchange_bytes": -1})) is None
    end = {"event": "end", "run_id": "r", "time": 10.0}
    assert parse_event(json.dumps({**end, "exchange": {"keys": "many"}})) is None


def _sharded_run(device, ranks, exchange_ms, backend="nccl", emulated=False):
    return Run("r-shard", start={
        "time": 100.0, "path": "cupy-plugin" if device == "gpu" else "numpy",
        "device": device, "preset": "ci", "pid": ranks[0]["pid"], "config": {"batch": 256},
        "gpu": {"uuid": ranks[0].get("gpu_uuid"), "index": None, "visible": None},
        "shards": {"count": len(ranks), "placement": "key", "backend": backend,
                   "emulated": emulated, "ranks": ranks}},
        iterations=[{"time": 101.0 + i, "ms": 10.0, "exchange_bytes": 2e8,
                     "exchange_ms": exchange_ms} for i in range(6)],
        end={"time": 107.0, "median_ms": 10.0, "interrupted": False}, warmup_end_s=100.5)


def _samples(nvlink_tx):
    def reading(i):
        return GpuReading.unavailable(i, lost=False)._replace(
            utilization_pct=90.0, memory_used_bytes=1e9, memory_total_bytes=8e10,
            nvlink_tx_bytes_per_s=nvlink_tx if i < 2 else 0.0, nvlink_rx_bytes_per_s=0.0,
            pcie_tx_bytes_per_s=1e9, pcie_rx_bytes_per_s=1e9)
    return [Sample(n, 100.0 + 0.2 * n, tuple(reading(i) for i in range(8)), HOST)
            for n in range(40)]


def test_workload_row_shows_expected_and_measured_and_names_every_gpu():
    gpus = facts()
    ranks = [{"rank": r, "pid": 1000 + r, "gpu_uuid": gpus[r].uuid} for r in range(2)]
    row = summarize(_sharded_run("gpu", ranks, exchange_ms=2.0), _samples(5e9), gpus,
                    simulated=False, native_median_ms=None, now_s=110.0)
    # 2e8 bytes a step every 10 ms is 20 GB/s expected; both GPUs send 5 GB/s: 10 measured.
    assert "expected 20.000 GB/s" in row["exchange"]
    assert "measured NVLink 10.000 GB/s, PCIe 2.000 GB/s" in row["exchange"]
    assert f"on {gpus[0].label}, {gpus[1].label}" in row["verdict"]
    assert row["cause"] != "communication-bound"
    # Each GPU judged on its own: both named in the second line.
    each = row["verdict_more"].split("each GPU: ", 1)[1]
    assert gpus[0].label in each and gpus[1].label in each


def test_a_gpu_missing_from_the_samples_makes_the_measured_exchange_unknown():
    """One rule for a sum with unknown parts (``rates.total``): a rank's GPU that the
    samples lack is an unknown part, never a smaller sum."""
    gpus = facts()
    ranks = [{"rank": r, "pid": 1000 + r, "gpu_uuid": gpus[r].uuid} for r in range(2)]
    samples = [replace(s, gpus=tuple(g for g in s.gpus if g.index != 1))
               for s in _samples(5e9)]
    row = summarize(_sharded_run("gpu", ranks, exchange_ms=2.0), samples, gpus,
                    simulated=False, native_median_ms=None, now_s=110.0)
    assert "measured NVLink not available, PCIe not available" in row["exchange"]


def test_a_cpu_run_measures_zero_and_says_why_and_a_slow_exchange_is_communication_bound():
    ranks = [{"rank": r, "pid": 2000 + r} for r in range(4)]
    run = _sharded_run("cpu", ranks, exchange_ms=7.0, backend="gloo")
    row = summarize(run, _samples(5e9), facts(), simulated=False, native_median_ms=None,
                    now_s=110.0)
    assert f"measured 0 GB/s: {CPU_WHY}" in row["exchange"]
    assert row["cause"] == "communication-bound"
    assert row["verdict"].startswith("communication-bound: exchange share of each step 70%")
    assert "shards 0-3 pids 2000 2001 2002 2003" in row["verdict"]
    assert communication_finding(_sharded_run("cpu", ranks, exchange_ms=4.0)) is None


def test_an_emulated_run_says_no_byte_crosses_a_link():
    gpus = facts()
    ranks = [{"rank": r, "pid": 3000, "gpu_uuid": gpus[0].uuid} for r in range(4)]
    row = summarize(_sharded_run("gpu", ranks, 1.0, backend="loopback", emulated=True),
                    _samples(5e9), gpus, simulated=False, native_median_ms=None, now_s=110.0)
    assert "measured 0 GB/s: 4 shards emulated in one process" in row["exchange"]


@pytest.mark.parametrize("shards,message", [("2,4", "must include 1"), ("1,x", "whole numbers"),
                                            ("1,3", "multiple of every shard count (3)")])
def test_the_benchmark_refuses_bad_shard_lists_in_one_line(tmp_path, shards, message):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "embedding_speedup.py"),
                           "--shards", shards, "--batch", "1024"], env=_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_the_launcher_pins_one_gpu_per_shard(tmp_path):
    from jupyterlab_nvdashboard.runs.launcher import PinnedGpu, RunLauncher

    launcher = RunLauncher(tmp_path, environ=_env(tmp_path))
    gpus = [PinnedGpu(2, "GPU-aaaa"), PinnedGpu(3, "GPU-bbbb")]
    # numpy cannot run on a GPU: the run ends at once, but its start event records what
    # the launcher set.
    status = launcher.start({"path": "numpy", "preset": "ci", "iterations": 1,
                             "device": "gpu", "shards": 2}, gpus)
    assert status == "started numpy on preset ci on GPUs 2, 3 over 2 shards"
    deadline = time.monotonic() + 60
    while launcher.running and time.monotonic() < deadline:
        time.sleep(0.1)
    [events_file] = list(tmp_path.glob("*.jsonl"))
    start = read_events(events_file)[0]
    assert start["gpu"]["visible"] == "GPU-aaaa,GPU-bbbb"
    assert start["gpu"]["uuid"] == "GPU-aaaa" and start["gpu"]["index"] == 2
    assert start["shards"]["count"] == 2


def test_without_torch_gloo_is_a_one_line_hint_and_auto_falls_back_to_loopback(tmp_path):
    code = ("import sys; sys.modules['torch'] = None\n"
            "from jupyterlab_nvdashboard.workload.cli import main\n"
            "sys.exit(main(sys.argv[1:]))")
    common = ["--path", "numpy", "--preset", "ci", "--iterations", "1", "--warmup", "0",
              "--shards", "2", "--events", str(tmp_path / "run.jsonl")]
    done = subprocess.run([sys.executable, "-c", code, *common, "--backend", "gloo"],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert "torch is not installed" in lines[0] and "pip install torch" in lines[0]
    (tmp_path / "run.jsonl").unlink()
    done = subprocess.run([sys.executable, "-c", code, *common], env=_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert read_events(tmp_path / "run.jsonl")[1]["shards"]["backend"] == "loopback"
