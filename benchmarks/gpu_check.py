"""GPU check of the cupy-plugin path (needs CuPy; torch and nvidia-ml-py when present;
never TensorFlow).

On a GPU machine::

    python benchmarks/gpu_check.py [--quick]   # JSON to $OUT/gpu_check.json when OUT is set

1. Agreement with the NumPy reference, same data and initial weights:
   * ``ci`` in float64 for 20 steps: losses and every weight within ``FLOAT64_RTOL``;
   * DenseDemo and large-vocab shapes in float32 (batch ``CHECK_BATCH``, TF32 off so
     the matmuls are plain float32) for ``CHECK_STEPS`` steps: losses within
     ``FLOAT32_RTOL``; table, moments and MLP weights within ``FLOAT32_RTOL`` relative
     plus ``FLOAT32_ATOL_STEPS`` of one Adam step absolute. The GPU sums a row's
     gradient in another order; a sum within rounding of zero can flip the sign of that
     row's Adam step, so up to ``FLOAT32_OUTLIER_FRACTION`` of the elements may differ
     by more (counted and printed).
2. Speed at batch 65536, embedding size 4, TF32 as the TensorFlow path runs (on):
   ms per full step (DenseDemo and large-vocab), loss read every ``LOSS_EVERY`` steps;
   the embedding part alone against ``torch.nn.Embedding(sparse=True)`` +
   ``torch.optim.SparseAdam`` (each step of both ends in a device sync there, so both
   are timed alike); medians and ranges over ``REPEATS`` repeats.
3. Kernel launches per step (from torch's CUPTI-based profiler, which sees CuPy's
   kernels too), peak device memory (CuPy's pool), and whether the host waited for the
   GPU inside a step (queueing K steps must take far less than running them).

Targets (H200): full step <= 1.5 x 10 ms (0.67 ms of embedding memory traffic + 9.2 ms
of MLP at TF32 peak); embedding part >= 1.5x faster than torch's sparse embedding.

Without CuPy or a GPU it prints one line saying why and exits with status 2.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from jupyterlab_nvdashboard.workload.config import WorkloadConfig, make_config  # noqa: E402
from jupyterlab_nvdashboard.workload.data import make_pool  # noqa: E402
from jupyterlab_nvdashboard.workload.xp_path import ArrayTrainer  # noqa: E402

FLOAT64_RTOL = 1e-9
FLOAT32_RTOL = 1e-4
FLOAT32_ATOL_STEPS = 0.01  # of one Adam step (the learning rate)
FLOAT32_OUTLIER_FRACTION = 1e-4
CHECK_BATCH = 2048
CHECK_STEPS = 3
SPEED_BATCH = 65536
LOSS_EVERY = 10
REPEATS = 3
TARGET_FULL_STEP_MS = 1.5 * 10.0
TARGET_SPEEDUP_VS_TORCH = 1.5


def gpu_backend() -> tuple[Any, str | None]:
    """(CupyOps class, None) when CuPy sees a GPU, else (None, why not)."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "CuPy sees no CUDA device"
    except Exception as exc:  # ImportError, CUDARuntimeError
        return None, f"CuPy unavailable: {type(exc).__name__}: {exc}".splitlines()[0]
    from jupyterlab_nvdashboard.workload.cupy_ops import CupyOps

    return CupyOps, None


def gpu_name() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        return name.decode() if isinstance(name, bytes) else name
    except Exception:
        return None


def release_device_memory() -> None:
    """Give cached blocks back, so the next trainer's pool peak is its own."""
    gc.collect()
    try:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
    except ImportError:
        pass


# -- 1. agreement -------------------------------------------------------------------------
def state_of(trainer: ArrayTrainer) -> dict[str, np.ndarray]:
    """Everything a step changes, on the host."""
    to_np = trainer.ops.to_numpy
    state = {"table": to_np(trainer.table), "m": to_np(trainer.m), "v": to_np(trainer.v)}
    if trainer.mlp is not None:
        state["mlp"] = to_np(trainer.mlp.weights)
    return state


