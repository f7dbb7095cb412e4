"""benchmarks/gpu_check.py and the CUDA side of the cupy-plugin path, without a GPU where
possible: the script's comparison logic, its one-line refusal, and the kernels compiling."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jupyterlab_nvdashboard.workload import cupy_ops
from jupyterlab_nvdashboard.workload.config import make_config
from jupyterlab_nvdashboard.workload.xp_path import NumpyOps

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402


def _has_cupy() -> bool:
    try:
        import cupy  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(_has_cupy(), reason="cupy is installed")
def test_gpu_check_without_cupy_says_why_in_one_line(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert done.stderr.startswith("gpu_check: cannot run: CuPy unavailable")
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["gpu_unavailable_reason"].startswith("CuPy unavailable")


class _WrongBeta(NumpyOps):
    """A backend whose embedding update forgets the second moment's decay."""

    def segment_sum_adam(self, table, m, v, grads, order, ends, c):
        wrong = type(c)(c.one_minus_beta_1, 1.0, c.alpha, c.epsilon)
        super().segment_sum_adam(table, m, v, grads, order, ends, wrong)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_comparison_passes_the_reference_and_catches_a_wrong_update(dtype):
    cfg = make_config("ci", dtype=dtype, tf32=False)
    same = gpu_check.compare(cfg, 4, NumpyOps)
    assert same["status"] == "pass" and same["table_max_abs_difference"] == 0.0
    assert len(same["numpy_losses"]) == 4
    wrong = gpu_check.compare(cfg, 4, _WrongBeta)
    assert wrong["status"] == "FAIL" and wrong["table_elements_over_tolerance"] > 0


def test_gpu_check_imports_no_tensorflow():
    code = "import sys; sys.path.insert(0, 'benchmarks'); import gpu_check; " \
           "print('tensorflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.stdout.strip() == "False", done.stderr


def test_cupy_ops_module_imports_without_cupy():
    for name in cupy_ops.KERNELS:
        assert f'extern "C" __global__ void {name}(' in cupy_ops.KERNEL_SOURCE
    assert cupy_ops.THREADS % 32 == 0  # segment_sum_adam needs whole warps
    assert cupy_ops.warp_per_item_blocks(8192) * cupy_ops.THREADS == 8192 * 32
    assert cupy_ops.grid_stride_blocks(10**12) == cupy_ops.MAX_BLOCKS


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no CUDA compiler")
@pytest.mark.parametrize("dtype,index", [("float32", "int32"), ("float64", "int64")])
def test_kernels_compile_without_warnings_or_spills(tmp_path, dtype, index):
    source = tmp_path / "kernels.cu"
    source.write_text(cupy_ops.kernel_source(dtype, index))
    done = subprocess.run(
        ["nvcc", "-c", "-arch=sm_90", "-Werror", "all-warnings", "-Xptxas", "-v",
         "-o", str(tmp_path / "k.o"), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    for name in cupy_ops.KERNELS:
        assert f"Compiling entry function '{name}'" in done.stderr
    usage = [line for line in done.stderr.splitlines() if "spill stores" in line]
    assert len(usage) == len(cupy_ops.KERNELS)
    clean = "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
    for line in usage:  # registers only: no local-memory stack, spill stores or loads
        assert line.strip() == clean, line


def test_cupy_plugin_path_gives_install_hint():
    if _has_cupy():
        pytest.skip("cupy is installed")
    from jupyterlab_nvdashboard.workload._lazy import MissingDependencyError
    from jupyterlab_nvdashboard.workload.runner import make_trainer

    with pytest.raises(MissingDependencyError, match=r"jupyterlab-nvdashboard\[cupy\]"):
        make_trainer("cupy-plugin", make_config("ci"), device="gpu")


@pytest.mark.gpu
def test_cupy_matches_numpy_on_gpu():
    ops, reason = gpu_check.gpu_backend()
    if ops is None:
        pytest.skip(reason)
    for cfg, steps in ((make_config("ci", dtype="float64"), 20),
                       (make_config("densedemo", batch=256, tf32=False), 3)):
        assert gpu_check.compare(cfg, steps, ops)["status"] == "pass"
    # At the full shape a step's GPU work (~10 ms) dwarfs its launch overhead, so queueing
    # five steps must return long before they finish unless the host waits inside a step.
    cfg = make_config("densedemo", batch=65536, pool_batches=1)
    trainer = gpu_check.ArrayTrainer(cfg, gpu_check.make_pool(cfg), ops=ops(cfg.dtype))
    assert not gpu_check.host_waits(trainer)["host_waited_inside_steps"]
    np.testing.assert_array_equal(trainer.ops.to_numpy(trainer.counts), 0)
