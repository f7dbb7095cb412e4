"""GPU check of the sharded cupy-plugin path (needs CuPy; nvidia-ml-py when present).

On a GPU machine::

    python benchmarks/shard_gpu_check.py [--shards 4]   # JSON to $OUT/shard_gpu_check.json

1. The one-GPU emulation (N shards in one process, loopback exchange in GPU memory) against
   N = 1 on the same GPU, DenseDemo's shape scaled down (V=8192, E=4, 100 x 10, batch 256,
   MLP 2 x 64) in float64 for 5 steps: losses and the re-assembled table within 1e-9.
2. ms per full step of DenseDemo (batch 8192) at N = 1 and N, median and range.
3. What NVML reports for the GPU meanwhile: its active NVLink links, and its NVLink TX/RX
   counters before and after the timed steps (the emulation should move nothing).

Without CuPy or a GPU it prints one line saying why and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from jupyterlab_nvdashboard.workload.config import make_config  # noqa: E402
from jupyterlab_nvdashboard.workload.data import make_pool  # noqa: E402

AGREEMENT_ATOL = 1e-9
STEPS = 5


def nvlink_state() -> dict[str, Any]:
    """Active NVLink links of GPU 0 and its summed TX/RX byte counters (None: not there)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:  # noqa: BLE001 - a check prints why and goes on
        return {"error": f"NVML: {exc}"}
    links = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            links += pynvml.nvmlDeviceGetNvLinkState(handle, link) == 1
        except Exception:  # noqa: BLE001 - a link ID past the GPU's own
            continue
    counters = None
    try:
        fields = [pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                  pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX]
        values = pynvml.nvmlDeviceGetFieldValues(handle, fields)
        counters = [int(v.value.ullVal) if v.nvmlReturn == 0 else None for v in values]
    except Exception:  # noqa: BLE001 - older drivers or bindings
        counters = None
    return {"active_links": links, "tx_rx_kib": counters}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--iterations", type=int, default=20)
    args = p.parse_args(argv)
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no CuPy, or no GPU
        print(f"shard_gpu_check: needs CuPy and a GPU: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    from jupyterlab_nvdashboard.workload.cupy_ops import CupyOps
    from jupyterlab_nvdashboard.workload.sharded import LoopbackTrainer

    out: dict[str, Any] = {"shards": args.shards}
    cfg = make_config("densedemo", batch=256, hidden_layers=2, hidden_units=64,
                      dtype="float64", pool_batches=2)
    pool = make_pool(cfg)
    results = {}
    for n in (1, args.shards):
        trainer = LoopbackTrainer(cfg, pool, n, ops_factory=lambda: CupyOps("float64"))
        losses = [trainer.step(i) for i in range(STEPS)]
        results[n] = (np.array(losses), trainer.table())
        trainer.close()
    loss_gap = float(np.abs(results[1][0] - results[args.shards][0]).max())
    table_gap = float(np.abs(results[1][1] - results[args.shards][1]).max())
    out["agreement"] = {"loss_max_abs": loss_gap, "table_max_abs": table_gap,
                        "ok": loss_gap <= AGREEMENT_ATOL and table_gap <= AGREEMENT_ATOL}
    print(f"emulated N={args.shards} vs N=1: losses {loss_gap:.2e}, table {table_gap:.2e} "
          f"({'ok' if out['agreement']['ok'] else 'FAIL'})")
    big = make_config("densedemo", batch=8192, pool_batches=2)
    big_pool = make_pool(big)
    out["speed"] = {}
    for n in (1, args.shards):
        trainer = LoopbackTrainer(big, big_pool, n, ops_factory=lambda: CupyOps("float32"))
        for i in range(3):
            trainer.step(i)
        before = nvlink_state()
        times = []
        for i in range(args.iterations):
            start = time.perf_counter()
            trainer.step(i)
            times.append((time.perf_counter() - start) * 1000.0)
        after = nvlink_state()
        trainer.close()
        out["speed"][n] = {"median_ms": statistics.median(times), "min_ms": min(times),
                           "max_ms": max(times), "nvlink_before": before,
                           "nvlink_after": after}
        print(f"N={n}: {statistics.median(times):.2f} ms/step ({min(times):.2f}-"
              f"{max(times):.2f}); NVLink before {before}, after {after}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "shard_gpu_check.json").write_text(json.dumps(out, indent=1))
    return 0 if out["agreement"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
