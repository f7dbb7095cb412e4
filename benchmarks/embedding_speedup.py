"""Embedding speed-up benchmark: workload paths side by side on one device.

Each run is a fresh subprocess (so peak memory is per path), and runs are interleaved
A B C A B C ... so drift in machine load hits every path alike. Prints a table of
ms/step (median of the per-run medians, and their min-max range), the speed-up against
``native`` and ``hashtable``, and peak host (and device) memory: the whole process, and
the part above the framework's own runtime.

    python benchmarks/embedding_speedup.py --mode embedding --preset densedemo --batch 1024
    python benchmarks/embedding_speedup.py --mode full --preset densedemo --batch 1024
    python benchmarks/embedding_speedup.py --crossover   # sparse vs dense update crossover
    python benchmarks/embedding_speedup.py --shards 1,2,4  # the sharded table's scaling

``--mode embedding`` times the embedding lookup, its gradient and the sparse update only
(a fixed linear probe replaces the MLP). ``torch`` (when importable) is a comparator:
``torch.nn.Embedding(sparse=True)`` + ``torch.optim.SparseAdam``; it is not a dependency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyterlab_nvdashboard.workload.config import WorkloadConfig, make_config  # noqa: E402

DEFAULT_PATHS = "native,native-dense,hashtable,plugin,torch"


# -- worker (runs inside the subprocess) --------------------------------------------------
class TorchTrainer:
    """Same model with torch.nn.Embedding(sparse=True) + SparseAdam (benchmark only)."""

    def __init__(self, cfg: WorkloadConfig, mode: str, device: str) -> None:
        import numpy as np
        import torch

        from jupyterlab_nvdashboard.workload.data import initial_mlp, initial_table, make_pool

        self.torch = torch
        dev = self.dev = torch.device("cuda" if device == "gpu" else "cpu")
        dtype = getattr(torch, cfg.dtype)
        pool = make_pool(cfg)
        self.keys = [torch.from_numpy(k).to(dev) for k in pool.keys]
        self.labels = [torch.from_numpy(y).to(dev) for y in pool.labels]
        self.emb = torch.nn.Embedding(cfg.vocabulary, cfg.embedding_size, sparse=True)
        with torch.no_grad():
            self.emb.weight.copy_(torch.from_numpy(initial_table(cfg)))
        self.emb = self.emb.to(dev, dtype)
        adam = dict(lr=cfg.learning_rate, betas=(cfg.beta_1, cfg.beta_2), eps=cfg.epsilon)
        self.sparse_opt = torch.optim.SparseAdam(list(self.emb.parameters()), **adam)
        self.mlp = None
        if mode == "full":
            layers: list[Any] = []
            for w, b in initial_mlp(cfg):
                lin = torch.nn.Linear(w.shape[0], w.shape[1])
                with torch.no_grad():
                    lin.weight.copy_(torch.from_numpy(w.T.copy()))
                    lin.bias.copy_(torch.from_numpy(b))
                layers += [lin, torch.nn.ReLU()]
            self.mlp = torch.nn.Sequential(*layers[:-1]).to(dev, dtype)
            self.opt = torch.optim.Adam(self.mlp.parameters(), **adam)
        probe = np.random.default_rng(cfg.seed + 2).standard_normal(cfg.mlp_input_size)
        self.probe = torch.from_numpy(probe.astype(cfg.dtype)).to(dev)

    def step(self, i: int) -> float:
        torch = self.torch
        keys, labels = self.keys[i % len(self.keys)], self.labels[i % len(self.labels)]
        x = self.emb(keys).reshape(keys.shape[0], -1)
        if self.mlp is None:
            loss = (x @ self.probe).mean()
        else:
            logits = self.mlp(x)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
            self.opt.zero_grad()
        self.sparse_opt.zero_grad()
        loss.backward()
        self.sparse_opt.step()
        if self.mlp is not None:
            self.opt.step()
        if self.dev.type == "cuda":
            torch.cuda.synchronize()
        return float(loss)

    def peak_device_memory_bytes(self) -> int | None:
        if self.dev.type != "cuda":
            return None
        return int(self.torch.cuda.max_memory_allocated())


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Build one path, warm it up, time ``iterations`` steps; return times and memory."""
    from jupyterlab_nvdashboard.workload.runner import make_trainer, peak_host_memory_bytes

    cfg = WorkloadConfig(**spec["config"])
    kwargs = {}
    if spec.get("dense_update_fraction") is not None:
        kwargs["dense_update_fraction"] = spec["dense_update_fraction"]
    if spec.get("shards") is not None:
        kwargs.update(shards=spec["shards"], backend=spec.get("backend", "auto"))
    runtime_rss = _started_runtime_rss(spec["path"])
    if spec["path"] == "torch":
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        trainer: Any = TorchTrainer(cfg, spec["mode"], spec["device"])
    else:
        trainer = make_trainer(
            spec["path"], cfg, device=spec["device"], mode=spec["mode"], **kwargs
        )
    for i in range(spec["warmup"]):
        trainer.step(i)
    times, exchange_ms, moved = [], [], []
    for i in range(spec["iterations"]):
        start = time.perf_counter()
        trainer.step(spec["warmup"] + i)
        times.append((time.perf_counter() - start) * 1000.0)
        if spec.get("shards") is not None:
            exchange_ms.append(trainer.step_exchange_ms())
            moved.append(trainer.step_bytes())
    sharding = None
    if spec.get("shards") is not None:
        sharding = {"backend": getattr(trainer, "backend", "loopback"),
                    "exchange_ms": exchange_ms, "bytes": moved}
        trainer.close()
    return {
        "sharding": sharding,
        "times_ms": times,
        "peak_host_memory_bytes": peak_host_memory_bytes(),
        "runtime_host_memory_bytes": runtime_rss,
        "peak_device_memory_bytes": trainer.peak_device_memory_bytes(),
        "tf32": _tf32_of(trainer, spec["path"]),
    }


