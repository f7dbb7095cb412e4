"""The ``numpy`` and ``cupy-plugin`` paths: one training step over an array module ``xp``.

The step (embedding gather, MLP forward and backward, the embedding gradient summed per
row over sorted runs, Adam for the MLP and lazy Adam for the touched rows) is written
once in :class:`ArrayTrainer`. :class:`NumpyOps` and :class:`~.cupy_ops.CupyOps` supply
the few fused pieces; NumPy is the reference the GPU results are checked against.

Built for the GPU:

* **Dense vocabulary, no key map.** The workload's keys are ``[0, V)`` (``check_keys``),
  so a key is its row.
* **int32 indices** whenever the vocabulary and the lookups of a batch fit
  (:func:`index_dtype`).
* **Sorted runs without a comparison sort.** The vocabulary is dense, so the lookups are
  grouped by key with a counting sort: ``counts`` per key (counted during the gather),
  ``ends = cumsum(counts)``, and ``order`` listing the lookups key by key; the run of
  key ``k`` is ``order[ends[k-1]:ends[k]]``. No step needs the number of distinct keys
  on the host, so nothing waits for the GPU.
* **Fused updates.** The per-row gradient sum and lazy Adam are one pass over the runs
  (one warp per run on the GPU); the MLP's weights, moments and gradients live in one
  flat buffer each, so its Adam is one pass too.
* **No host sync inside a step.** :meth:`ArrayTrainer.launch` only queues work; the loss
  is computed and read by :meth:`ArrayTrainer.read_loss`, which a caller runs every N
  steps. :meth:`ArrayTrainer.step` (launch + read) keeps the runner's interface.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .adam import AdamCoefficients, adam_coefficients, adam_update
from .config import WorkloadConfig
from .data import BatchPool, check_keys, initial_mlp, initial_table_chunks

INT32_MAX = 2**31 - 1


def index_dtype(cfg: WorkloadConfig) -> np.dtype:
    """int32 when every row and every lookup position of a batch fits, else int64."""
    lookups = cfg.batch * cfg.keys_per_sample
    fits = cfg.vocabulary <= INT32_MAX and lookups <= INT32_MAX
    return np.dtype(np.int32 if fits else np.int64)


def run_starts(xp: Any, ends: Any) -> Any:
    """First position in ``order`` of each key's run: ``ends`` shifted right by one."""
    starts = xp.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1]
    return starts


class FlatParameters:
    """The MLP's kernels and biases as views into one contiguous buffer.

    The weights, both Adam moments and the gradients share this layout, so a single
    elementwise pass updates every tensor of the MLP.
    """

    def __init__(self, xp: Any, layers: list[tuple[np.ndarray, np.ndarray]], dtype: Any) -> None:
        self.shapes = [(w.shape, b.shape) for w, b in layers]
        self.size = sum(w.size + b.size for w, b in layers)
        self.weights = xp.zeros(self.size, dtype=dtype)
        self.m = xp.zeros_like(self.weights)
        self.v = xp.zeros_like(self.weights)
        self.grads = xp.zeros_like(self.weights)
        self.layers = self.views(self.weights)
        self.grad_layers = self.views(self.grads)
        for (w_view, b_view), (w, b) in zip(self.layers, layers, strict=True):
            w_view[...] = xp.asarray(w)
            b_view[...] = xp.asarray(b)

    def views(self, flat: Any) -> list[tuple[Any, Any]]:
        """(kernel, bias) views of ``flat`` for each layer, in order."""
        out, at = [], 0
        for w_shape, b_shape in self.shapes:
            w_size, b_size = int(np.prod(w_shape)), int(np.prod(b_shape))
            out.append((flat[at : at + w_size].reshape(w_shape),
                        flat[at + w_size : at + w_size + b_size].reshape(b_shape)))
            at += w_size + b_size
        return out


