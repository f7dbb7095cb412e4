"""The ``numpy`` and ``cupy-plugin`` paths: one algorithm over an array module ``xp``.

The full training step (dedup, key->row map, gather, MLP forward/backward, segment-sum
of the embedding gradient, dense Adam for the MLP and lazy sparse Adam for the table)
is written once against ``xp``. :class:`NumpyOps` and :class:`~.cupy_ops.CupyOps`
supply the few parts that differ:

* ``KeyMap``: int64 key -> table row, inserting missing keys. NumPy keeps a sorted key
  array; CuPy uses an open-addressing GPU hash table (``atomicCAS`` in a RawKernel).
* ``segment_sum``: the per-unique-key gradient sum. Both sort the lookups by key and
  reduce contiguous runs (no atomics: each DenseDemo key repeats ~8,000 times a batch);
  NumPy uses ``np.add.reduceat``, CuPy one thread block per run.
* ``sparse_adam``: the lazy Adam row update; a fused RawKernel on CuPy.

The NumPy path is the reference the GPU results are checked against. Row order may
differ between the two (GPU inserts race), so initial rows are a function of the key
(:func:`.data.initial_rows`) and results are compared per key.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .adam import keras_adam_alpha
from .config import WorkloadConfig
from .data import BatchPool, check_keys, initial_mlp, initial_rows


class NumpyKeyMap:
    """Key -> row map with insert-on-miss: sorted key array plus the row of each key."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.sorted_keys = np.empty(0, dtype=np.int64)
        self.sorted_rows = np.empty(0, dtype=np.int64)
        self.size = 0

    def lookup_or_insert(self, unique_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``unique_keys`` (sorted, distinct) and the keys that were inserted."""
        pos = np.searchsorted(self.sorted_keys, unique_keys)
        found = pos < self.sorted_keys.size
        found[found] = self.sorted_keys[pos[found]] == unique_keys[found]
        new_keys = unique_keys[~found]
        if new_keys.size:
            if self.size + new_keys.size > self.capacity:
                raise ValueError(f"more distinct keys than table capacity {self.capacity}")
            new_rows = np.arange(self.size, self.size + new_keys.size, dtype=np.int64)
            self.size += new_keys.size
            keys = np.concatenate([self.sorted_keys, new_keys])
            rows = np.concatenate([self.sorted_rows, new_rows])
            order = np.argsort(keys, kind="stable")
            self.sorted_keys, self.sorted_rows = keys[order], rows[order]
            pos = np.searchsorted(self.sorted_keys, unique_keys)
        return self.sorted_rows[pos], new_keys


class NumpyOps:
    """The array-module-specific parts for NumPy."""

    xp = np
    name = "numpy"

    def key_map(self, capacity: int) -> NumpyKeyMap:
        return NumpyKeyMap(capacity)

    def segment_sum(self, values: Any, order: Any, starts: Any) -> Any:
        """Sum ``values[order]`` over the runs beginning at ``starts``."""
        return np.add.reduceat(values[order], starts, axis=0)

    def sparse_adam(
        self, table: Any, m: Any, v: Any, rows: Any, grad: Any, alpha: float, cfg: WorkloadConfig
    ) -> None:
        mr = m[rows]
        vr = v[rows]
        mr += (grad - mr) * (1 - cfg.beta_1)
        vr += (grad * grad - vr) * (1 - cfg.beta_2)
        m[rows] = mr
        v[rows] = vr
        table[rows] -= alpha * mr / (np.sqrt(vr) + cfg.epsilon)

    def sync(self) -> None:
        pass

    def to_numpy(self, a: Any) -> np.ndarray:
        return np.asarray(a)

    def peak_device_memory_bytes(self) -> int | None:
        return None


def dedup(xp: Any, flat_keys: Any) -> tuple[Any, Any, Any, Any]:
    """Sort-based dedup: (unique keys, inverse, sort order, run starts)."""
    order = xp.argsort(flat_keys, kind="stable") if xp is np else xp.argsort(flat_keys)
    sorted_keys = flat_keys[order]
    is_start = xp.empty(sorted_keys.shape, dtype=bool)
    if sorted_keys.size:
        is_start[0] = True
        is_start[1:] = sorted_keys[1:] != sorted_keys[:-1]
    starts = xp.flatnonzero(is_start)
    unique_keys = sorted_keys[starts]
    inverse = xp.empty_like(order)
    inverse[order] = xp.cumsum(is_start) - 1
    return unique_keys, inverse, order, starts


class ArrayTrainer:
    """The full training step on NumPy or CuPy; ``step(i)`` uses pool batch ``i mod n``."""

    def __init__(
        self, cfg: WorkloadConfig, pool: BatchPool, ops: Any = None, mode: str = "full"
    ) -> None:
        self.ops = ops or NumpyOps()
        xp = self.xp = self.ops.xp
        self.cfg, self.mode = cfg, mode
        for keys in pool.keys:
            check_keys(keys, cfg.vocabulary, name="keys")
        dtype = np.dtype(cfg.dtype)
        self.keys = [xp.asarray(k) for k in pool.keys]  # on the device once
        self.labels = [xp.asarray(y) for y in pool.labels]
        probe = np.random.default_rng(cfg.seed + 2).standard_normal(cfg.mlp_input_size)
        self.probe = xp.asarray(probe.astype(dtype))
        self.table = xp.zeros((cfg.vocabulary, cfg.embedding_size), dtype=dtype)
        self.m = xp.zeros_like(self.table)
        self.v = xp.zeros_like(self.table)
        self.key_map = self.ops.key_map(cfg.vocabulary)
        self.layers = [(xp.asarray(w), xp.asarray(b)) for w, b in initial_mlp(cfg)]
        self.layer_m = [(xp.zeros_like(w), xp.zeros_like(b)) for w, b in self.layers]
        self.layer_v = [(xp.zeros_like(w), xp.zeros_like(b)) for w, b in self.layers]
        self.t = 0
        if mode == "embedding":
            self.layers = self.layer_m = self.layer_v = []

    # -- pieces -------------------------------------------------------------------------
    def rows_for(self, unique_keys: Any) -> Any:
        rows, new_keys = self.key_map.lookup_or_insert(unique_keys)
        if int(new_keys.size):
            new_rows = rows[self.xp.searchsorted(unique_keys, new_keys)]
            self.table[new_rows] = initial_rows(new_keys, self.cfg, self.xp)
        return rows

    def forward_backward(self, emb: Any, labels: Any) -> tuple[float, Any, list]:
        """Loss, d(loss)/d(emb) and the MLP gradients for flattened ``emb [B, D]``."""
        xp = self.xp
        batch = emb.shape[0]
        if not self.layers:
            loss = (emb @ self.probe).mean()
            return loss, xp.broadcast_to(self.probe / batch, emb.shape), []
        acts = [emb]
        h = emb
        for w, b in self.layers[:-1]:
            h = xp.maximum(h @ w + b, 0)
            acts.append(h)
        w_out, b_out = self.layers[-1]
        z = h @ w_out + b_out
        # Binary cross-entropy from logits, stable form (as tf.nn.sigmoid_cross_entropy...).
        loss = (xp.maximum(z, 0) - z * labels + xp.log1p(xp.exp(-xp.abs(z)))).mean()
        dz = (1 / (1 + xp.exp(-z)) - labels) / batch
        grads = []
        for i in range(len(self.layers) - 1, -1, -1):
            w, _ = self.layers[i]
            grads.append((acts[i].T @ dz, dz.sum(axis=0)))
            dz = dz @ w.T
            if i > 0:
                dz = dz * (acts[i] > 0)
        grads.reverse()
        return loss, dz, grads

    def _alpha(self) -> float:
        c = self.cfg
        return keras_adam_alpha(c.learning_rate, c.beta_1, c.beta_2, self.t)

    def _dense_adam(self, grads: list) -> None:
        c, alpha = self.cfg, self._alpha()
        for params, ms, vs, gs in zip(self.layers, self.layer_m, self.layer_v, grads, strict=True):
            for p, m, v, g in zip(params, ms, vs, gs, strict=True):
                m += (g - m) * (1 - c.beta_1)
                v += (g * g - v) * (1 - c.beta_2)
                p -= alpha * m / (self.xp.sqrt(v) + c.epsilon)

    # -- public -------------------------------------------------------------------------
    def step(self, i: int) -> float:
        xp, cfg = self.xp, self.cfg
        keys = self.keys[i % len(self.keys)]
        labels = self.labels[i % len(self.labels)]
        batch = keys.shape[0]
        unique_keys, inverse, order, starts = dedup(xp, keys.reshape(-1))
        rows = self.rows_for(unique_keys)
        emb_unique = self.table[rows]  # each unique row gathered once
        emb = emb_unique[inverse].reshape(batch, -1)
        loss, d_emb, grads = self.forward_backward(emb, labels)
        d_emb = xp.ascontiguousarray(d_emb).reshape(-1, cfg.embedding_size)
        g_unique = self.ops.segment_sum(d_emb, order, starts)
        self.t += 1
        self._dense_adam(grads)
        self.ops.sparse_adam(self.table, self.m, self.v, rows, g_unique, self._alpha(), cfg)
        value = float(loss)  # a device sync on CuPy
        self.ops.sync()
        return value

    def embedding_of(self, keys: np.ndarray) -> np.ndarray:
        """Current rows of ``keys`` (each must have been seen)."""
        xp = self.xp
        k = xp.asarray(np.asarray(keys, dtype=np.int64))
        uk, inv, _, _ = dedup(xp, k)
        rows, new = self.key_map.lookup_or_insert(uk)
        if int(new.size):
            raise ValueError("embedding_of: some keys were never trained")
        return self.ops.to_numpy(self.table[rows][inv])

    def peak_device_memory_bytes(self) -> int | None:
        return self.ops.peak_device_memory_bytes()
