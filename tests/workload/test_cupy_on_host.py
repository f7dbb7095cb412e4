"""The cupy-plugin path's CUDA kernels and CuPy calls, run on the CPU.

``tests/support/fake_cupy.py`` stands in for CuPy: NumPy arrays, the real CUDA source
compiled for the host with one coroutine per CUDA lane (``cuda_on_host.h``), and strict
checks of every kernel argument's type. What a GPU adds (timing, the memory model,
cuBLAS) is left to ``benchmarks/gpu_check.py`` on a GPU machine.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from jupyterlab_nvdashboard.workload.adam import adam_coefficients
from jupyterlab_nvdashboard.workload.config import make_config
from jupyterlab_nvdashboard.workload.data import make_pool
from jupyterlab_nvdashboard.workload.xp_path import ArrayTrainer, NumpyOps
from tests.support import fake_cupy

pytestmark = pytest.mark.skipif(not fake_cupy.available(), reason="needs g++")


@pytest.fixture
def cupy_ops(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy.make_module())
    monkeypatch.setenv("CUPY_TF32", "0")  # restored after: the TF32 fallback writes it
    from jupyterlab_nvdashboard.workload.cupy_ops import CupyOps

    return CupyOps


@pytest.mark.parametrize("dtype,index", [("float64", np.int32), ("float32", np.int64)])
def test_kernels_group_sum_and_update_like_the_reference(cupy_ops, dtype, index):
    # 11 columns: a full chunk of 8 and a partial one; 7 keys over 900 lookups: runs of
    # ~130, longer than a warp; key 3 never looked up.
    rng = np.random.default_rng(0)
    vocabulary, dim, n = 7, 11, 900
    keys = rng.integers(0, vocabulary, n).astype(index)
    keys[keys == 3] = 4
    table = rng.standard_normal((vocabulary, dim)).astype(dtype)
    m, v = (rng.standard_normal((2, vocabulary, dim)) ** 2).astype(dtype)
    grads = rng.standard_normal((n, dim)).astype(dtype)
    c = adam_coefficients(0.01, 0.9, 0.999, 1e-7, step=2)
    results = []
    for ops in (NumpyOps(dtype), cupy_ops(dtype)):
        t, mm, vv = table.copy(), m.copy(), v.copy()
        counts = np.zeros(vocabulary, dtype=index)
        out = np.empty((n, dim), dtype=dtype)
        ops.gather_count(t, keys, counts, out)
        np.testing.assert_array_equal(out, table[keys])
        np.testing.assert_array_equal(counts, np.bincount(keys, minlength=vocabulary))
        ends = np.cumsum(counts, dtype=index)
        order = ops.order_by_key(keys, counts, ends)
        assert not counts.any() and order.dtype == index
        starts = np.concatenate([[0], ends[:-1]])
        for k in range(vocabulary):
            np.testing.assert_array_equal(
                np.sort(order[starts[k]:ends[k]]), np.flatnonzero(keys == k))
        ops.segment_sum_adam(t, mm, vv, grads, order, ends, c)
        results.append((t, mm, vv))
    rtol = 1e-12 if dtype == "float64" else 2e-5
    for want, got in zip(results[0], results[1], strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol)
    np.testing.assert_array_equal(results[1][0][3], table[3])  # untouched row: unchanged


@pytest.mark.parametrize("mode", ["full", "embedding"])
def test_cupy_path_trains_like_the_numpy_reference(cupy_ops, mode):
    cfg = make_config("ci", dtype="float64", vocabulary=16, batch=64)
    pool = make_pool(cfg)
    ref = ArrayTrainer(cfg, pool, mode=mode)
    host = ArrayTrainer(cfg, pool, cupy_ops(cfg.dtype), mode)
    assert host.keys[0].dtype == np.int32 and host.tf32 is False  # float64: never TF32
    ref_losses = [ref.step(i) for i in range(5)]
    for i in range(5):
        host.launch(i)
    np.testing.assert_allclose(host.read_loss(), ref_losses[-1], rtol=1e-12)
    np.testing.assert_allclose(host.table, ref.table, rtol=1e-12, atol=1e-15)
    if mode == "full":
        np.testing.assert_allclose(host.mlp.weights, ref.mlp.weights, rtol=1e-12, atol=1e-15)


def test_tf32_follows_the_config_for_float32(cupy_ops):
    cfg = make_config("ci", vocabulary=16, batch=64)
    assert ArrayTrainer(cfg, make_pool(cfg), cupy_ops(cfg.dtype)).tf32 is True
    off = make_config("ci", vocabulary=16, batch=64, tf32=False)
    assert ArrayTrainer(off, make_pool(off), cupy_ops(off.dtype)).tf32 is False


def test_host_runner_catches_a_shuffle_with_a_missing_lane():
    bad = r'''
extern "C" __global__ void early_exit(float* x) {
    if (threadIdx.x % 32 == 5) return;  /* not warp-uniform */
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}'''
    kernel = fake_cupy.RawModule(code=bad).get_function("early_exit")
    with pytest.raises(AssertionError, match="lane errors"):
        kernel((1,), (32,), (np.zeros(32, np.float32),))
    with pytest.raises(AssertionError, match="int64, want float32"):
        kernel((1,), (32,), (np.zeros(32, np.int64),))


def test_gpu_check_script_runs_its_checks_on_the_host_runner(cupy_ops, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import gpu_check

    monkeypatch.setattr(gpu_check, "REPEATS", 1)

    tiny = {"dtype": "float32", "vocabulary": 16, "batch": 64, "tf32": False}
    configs = [(make_config("ci", **dict(tiny, dtype="float64")), 3),
               (make_config("ci", **tiny), 3)]
    results = gpu_check.agreement_checks(cupy_ops, configs)
    assert [r["status"] for r in results] == ["pass", "pass"]
    speed = gpu_check.speed_checks(cupy_ops, {"densedemo": make_config("ci", **tiny)}, 2)
    full = speed["densedemo_full"]
    assert full["ms_per_step"]["min"] <= full["ms_per_step"]["median"] <= full["ms_per_step"]["max"]
    assert full["config"]["batch"] == 64 and full["tf32"] is False
    assert set(full["host_sync"]) >= {"queue_ms_per_step", "host_waited_inside_steps"}
    try:
        import torch  # noqa: F401
    except ImportError:
        assert full["launches"]["status"].startswith("not measured")
        assert speed["torch_sparse_embedding"].startswith("skipped")
    assert gpu_check.verdicts(speed)["full_step_target_ms"] == 15.0


def test_one_adam_kernel_for_the_mlp_and_one_for_the_embedding_rows(cupy_ops):
    # Own kernels per step, whatever the number of MLP tensors: the embedding's gather,
    # ordering and fused sum+Adam, one Adam for all MLP tensors, and per layer only the
    # bias/ReLU passes (cuBLAS matmuls and CuPy's reductions are not counted here).
    for hidden_layers in (2, 5):
        cfg = make_config("ci", vocabulary=16, batch=64, hidden_layers=hidden_layers)
        trainer = ArrayTrainer(cfg, make_pool(cfg), cupy_ops(cfg.dtype))
        trainer.launch(0)
        fake_cupy.LAUNCHES.clear()
        trainer.launch(1)
        assert dict(fake_cupy.LAUNCHES) == {
            "gather_count": 1, "order_by_key": 1, "segment_sum_adam": 1, "adam_flat": 1,
            "nvd_bias_relu": hidden_layers, "nvd_bias": 1, "nvd_bce_grad": 1,
            "nvd_relu_grad": hidden_layers,
        }


def test_a_step_calls_no_cupy_function_that_waits_for_the_gpu(monkeypatch):
    # Data-dependent sizes (nonzero, unique, bincount's check) and host copies sync;
    # launch() must run with all of them missing from the module.
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy.make_module(forbid_host_sync=True))
    monkeypatch.setenv("CUPY_TF32", "0")
    from jupyterlab_nvdashboard.workload.cupy_ops import CupyOps

    for mode in ("full", "embedding"):
        cfg = make_config("ci", vocabulary=16, batch=64)
        trainer = ArrayTrainer(cfg, make_pool(cfg), CupyOps(cfg.dtype), mode)
        for i in range(3):
            trainer.launch(i)
        assert np.isfinite(trainer.read_loss())
    with pytest.raises(AttributeError):
        sys.modules["cupy"].flatnonzero  # noqa: B018  (the guard is real)
