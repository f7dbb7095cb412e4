"""The sharded embedding (``--shards N``) against the single-device path it must equal.

DenseDemo's shape scaled down (V=8192, E=4, 100 fields x 10 lookups, batch 256; an MLP of
2 x 64 instead of 6 x 1024 so that the CPU time goes to the exchange under test), float64,
for N = 1, 2 and 4: in one process over the loopback exchange, and as N real processes over
torch.distributed's gloo. The forward pass must be bit-exact against ``np.take`` on the
unsharded table, the gradients within 1e-6 of the single-device path's, five lazy-Adam steps
within 1e-5 (losses and the re-assembled table), and the bytes each rank counts from its
buffers equal to the formula worked out here from the keys.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest

from jupyterlab_nvdashboard.workload.config import make_config
from jupyterlab_nvdashboard.workload.data import BatchPool, initial_table, make_pool
from jupyterlab_nvdashboard.workload.sharded import (
    BYTE_KINDS,
    LoopbackTrainer,
    Placement,
    assemble_table,
    placement_for,
)
from jupyterlab_nvdashboard.workload.xp_path import ArrayTrainer, mlp_forward_backward
from tests.support.waiting import until

ROOT = Path(__file__).resolve().parents[2]
SHARDS = (1, 2, 4)
STEPS = 5
CFG = make_config("densedemo", batch=256, hidden_layers=2, hidden_units=64, dtype="float64",
                  pool_batches=2)


def _reference(cfg, pool):
    """The single-device path: the first step's lookups, per-row and MLP gradients, and
    five steps' losses and final table."""
    trainer = ArrayTrainer(cfg, pool)
    keys = pool.keys[0].reshape(cfg.batch, -1)
    lookups = np.take(initial_table(cfg), keys, axis=0).reshape(cfg.batch, -1)
    _, d_x = mlp_forward_backward(np, trainer.ops, trainer.mlp, lookups.copy(), pool.labels[0])
    grads = d_x.reshape(-1, cfg.embedding_size)
    flat = keys.reshape(-1)
    row_grads = np.stack([np.bincount(flat, grads[:, j], cfg.vocabulary)
                          for j in range(cfg.embedding_size)], axis=1)
    mlp_grads = trainer.mlp.grads.copy()
    fresh = ArrayTrainer(cfg, pool)
    losses = [fresh.step(i) for i in range(STEPS)]
    table = fresh.embedding_of(np.arange(cfg.vocabulary))
    return {"lookups": lookups, "row_grads": row_grads, "mlp_grads": mlp_grads,
            "losses": np.array(losses), "table": table}


