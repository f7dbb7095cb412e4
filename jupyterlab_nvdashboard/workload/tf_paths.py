"""TensorFlow training paths: ``native``, ``native-dense``, ``hashtable`` and ``plugin``.

All four train the same model (embedding -> flatten -> ``hidden_layers`` x
``Dense(hidden_units, relu)`` -> ``Dense(1)``) with binary cross-entropy from logits
and Adam, from the same initial MLP weights. They differ only in the embedding:

* ``native``: ``tf.Variable`` table, ``tf.nn.embedding_lookup``, Keras ``Adam``.
* ``native-dense`` (benchmark comparator): ``tf.gather`` whose ``IndexedSlices``
  gradient is converted to a dense ``[V, E]`` tensor before Keras ``Adam``.
* ``hashtable``: ``tf.lookup.experimental.DenseHashTable`` maps keys to rows, inserting
  missing keys, then ``tf.nn.embedding_lookup`` (the SOK DenseDemo TF baseline).
* ``plugin``: :mod:`.plugin` (dedup, gather once, segment-sum gradient, lazy Adam).

``mode="embedding"`` replaces the MLP and loss with a fixed linear probe so that only
the lookup, its gradient and the sparse update are timed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ._lazy import import_tensorflow
from .config import WorkloadConfig
from .data import TABLE_CHUNK_ROWS, BatchPool, check_keys, initial_mlp, initial_table_chunks
from .plugin import SparseAdam, SparseEmbedding, lookup_unique

TF_PATHS = ("native", "native-dense", "hashtable", "plugin")


def tf_device_name(device: str) -> str:
    tf = import_tensorflow()
    if device == "gpu":
        if not tf.config.list_physical_devices("GPU"):
            raise RuntimeError("--device gpu: TensorFlow sees no GPU on this machine")
        return "/GPU:0"
    return "/CPU:0"


def initial_table_variable(
    cfg: WorkloadConfig, name: str, chunk: int = TABLE_CHUNK_ROWS
) -> Any:
    """The initial table as a ``tf.Variable``, filled in place one chunk of rows at a time.

    ``tf.Variable(numpy_table)`` briefly holds the NumPy table, a converted tensor and the
    variable: at large-vocab (20M x 4) that raised peak memory by 630 MiB over the
    variable alone. This holds the variable and one chunk.
    """
    tf = import_tensorflow()
    table = tf.Variable(tf.zeros([cfg.vocabulary, cfg.embedding_size], cfg.dtype), name=name)
    for start, rows in initial_table_chunks(cfg, chunk):
        table.scatter_update(tf.IndexedSlices(
            tf.constant(rows), tf.range(start, start + len(rows), dtype=tf.int64)))
    return table


class TFTrainer:
    """One TensorFlow path; ``step(i)`` trains on pool batch ``i mod len(pool)``."""

    def __init__(
        self,
        path: str,
        cfg: WorkloadConfig,
        pool: BatchPool,
        device: str = "cpu",
        mode: str = "full",
        dense_update_fraction: float | None = None,
    ) -> None:
        if path not in TF_PATHS:
            raise ValueError(f"unknown TensorFlow path {path!r}")
        tf = import_tensorflow()
        import keras

        self.path, self.cfg, self.mode, self.device = path, cfg, mode, device
        self.device_name = tf_device_name(device)
        # Process-wide in TensorFlow; set from the config so the CuPy path can match it.
        tf.config.experimental.enable_tensor_float_32_execution(cfg.tf32)
        #: Whether float32 matmuls may use TF32 (only where the GPU has it), as run.
        self.tf32 = bool(tf.config.experimental.tensor_float_32_execution_enabled())
        for keys in pool.keys:
            check_keys(keys, cfg.vocabulary, name="keys")
        dtype = cfg.dtype
        with tf.device(self.device_name):
            # The pool is placed on the device once; data loading is not timed.
            self.keys = [tf.constant(k) for k in pool.keys]
            self.labels = [tf.constant(y) for y in pool.labels]
            probe = np.random.default_rng(cfg.seed + 2).standard_normal(cfg.mlp_input_size)
            self.probe = tf.constant(probe.astype(dtype))
            self.mlp = None
            if mode == "full":
                layers = [
                    keras.layers.Dense(cfg.hidden_units, activation="relu", dtype=dtype)
                    for _ in range(cfg.hidden_layers)
                ] + [keras.layers.Dense(1, dtype=dtype)]
                self.mlp = keras.Sequential([keras.Input((cfg.mlp_input_size,), dtype=dtype)])
                for layer in layers:
                    self.mlp.add(layer)
                self.mlp.set_weights([w for pair in initial_mlp(cfg) for w in pair])
            adam = dict(
                learning_rate=cfg.learning_rate,
                beta_1=cfg.beta_1,
                beta_2=cfg.beta_2,
                epsilon=cfg.epsilon,
            )
            self.optimizer = keras.optimizers.Adam(**adam)
            self.sparse_optimizer = None
            if path == "plugin":
                self.embedding = SparseEmbedding(
                    initial_table_variable(cfg, "sparse_embedding"),
                    lookups_per_batch=cfg.batch * cfg.keys_per_sample,
                )
                kwargs = {}
                if dense_update_fraction is not None:
                    kwargs["dense_update_fraction"] = dense_update_fraction
                self.sparse_optimizer = SparseAdam(**adam, **kwargs)
            elif path == "hashtable":
                self.table = initial_table_variable(cfg, "table")
                self.next_row = tf.Variable(0, dtype=tf.int64, trainable=False)
            else:
                self.table = initial_table_variable(cfg, "table")
        with tf.device("/CPU:0" if path == "hashtable" else self.device_name):
            if path == "hashtable":
                self.hashtable = tf.lookup.experimental.DenseHashTable(
                    key_dtype=tf.int64,
                    value_dtype=tf.int64,
                    default_value=-1,
                    empty_key=-1,
                    deleted_key=-2,
                )
        self._step = tf.function(self._train_step, autograph=False)
        # The hashtable's lookup and insert is a stage of its own, on the host: its CPU-only
        # kernel runs while the device waits for the rows (``step_host_ms``).
        self._rows = tf.function(self._rows_from_hashtable, autograph=False)
        self._host_ms = 0.0

    # -- the embedding part -------------------------------------------------------------
    def _rows_from_hashtable(self, keys: Any) -> Any:
        tf = import_tensorflow()
        flat = tf.reshape(keys, [-1])
        rows = tf.reshape(self.hashtable.lookup(flat), [-1])
        missing, _ = tf.unique(tf.boolean_mask(flat, rows < 0))
        n = tf.size(missing, out_type=tf.int64)
        self.hashtable.insert(missing, self.next_row + tf.range(n, dtype=tf.int64))
        self.next_row.assign_add(n)
        return tf.reshape(self.hashtable.lookup(flat), tf.shape(keys))

    def _loss(self, emb: Any, labels: Any) -> Any:
        tf = import_tensorflow()
        x = tf.reshape(emb, [tf.shape(emb)[0], -1])
        if self.mlp is None:
            return tf.reduce_mean(tf.reduce_sum(x * self.probe, axis=1))
        logits = self.mlp(x, training=True)
        return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, logits))

    def _train_step(self, keys: Any, labels: Any, rows: Any = None) -> Any:
        tf = import_tensorflow()
        mlp_vars = list(self.mlp.trainable_variables) if self.mlp is not None else []
        with tf.GradientTape() as tape:
            if self.path == "plugin":
                emb, _ = lookup_unique(self.embedding, keys)
                table = self.embedding.table
            elif self.path == "hashtable":
                emb = tf.nn.embedding_lookup(self.table, rows)
                table = self.table
            elif self.path == "native-dense":
                emb = tf.gather(self.table, keys)
                table = self.table
            else:
                emb = tf.nn.embedding_lookup(self.table, keys)
                table = self.table
            loss = self._loss(emb, labels)
        grads = tape.gradient(loss, [table, *mlp_vars])
        if self.path == "native-dense":
            grads[0] = tf.convert_to_tensor(grads[0])
        if self.path == "plugin":
            # One lookup per step: its gradient rows are unique already.
            self.sparse_optimizer.apply(self.embedding, grads[0], unique_indices=True)
            if mlp_vars:
                self.optimizer.apply_gradients(zip(grads[1:], mlp_vars, strict=True))
        else:
            self.optimizer.apply_gradients(zip(grads, [table, *mlp_vars], strict=True))
        return loss

    # -- public -------------------------------------------------------------------------
    def step(self, i: int) -> float:
        """One training step on pool batch ``i``; returns the loss (a device sync)."""
        tf = import_tensorflow()
        n = len(self.keys)
        keys, rows = self.keys[i % n], None
        if self.path == "hashtable":
            start = time.perf_counter()
            with tf.device("/CPU:0"):
                rows = self._rows(keys)  # returns once the host has the rows
            self._host_ms = (time.perf_counter() - start) * 1000.0
        with tf.device(self.device_name):
            loss = self._step(keys, self.labels[i % n], rows)
        return float(loss.numpy())

    def step_host_ms(self) -> float:
        """Milliseconds of the last step spent in the path's host-only stage, with the
        device waiting on it: the hashtable's CPU-only lookup and insert. 0.0 for the paths
        whose every op runs on the training device."""
        return self._host_ms

    def embedding_of(self, keys: np.ndarray) -> np.ndarray:
        """Current embedding rows of ``keys`` (for tests; hashtable rows must exist)."""
        tf = import_tensorflow()
        keys = np.asarray(keys, dtype=np.int64)
        if self.path == "plugin":
            return tf.gather(self.embedding.table, keys).numpy()
        if self.path == "hashtable":
            return tf.gather(self.table, self.hashtable.lookup(tf.constant(keys))).numpy()
        return tf.gather(self.table, keys).numpy()

    def peak_device_memory_bytes(self) -> int | None:
        tf = import_tensorflow()
        if self.device != "gpu":
            return None
        try:
            return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
        except (ValueError, RuntimeError):
            return None
