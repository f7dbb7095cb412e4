"""Workload configuration: presets, overrides and validation.

All settings of the bundled embedding workload live in one frozen dataclass,
:class:`WorkloadConfig`. Presets give the starting point and every field can be
overridden; :func:`make_config` validates the result and raises a one-line
``ValueError`` on bad input. The runs directory is resolved here too, so no other
module reads the environment.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Re-exported: the workload's callers take the runs directory from here.
from ..paths import RUNS_DIR_ENV, default_runs_dir, expand_path  # noqa: F401

#: Training paths the CLI and the dashboard may launch.
PATHS: tuple[str, ...] = ("native", "hashtable", "plugin", "numpy", "cupy-plugin")
#: Paths that exist only for benchmarks (comparators), never launched by the dashboard.
BENCHMARK_PATHS: tuple[str, ...] = ("native-dense",)
DISTRIBUTIONS: tuple[str, ...] = ("densedemo", "uniform", "zipf")
DEVICES: tuple[str, ...] = ("cpu", "gpu")
#: The sharded path (``sharded.py``): where rows live, and the shards' exchange.
SHARDED_PATHS: tuple[str, ...] = ("numpy", "cupy-plugin")
PLACEMENTS: tuple[str, ...] = ("key", "field")
BACKENDS: tuple[str, ...] = ("auto", "loopback", "gloo", "nccl")
MAX_SHARDS = 64
#: Set by the dashboard's launcher: the GPU (``<row index>:<uuid>``) it pinned a run to.
RUN_GPU_ENV = "NVDASHBOARD_RUN_GPU"


@dataclass(frozen=True)
class WorkloadConfig:
    """One workload: data shape, model shape, optimizer and data pool."""

    fields: int = 100  # feature fields (SOK "slots")
    hotness: int = 10  # lookups per field per sample
    vocabulary: int = 8192  # rows in the embedding table; keys lie in [0, vocabulary)
    embedding_size: int = 4
    hidden_layers: int = 6
    hidden_units: int = 1024
    batch: int = 8192
    learning_rate: float = 1e-3
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7
    distribution: str = "densedemo"
    zipf_exponent: float = 1.2
    seed: int = 0
    pool_batches: int = 4  # batches generated up front and placed on the device once
    dtype: str = "float32"
    # TF32 matmuls for float32 (TensorFlow's default on Ampere and later). The GPU paths
    # set it alike so that their times compare; each reports the state it ran with.
    tf32: bool = True
    # Milliseconds each timed step waits on a slow input stage before it trains: makes a run
    # input-bound on purpose, so the diagnosis can be seen to say so. 0: no wait.
    input_delay_ms: int = 0

    @property
    def keys_per_sample(self) -> int:
        return self.fields * self.hotness

    @property
    def mlp_input_size(self) -> int:
        return self.fields * self.hotness * self.embedding_size

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PRESETS: dict[str, WorkloadConfig] = {
    # NVIDIA SOK DenseDemo: 100 fields x 10 lookups, vocabulary 8192, embedding 4.
    "densedemo": WorkloadConfig(),
    "large-vocab": WorkloadConfig(vocabulary=20_000_000, distribution="uniform"),
    # Tiny and fast: well under a second per step on a 2-core CPU, learnable in ~50 steps.
    "ci": WorkloadConfig(
        fields=8,
        hotness=2,
        vocabulary=512,
        embedding_size=4,
        hidden_layers=2,
        hidden_units=32,
        batch=256,
        learning_rate=1e-2,
        pool_batches=4,
    ),
}

_RANGES: dict[str, tuple[float, float]] = {
    "fields": (1, 10_000),
    "hotness": (1, 10_000),
    "vocabulary": (1, 2**40),
    "embedding_size": (1, 4096),
    "hidden_layers": (0, 64),
    "hidden_units": (1, 65_536),
    "batch": (1, 1 << 20),
    "learning_rate": (0.0, 10.0),
    "beta_1": (0.0, 1.0),
    "beta_2": (0.0, 1.0),
    "epsilon": (0.0, 1.0),
    "zipf_exponent": (1.0001, 10.0),
    "seed": (0, 2**32 - 1),
    "pool_batches": (1, 1024),
    "input_delay_ms": (0, 10_000),
}


def make_config(preset: str = "densedemo", **overrides: Any) -> WorkloadConfig:
    """Return the preset with ``overrides`` applied (``None`` values are ignored)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    names = {f.name for f in dataclasses.fields(WorkloadConfig)}
    changes = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise ValueError(f"unknown workload setting(s): {', '.join(unknown)}")
    cfg = dataclasses.replace(PRESETS[preset], **changes)
    validate(cfg)
    return cfg


def validate(cfg: WorkloadConfig) -> None:
    """Raise a one-line ``ValueError`` when a field is out of range."""
    for name, (low, high) in _RANGES.items():
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name} must be a number, got {value!r}")
        if not low <= value <= high:
            raise ValueError(f"{name}={value} is out of range [{low}, {high}]")
    if cfg.distribution not in DISTRIBUTIONS:
        raise ValueError(
            f"unknown distribution {cfg.distribution!r}; choose one of {', '.join(DISTRIBUTIONS)}"
        )
    if not isinstance(cfg.tf32, bool):
        raise ValueError(f"tf32 must be true or false, got {cfg.tf32!r}")
    if cfg.dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be float32 or float64, got {cfg.dtype!r}")
    if cfg.distribution == "densedemo" and cfg.vocabulary < cfg.fields:
        raise ValueError("the densedemo distribution needs vocabulary >= fields")


def pinned_gpu(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """``{"uuid", "index"}`` of the GPU the dashboard pinned this run to, if it did."""
    env = os.environ if environ is None else environ
    index, _, uuid = env.get(RUN_GPU_ENV, "").partition(":")
    if not index.isdigit() or not uuid:
        return None
    return {"uuid": uuid, "index": int(index)}


def cuda_visible_devices(environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    return env.get("CUDA_VISIBLE_DEVICES")


def estimated_memory_bytes(cfg: WorkloadConfig) -> int:
    """Roughly what a run of ``cfg`` holds on its device: the table and its two Adam moments,
    the MLP with its moments, and the pre-generated key pool (int64 keys and labels)."""
    itemsize = 8 if cfg.dtype == "float64" else 4
    table = cfg.vocabulary * cfg.embedding_size * itemsize * 3
    widths = [cfg.mlp_input_size] + [cfg.hidden_units] * cfg.hidden_layers + [1]
    mlp = sum(a * b + b for a, b in zip(widths, widths[1:], strict=False)) * itemsize * 3
    pool = cfg.pool_batches * cfg.batch * (cfg.keys_per_sample * 8 + itemsize)
    activations = cfg.batch * sum(widths) * itemsize * 2
    return table + mlp + pool + activations

