"""The sharded path on the cupy-plugin's kernels (run on the CPU, ``tests/support/
fake_cupy.py``): N shards emulated on one GPU equal the single-device cupy-plugin path."""

import sys

import numpy as np
import pytest

from jupyterlab_nvdashboard.workload.config import make_config
from jupyterlab_nvdashboard.workload.data import make_pool
from tests.support import fake_cupy

pytestmark = pytest.mark.skipif(not fake_cupy.available(), reason="needs g++")


@pytest.fixture
def cupy_ops(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy.make_module())
    monkeypatch.setenv("CUPY_TF32", "0")
    from jupyterlab_nvdashboard.workload.cupy_ops import CupyOps

    return CupyOps


def test_emulated_shards_on_the_cuda_kernels_equal_one_device(cupy_ops):
    from jupyterlab_nvdashboard.workload.sharded import LoopbackTrainer
    from jupyterlab_nvdashboard.workload.xp_path import ArrayTrainer

    cfg = make_config("ci", dtype="float64", pool_batches=2)
    pool = make_pool(cfg)
    single = ArrayTrainer(cfg, pool, ops=cupy_ops("float64"))
    want = [single.step(i) for i in range(4)]
    table = single.embedding_of(np.arange(cfg.vocabulary))
    for shards in (1, 4):
        trainer = LoopbackTrainer(cfg, pool, shards, ops_factory=lambda: cupy_ops("float64"))
        try:
            got = [trainer.step(i) for i in range(4)]
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
            np.testing.assert_allclose(trainer.table(), table, rtol=0, atol=1e-9)
        finally:
            trainer.close()
    from jupyterlab_nvdashboard.workload.data import initial_table

    assert np.abs(table - initial_table(cfg)).max() > 1e-3  # it trained: the check can fail
