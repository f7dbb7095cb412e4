"""Seeded synthetic data and initial weights for the embedding workload.

Everything here works on NumPy arrays and, where it takes an ``xp`` argument, on
CuPy arrays as well (same integer arithmetic, so the same bits on both).

* Keys: ``int64`` arrays of shape ``[batch, fields, hotness]`` drawn from one of
  three distributions. ``densedemo`` reproduces NVIDIA SOK's DenseDemo generator:
  ``key = (V // fields) * field + r mod 81`` with ``r`` random (for the reference
  setting V=8192, 100 fields the stride is 81, so 8,100 distinct keys).
* Labels: a fixed hidden linear function of per-key hidden weights, thresholded at
  the pool's median. A model with an embedding table can learn it, so "loss falls"
  is a meaningful test.
* Initial embedding rows are a hash of the key (not of the row), so a path that
  assigns rows in any order (a hash table filled on the GPU) starts from the same
  values as one that uses the key as the row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import WorkloadConfig

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_SALT_INIT = 0x5EED_0001
_SALT_LABEL = 0x5EED_0002
INIT_SCALE = 0.05


def splitmix64(x: Any, xp: Any = np) -> Any:
    """SplitMix64 finaliser on a ``uint64`` array (wrapping arithmetic, NumPy or CuPy)."""
    z = x.astype(xp.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _unit_uniform(keys: Any, salt: int, width: int, xp: Any = np) -> Any:
    """Uniform [0, 1) values, ``width`` per key, a pure function of (key, salt)."""
    base = keys.astype(xp.uint64).reshape(-1, 1) * np.uint64(width)
    lanes = xp.arange(width, dtype=xp.uint64).reshape(1, -1)
    seeded = (base + lanes) ^ np.uint64(salt)
    with np.errstate(over="ignore"):
        bits = splitmix64(seeded, xp) >> np.uint64(11)
    return bits.astype(xp.float64) * (1.0 / (1 << 53))


def initial_rows(keys: Any, cfg: WorkloadConfig, xp: Any = np, dtype: Any = None) -> Any:
    """Initial embedding rows for ``keys``: uniform in ±INIT_SCALE, seeded by key."""
    salt = _SALT_INIT ^ (cfg.seed * 0x10001)
    u = _unit_uniform(keys, salt, cfg.embedding_size, xp)
    return ((u * 2.0 - 1.0) * INIT_SCALE).astype(dtype or cfg.dtype)


TABLE_CHUNK_ROWS = 1 << 20


def initial_table_chunks(
    cfg: WorkloadConfig, chunk: int = TABLE_CHUNK_ROWS
) -> Iterator[tuple[int, np.ndarray]]:
    """The initial table as ``(first row, rows)`` pieces, so no caller needs it whole."""
    for start in range(0, cfg.vocabulary, chunk):
        stop = min(start + chunk, cfg.vocabulary)
        yield start, initial_rows(np.arange(start, stop, dtype=np.int64), cfg)


def initial_table(cfg: WorkloadConfig, chunk: int = TABLE_CHUNK_ROWS) -> np.ndarray:
    """The full ``[vocabulary, embedding_size]`` table where row ``k`` holds key ``k``."""
    table = np.empty((cfg.vocabulary, cfg.embedding_size), dtype=cfg.dtype)
    for start, rows in initial_table_chunks(cfg, chunk):
        table[start:start + len(rows)] = rows
    return table


def hidden_weights(keys: Any, cfg: WorkloadConfig, xp: Any = np) -> Any:
    """The hidden per-key weight the labels are built from, uniform in [-1, 1)."""
    salt = _SALT_LABEL ^ (cfg.seed * 0x10001)
    return _unit_uniform(keys, salt, 1, xp).reshape(keys.shape) * 2.0 - 1.0


def generate_keys(cfg: WorkloadConfig, rng: np.random.Generator) -> np.ndarray:
    """One batch of keys, ``int64[batch, fields, hotness]``."""
    shape = (cfg.batch, cfg.fields, cfg.hotness)
    vocab = cfg.vocabulary
    if cfg.distribution == "densedemo":
        stride = vocab // cfg.fields
        r = rng.integers(0, 2**31 - 1, size=shape, dtype=np.int64)
        slot = np.arange(cfg.fields, dtype=np.int64).reshape(1, -1, 1)
        return stride * slot + r % min(81, stride)
    if cfg.distribution == "uniform":
        return rng.integers(0, vocab, size=shape, dtype=np.int64)
    # zipf: rank 0 is the most frequent key; ranks past the vocabulary wrap around.
    ranks = rng.zipf(cfg.zipf_exponent, size=shape).astype(np.int64) - 1
    return ranks % vocab


def label_scores(keys: np.ndarray, cfg: WorkloadConfig) -> np.ndarray:
    """The hidden linear score of each sample (before thresholding)."""
    w = hidden_weights(keys, cfg)
    return w.reshape(keys.shape[0], -1).sum(axis=1) / np.sqrt(cfg.keys_per_sample)


@dataclass
class BatchPool:
    """Batches generated up front; the trainers move them to the device once."""

    keys: list[np.ndarray]  # int64[batch, fields, hotness]
    labels: list[np.ndarray]  # dtype[batch, 1], 0.0 or 1.0

    def __len__(self) -> int:
        return len(self.keys)


def make_pool(cfg: WorkloadConfig) -> BatchPool:
    """``cfg.pool_batches`` seeded batches with learnable labels."""
    rng = np.random.default_rng(cfg.seed)
    keys = [generate_keys(cfg, rng) for _ in range(cfg.pool_batches)]
    scores = [label_scores(k, cfg) for k in keys]
    threshold = float(np.median(np.concatenate(scores)))
    labels = [(s > threshold).astype(cfg.dtype).reshape(-1, 1) for s in scores]
    return BatchPool(keys=keys, labels=labels)


def initial_mlp(cfg: WorkloadConfig) -> list[tuple[np.ndarray, np.ndarray]]:
    """Glorot-uniform kernels and zero biases: hidden layers, then a 1-unit output."""
    rng = np.random.default_rng(cfg.seed + 1)
    sizes = [cfg.mlp_input_size] + [cfg.hidden_units] * cfg.hidden_layers + [1]
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        kernel = rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(cfg.dtype)
        layers.append((kernel, np.zeros(fan_out, dtype=cfg.dtype)))
    return layers


def check_keys(keys: Any, vocabulary: int, *, name: str = "ids", xp: Any = np) -> None:
    """Raise a one-line ``ValueError`` for wrong dtype, wrong rank or out-of-vocabulary keys."""
    dtype = getattr(keys, "dtype", None)
    if dtype is None or xp.dtype(dtype).kind not in "iu":
        raise ValueError(f"{name} must be an integer array (int64), got dtype {dtype}")
    if keys.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension, got a scalar")
    if keys.size and (int(keys.min()) < 0 or int(keys.max()) >= vocabulary):
        bad = int(keys.min()) if int(keys.min()) < 0 else int(keys.max())
        raise ValueError(f"{name} contains key {bad} outside the vocabulary [0, {vocabulary})")