class NumpyOps:
    """The fused pieces, on NumPy: the reference the CUDA kernels are checked against."""

    xp = np
    name = "numpy"

    def __init__(self, dtype: str = "float64") -> None:
        self.dtype = dtype

    def use_tf32(self, enabled: bool) -> bool:
        """NumPy has no TF32: always off."""
        return False

    def gather_count(self, table: Any, keys: Any, counts: Any, out: Any) -> None:
        """``out[j] = table[keys[j]]`` and ``counts[k] += (number of lookups of k)``."""
        np.take(table, keys, axis=0, out=out)
        counts += np.bincount(keys, minlength=counts.size).astype(counts.dtype)

    def order_by_key(self, keys: Any, counts: Any, ends: Any) -> Any:
        """Lookup positions grouped by key (run of ``k`` at ``ends[k-1]:ends[k]``), and
        ``counts`` back to zero for the next step, as the GPU scatter leaves it."""
        counts[...] = 0
        return np.argsort(keys, kind="stable").astype(keys.dtype)

    def segment_sum_adam(
        self, table: Any, m: Any, v: Any, grads: Any, order: Any, ends: Any,
        c: AdamCoefficients,
    ) -> None:
        """Sum ``grads [N, E]`` over each non-empty run and apply lazy Adam to its row."""
        starts = run_starts(np, ends)
        rows = np.flatnonzero(ends > starts)
        if not rows.size:
            return
        g = np.add.reduceat(grads[order], starts[rows], axis=0)
        new_m, new_v, step = adam_update(m[rows], v[rows], g, c, np.sqrt)
        m[rows], v[rows] = new_m, new_v
        table[rows] -= step

    def adam_flat(self, p: FlatParameters, c: AdamCoefficients) -> None:
        p.m[...], p.v[...], step = adam_update(p.m, p.v, p.grads, c, np.sqrt)
        p.weights -= step

    def matmul_into(self, a: Any, b: Any, out: Any) -> None:
        """``out[...] = a @ b`` (NumPy's ``matmul(out=)`` skips BLAS: 60x slower here)."""
        out[...] = a @ b

    def bias_relu(self, h: Any, b: Any) -> None:
        h += b
        np.maximum(h, 0, out=h)

    def bias(self, h: Any, b: Any) -> None:
        h += b

    def relu_grad(self, activation: Any, dz: Any) -> None:
        """``dz`` zeroed where the ReLU was inactive."""
        dz *= activation > 0

    def bce_grad(self, z: Any, labels: Any, out: Any) -> None:
        """d(mean binary cross-entropy from logits)/dz."""
        out[...] = (1 / (1 + np.exp(-z)) - labels) / z.shape[0]

    def to_numpy(self, a: Any) -> np.ndarray:
        return np.asarray(a)

    def synchronize(self) -> None:
        pass

    def peak_device_memory_bytes(self) -> int | None:
        return None


def mlp_forward_backward(
    xp: Any, ops: Any, mlp: FlatParameters, x: Any, labels: Any
) -> tuple[Any, Any]:
    """Logits and d(loss)/dx for ``x [B, D]``; the MLP gradients go to ``mlp.grads``.

    The loss is ``ops.bce_grad``'s: the mean over the rows of ``x``.
    """
    layers = mlp.layers
    acts = [x]
    for w, b in layers[:-1]:
        h = acts[-1] @ w
        ops.bias_relu(h, b)
        acts.append(h)
    w_out, b_out = layers[-1]
    z = acts[-1] @ w_out
    ops.bias(z, b_out)
    dz = xp.empty_like(z)
    ops.bce_grad(z, labels, dz)
    for i in range(len(layers) - 1, -1, -1):
        (w, _), (gw, gb) = layers[i], mlp.grad_layers[i]
        ops.matmul_into(acts[i].T, dz, gw)
        xp.sum(dz, axis=0, out=gb)
        dz = dz @ w.T
        if i > 0:
            ops.relu_grad(acts[i], dz)
    return z, dz


def step_losses(xp: Any, a: Any, labels: Any, probe: Any) -> Any:
    """Per-sample losses of a step: binary cross-entropy from the logits ``a`` (stable
    form), or, with ``labels`` None (embedding mode), the fixed linear probe of ``a``."""
    if labels is None:
        return a @ probe
    return xp.maximum(a, 0) - a * labels + xp.log1p(xp.exp(-xp.abs(a)))


