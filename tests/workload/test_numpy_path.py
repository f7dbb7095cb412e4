"""The NumPy reference path (the step the cupy-plugin path runs) and its pieces."""

import numpy as np
import pytest

from jupyterlab_nvdashboard.workload.adam import adam_coefficients, adam_update
from jupyterlab_nvdashboard.workload.config import make_config
from jupyterlab_nvdashboard.workload.data import make_pool
from jupyterlab_nvdashboard.workload.xp_path import (
    ArrayTrainer,
    FlatParameters,
    NumpyOps,
    index_dtype,
    run_starts,
)

COEFFS = adam_coefficients(0.01, 0.9, 0.999, 1e-7, step=3)


def _runs(keys, vocabulary, table):
    """What one step computes before the MLP: gathered rows, run ends and the order."""
    ops = NumpyOps()
    counts = np.zeros(vocabulary, dtype=keys.dtype)
    out = np.empty((keys.size, table.shape[1]))
    ops.gather_count(table, keys, counts, out)
    ends = np.cumsum(counts, dtype=keys.dtype)
    order = ops.order_by_key(keys, counts, ends)
    return out, ends, order, counts


def test_runs_group_every_lookup_under_its_key():
    rng = np.random.default_rng(0)
    vocabulary = 30
    keys = rng.integers(0, vocabulary, size=500).astype(np.int32)
    keys[keys == 7] = 8  # a key nobody looks up: an empty run
    table = rng.standard_normal((vocabulary, 3))
    out, ends, order, counts = _runs(keys, vocabulary, table)
    np.testing.assert_array_equal(out, table[keys])
    starts = run_starts(np, ends)
    assert ends[-1] == keys.size and starts[7] == ends[7]
    for k in range(vocabulary):
        run = order[starts[k] : ends[k]]
        np.testing.assert_array_equal(np.sort(run), np.flatnonzero(keys == k))
    assert not counts.any()  # ready for the next step without a reset
    assert order.dtype == np.int32


def test_segment_sum_adam_is_lazy_adam_on_the_summed_rows():
    rng = np.random.default_rng(1)
    vocabulary, dim = 20, 4
    keys = rng.integers(0, vocabulary, size=300).astype(np.int32)
    keys[keys == 5] = 6
    table = rng.standard_normal((vocabulary, dim))
    m, v = rng.standard_normal((2, vocabulary, dim)) ** 2
    grads = rng.standard_normal((keys.size, dim))
    _, ends, order, _ = _runs(keys, vocabulary, table)
    want_table, want_m, want_v = table.copy(), m.copy(), v.copy()
    NumpyOps().segment_sum_adam(table, m, v, grads, order, ends, COEFFS)
    summed = np.stack([np.bincount(keys, grads[:, c], vocabulary) for c in range(dim)], 1)
    touched = np.unique(keys)
    new_m, new_v, step = adam_update(
        want_m[touched], want_v[touched], summed[touched], COEFFS, np.sqrt
    )
    want_m[touched], want_v[touched] = new_m, new_v
    want_table[touched] -= step
    np.testing.assert_allclose(table, want_table, rtol=1e-12)
    np.testing.assert_allclose(m, want_m, rtol=1e-12)
    np.testing.assert_allclose(v, want_v, rtol=1e-12)
    assert 5 not in touched  # lazy: the untouched row kept its weights and moments
    np.testing.assert_array_equal(table[5], want_table[5])


def test_flat_buffer_views_are_the_layers_and_one_adam_pass_updates_all():
    rng = np.random.default_rng(2)
    layers = [(rng.standard_normal((5, 3)), rng.standard_normal(3)),
              (rng.standard_normal((3, 1)), rng.standard_normal(1))]
    flat = FlatParameters(np, layers, np.float64)
    assert flat.size == 15 + 3 + 3 + 1
    for (w, b), (wv, bv) in zip(layers, flat.layers, strict=True):
        np.testing.assert_array_equal(wv, w)
        np.testing.assert_array_equal(bv, b)
        assert np.shares_memory(wv, flat.weights) and np.shares_memory(bv, flat.weights)
    grads = [(rng.standard_normal(w.shape), rng.standard_normal(b.shape)) for w, b in layers]
    for (gw, gb), (gwv, gbv) in zip(grads, flat.grad_layers, strict=True):
        gwv[...], gbv[...] = gw, gb
    NumpyOps().adam_flat(flat, COEFFS)
    for (w, b), (gw, gb), (wv, bv) in zip(layers, grads, flat.layers, strict=True):
        for p, g, got in ((w, gw, wv), (b, gb, bv)):
            zero = np.zeros_like(p)
            _, _, step = adam_update(zero, zero, g, COEFFS, np.sqrt)
            np.testing.assert_allclose(got, p - step, rtol=1e-12)


def test_indices_are_int32_where_they_fit():
    assert index_dtype(make_config("densedemo", batch=65536)) == np.int32
    assert index_dtype(make_config("large-vocab", batch=65536)) == np.int32
    assert index_dtype(make_config("ci", vocabulary=2**31)) == np.int64
    assert index_dtype(make_config("densedemo", batch=1 << 20, hotness=2100)) == np.int64
    cfg = make_config("ci")
    assert ArrayTrainer(cfg, make_pool(cfg)).keys[0].dtype == np.int32


@pytest.mark.parametrize("mode", ["full", "embedding"])
def test_step_is_launch_then_read_loss(mode):
    cfg = make_config("ci", dtype="float64")
    pool = make_pool(cfg)
    stepped, launched = ArrayTrainer(cfg, pool, mode=mode), ArrayTrainer(cfg, pool, mode=mode)
    losses = [stepped.step(i) for i in range(5)]
    for i in range(5):
        launched.launch(i)  # the loss is read only at the end, as a GPU caller would
    assert launched.read_loss() == losses[-1]
    np.testing.assert_array_equal(launched.table, stepped.table)
    assert launched.tf32 is False
    with pytest.raises(RuntimeError, match="no step"):
        ArrayTrainer(cfg, pool).read_loss()


def test_numpy_path_trains():
    cfg = make_config("ci")
    trainer = ArrayTrainer(cfg, make_pool(cfg))
    losses = [trainer.step(i) for i in range(40)]
    assert losses[0] > 0.6 and np.mean(losses[-4:]) < 0.5 * losses[0]