def compare(cfg: WorkloadConfig, steps: int, ops_factory: Any) -> dict[str, Any]:
    """Train NumPy and the GPU path from the same start; report the differences."""
    pool = make_pool(cfg)
    ref = ArrayTrainer(cfg, pool)
    ref_losses = [ref.step(i) for i in range(steps)]
    ref_state = state_of(ref)
    del ref
    gpu = ArrayTrainer(cfg, pool, ops=ops_factory(cfg.dtype))
    losses = [gpu.step(i) for i in range(steps)]
    gpu_state, tf32 = state_of(gpu), gpu.tf32
    del gpu
    release_device_memory()
    loss_rel = float(np.max(np.abs(np.subtract(losses, ref_losses)) / np.abs(ref_losses)))
    out: dict[str, Any] = {
        "shape": {k: getattr(cfg, k) for k in ("vocabulary", "batch", "distribution", "dtype")},
        "steps": steps, "tf32": tf32, "numpy_losses": ref_losses, "gpu_losses": losses,
        "max_relative_loss_difference": loss_rel,
    }
    if cfg.dtype == "float64":
        rtol, atol, allowed = FLOAT64_RTOL, FLOAT64_RTOL, 0.0
    else:
        rtol, atol = FLOAT32_RTOL, FLOAT32_ATOL_STEPS * cfg.learning_rate
        allowed = FLOAT32_OUTLIER_FRACTION
    ok = loss_rel <= rtol
    for name, want in ref_state.items():
        got = gpu_state[name]
        diff = np.abs(got.astype(np.float64) - want)
        over = int(np.count_nonzero(diff > atol + rtol * np.abs(want)))
        out[f"{name}_max_abs_difference"] = float(diff.max())
        out[f"{name}_elements_over_tolerance"] = over
        ok = ok and over <= allowed * want.size
    out["tolerance"] = {"rtol": rtol, "atol": atol, "outlier_fraction": allowed}
    out["status"] = "pass" if ok else "FAIL"
    return out


def agreement_configs(quick: bool) -> list[tuple[WorkloadConfig, int]]:
    """(config, steps) of each agreement check."""
    batch = 256 if quick else CHECK_BATCH
    # TF32 off for the float32 shapes: the reference is plain float32 matmuls.
    return [(make_config("ci", dtype="float64"), 20)] + [
        (make_config(preset, batch=batch, pool_batches=2, tf32=False), CHECK_STEPS)
        for preset in ("densedemo", "large-vocab")
    ]


def agreement_checks(
    ops_factory: Any, configs: list[tuple[WorkloadConfig, int]]
) -> list[dict[str, Any]]:
    results = []
    for cfg, steps in configs:
        res = compare(cfg, steps, ops_factory)
        print(f"agreement {res['shape']}: {res['status']} "
              f"(loss rel diff {res['max_relative_loss_difference']:.2e}, "
              f"table max abs diff {res['table_max_abs_difference']:.2e}, "
              f"over tolerance {res['table_elements_over_tolerance']})", flush=True)
        results.append(res)
    return results


# -- 2. speed ---------------------------------------------------------------------------
def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def time_launched(trainer: ArrayTrainer, steps: int, warmup: int = 3) -> list[float]:
    """ms per step over ``steps`` queued steps, loss read every LOSS_EVERY; per repeat."""
    for i in range(warmup):
        trainer.launch(i)
    trainer.read_loss()
    per_repeat = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for i in range(steps):
            trainer.launch(warmup + i)
            if (i + 1) % LOSS_EVERY == 0:
                trainer.read_loss()
        trainer.ops.synchronize()
        per_repeat.append((time.perf_counter() - start) * 1000.0 / steps)
    return per_repeat