class ArrayTrainer:
    """The full training step on NumPy or CuPy; ``step(i)`` uses pool batch ``i mod n``."""

    def __init__(
        self, cfg: WorkloadConfig, pool: BatchPool, ops: Any = None, mode: str = "full"
    ) -> None:
        self.ops = ops or NumpyOps(cfg.dtype)
        xp = self.xp = self.ops.xp
        self.cfg, self.mode = cfg, mode
        for keys in pool.keys:
            check_keys(keys, cfg.vocabulary, name="keys")
        dtype = self.dtype = np.dtype(cfg.dtype)
        self.index_dtype = index_dtype(cfg)
        # The pool is placed on the device once, flat, as the index type.
        self.keys = [xp.asarray(k.reshape(-1).astype(self.index_dtype)) for k in pool.keys]
        self.labels = [xp.asarray(y) for y in pool.labels]
        self.table = xp.empty((cfg.vocabulary, cfg.embedding_size), dtype=dtype)
        for start, rows in initial_table_chunks(cfg):
            self.table[start : start + len(rows)] = xp.asarray(rows)
        self.m = xp.zeros_like(self.table)
        self.v = xp.zeros_like(self.table)
        # Zero between steps: the gather counts up, the ordering counts back down.
        self.counts = xp.zeros(cfg.vocabulary, dtype=self.index_dtype)
        self.mlp = FlatParameters(xp, initial_mlp(cfg), dtype) if mode == "full" else None
        probe = np.random.default_rng(cfg.seed + 2).standard_normal(cfg.mlp_input_size)
        self.probe = xp.asarray(probe.astype(dtype))
        # With the fixed linear probe the embedding gradient is the same every step.
        self.probe_grad = None
        if self.mlp is None:
            self.probe_grad = xp.ascontiguousarray(
                xp.broadcast_to(self.probe / cfg.batch, (cfg.batch, cfg.mlp_input_size))
            ).reshape(-1, cfg.embedding_size)
        #: Whether float32 matmuls run with TF32, as set from ``cfg.tf32`` (reported).
        self.tf32 = self.ops.use_tf32(cfg.tf32 and dtype == np.float32)
        self.t = 0
        self._last: tuple[Any, Any] | None = None  # what read_loss needs of the last step

    # -- the step ---------------------------------------------------------------------
    def _mlp_forward_backward(self, x: Any, labels: Any) -> tuple[Any, Any]:
        return mlp_forward_backward(self.xp, self.ops, self.mlp, x, labels)

    def launch(self, i: int) -> None:
        """Queue one training step on pool batch ``i``; nothing waits for the device."""
        xp, ops, cfg = self.xp, self.ops, self.cfg
        keys = self.keys[i % len(self.keys)]
        labels = self.labels[i % len(self.labels)]
        x = xp.empty((keys.size, cfg.embedding_size), dtype=self.dtype)
        ops.gather_count(self.table, keys, self.counts, x)
        ends = xp.cumsum(self.counts, dtype=self.index_dtype)
        order = ops.order_by_key(keys, self.counts, ends)
        x = x.reshape(cfg.batch, -1)
        if self.mlp is None:
            grads, self._last = self.probe_grad, (x, None)
        else:
            z, d_x = self._mlp_forward_backward(x, labels)
            grads, self._last = d_x.reshape(-1, cfg.embedding_size), (z, labels)
        self.t += 1
        c = adam_coefficients(cfg.learning_rate, cfg.beta_1, cfg.beta_2, cfg.epsilon, self.t)
        if self.mlp is not None:
            ops.adam_flat(self.mlp, c)
        ops.segment_sum_adam(self.table, self.m, self.v, grads, order, ends, c)

    def read_loss(self) -> float:
        """The loss of the last step launched (computed now; waits for the device)."""
        xp = self.xp
        if self._last is None:
            raise RuntimeError("no step has been launched")
        a, labels = self._last
        return float(step_losses(xp, a, labels, self.probe).mean())

    def step(self, i: int) -> float:
        """One training step on pool batch ``i``; returns its loss (a device sync)."""
        self.launch(i)
        return self.read_loss()

    def embedding_of(self, keys: np.ndarray) -> np.ndarray:
        """Current rows of ``keys``."""
        rows = self.xp.asarray(np.asarray(keys, dtype=np.int64))
        return self.ops.to_numpy(self.table[rows])

    def peak_device_memory_bytes(self) -> int | None:
        return self.ops.peak_device_memory_bytes()