def expected_bytes(cfg, pool, step, placement, mlp_bytes):
    """What the job must move in pool batch ``step``, worked out from the keys alone."""
    n = placement.shards
    remote = 0
    for rank in range(n):
        part = pool.keys[step % len(pool.keys)][rank * cfg.batch // n:
                                                (rank + 1) * cfg.batch // n]
        owners = placement.owner(np.unique(part))
        remote += int(np.sum(owners != rank))
    vector = cfg.embedding_size * np.dtype(cfg.dtype).itemsize
    return {"counts": n * (n - 1) * n * 8, "keys": remote * 4, "vectors": remote * vector,
            "gradients": remote * vector,
            "all_reduce": n * (2 * (n - 1) * (mlp_bytes + 8) // n)}


def mlp_bytes(cfg):
    widths = [cfg.mlp_input_size] + [cfg.hidden_units] * cfg.hidden_layers + [1]
    params = sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))
    return params * np.dtype(cfg.dtype).itemsize


def _check_against(ref, got, cfg):
    """``got``: per rank, dicts of what the rank recorded (first step) and its final rows."""
    lookups = np.concatenate([g["lookups"] for g in got])
    assert np.array_equal(lookups, ref["lookups"])  # bit-exact: only copies
    for g in got:
        rows = g["rows"]
        np.testing.assert_allclose(g["row_grads"], ref["row_grads"][rows], rtol=0, atol=1e-6)
        np.testing.assert_allclose(g["mlp_grads"], ref["mlp_grads"], rtol=0, atol=1e-6)
        np.testing.assert_allclose(g["losses"], ref["losses"], rtol=0, atol=1e-5)
    table = assemble_table([(g["rows"], g["table"]) for g in got], cfg.vocabulary,
                           cfg.embedding_size)
    assert not np.isnan(table).any()  # every row is on exactly one shard
    np.testing.assert_allclose(table, ref["table"], rtol=0, atol=1e-5)
    # The gradients must not be trivially small: the tolerance has to be able to fail.
    assert np.abs(ref["row_grads"]).max() > 1e-4
    assert np.abs(ref["table"] - initial_table(cfg)).max() > 1e-3


@pytest.fixture(scope="module")
def reference():
    return _reference(CFG, make_pool(CFG))


# -- placement ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["key", "field"])
@pytest.mark.parametrize("shards,vocabulary,fields", [(1, 8192, 100), (4, 8192, 100),
                                                      (4, 8190, 100), (3, 10, 4), (4, 3, 2)])
def test_every_row_has_one_owner_and_one_local_slot(kind, shards, vocabulary, fields):
    p = Placement(kind, shards, vocabulary, fields)
    seen = np.zeros(vocabulary, dtype=int)
    for s in range(shards):
        rows = p.rows_of(s)
        seen[rows] += 1
        assert (p.owner(rows) == s).all()
        np.testing.assert_array_equal(p.local(rows), np.arange(len(rows)))
    assert (seen == 1).all()


def test_key_placement_is_round_robin_and_field_placement_keeps_fields_whole():
    assert list(Placement("key", 4, 10).rows_of(1)) == [1, 5, 9]
    p = Placement("field", 2, 8192, 100)  # DenseDemo: field f holds rows [81 f, 81 f + 81)
    keys = make_pool(CFG).keys[0]
    owners = p.owner(keys)
    fields = np.arange(100).reshape(1, -1, 1)
    assert (owners == fields % 2).all()


def test_bad_shard_settings_are_one_line_errors():
    with pytest.raises(ValueError, match="multiple of --shards 3"):
        LoopbackTrainer(CFG, make_pool(CFG), 3)
    with pytest.raises(ValueError, match="unknown placement"):
        placement_for(CFG, 2, "row")
    with pytest.raises(ValueError, match=r"shards must be in \[1, 64\]"):
        Placement("key", 0, 10)


# -- in one process, loopback -------------------------------------------------------------
def _loopback(cfg, pool, shards, placement="key"):
    trainer = LoopbackTrainer(cfg, pool, shards, placement, record=True)
    try:
        losses = [trainer.step(i) for i in range(STEPS)]
        sent = trainer.sent_bytes()
        job = trainer.step_bytes()
        got = []
        for w in trainer.workers:
            rows, table = w.table_rows()
            got.append({"lookups": w.records[0].lookups, "row_grads": w.records[0].row_grads,
                        "mlp_grads": w.records[0].mlp_grads, "losses": np.array(losses),
                        "rows": rows, "table": table})
        return got, sent, job
    finally:
        trainer.close()


@pytest.mark.parametrize("placement", ["key", "field"])
@pytest.mark.parametrize("shards", SHARDS)
def test_loopback_equals_the_single_device(reference, shards, placement):
    pool = make_pool(CFG)
    got, sent, job = _loopback(CFG, pool, shards, placement)
    _check_against(reference, got, CFG)
    expected = expected_bytes(CFG, pool, STEPS - 1, placement_for(CFG, shards, placement),
                               mlp_bytes(CFG))
    assert job == expected
    assert {k: sum(s[k] for s in sent) for k in BYTE_KINDS} == expected
    if shards > 1:
        assert expected["vectors"] > 0 and expected["keys"] > 0


def _edge_pool(cfg, kind):
    rng = np.random.default_rng(7)
    shape = (cfg.batch, cfg.fields, cfg.hotness)
    if kind == "duplicates":  # every lookup of the batch is one of three keys
        keys = rng.choice([5, 6, 5 + 4 * 7], size=shape)
    elif kind == "one-shard":  # every key is a multiple of 4: shard 0 serves all, 1-3 none
        keys = 4 * rng.integers(0, cfg.vocabulary // 4, size=shape)
    else:
        keys = rng.integers(0, cfg.vocabulary, size=shape)
    labels = (rng.random((cfg.batch, 1)) > 0.5).astype(cfg.dtype)
    return BatchPool(keys=[keys.astype(np.int64)], labels=[labels])


@pytest.mark.parametrize("kind,vocabulary,shards", [
    ("duplicates", 8192, 4),
    ("one-shard", 8192, 4),
    ("uniform", 8190, 4),  # N does not divide V
    ("uniform", 3, 4),  # shard 3 owns no row at all
])
def test_loopback_edge_cases(kind, vocabulary, shards):
    cfg = make_config("densedemo", batch=64, fields=2, hotness=5, vocabulary=vocabulary,
                      hidden_layers=1, hidden_units=16, dtype="float64", pool_batches=1,
                      distribution="uniform")
    pool = _edge_pool(cfg, kind)
    got, sent, job = _loopback(cfg, pool, shards)
    _check_against(_reference(cfg, pool), got, cfg)
    expected = expected_bytes(cfg, pool, 0, placement_for(cfg, shards), mlp_bytes(cfg))
    assert job == expected
    if kind == "one-shard":
        assert [len(g["rows"]) for g in got] == [2048] * 4
        assert sent[0]["vectors"] > 0 and all(s["keys"] == 0 for s in sent[:1])
        assert all(s["vectors"] == 0 for s in sent[1:])  # shards 1-3 serve nothing
    if vocabulary == 3:
        assert len(got[3]["rows"]) == 0


# -- real processes, gloo -----------------------------------------------------------------
def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _start_recorded(cfg, shards, out, pool_file=None, **settings):
    spec = {"config": cfg.to_dict(), "shards": shards, "record_dir": str(out),
            "steps": STEPS, "backend": "gloo", "pool_file": pool_file, **settings}
    out.mkdir()
    return subprocess.Popen(
        [sys.executable, "-m", "jupyterlab_nvdashboard.workload.shard_rank", "--record",
         json.dumps(spec)], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


def _finish(proc, out, shards):
    # No deadline of the test's own: every wait of rank 0 is a collective with its timeout
    # (a rank that waits past it says which collective), and once every rank has finished
    # its work a slow exit is no failure. A busy machine makes the run slower, not wrong.
    _, stderr = proc.communicate()
    assert proc.returncode == 0, stderr
    got = []
    for r in range(shards):
        with np.load(out / f"rank{r}.npz") as saved:
            got.append({name: saved[name] for name in saved.files})
    return got


@pytest.fixture(scope="module")
def gloo_runs(tmp_path_factory):
    """N = 1, 2, 4 on DenseDemo's shape, and an edge-case pool on 4 ranks, all at once."""
    pytest.importorskip("torch", reason="the gloo backend needs torch (the CPU build)")
    base = tmp_path_factory.mktemp("gloo")
    edge_cfg = make_config("densedemo", batch=64, fields=2, hotness=5, vocabulary=8190,
                           hidden_layers=1, hidden_units=16, dtype="float64", pool_batches=1,
                           distribution="uniform")
    edge_pool = _edge_pool(edge_cfg, "one-shard")
    from jupyterlab_nvdashboard.workload.shard_rank import save_pool

    save_pool(edge_pool, base / "edge_pool.npz")
    runs = {n: _start_recorded(CFG, n, base / f"n{n}") for n in SHARDS}
    runs["edge"] = _start_recorded(edge_cfg, 4, base / "edge", str(base / "edge_pool.npz"))
    try:
        results = {n: _finish(runs[n], base / f"n{n}", n) for n in SHARDS}
        results["edge"] = _finish(runs["edge"], base / "edge", 4)
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    results["edge_cfg"], results["edge_pool"] = edge_cfg, edge_pool
    return results


@pytest.mark.parametrize("shards", SHARDS)
def test_gloo_processes_equal_the_single_device(gloo_runs, reference, shards):
    got = gloo_runs[shards]
    _check_against(reference, got, CFG)
    pool = make_pool(CFG)
    for step in range(STEPS):
        expected = expected_bytes(CFG, pool, step, placement_for(CFG, shards),
                                   mlp_bytes(CFG))
        sent = {k: int(sum(g["sent"][step][j] for g in got)) for j, k in enumerate(BYTE_KINDS)}
        assert sent == expected  # what the ranks' buffers held
        assert dict(zip(BYTE_KINDS, got[0]["job"][step].tolist(), strict=True)) == expected


def test_gloo_edge_case_all_keys_on_one_shard_and_n_not_dividing_v(gloo_runs):
    cfg, pool, got = gloo_runs["edge_cfg"], gloo_runs["edge_pool"], gloo_runs["edge"]
    _check_against(_reference(cfg, pool), got, cfg)
    assert [len(g["rows"]) for g in got] == [2048, 2048, 2047, 2047]
    assert all(not g["sent"][:, BYTE_KINDS.index("vectors")].any() for g in got[1:])


def _joined(process):
    """``process`` once it has a gloo connection besides the store's: it joined the group."""
    try:
        connected = [c for c in process.net_connections(kind="tcp")
                     if c.status == psutil.CONN_ESTABLISHED]
    except psutil.Error:
        return None
    return process if len(connected) >= 2 else None


def test_a_rank_that_waits_too_long_says_which_collective_it_waited_on(tmp_path):
    pytest.importorskip("torch", reason="the gloo backend needs torch (the CPU build)")
    proc = _start_recorded(CFG, 2, tmp_path / "run", steps=10**6, collective_timeout_s=3)
    try:
        child = until(lambda: next(iter(psutil.Process(proc.pid).children()), None),
                      "rank 0 starts rank 1")
        until(lambda: _joined(child), "rank 1 joins the group", seconds=120)
        child.suspend()  # rank 1 stops answering, in whatever step rank 0 has got to
        _, stderr = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stderr
    # One line of ours (torch's own C++ warnings may come before it).
    [line] = [line for line in stderr.splitlines() if line.startswith("shard rank:")]
    assert re.fullmatch(r"shard rank: CollectiveError: rank 0 of 2 gave up waiting on the "
                        r"other ranks in (joining the process group|the (broadcast of the "
                        r"next step|all-gather of the send counts|all-to-all of the (keys|"
                        r"looked-up vectors|lookup gradients)|all-reduce of the (MLP "
                        r"gradients|loss))): .+", line), line
    until(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
          "rank 0 ends the rank it gave up on")


def test_a_rank_slow_to_exit_after_every_rank_finished_has_not_failed():
    from jupyterlab_nvdashboard.workload.shard_rank import reap

    def never_exits():
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

    def exits_with(status):  # already exited when reaped, however busy the machine
        process = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({status})"])
        process.wait()
        return process

    # A busy machine: every rank said it finished, one is still exiting when the wait ends.
    slow, done = never_exits(), exits_with(0)
    assert reap([slow, done], 0.5, finished=True) == []
    assert slow.returncode == -9
    # Before the work was done, a rank that had to be ended did fail, and so does one that
    # ended badly by itself.
    slow, failed = never_exits(), exits_with(3)
    assert sorted(reap([slow, failed], 0.5, finished=False)) == [-9, 3]
    assert reap([exits_with(3)], 0.5, finished=True) == [3]