def time_synced(step: Any, steps: int, warmup: int = 3) -> list[float]:
    """ms per step when every step ends in a device sync (how torch's trainer runs)."""
    for i in range(warmup):
        step(i)
    per_repeat = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for i in range(steps):
            step(warmup + i)
        per_repeat.append((time.perf_counter() - start) * 1000.0 / steps)
    return per_repeat


def synced_step(trainer: ArrayTrainer) -> Any:
    """``step(i)`` that launches a step and waits for it, without reading the loss."""

    def step(i: int) -> None:
        trainer.launch(i)
        trainer.ops.synchronize()

    return step


def host_waits(trainer: ArrayTrainer, steps: int = 5) -> dict[str, Any]:
    """Queue ``steps`` steps, then wait: with no host sync inside a step the queueing
    takes a small part of the run (the GPU still has work when launch returns)."""
    trainer.ops.synchronize()
    start = time.perf_counter()
    for i in range(steps):
        trainer.launch(i)
    queued = time.perf_counter() - start
    trainer.ops.synchronize()
    total = time.perf_counter() - start
    ratio = queued / total
    return {"queue_ms_per_step": queued * 1000 / steps, "run_ms_per_step": total * 1000 / steps,
            "queue_over_run": ratio, "host_waited_inside_steps": ratio > 0.5}


