"""The project's optimized TensorFlow embedding: dedup, gather once, lazy sparse Adam.

``embedding_lookup(params, ids)`` is a drop-in for ``tf.nn.embedding_lookup`` where
``params`` is a :class:`SparseEmbedding`. Per batch it

1. deduplicates the keys with ``tf.unique`` (8M lookups of DenseDemo touch ~8k rows),
2. maps each unique key to a row: the key itself for a dense vocabulary ``[0, V)``, or
   ``tf.searchsorted`` into a sorted ``int64`` key array for arbitrary keys. Both are
   plain tensor ops that run on the GPU; no CPU-only hash table is involved,
3. gathers each unique row once and expands to the lookups with a custom gradient that
   aggregates the incoming gradient per unique row, so the table's gradient is an
   ``IndexedSlices`` with *unique* indices. The sum is ``tf.math.unsorted_segment_sum``
   when the table lives on a GPU, and a weighted ``tf.math.bincount`` on the CPU. The
   choice follows where the table variable was placed, fixed when the graph is built
   (inside ``tf.function`` a tensor's ``device`` is empty while tracing, so it cannot
   decide; on a GPU the bincount would copy to the host every step).

:class:`SparseAdam` then updates only the touched rows ("lazy Adam"). Semantics: rows
absent from a batch keep their first and second moments unchanged (they are *not*
decayed, unlike dense Adam where every moment decays every step), and the bias
correction uses the global step. On rows touched every step lazy and dense Adam agree
exactly. A table looked up more than once in a step gets one ``IndexedSlices`` per
lookup, concatenated, so its indices repeat: :meth:`SparseAdam.apply` sums repeated rows
first (as dense Adam sees them), unless the caller states they are unique. When a batch
touches more than ``dense_update_fraction`` of the table the same
update is computed densely over the whole table with a mask (identical results, no
gather/scatter); the crossover was measured with ``benchmarks/embedding_speedup.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._lazy import import_tensorflow
from .adam import AdamCoefficients, adam_update

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
        self.on_gpu = placed_on_gpu(table.device)
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


def placed_on_gpu(device: str) -> bool:
    """Whether a variable's ``device`` string names a GPU ("" means not placed: CPU)."""
    tf = import_tensorflow()
    return (tf.DeviceSpec.from_string(device or "").device_type or "").upper() == "GPU"


def segment_sum(dy: Any, segment_ids: Any, num_segments: Any, on_gpu: bool) -> Any:
    """Sum the rows of ``dy [N, E]`` per segment id (ids in ``[0, num_segments)``).

    ``on_gpu`` (where the table lives) picks the kernel: ``tf.math.unsorted_segment_sum``
    on a GPU; on the CPU one weighted ``tf.math.bincount`` over ``id * E + column``, which
    measured ~4x faster than TensorFlow's single-threaded CPU segment-sum kernel for
    DenseDemo batches (on a GPU it would force a device-to-host copy every step).
    """
    tf = import_tensorflow()
    if on_gpu:
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


def _expand(tf: Any, on_gpu: bool) -> Any:
    @tf.custom_gradient
    def expand(unique_rows_values: Any, inverse: Any) -> Any:
        out = tf.gather(unique_rows_values, inverse)

        def grad(dy: Any) -> Any:
            n = tf.shape(unique_rows_values)[0]
            return segment_sum(dy, inverse, n, on_gpu), None

        return out, grad

    return expand