def _tf32_of(trainer: Any, path: str) -> bool | None:
    """Whether the path's float32 matmuls may use TF32, as it ran."""
    if path == "torch":
        import torch

        return bool(torch.backends.cuda.matmul.allow_tf32)
    return getattr(trainer, "tf32", None)


def _started_runtime_rss(path: str) -> int:
    """Resident memory once the path's framework is imported and has run one op.

    Every path of a framework pays this (about 530 MiB for TensorFlow here); the peak
    minus this is what the path itself holds: its tables, optimizer state and temporaries.
    """
    import psutil

    from jupyterlab_nvdashboard.workload.tf_paths import TF_PATHS

    if path == "torch":
        import torch

        torch.ones(1).add_(1)
    elif path in TF_PATHS:
        from jupyterlab_nvdashboard.workload._lazy import import_tensorflow

        tf = import_tensorflow()
        tf.constant(1.0) + 1.0
    return int(psutil.Process().memory_info().rss)


# -- driver -------------------------------------------------------------------------------
def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    cmd = [sys.executable, __file__, "--worker", json.dumps(spec)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"{spec['path']} failed: {tail[0]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def benchmark(
    paths: list[str],
    cfg: WorkloadConfig,
    mode: str,
    device: str,
    iterations: int,
    warmup: int,
    repeats: int,
    **extra: Any,
) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {p: {"runs": []} for p in paths}
    for r in range(repeats):
        for path in paths:  # interleaved: A B C A B C ...
            spec = dict(
                path=path,
                config=cfg.to_dict(),
                mode=mode,
                device=device,
                iterations=iterations,
                warmup=warmup,
                **extra,
            )
            out = run_one(spec)
            results[path]["runs"].append(out)
            med = statistics.median(out["times_ms"])
            print(f"  run {r + 1}/{repeats} {path:13s} {med:9.2f} ms/step", file=sys.stderr)
    for res in results.values():
        medians = [statistics.median(run["times_ms"]) for run in res["runs"]]
        res["median_ms"] = statistics.median(medians)
        res["min_ms"], res["max_ms"] = min(medians), max(medians)
        res["peak_host_memory_bytes"] = max(run["peak_host_memory_bytes"] for run in res["runs"])
        res["path_host_memory_bytes"] = max(
            run["peak_host_memory_bytes"] - run["runtime_host_memory_bytes"] for run in res["runs"])
        dev = [run["peak_device_memory_bytes"] for run in res["runs"]]
        res["peak_device_memory_bytes"] = None if None in dev else max(dev)
        res["tf32"] = res["runs"][-1].get("tf32")
    return results