def count_launches(trainer: ArrayTrainer, steps: int = 3) -> dict[str, Any]:
    """Kernels (and memsets/copies) per step, from torch's CUPTI trace of ``steps`` steps."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError as exc:
        return {"status": f"not measured: torch is needed ({exc})"}
    trainer.launch(0)
    trainer.ops.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            trainer.launch(i)
        trainer.ops.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    cats: dict[str, int] = {}
    names: dict[str, int] = {}
    for e in events:
        cat = e.get("cat", "")
        if cat in ("kernel", "gpu_memset", "gpu_memcpy"):
            cats[cat] = cats.get(cat, 0) + 1
            if cat == "kernel":
                names[e.get("name", "?")[:60]] = names.get(e.get("name", "?")[:60], 0) + 1
    per_step = {cat: n / steps for cat, n in cats.items()}
    top = sorted(names.items(), key=lambda kv: -kv[1])[:12]
    return {"status": "measured" if cats else "no kernels seen in the trace",
            "per_step": per_step, "kernels_per_step": per_step.get("kernel"),
            "top_kernels_per_step": {k: n / steps for k, n in top}}


def speed_configs(quick: bool) -> dict[str, WorkloadConfig]:
    """The full-step shapes by name; "densedemo" is also the embedding-part shape."""
    batch = 4096 if quick else SPEED_BATCH
    return {preset: make_config(preset, batch=batch, embedding_size=4, pool_batches=2)
            for preset in ("densedemo", "large-vocab")}


def speed_checks(ops_factory: Any, configs: dict[str, WorkloadConfig],
                 steps: int) -> dict[str, Any]:
    out: dict[str, Any] = {"steps_per_repeat": steps, "repeats": REPEATS,
                           "loss_read_every": LOSS_EVERY}
    for preset, cfg in configs.items():
        batch = cfg.batch
        release_device_memory()
        trainer = ArrayTrainer(cfg, make_pool(cfg), ops=ops_factory(cfg.dtype))
        res: dict[str, Any] = {"config": cfg.to_dict(), "tf32": trainer.tf32}
        res["ms_per_step"] = spread(time_launched(trainer, steps))
        res["launches"] = count_launches(trainer)
        res["host_sync"] = host_waits(trainer)
        res["peak_device_memory_bytes"] = trainer.peak_device_memory_bytes()
        out[f"{preset}_full"] = res
        del trainer
        print(f"{preset} full step, batch {batch}, TF32 {'on' if res['tf32'] else 'off'}: "
              f"{fmt(res['ms_per_step'])} ms/step, "
              f"{res['launches'].get('kernels_per_step')} kernels/step, "
              f"peak device memory {res['peak_device_memory_bytes'] / 2**20:.0f} MiB, "
              f"host waited inside steps: {res['host_sync']['host_waited_inside_steps']}",
              flush=True)
    cfg = configs["densedemo"]
    release_device_memory()
    emb = ArrayTrainer(cfg, make_pool(cfg), ops=ops_factory(cfg.dtype), mode="embedding")
    out["cupy_embedding"] = {"ms_per_step": spread(time_synced(synced_step(emb), steps)),
                             "launches": count_launches(emb),
                             "peak_device_memory_bytes": emb.peak_device_memory_bytes()}
    del emb
    release_device_memory()
    print(f"cupy embedding part: {fmt(out['cupy_embedding']['ms_per_step'])} ms/step, "
          f"{out['cupy_embedding']['launches'].get('kernels_per_step')} kernels/step", flush=True)
    try:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from embedding_speedup import TorchTrainer

        torch_emb = TorchTrainer(cfg, "embedding", "gpu")
        out["torch_sparse_embedding"] = {
            "ms_per_step": spread(time_synced(torch_emb.step, steps)),
            "peak_device_memory_bytes": torch_emb.peak_device_memory_bytes()}
        ratio = (out["torch_sparse_embedding"]["ms_per_step"]["median"]
                 / out["cupy_embedding"]["ms_per_step"]["median"])
        out["embedding_speedup_vs_torch"] = ratio
        print(f"torch sparse embedding: {fmt(out['torch_sparse_embedding']['ms_per_step'])} "
              f"ms/step; cupy is {ratio:.2f}x faster", flush=True)
        del torch_emb
    except Exception as exc:  # torch missing or without CUDA
        out["torch_sparse_embedding"] = f"skipped: {type(exc).__name__}: {exc}".splitlines()[0]
        print(f"torch comparison {out['torch_sparse_embedding']}", flush=True)
    return out


def fmt(s: dict[str, float]) -> str:
    return f"{s['median']:.2f} (range {s['min']:.2f}-{s['max']:.2f})"


def verdicts(speed: dict[str, Any]) -> dict[str, Any]:
    full = speed["densedemo_full"]["ms_per_step"]["median"]
    ratio = speed.get("embedding_speedup_vs_torch")
    return {
        "full_step_ms": full, "full_step_target_ms": TARGET_FULL_STEP_MS,
        "full_step_met": full <= TARGET_FULL_STEP_MS,
        "speedup_vs_torch": ratio, "speedup_target": TARGET_SPEEDUP_VS_TORCH,
        "speedup_met": None if ratio is None else ratio >= TARGET_SPEEDUP_VS_TORCH,
    }


def write_report(report: dict[str, Any]) -> None:
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small shapes, few steps (smoke run)")
    p.add_argument("--skip-speed", action="store_true", help="agreement checks only")
    args = p.parse_args(argv)
    ops, reason = gpu_backend()
    report: dict[str, Any] = {"gpu": gpu_name(), "gpu_unavailable_reason": reason}
    if ops is None:
        write_report(report)
        print(f"gpu_check: cannot run: {reason}", file=sys.stderr)
        return 2
    report["agreement"] = agreement_checks(ops, agreement_configs(args.quick))
    if not args.skip_speed:
        report["speed"] = speed_checks(ops, speed_configs(args.quick), 5 if args.quick else 30)
        report["targets"] = verdicts(report["speed"])
        print(f"targets: {report['targets']}")
    report["tensorflow_imported"] = "tensorflow" in sys.modules
    write_report(report)
    failed = [a["shape"] for a in report["agreement"] if a["status"] != "pass"]
    if failed:
        print(f"gpu_check: disagreement with the NumPy reference at {failed}", file=sys.stderr)
    return 1 if failed or report["tensorflow_imported"] else 0


if __name__ == "__main__":
    sys.exit(main())
