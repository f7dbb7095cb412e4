"""GPU check for the cupy-plugin path (needs cupy, torch, nvidia-ml-py; never TensorFlow).

On a GPU machine::

    python benchmarks/gpu_check.py            # writes $OUT/gpu_check.json (or ./)

1. Equality: the NumPy reference and the CuPy path train the ``ci`` preset in float64
   from the same data and initial weights; losses and per-key rows must agree to 1e-9.
2. Speed: the cupy-plugin full step at batch 65536, embedding size 4 (DenseDemo
   otherwise), and the embedding part alone against torch ``Embedding(sparse=True)`` +
   ``SparseAdam``.

Without CuPy or a GPU it still runs the NumPy half and records why the rest was
skipped, so it is safe to import and to run anywhere.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyterlab_nvdashboard.workload.config import make_config  # noqa: E402
from jupyterlab_nvdashboard.workload.data import make_pool  # noqa: E402
from jupyterlab_nvdashboard.workload.xp_path import ArrayTrainer  # noqa: E402


def gpu_backend() -> tuple[Any, str | None]:
    """(CupyOps class, None) when a GPU is usable, else (None, reason)."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "no CUDA device"
    except Exception as exc:  # ImportError, CUDARuntimeError
        return None, f"cupy unavailable: {type(exc).__name__}: {exc}".splitlines()[0]
    from jupyterlab_nvdashboard.workload.cupy_ops import CupyOps

    return CupyOps, None


def equality_check(steps: int = 20, ops_factory: Any = None) -> dict[str, Any]:
    """Train NumPy and (if given) the other ops on the same float64 ``ci`` data."""
    import numpy as np

    cfg = make_config("ci", dtype="float64")
    pool = make_pool(cfg)
    ref = ArrayTrainer(cfg, pool)
    ref_losses = [ref.step(i) for i in range(steps)]
    result: dict[str, Any] = {"steps": steps, "numpy_losses": ref_losses}
    if ops_factory is None:
        result["status"] = "skipped"
        return result
    other = ArrayTrainer(cfg, pool, ops=ops_factory("float64"))
    losses = [other.step(i) for i in range(steps)]
    keys = np.unique(np.concatenate([k.ravel() for k in pool.keys]))
    row_diff = float(np.abs(other.embedding_of(keys) - ref.embedding_of(keys)).max())
    loss_diff = float(np.max(np.abs(np.subtract(losses, ref_losses)) / np.abs(ref_losses)))
    result.update(
        gpu_losses=losses,
        max_relative_loss_difference=loss_diff,
        max_row_difference=row_diff,
        status="pass" if loss_diff < 1e-9 and row_diff < 1e-9 else "FAIL",
    )
    return result


def time_steps(trainer: Any, iterations: int, warmup: int) -> dict[str, float]:
    for i in range(warmup):
        trainer.step(i)
    times = []
    for i in range(iterations):
        start = time.perf_counter()
        trainer.step(warmup + i)
        times.append((time.perf_counter() - start) * 1000.0)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times)}


def speed_check(ops_factory: Any, iterations: int = 20, warmup: int = 3) -> dict[str, Any]:
    cfg = make_config("densedemo", batch=65536, embedding_size=4, pool_batches=2)
    out: dict[str, Any] = {"config": cfg.to_dict()}
    pool = make_pool(cfg)
    full = ArrayTrainer(cfg, pool, ops=ops_factory(cfg.dtype))
    out["cupy_plugin_full"] = time_steps(full, iterations, warmup)
    out["cupy_plugin_full"]["peak_device_memory_bytes"] = full.peak_device_memory_bytes()
    del full
    emb = ArrayTrainer(cfg, pool, ops=ops_factory(cfg.dtype), mode="embedding")
    out["cupy_plugin_embedding"] = time_steps(emb, iterations, warmup)
    del emb
    try:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from embedding_speedup import TorchTrainer

        torch_emb = TorchTrainer(cfg, "embedding", "gpu")
        out["torch_sparse_embedding"] = time_steps(torch_emb, iterations, warmup)
        ratio = (
            out["torch_sparse_embedding"]["median_ms"] / out["cupy_plugin_embedding"]["median_ms"]
        )
        out["embedding_speedup_vs_torch"] = ratio
    except Exception as exc:  # torch missing or without CUDA
        out["torch_sparse_embedding"] = f"skipped: {type(exc).__name__}: {exc}".splitlines()[0]
    return out


def gpu_name() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        return name.decode() if isinstance(name, bytes) else name
    except Exception:
        return None


def main() -> int:
    ops, reason = gpu_backend()
    report: dict[str, Any] = {"gpu": gpu_name(), "gpu_unavailable_reason": reason}
    report["equality"] = equality_check(ops_factory=ops)
    print(f"equality: {report['equality']['status']}")
    if ops is not None:
        report["speed"] = speed_check(ops)
        for name in ("cupy_plugin_full", "cupy_plugin_embedding", "torch_sparse_embedding"):
            print(f"{name}: {report['speed'][name]}")
    else:
        print(f"speed: skipped ({reason})")
    out_dir = Path(os.environ.get("OUT") or ".")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    assert "tensorflow" not in sys.modules, "gpu_check must not import TensorFlow"
    return 0 if report["equality"]["status"] != "FAIL" else 1


if __name__ == "__main__":
    sys.exit(main())
