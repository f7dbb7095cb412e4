"""The NumPy reference path (same algorithm as cupy-plugin) and its pieces."""

import numpy as np

from jupyterlab_nvdashboard.workload.config import make_config
from jupyterlab_nvdashboard.workload.data import make_pool
from jupyterlab_nvdashboard.workload.xp_path import ArrayTrainer, NumpyKeyMap, NumpyOps, dedup


def test_dedup_and_segment_sum_match_bincount():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 50, size=5000)
    values = rng.standard_normal((5000, 3))
    uk, inverse, order, starts = dedup(np, keys)
    assert np.array_equal(uk, np.unique(keys))
    assert np.array_equal(uk[inverse], keys)
    sums = NumpyOps().segment_sum(values, order, starts)
    for c in range(3):
        expected = np.bincount(inverse, weights=values[:, c], minlength=uk.size)
        np.testing.assert_allclose(sums[:, c], expected, rtol=1e-12, atol=1e-12)


def test_key_map_inserts_and_finds_arbitrary_keys():
    km = NumpyKeyMap(capacity=4)
    rows, new = km.lookup_or_insert(np.array([-7, 10**15]))
    assert sorted(rows.tolist()) == [0, 1] and new.tolist() == [-7, 10**15]
    rows2, new2 = km.lookup_or_insert(np.array([-7, 3, 10**15]))
    assert rows2[0] == rows[0] and rows2[2] == rows[1] and new2.tolist() == [3]


def test_numpy_path_trains():
    cfg = make_config("ci")
    trainer = ArrayTrainer(cfg, make_pool(cfg))
    losses = [trainer.step(i) for i in range(40)]
    assert losses[0] > 0.6 and np.mean(losses[-4:]) < 0.5 * losses[0]
