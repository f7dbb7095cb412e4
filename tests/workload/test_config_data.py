"""Config, data generation, events and build_command: no framework needed."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from jupyterlab_nvdashboard.workload import build_command, default_runs_dir, read_events
from jupyterlab_nvdashboard.workload.config import PRESETS, make_config
from jupyterlab_nvdashboard.workload.data import (
    check_keys,
    generate_keys,
    initial_rows,
    initial_table,
    make_pool,
)
from jupyterlab_nvdashboard.workload.events import EventWriter


def test_presets():
    dd = PRESETS["densedemo"]
    assert (dd.fields, dd.hotness, dd.vocabulary, dd.embedding_size) == (100, 10, 8192, 4)
    assert (dd.hidden_layers, dd.hidden_units, dd.batch) == (6, 1024, 8192)
    assert PRESETS["large-vocab"].vocabulary == 20_000_000
    assert PRESETS["large-vocab"].distribution == "uniform"


def test_overrides_and_validation():
    cfg = make_config("densedemo", embedding_size=16, batch=1024, vocabulary=None)
    assert cfg.embedding_size == 16 and cfg.batch == 1024 and cfg.vocabulary == 8192
    for bad in ({"batch": 0}, {"distribution": "normal"}, {"colour": 1}, {"batch": True}):
        with pytest.raises(ValueError) as err:
            make_config("ci", **bad)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="unknown preset"):
        make_config("nope")


def test_densedemo_keys_follow_reference():
    cfg = make_config("densedemo", batch=64)
    keys = generate_keys(cfg, np.random.default_rng(0))
    assert keys.shape == (64, 100, 10) and keys.dtype == np.int64
    slot = np.arange(100).reshape(1, -1, 1)
    offset = keys - 81 * slot
    assert offset.min() >= 0 and offset.max() < 81
    assert len(np.unique(generate_keys(make_config("densedemo"), np.random.default_rng(1)))) == 8100


@pytest.mark.parametrize("dist", ["uniform", "zipf"])
def test_other_distributions_in_vocab(dist):
    cfg = make_config("ci", distribution=dist, vocabulary=1000)
    keys = generate_keys(cfg, np.random.default_rng(0))
    assert keys.min() >= 0 and keys.max() < 1000


def test_pool_is_seeded_and_labels_balanced():
    a, b = make_pool(make_config("ci")), make_pool(make_config("ci"))
    assert all(np.array_equal(x, y) for x, y in zip(a.keys, b.keys, strict=True))
    c = make_pool(make_config("ci", seed=7))
    assert not np.array_equal(a.keys[0], c.keys[0])
    frac = np.mean(np.concatenate(a.labels))
    assert 0.4 < frac < 0.6


def test_initial_rows_depend_on_key_only():
    cfg = make_config("ci")
    table = initial_table(cfg)
    keys = np.array([5, 3, 5, 100])
    assert np.array_equal(initial_rows(keys, cfg), table[keys])
    assert np.abs(table).max() <= 0.05


def test_check_keys_errors():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        check_keys(np.array([1, 512]), 512)
    with pytest.raises(ValueError, match="integer"):
        check_keys(np.array([1.0]), 512)
    with pytest.raises(ValueError, match="scalar"):
        check_keys(np.int64(3), 512)


def test_build_command_valid():
    cmd = build_command({"path": "plugin", "preset": "ci", "iterations": 5, "device": "cpu"})
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab_nvdashboard.workload"]
    assert cmd[3:] == ["--path", "plugin", "--preset", "ci", "--iterations", "5", "--device", "cpu"]


@pytest.mark.parametrize(
    "params",
    [
        {"path": "plugin", "preset": "ci"},
        {"path": "rm -rf", "preset": "ci", "iterations": 5},
        {"path": "plugin", "preset": "ci", "iterations": 0},
        {"path": "plugin", "preset": "ci", "iterations": 10**9},
        {"path": "plugin", "preset": "ci", "iterations": "5"},
        {"path": "plugin", "preset": "ci", "iterations": True},
        {"path": "plugin", "preset": "ci", "iterations": 5, "device": "tpu"},
        {"path": "plugin", "preset": "ci", "iterations": 5, "extra": "--events=/etc"},
        ["plugin"],
    ],
)
def test_build_command_rejects(params):
    with pytest.raises(ValueError):
        build_command(params)


def test_read_events_tolerates_partial_line(tmp_path):
    path = tmp_path / "run.jsonl"
    with EventWriter(path, "r1") as w:
        w.emit("start", path="plugin")
        w.emit("iteration", iteration=1, ms=1.5, samples_per_s=10.0, loss=np.float32(0.5))
    with open(path, "a") as f:
        f.write('{"event": "iteration", "run_id": "r1", "ti')
    events = read_events(path)
    assert [e["event"] for e in events] == ["start", "iteration"]
    assert events[1]["loss"] == 0.5 and isinstance(events[0]["time"], float)
    json.loads(path.read_text().splitlines()[0])


def test_default_runs_dir(tmp_path):
    assert default_runs_dir({"NVDASHBOARD_RUNS_DIR": str(tmp_path)}) == tmp_path
    assert default_runs_dir({}).parts[-3:] == (".cache", "nvdashboard", "runs")


def test_the_server_and_the_workload_expand_the_runs_dir_alike(tmp_path):
    from jupyterlab_nvdashboard.config import load_config

    environ = {"NVDASHBOARD_RUNS_DIR": "~/x/$NVD_TEST_SUB"}
    os.environ["NVD_TEST_SUB"] = "runs"
    try:
        server = load_config([], environ=environ).runs_dir
        workload = default_runs_dir(environ)
    finally:
        del os.environ["NVD_TEST_SUB"]
    assert server == workload == Path.home() / "x" / "runs"
