"""The project's optimized TensorFlow embedding: dedup, gather once, lazy sparse Adam.

``embedding_lookup(params, ids)`` is a drop-in for ``tf.nn.embedding_lookup`` where
``params`` is a :class:`SparseEmbedding`. Per batch it

1. deduplicates the keys with ``tf.unique`` (8M lookups of DenseDemo touch ~8k rows),
2. maps each unique key to a row: the key itself for a dense vocabulary ``[0, V)``, or
   ``tf.searchsorted`` into a sorted ``int64`` key array for arbitrary keys. Both are
   plain tensor ops that run on the GPU; no CPU-only hash table is involved,
3. gathers each unique row once and expands to the lookups with a custom gradient that
   aggregates the incoming gradient per unique row (``tf.math.unsorted_segment_sum``),
   so the table's gradient is an ``IndexedSlices`` with *unique* indices.

:class:`SparseAdam` then updates only the touched rows ("lazy Adam"). Semantics: rows
absent from a batch keep their first and second moments unchanged (they are *not*
decayed, unlike dense Adam where every moment decays every step), and the bias
correction uses the global step. On rows touched every step lazy and dense Adam agree
exactly. When a batch touches more than ``dense_update_fraction`` of the table the same
update is computed densely over the whole table with a mask (identical results, no
gather/scatter); the crossover was measured with ``benchmarks/embedding_speedup.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._lazy import import_tensorflow

#: Above this fraction of touched rows the masked dense update is used (measured crossover;
#: see benchmarks/README.md).
DENSE_UPDATE_FRACTION = 0.8


class SparseEmbedding:
    """An embedding table with lazy-Adam slots, addressed by int64 keys.

    ``keys=None``: the vocabulary is ``[0, initial.shape[0])`` and a key is its row.
    ``keys=array``: arbitrary distinct int64 keys; row ``i`` belongs to ``sorted(keys)[i]``.
    """

    def __init__(
        self,
        initial: Any,
        keys: np.ndarray | None = None,
        name: str = "sparse_embedding",
        lookups_per_batch: int | None = None,
    ) -> None:
        """``initial``: the ``[rows, dim]`` table as an array, or a ``tf.Variable`` to
        train in place (no copy; only with ``keys=None``)."""
        tf = import_tensorflow()
        self.sorted_keys = None
        if isinstance(initial, tf.Variable):
            if keys is not None:
                raise ValueError("keys need the initial table as an array, to sort its rows")
            table = initial
        else:
            initial = np.asarray(initial)
            if keys is not None and initial.ndim == 2:
                initial = initial[self._sort_keys(tf, keys, initial.shape[0])]
            table = tf.Variable(initial, name=name, trainable=True)
        if len(table.shape) != 2:
            raise ValueError(f"initial table must be 2-D [rows, dim], got shape {table.shape}")
        self.vocabulary, self.dim = (int(s) for s in table.shape)
        # A batch with at least as many lookups as the table has rows touches most of it
        # (DenseDemo: 1M lookups, 8,192 rows): skip the dedup, sum a dense gradient.
        small = lookups_per_batch is not None and self.vocabulary <= lookups_per_batch
        self.update = "dense" if small and self.sorted_keys is None else "sparse"
        self.table = table
        # tf.zeros, not tf.zeros_like(table): that reads the table and held an extra
        # table-sized buffer while building (measured +330 MiB at large-vocab).
        self.m = tf.Variable(tf.zeros(table.shape, table.dtype), trainable=False, name=name + "_m")
        self.v = tf.Variable(tf.zeros(table.shape, table.dtype), trainable=False, name=name + "_v")

    def _sort_keys(self, tf: Any, keys: np.ndarray, rows: int) -> np.ndarray:
        """Keep the keys sorted (for ``searchsorted``); return the row order that matches."""
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        if keys.size != rows or np.unique(keys).size != keys.size:
            raise ValueError("keys must be distinct and one per table row")
        order = np.argsort(keys)
        self.sorted_keys = tf.constant(keys[order])
        return order

    @property
    def dtype(self) -> Any:
        return self.table.dtype

    def rows_of(self, unique_keys: Any) -> Any:
        """Rows of ``unique_keys`` (a 1-D int64 tensor); keys must be in the vocabulary."""
        tf = import_tensorflow()
        if self.sorted_keys is None:
            return unique_keys
        pos = tf.searchsorted(self.sorted_keys, unique_keys, side="left")
        pos = tf.minimum(pos, self.vocabulary - 1)
        tf.debugging.assert_equal(
            tf.gather(self.sorted_keys, pos), unique_keys, message="key not in vocabulary"
        )
        return pos

    def check_ids(self, ids: Any) -> Any:
        """Validate ``ids`` eagerly (one-line ``ValueError``) and return an int64 tensor."""
        tf = import_tensorflow()
        dtype = getattr(ids, "dtype", None)
        if dtype is None:
            ids = np.asarray(ids)
            dtype = ids.dtype
        name = getattr(dtype, "name", str(dtype))
        if name not in ("int32", "int64"):
            raise ValueError(f"ids must be int32 or int64, got dtype {name}")
        if len(getattr(ids, "shape", ())) == 0:
            raise ValueError("ids must have at least one dimension, got a scalar")
        ids = tf.cast(ids, tf.int64)
        if tf.executing_eagerly() and int(tf.size(ids)) > 0:
            flat = ids.numpy().reshape(-1)
            if self.sorted_keys is None:
                lo, hi = int(flat.min()), int(flat.max())
                if lo < 0 or hi >= self.vocabulary:
                    bad = lo if lo < 0 else hi
                    raise ValueError(
                        f"ids contains key {bad} outside the vocabulary [0, {self.vocabulary})"
                    )
            else:
                known = self.sorted_keys.numpy()
                missing = np.setdiff1d(flat, known)
                if missing.size:
                    raise ValueError(f"ids contains key {int(missing[0])} not in the vocabulary")
        return ids


def segment_sum(dy: Any, segment_ids: Any, num_segments: Any) -> Any:
    """Sum the rows of ``dy [N, E]`` per segment id (ids in ``[0, num_segments)``).

    On the GPU this is ``tf.math.unsorted_segment_sum``. On the CPU the same sum is one
    weighted ``tf.math.bincount`` over ``id * E + column``, which measured ~4x faster
    than TensorFlow's single-threaded CPU segment-sum kernel for DenseDemo batches.
    """
    tf = import_tensorflow()
    if "GPU" in (dy.device or "").upper():
        return tf.math.unsorted_segment_sum(dy, segment_ids, num_segments)
    dim = tf.shape(dy)[1]
    ids = tf.cast(segment_ids, tf.int32)[:, None] * dim + tf.range(dim)[None, :]
    size = tf.cast(num_segments, tf.int32) * dim
    flat = tf.math.bincount(
        tf.reshape(ids, [-1]),
        weights=tf.reshape(dy, [-1]),
        minlength=size,
        maxlength=size,
        dtype=dy.dtype,
    )
    return tf.reshape(flat, [-1, dim])


def _expand(tf: Any) -> Any:
    @tf.custom_gradient
    def expand(unique_rows_values: Any, inverse: Any) -> Any:
        out = tf.gather(unique_rows_values, inverse)

        def grad(dy: Any) -> Any:
            n = tf.shape(unique_rows_values)[0]
            return segment_sum(dy, inverse, n), None

        return out, grad

    return expand


def _gather_dense_grad(tf: Any) -> Any:
    @tf.custom_gradient
    def gather(table: Any, flat_ids: Any) -> Any:
        out = tf.gather(table, flat_ids)

        def grad(dy: Any) -> Any:
            return segment_sum(dy, flat_ids, tf.shape(table)[0]), None

        return out, grad

    return gather


def lookup_unique(params: SparseEmbedding, ids: Any) -> tuple[Any, Any]:
    """Forward of the plugin lookup; returns (embeddings ``ids.shape + [dim]``, unique rows).

    With ``params.update == "dense"`` (a small table most of which every batch touches,
    chosen by :class:`SparseEmbedding`), the dedup is skipped: the lookups gather
    directly and the gradient is summed straight into a dense ``[V, E]`` tensor; rows
    is then ``None``.
    """
    tf = import_tensorflow()
    flat = tf.reshape(ids, [-1])
    shape = tf.concat([tf.shape(ids), [params.dim]], axis=0)
    if params.update == "dense":
        out = _gather_dense_grad(tf)(params.table.read_value(), flat)
        return tf.reshape(out, shape), None
    unique_keys, inverse = tf.unique(flat, out_idx=tf.int32)
    rows = params.rows_of(unique_keys)
    values = tf.gather(params.table, rows)  # gradient: IndexedSlices(rows unique)
    out = _expand(tf)(values, inverse)
    return tf.reshape(out, shape), rows


def embedding_lookup(params: SparseEmbedding, ids: Any) -> Any:
    """Drop-in for ``tf.nn.embedding_lookup(params, ids)`` on a :class:`SparseEmbedding`.

    The gradient with respect to ``params.table`` is an ``IndexedSlices`` whose indices
    are unique, ready for :meth:`SparseAdam.apply`.
    """
    if not isinstance(params, SparseEmbedding):
        raise ValueError(f"params must be a SparseEmbedding, got {type(params).__name__}")
    ids = params.check_ids(ids)
    out, _ = lookup_unique(params, ids)
    return out


class SparseAdam:
    """Lazy Adam for a :class:`SparseEmbedding`, same formulas as Keras 3 ``Adam``.

    ``alpha = lr * sqrt(1 - b2^t) / (1 - b1^t)``; on the touched rows
    ``m += (g - m)(1 - b1)``, ``v += (g^2 - v)(1 - b2)``, ``w -= alpha m / (sqrt(v) + eps)``.
    """

    def __init__(
        self,
        learning_rate: float = 1e-3,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        dense_update_fraction: float = DENSE_UPDATE_FRACTION,
    ) -> None:
        tf = import_tensorflow()
        # float32, as Keras stores it, so plugin and Keras layers use the same rate.
        self.learning_rate = float(np.float32(learning_rate))
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.dense_update_fraction = dense_update_fraction
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="sparse_adam_t")

    def apply(self, params: SparseEmbedding, grad: Any) -> None:
        """Apply an ``IndexedSlices`` gradient with unique indices to ``params``."""
        tf = import_tensorflow()
        dtype = params.dtype
        if not isinstance(grad, tf.IndexedSlices):
            self._apply_dense(params, tf.convert_to_tensor(grad))
            return
        rows = tf.cast(grad.indices, tf.int64)
        g = tf.convert_to_tensor(grad.values)
        # (1 - beta) is formed in Python (float64) before it meets the tensors, as Keras
        # does; 1 - float32(0.999) would be off by 1.3e-5 relative.
        one_minus_b1 = tf.constant(1.0 - self.beta_1, dtype)
        one_minus_b2 = tf.constant(1.0 - self.beta_2, dtype)
        alpha = self._alpha(dtype)
        eps = tf.constant(self.epsilon, dtype)
        threshold = int(self.dense_update_fraction * params.vocabulary)

        def sparse() -> Any:
            m = tf.gather(params.m, rows)
            v = tf.gather(params.v, rows)
            m = m + (g - m) * one_minus_b1
            v = v + (g * g - v) * one_minus_b2
            params.m.scatter_update(tf.IndexedSlices(m, rows))
            params.v.scatter_update(tf.IndexedSlices(v, rows))
            params.table.scatter_sub(tf.IndexedSlices(alpha * m / (tf.sqrt(v) + eps), rows))
            return tf.constant(0)

        def dense() -> Any:
            shape = tf.shape(params.table, out_type=tf.int64)
            idx = rows[:, None]
            g_full = tf.scatter_nd(idx, g, shape)
            hits = tf.scatter_nd(idx, tf.ones_like(rows, dtype=tf.int32), shape[:1])
            touched = tf.reshape(hits > 0, [-1, 1])
            m = tf.where(touched, params.m + (g_full - params.m) * one_minus_b1, params.m)
            v = tf.where(touched, params.v + (g_full * g_full - params.v) * one_minus_b2, params.v)
            params.m.assign(m)
            params.v.assign(v)
            params.table.assign_sub(tf.where(touched, alpha * m / (tf.sqrt(v) + eps), 0))
            return tf.constant(1)

        if threshold >= params.vocabulary:
            sparse()
        else:
            tf.cond(tf.size(rows, out_type=tf.int64) > threshold, dense, sparse)
        self.iterations.assign_add(1)

    def _alpha(self, dtype: Any) -> Any:
        """As Keras: float32 learning rate and float32-rounded betas in the bias correction."""
        tf = import_tensorflow()
        t = tf.cast(self.iterations + 1, dtype)
        b1_32 = tf.constant(float(np.float32(self.beta_1)), dtype)
        b2_32 = tf.constant(float(np.float32(self.beta_2)), dtype)
        return self.learning_rate * tf.sqrt(1 - tf.pow(b2_32, t)) / (1 - tf.pow(b1_32, t))

    def _apply_dense(self, params: SparseEmbedding, g: Any) -> None:
        """Lazy Adam from a dense ``[V, E]`` gradient: rows with an all-zero gradient are
        treated as untouched (identical to the sparse update except for a touched row
        whose summed gradient is exactly zero, whose moments are then not decayed)."""
        tf = import_tensorflow()
        dtype = params.dtype
        alpha = self._alpha(dtype)
        eps = tf.constant(self.epsilon, dtype)
        one_minus_b1 = tf.constant(1.0 - self.beta_1, dtype)
        one_minus_b2 = tf.constant(1.0 - self.beta_2, dtype)
        touched = tf.reduce_any(tf.not_equal(g, 0), axis=1, keepdims=True)
        m = tf.where(touched, params.m + (g - params.m) * one_minus_b1, params.m)
        v = tf.where(touched, params.v + (g * g - params.v) * one_minus_b2, params.v)
        params.m.assign(m)
        params.v.assign(v)
        params.table.assign_sub(tf.where(touched, alpha * m / (tf.sqrt(v) + eps), 0))
        self.iterations.assign_add(1)