def format_table(results: dict[str, dict[str, Any]]) -> str:
    def ratio(base: str, path: str) -> str:
        if base not in results:
            return "-"
        return f"{results[base]['median_ms'] / results[path]['median_ms']:.2f}x"

    lines = [
        "| path | ms/step median | range (min-max) | vs native | vs hashtable | peak host MiB "
        "| of which the path MiB | peak device MiB | TF32 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for path, res in results.items():
        dev = res["peak_device_memory_bytes"]
        lines.append(
            f"| {path} | {res['median_ms']:.2f} | {res['min_ms']:.2f}-{res['max_ms']:.2f} "
            f"| {ratio('native', path)} | {ratio('hashtable', path)} "
            f"| {res['peak_host_memory_bytes'] / 2**20:.0f} "
            f"| {res['path_host_memory_bytes'] / 2**20:.0f} "
            f"| {'-' if dev is None else f'{dev / 2**20:.0f}'} "
            f"| {'-' if res.get('tf32') is None else ('on' if res['tf32'] else 'off')} |"
        )
    return "\n".join(lines)


def crossover(device: str, iterations: int, warmup: int, repeats: int) -> str:
    """Plugin sparse vs masked-dense update at growing touched fractions of the table."""
    lines = [
        "| vocabulary | touched rows | sparse ms | dense ms | faster |",
        "|---:|---:|---:|---:|---|",
    ]
    for vocab in (8192, 262_144, 1_048_576, 4_194_304):
        cfg = make_config("densedemo", batch=1024, vocabulary=vocab, distribution="uniform")
        touched = 1 - (1 - 1 / vocab) ** (cfg.batch * cfg.keys_per_sample)
        ms = {}
        for name, frac in (("sparse", 1.0), ("dense", 0.0)):
            res = benchmark(
                ["plugin"],
                cfg,
                "embedding",
                device,
                iterations,
                warmup,
                repeats,
                dense_update_fraction=frac,
            )
            ms[name] = res["plugin"]["median_ms"]
        best = "sparse" if ms["sparse"] <= ms["dense"] else "dense"
        lines.append(
            f"| {vocab} | {touched:.0%} | {ms['sparse']:.2f} | {ms['dense']:.2f} | {best} |"
        )
    return "\n".join(lines)


# SOK's DenseDemo (documents/source/performance/dense_demo.md): 25.90 ms/step on 1 A100 at
# batch 8192, 45.36 ms on 8 at 65536: 4.57x the throughput, 57% weak-scaling efficiency.
# NVIDIA's blog: 7.9x on 1 A100, 23.6x on 4: 2.99x from 1 to 4, about 75%.
SOK_WEAK_1_TO_8 = 25.90 / 45.36
BLOG_1_TO_4 = 23.6 / 7.9 / 4


def shard_scaling(counts: list[int], cfg: WorkloadConfig, mode: str, iterations: int,
                  warmup: int, repeats: int, backend: str) -> tuple[str, dict[str, Any]]:
    """Weak scaling (each shard keeps ``cfg.batch`` samples) and strong scaling (the global
    batch stays ``cfg.batch``) of the sharded numpy path, runs interleaved over N."""
    import dataclasses

    results: dict[str, Any] = {}
    cases = [("weak", n, cfg.batch * n) for n in counts] + \
            [("strong", n, cfg.batch) for n in counts if n > 1]
    for r in range(repeats):
        for scaling, n, batch in cases:
            key = f"{scaling} {n}"
            spec = dict(path="numpy", config=dataclasses.replace(cfg, batch=batch).to_dict(),
                        mode=mode, device="cpu", iterations=iterations, warmup=warmup,
                        shards=n, backend=backend)
            out = run_one(spec)
            res = results.setdefault(key, {"scaling": scaling, "shards": n, "batch": batch,
                                           "runs": []})
            res["runs"].append(out)
            print(f"  run {r + 1}/{repeats} {key:9s} batch {batch:6d} "
                  f"{statistics.median(out['times_ms']):9.2f} ms/step", file=sys.stderr)
    for res in results.values():
        medians = [statistics.median(run["times_ms"]) for run in res["runs"]]
        res["median_ms"] = statistics.median(medians)
        res["min_ms"], res["max_ms"] = min(medians), max(medians)
        last = res["runs"][-1]["sharding"]
        res["backend"] = last["backend"]
        res["bytes"] = {k: statistics.median(step[k] for run in res["runs"]
                                             for step in run["sharding"]["bytes"])
                        for k in last["bytes"][0]}
        shares = [ms / t for run in res["runs"]
                  for ms, t in zip(run["sharding"]["exchange_ms"], run["times_ms"], strict=True)]
        res["exchange_share"] = statistics.median(shares)
    base = results.get("weak 1")
    for res in results.values():
        if base is None:
            res["efficiency"] = None
        elif res["scaling"] == "weak":  # throughput(N) / (N x throughput(1))
            res["efficiency"] = base["median_ms"] / res["median_ms"]
        else:  # the same batch on N shards: time(1) / (N x time(N))
            res["efficiency"] = base["median_ms"] / (res["shards"] * res["median_ms"])
    lines = [
        "| scaling | shards | global batch | backend | ms/step median | range (min-max) "
        "| samples/s | exchange MB/step (keys / vectors / grads / all-reduce) "
        "| time in collectives | efficiency vs 1 shard |",
        "|---|---:|---:|---|---:|---:|---:|---|---:|---:|",
    ]
    for res in results.values():
        b = res["bytes"]
        eff = "-" if res["efficiency"] is None else f"{res['efficiency']:.0%}"
        lines.append(
            f"| {res['scaling']} | {res['shards']} | {res['batch']} | {res['backend']} "
            f"| {res['median_ms']:.2f} | {res['min_ms']:.2f}-{res['max_ms']:.2f} "
            f"| {res['batch'] / res['median_ms'] * 1000:.0f} "
            f"| {sum(b.values()) / 1e6:.3f} ({b['keys'] / 1e6:.3f} / {b['vectors'] / 1e6:.3f}"
            f" / {b['gradients'] / 1e6:.3f} / {b['all_reduce'] / 1e6:.3f}) "
            f"| {res['exchange_share']:.0%} | {eff} |")
    lines.append(f"\nReference: SOK DenseDemo 1->8 A100 weak scaling {SOK_WEAK_1_TO_8:.0%}; "
                 f"NVIDIA's blog 1->4 A100 {BLOG_1_TO_4:.0%}.")
    return "\n".join(lines), results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--paths", default=DEFAULT_PATHS)
    p.add_argument("--mode", choices=("full", "embedding"), default="embedding")
    p.add_argument("--preset", default="densedemo")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=None)
    p.add_argument("--embedding-size", type=int, default=None)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pool-batches", type=int, default=2)
    p.add_argument("--crossover", action="store_true")
    p.add_argument("--shards", metavar="N,N,...", default=None,
                   help="the sharded numpy path at these shard counts: weak and strong "
                        "scaling, with --batch samples per shard (weak) or in all (strong)")
    p.add_argument("--backend", default="gloo",
                   help="the shards' exchange (with --shards; default gloo, for N = 1 too)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if args.crossover:
        print(crossover(args.device, args.iterations, args.warmup, args.repeats))
        return 0
    cfg = make_config(
        args.preset,
        batch=args.batch,
        vocabulary=args.vocab,
        embedding_size=args.embedding_size,
        pool_batches=args.pool_batches,
    )
    if args.shards:
        def refuse(message: str) -> int:
            print(f"embedding_speedup.py: error: {message}", file=sys.stderr)
            return 2

        try:
            counts = sorted({int(x) for x in args.shards.split(",") if x})
        except ValueError:
            return refuse(f"--shards takes whole numbers separated by commas, got "
                          f"{args.shards!r}")
        if not counts or counts[0] != 1:
            return refuse("--shards must include 1 (the baseline every efficiency is against)")
        for n in counts:
            if cfg.batch % n:
                return refuse(f"--batch {cfg.batch} must be a multiple of every shard count "
                              f"({n})")
        print(f"sharded numpy path: mode={args.mode} preset={args.preset} batch={cfg.batch} "
              f"vocabulary={cfg.vocabulary} dtype={cfg.dtype} iterations={args.iterations} x "
              f"{args.repeats} interleaved runs, cpus={os.cpu_count()}", file=sys.stderr)
        table, results = shard_scaling(counts, cfg, args.mode, args.iterations, args.warmup,
                                       args.repeats, args.backend)
        print(table)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return 0
    paths = [x for x in args.paths.split(",") if x]
    if "torch" in paths and not torch_available():
        print("torch not importable: skipping the torch comparator", file=sys.stderr)
        paths.remove("torch")
    print(
        f"mode={args.mode} preset={args.preset} batch={cfg.batch} vocabulary={cfg.vocabulary} "
        f"embedding={cfg.embedding_size} device={args.device} iterations={args.iterations} "
        f"x {args.repeats} interleaved runs",
        file=sys.stderr,
    )
    results = benchmark(
        paths, cfg, args.mode, args.device, args.iterations, args.warmup, args.repeats
    )
    print(format_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