def _gather_dense_grad(tf: Any, on_gpu: bool) -> Any:
    @tf.custom_gradient
    def gather(table: Any, flat_ids: Any) -> Any:
        out = tf.gather(table, flat_ids)

        def grad(dy: Any) -> Any:
            return segment_sum(dy, flat_ids, tf.shape(table)[0], on_gpu), None

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
        out = _gather_dense_grad(tf, params.on_gpu)(params.table.read_value(), flat)
        return tf.reshape(out, shape), None
    unique_keys, inverse = tf.unique(flat, out_idx=tf.int32)
    rows = params.rows_of(unique_keys)
    values = tf.gather(params.table, rows)  # gradient: IndexedSlices(rows unique)
    out = _expand(tf, params.on_gpu)(values, inverse)
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
    """Lazy Adam for a :class:`SparseEmbedding`, same formulas as Keras 3 ``Adam``
    (:func:`.adam.adam_update`), applied to the touched rows only."""

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

    def apply(self, params: SparseEmbedding, grad: Any, unique_indices: bool = False) -> None:
        """Apply the gradient of ``params.table`` (``IndexedSlices`` or dense).

        Repeated indices (the table looked up more than once in the step) are summed
        first, as dense Adam sees them. ``unique_indices=True`` skips that ``tf.unique``
        when the caller knows there is one lookup per step.
        """
        tf = import_tensorflow()
        if not isinstance(grad, tf.IndexedSlices):
            self._apply_dense(params, tf.convert_to_tensor(grad))
            return
        rows = tf.cast(grad.indices, tf.int64)
        g = tf.convert_to_tensor(grad.values)
        if not unique_indices:
            rows, position = tf.unique(rows, out_idx=tf.int32)
            g = segment_sum(g, position, tf.size(rows), params.on_gpu)
        c = self._coefficients(params.dtype)
        threshold = int(self.dense_update_fraction * params.vocabulary)

        def sparse() -> Any:
            m, v, step = adam_update(
                tf.gather(params.m, rows), tf.gather(params.v, rows), g, c, tf.sqrt
            )
            params.m.scatter_update(tf.IndexedSlices(m, rows))
            params.v.scatter_update(tf.IndexedSlices(v, rows))
            params.table.scatter_sub(tf.IndexedSlices(step, rows))
            return tf.constant(0)

        def dense() -> Any:
            shape = tf.shape(params.table, out_type=tf.int64)
            idx = rows[:, None]
            hits = tf.scatter_nd(idx, tf.ones_like(rows, dtype=tf.int32), shape[:1])
            self._masked_update(params, tf.scatter_nd(idx, g, shape), hits > 0, c)
            return tf.constant(1)

        if threshold >= params.vocabulary:
            sparse()
        else:
            tf.cond(tf.size(rows, out_type=tf.int64) > threshold, dense, sparse)
        self.iterations.assign_add(1)

    def _coefficients(self, dtype: Any) -> AdamCoefficients:
        """This step's coefficients as tensors of ``dtype`` (the step lives in a variable,
        so that a traced ``tf.function`` sees each new step)."""
        tf = import_tensorflow()
        return AdamCoefficients(
            one_minus_beta_1=tf.constant(1.0 - self.beta_1, dtype),
            one_minus_beta_2=tf.constant(1.0 - self.beta_2, dtype),
            alpha=self._alpha(dtype),
            epsilon=tf.constant(self.epsilon, dtype),
        )

    def _alpha(self, dtype: Any) -> Any:
        """As Keras: float32 learning rate and float32-rounded betas in the bias correction."""
        tf = import_tensorflow()
        t = tf.cast(self.iterations + 1, dtype)
        b1_32 = tf.constant(float(np.float32(self.beta_1)), dtype)
        b2_32 = tf.constant(float(np.float32(self.beta_2)), dtype)
        return self.learning_rate * tf.sqrt(1 - tf.pow(b2_32, t)) / (1 - tf.pow(b1_32, t))

    def _masked_update(
        self, params: SparseEmbedding, g: Any, touched_rows: Any, c: AdamCoefficients
    ) -> None:
        """The lazy update over the whole table: rows outside ``touched_rows [V]`` keep
        their weights and moments."""
        tf = import_tensorflow()
        touched = tf.reshape(touched_rows, [-1, 1])
        m, v, step = adam_update(params.m, params.v, g, c, tf.sqrt)
        params.m.assign(tf.where(touched, m, params.m))
        params.v.assign(tf.where(touched, v, params.v))
        params.table.assign_sub(tf.where(touched, step, 0))

    def _apply_dense(self, params: SparseEmbedding, g: Any) -> None:
        """Lazy Adam from a dense ``[V, E]`` gradient: rows with an all-zero gradient are
        treated as untouched (identical to the sparse update except for a touched row
        whose summed gradient is exactly zero, whose moments are then not decayed)."""
        tf = import_tensorflow()
        touched = tf.reduce_any(tf.not_equal(g, 0), axis=1)
        self._masked_update(params, g, touched, self._coefficients(params.dtype))
        self.iterations.assign_add(1)
