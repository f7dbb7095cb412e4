"""benchmarks/gpu_check.py: import-safe, TensorFlow-free, NumPy half works anywhere."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_without_gpu_and_without_tensorflow(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert len(report["equality"]["numpy_losses"]) == 20
    try:
        import cupy  # noqa: F401
    except ImportError:
        assert report["equality"]["status"] == "skipped"
        assert report["gpu_unavailable_reason"].startswith("cupy unavailable")


def test_cupy_ops_module_imports_without_cupy():
    from jupyterlab_nvdashboard.workload import cupy_ops

    assert "hash_insert" in cupy_ops._SOURCE


def test_cupy_plugin_path_gives_install_hint():
    pytest.importorskip("numpy")
    try:
        import cupy  # noqa: F401

        pytest.skip("cupy is installed")
    except ImportError:
        pass
    from jupyterlab_nvdashboard.workload._lazy import MissingDependencyError
    from jupyterlab_nvdashboard.workload.config import make_config
    from jupyterlab_nvdashboard.workload.runner import make_trainer

    with pytest.raises(MissingDependencyError, match=r"jupyterlab-nvdashboard\[cupy\]"):
        make_trainer("cupy-plugin", make_config("ci"), device="gpu")


@pytest.mark.gpu
def test_cupy_matches_numpy_on_gpu():
    pytest.importorskip("cupy")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check

    ops, reason = gpu_check.gpu_backend()
    if ops is None:
        pytest.skip(reason)
    assert gpu_check.equality_check(ops_factory=ops)["status"] == "pass"
