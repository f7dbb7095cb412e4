"""The embedding table spread over N shards (model parallel), as SOK's dense embedding does.

Placement: row ``k`` lives on shard ``k % N`` (``key``, SOK's round-robin), or whole fields
per shard (``field``: with the workload's key layout, field ``f`` owns the rows
``[f * V // fields, (f + 1) * V // fields)`` and the rows past the last field go with it;
field ``f`` lives on shard ``f % N``). Each shard holds only its own rows, their Adam
moments, and a full replica of the MLP; the batch is split evenly over the shards.

One step on each rank (:class:`ShardWorker`):

1. deduplicate the rank's keys (:func:`dedupe`: a presence count over the dense
   vocabulary, no sort), bucket them by owner;
2. exchange the counts (an all-gather of each rank's N counts, so every rank knows the
   whole N x N matrix and hence every rank's traffic);
3. all-to-all the keys; each owner gathers its rows (the same ``gather_count`` the
   single-device path uses, on the local table);
4. all-to-all the vectors back, and restore the lookup order (``uniq_rows[inverse]``):
   plain copies, so the forward pass is bit-exact against ``np.take`` on the whole table;
5. the MLP, data parallel: forward and backward on the rank's slice
   (``xp_path.mlp_forward_backward``), its gradients all-reduced (summed);
6. backward: the lookup gradients summed per unique key, all-to-all to the owners, summed
   per row and lazy Adam on the owner's rows: ``ops.segment_sum_adam``, the single-device
   path's own fused update, on the local table. Adam itself is ``adam.adam_update``.

The exchange (:class:`Exchange`) is one small interface with three backends:
``loopback`` (N shards in one process, one thread each: always available; on one GPU this
is the emulation, the exchange a permutation in that GPU's memory), and ``gloo`` / ``nccl``
through ``torch.distributed`` across N processes (``shard_rank.py`` starts them). torch is
imported only by those two.

Bytes: every step each rank counts what it sends to *other* ranks, by category, from the
buffers themselves; :func:`expected_step_bytes` is the analytic formula, from the N x N
count matrix, that the whole job must move. The all-reduce is counted as a ring all-reduce
sends it (``2 (N - 1) / N`` of the buffer per rank), as NCCL does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .adam import adam_coefficients
from .config import BACKENDS, MAX_SHARDS, PLACEMENTS, WorkloadConfig
from .data import BatchPool, check_keys, initial_mlp, initial_rows
from .xp_path import FlatParameters, NumpyOps, index_dtype, mlp_forward_backward, step_losses

__all__ = ["BACKENDS", "BYTE_KINDS", "MAX_SHARDS", "PLACEMENTS", "CollectiveError", "Exchange",
           "LoopbackTrainer",
           "Placement", "ShardWorker", "TorchExchange", "assemble_table", "check_shards", "dedupe",
           "expected_step_bytes", "placement_for", "ring_all_reduce_bytes"]
#: The categories of exchanged bytes, in the order they are reported.
BYTE_KINDS: tuple[str, ...] = ("counts", "keys", "vectors", "gradients", "all_reduce")
COUNT_ITEMSIZE = 8  # the counts travel as int64


# -- placement ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Placement:
    """Which shard owns each row, and where in that shard's table it sits."""

    kind: str  # "key" or "field"
    shards: int
    vocabulary: int
    fields: int = 1

    def __post_init__(self) -> None:
        if self.kind not in PLACEMENTS:
            raise ValueError(f"unknown placement {self.kind!r}; choose one of "
                             f"{', '.join(PLACEMENTS)}")
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ValueError(f"shards must be in [1, {MAX_SHARDS}], got {self.shards}")

    @property
    def stride(self) -> int:
        """Rows per field under ``field`` placement (the last field also takes the rest)."""
        return max(1, self.vocabulary // self.fields)

    def _field(self, keys: Any, xp: Any) -> Any:
        return xp.minimum(keys // self.stride, self.fields - 1)

    def owner(self, keys: Any, xp: Any = np) -> Any:
        """The shard of each key."""
        if self.kind == "key":
            return keys % self.shards
        return self._field(keys, xp) % self.shards

    def local(self, keys: Any, xp: Any = np) -> Any:
        """Each key's row in its owner's table (keys must all belong to one shard)."""
        if self.kind == "key":
            return keys // self.shards
        f = self._field(keys, xp)
        return (f // self.shards) * self.stride + (keys - f * self.stride)

    def rows_of(self, shard: int) -> np.ndarray:
        """The global rows shard ``shard`` owns, in its local order (int64)."""
        if self.kind == "key":
            return np.arange(shard, self.vocabulary, self.shards, dtype=np.int64)
        parts = []
        for f in range(shard, min(self.fields, self.vocabulary), self.shards):
            stop = self.vocabulary if f == self.fields - 1 else (f + 1) * self.stride
            parts.append(np.arange(f * self.stride, min(stop, self.vocabulary), dtype=np.int64))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def placement_for(cfg: WorkloadConfig, shards: int, kind: str = "key") -> Placement:
    return Placement(kind, shards, cfg.vocabulary, cfg.fields)


def check_shards(cfg: WorkloadConfig, shards: int) -> None:
    """One-line ``ValueError`` when ``cfg`` cannot be split over ``shards``."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be in [1, {MAX_SHARDS}], got {shards}")
    if cfg.batch % shards:
        raise ValueError(f"batch {cfg.batch} must be a multiple of --shards {shards} "
                         "(each shard trains on an equal slice)")


# -- the bytes a step must move -----------------------------------------------------------
def ring_all_reduce_bytes(nbytes: int, shards: int) -> int:
    """What each rank sends in a ring all-reduce of ``nbytes``: 2 (N - 1) / N of it."""
    return (2 * (shards - 1) * nbytes) // shards


def expected_step_bytes(matrix: np.ndarray, embedding_size: int, key_itemsize: int,
                        value_itemsize: int, all_reduce_nbytes: int) -> dict[str, int]:
    """Bytes the whole job sends between ranks in one step, by kind.

    ``matrix[r, s]`` is the number of distinct keys rank ``r`` asks shard ``s`` for; what a
    rank asks itself for never leaves it. ``all_reduce_nbytes`` is one rank's all-reduced
    buffer (the MLP's gradients and the loss).
    """
    n = matrix.shape[0]
    remote = int(matrix.sum() - np.trace(matrix))
    vector = embedding_size * value_itemsize
    return {
        "counts": n * (n - 1) * n * COUNT_ITEMSIZE,
        "keys": remote * key_itemsize,
        "vectors": remote * vector,
        "gradients": remote * vector,
        "all_reduce": n * ring_all_reduce_bytes(all_reduce_nbytes, n),
    }


def _sent_elsewhere(buffer: Any, counts: Sequence[int], rank: int) -> int:
    """Bytes of ``buffer`` (split by ``counts`` along axis 0) bound for other ranks."""
    rows = int(sum(counts)) - int(counts[rank])
    per_row = buffer.nbytes // buffer.shape[0] if buffer.shape[0] else 0
    return rows * per_row


def dedupe(xp: Any, keys: Any, vocabulary: int) -> tuple[Any, Any]:
    """The distinct keys (ascending) and each lookup's position among them, as
    ``unique(keys, return_inverse=True)`` gives them, without a comparison sort: the keys
    are a dense ``[0, V)``, so a presence count over the vocabulary does it in O(L + V),
    as the single-device path groups its lookups."""
    present = xp.bincount(keys, minlength=vocabulary) > 0
    uniq = xp.flatnonzero(present).astype(keys.dtype)
    position = xp.cumsum(present, dtype=keys.dtype) - 1
    return uniq, position[keys]


# -- the exchange -------------------------------------------------------------------------
class Exchange(Protocol):
    """The collectives one rank calls; every rank calls them in the same order."""

    rank: int
    size: int
    name: str

    def all_gather_counts(self, counts: np.ndarray) -> np.ndarray:
        """Every rank's ``counts`` (int64[N]) as the rows of an N x N host matrix."""
        ...

    def all_to_all(self, send: Any, send_counts: Sequence[int],
                   recv_counts: Sequence[int], what: str = "rows") -> Any:
        """Rows ``send`` split by ``send_counts`` go one chunk to each rank; returns the
        chunks received, ``recv_counts[s]`` rows from rank ``s``, concatenated in rank order.
        ``what`` the rows are, for a rank that waits too long to say."""
        ...

    def all_reduce_sum(self, buffer: Any, what: str = "buffer") -> None:
        """``buffer`` summed over the ranks, in place (the same bits on every rank)."""
        ...


class LoopbackGroup:
    """N ranks in one process, one thread each, exchanging through shared slots."""

    def __init__(self, size: int, xp: Any = np) -> None:
        self.size, self.xp = size, xp
        self.barrier = threading.Barrier(size)
        self.slots: list[Any] = [None] * size

    def member(self, rank: int) -> LoopbackExchange:
        return LoopbackExchange(self, rank)

    def abort(self) -> None:
        self.barrier.abort()


class LoopbackExchange:
    """One rank of a :class:`LoopbackGroup`: copies between the ranks' buffers."""

    name = "loopback"

    def __init__(self, group: LoopbackGroup, rank: int) -> None:
        self.group, self.rank, self.size = group, rank, group.size

    def _swap(self, item: Any) -> list[Any]:
        g = self.group
        g.slots[self.rank] = item
        g.barrier.wait()
        seen = list(g.slots)
        g.barrier.wait()  # nobody overwrites a slot before everyone has read them all
        return seen

    def all_gather_counts(self, counts: np.ndarray) -> np.ndarray:
        return np.stack([np.asarray(c, dtype=np.int64) for c in self._swap(counts)])

    def all_to_all(self, send: Any, send_counts: Sequence[int],
                   recv_counts: Sequence[int], what: str = "rows") -> Any:
        xp = self.group.xp
        offsets = np.concatenate([[0], np.cumsum(send_counts)])
        seen = self._swap((send, offsets))
        chunks = [buf[int(off[self.rank]):int(off[self.rank + 1])] for buf, off in seen]
        got = xp.concatenate(chunks) if chunks else send[:0]
        return xp.ascontiguousarray(got)

    def all_reduce_sum(self, buffer: Any, what: str = "buffer") -> None:
        seen = self._swap(buffer.copy())
        total = seen[0].copy()
        for other in seen[1:]:  # the same order on every rank: the same bits
            total += other
        buffer[...] = total


class CollectiveError(RuntimeError):
    """A collective that did not complete on this rank: which one, and torch's reason (its
    timeout, or a rank that is gone)."""


class TorchExchange:
    """One rank of a ``torch.distributed`` process group (gloo on the CPU, NCCL on GPUs).

    NumPy arrays travel as CPU tensors sharing their memory; CuPy arrays as CUDA tensors
    through DLPack, so nothing is copied to the host. A collective that fails (it waited
    past the group's timeout, or another rank is gone) raises :class:`CollectiveError`,
    which names it.
    """

    def __init__(self, torch: Any, backend: str) -> None:
        self.torch, self.dist = torch, torch.distributed
        self.name = backend
        self.rank, self.size = self.dist.get_rank(), self.dist.get_world_size()
        self.device = "cuda" if backend == "nccl" else "cpu"

    def waiting_on(self, what: str, collective: Callable[..., Any], *args: Any) -> Any:
        """``collective(*args)``; if it fails, a :class:`CollectiveError` that says ``what``
        this rank waited on."""
        try:
            return collective(*args)
        except RuntimeError as error:  # torch's DistBackendError among them
            reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise CollectiveError(f"rank {self.rank} of {self.size} gave up waiting on the "
                                  f"other ranks in {what}: {reason}") from error

    def _tensor(self, a: Any) -> Any:
        if isinstance(a, np.ndarray):
            return self.torch.from_numpy(np.ascontiguousarray(a))
        return self.torch.from_dlpack(a)

    def _like(self, t: Any, a: Any) -> Any:
        if isinstance(a, np.ndarray):
            return t.numpy()
        import cupy  # only an NCCL rank holds CuPy arrays

        return cupy.from_dlpack(t)

    def broadcast(self, value: int, what: str) -> int:
        """Rank 0's ``value`` on every rank."""
        t = self.torch.tensor([value], dtype=self.torch.int64, device=self.device)
        self.waiting_on(f"the broadcast of {what}", self.dist.broadcast, t, 0)
        return int(t.item())

    def count_ranks(self, what: str) -> int:
        """How many ranks call this (an all-reduce of ones), once every one of them has."""
        t = self.torch.ones(1, dtype=self.torch.int64, device=self.device)
        self.waiting_on(f"the count of the {what}", self.dist.all_reduce, t)
        return int(t.item())

    def all_gather_counts(self, counts: np.ndarray) -> np.ndarray:
        mine = self.torch.from_numpy(np.ascontiguousarray(counts, dtype=np.int64))
        if self.name == "nccl":
            mine = mine.cuda()
        out = [self.torch.empty_like(mine) for _ in range(self.size)]
        self.waiting_on("the all-gather of the send counts", self.dist.all_gather, out, mine)
        return np.stack([t.cpu().numpy() for t in out])

    def all_to_all(self, send: Any, send_counts: Sequence[int],
                   recv_counts: Sequence[int], what: str = "rows") -> Any:
        t = self._tensor(send)
        out = self.torch.empty((int(sum(recv_counts)), *t.shape[1:]), dtype=t.dtype,
                               device=t.device)
        self.waiting_on(f"the all-to-all of the {what}", self.dist.all_to_all_single, out, t,
                        [int(c) for c in recv_counts], [int(c) for c in send_counts])
        return self._like(out, send)

    def all_reduce_sum(self, buffer: Any, what: str = "buffer") -> None:
        t = self._tensor(buffer)  # shares memory: reduced in place
        self.waiting_on(f"the all-reduce of the {what}", self.dist.all_reduce, t)
        if isinstance(buffer, np.ndarray) and not np.shares_memory(t.numpy(), buffer):
            buffer[...] = t.numpy()


class TimedExchange:
    """An exchange that adds up the wall time its collectives take (waiting for the other
    ranks included: time a rank cannot compute)."""

    def __init__(self, inner: Exchange) -> None:
        self.inner = inner
        self.rank, self.size, self.name = inner.rank, inner.size, inner.name
        self.seconds = 0.0

    def _timed(self, call: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.seconds += time.perf_counter() - start

    def all_gather_counts(self, counts: np.ndarray) -> np.ndarray:
        return self._timed(self.inner.all_gather_counts, counts)

    def all_to_all(self, send: Any, send_counts: Sequence[int],
                   recv_counts: Sequence[int], what: str = "rows") -> Any:
        return self._timed(self.inner.all_to_all, send, send_counts, recv_counts, what)

    def all_reduce_sum(self, buffer: Any, what: str = "buffer") -> None:
        self._timed(self.inner.all_reduce_sum, buffer, what)


# -- one rank -----------------------------------------------------------------------------
class _GlobalMeanOps:
    """The single-device ops, except that the loss is the mean over the *global* batch:
    each rank's ``bce_grad`` (a mean over its slice) is scaled by slice / batch, which is
    exact for N a power of two, so d(loss)/dz is bit-identical to the single device's."""

    def __init__(self, ops: Any, scale: float) -> None:
        self._ops, self._scale = ops, scale

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ops, name)

    def bce_grad(self, z: Any, labels: Any, out: Any) -> None:
        self._ops.bce_grad(z, labels, out)
        if self._scale != 1.0:
            out *= self._scale


@dataclass
class StepRecord:
    """What one rank saw of one step (kept only when recording, for the tests)."""

    lookups: Any = None  # the lookup output, [slice, fields * hotness * embedding]
    row_grads: Any = None  # the summed gradient of each of this shard's rows, [rows, E]
    mlp_grads: Any = None  # the all-reduced MLP gradients


@dataclass
class StepBytes:
    sent: dict[str, int] = field(default_factory=dict)  # by this rank, from its buffers
    job: dict[str, int] = field(default_factory=dict)  # by every rank: the formula


class ShardWorker:
    """One rank: its shard of the table, a replica of the MLP, its slice of each batch."""

    def __init__(self, cfg: WorkloadConfig, pool: BatchPool, placement: Placement,
                 exchange: Exchange, ops: Any = None, mode: str = "full",
                 record: bool = False) -> None:
        self.cfg, self.placement, self.mode = cfg, placement, mode
        self.exchange = TimedExchange(exchange)
        n, rank = exchange.size, exchange.rank
        if n != placement.shards:
            raise ValueError(f"the exchange has {n} ranks but the placement {placement.shards}")
        check_shards(cfg, n)
        base_ops = ops or NumpyOps(cfg.dtype)
        xp = self.xp = base_ops.xp
        self.ops = _GlobalMeanOps(base_ops, 1.0 / n)
        self.base_ops = base_ops
        self.dtype = np.dtype(cfg.dtype)
        self.index_dtype = index_dtype(cfg)
        self.slice_size = cfg.batch // n
        part = slice(rank * self.slice_size, (rank + 1) * self.slice_size)
        for keys in pool.keys:
            check_keys(keys, cfg.vocabulary, name="keys")
        self.keys = [xp.asarray(k[part].reshape(-1).astype(self.index_dtype))
                     for k in pool.keys]
        self.labels = [xp.asarray(y[part]) for y in pool.labels]
        self.rows = placement.rows_of(rank)  # global rows of this shard, local order
        self.table = xp.asarray(initial_rows(self.rows, cfg).reshape(-1, cfg.embedding_size))
        self.m = xp.zeros_like(self.table)
        self.v = xp.zeros_like(self.table)
        self.counts = xp.zeros(len(self.rows), dtype=self.index_dtype)
        self.mlp = FlatParameters(xp, initial_mlp(cfg), self.dtype) if mode == "full" else None
        probe = np.random.default_rng(cfg.seed + 2).standard_normal(cfg.mlp_input_size)
        self.probe = xp.asarray(probe.astype(self.dtype))
        self.probe_grad = None
        if self.mlp is None:  # d(mean over the global batch of x @ probe)/dx
            self.probe_grad = xp.ascontiguousarray(xp.broadcast_to(
                self.probe / cfg.batch, (self.slice_size, cfg.mlp_input_size)
            )).reshape(-1, cfg.embedding_size)
        self.tf32 = base_ops.use_tf32(cfg.tf32 and self.dtype == np.float32)
        self.all_reduce_nbytes = (self.mlp.weights.nbytes if self.mlp else 0) + 8  # + loss
        self.t = 0
        self.record = record
        self.records: list[StepRecord] = []
        self.last_bytes = StepBytes()
        self.last_exchange_ms = 0.0  # wall time of the last step's collectives

    # -- forward --------------------------------------------------------------------------
    def lookup(self, keys: Any) -> tuple[Any, dict[str, Any]]:
        """The rows of ``keys`` (flat) gathered from their shards, in lookup order."""
        xp, ex, cfg = self.xp, self.exchange, self.cfg
        uniq, inverse = dedupe(xp, keys, cfg.vocabulary)
        owner = self.placement.owner(uniq, xp)
        perm = xp.argsort(owner, kind="stable")
        send_keys = xp.ascontiguousarray(uniq[perm])
        send_counts = np.bincount(np.asarray(self.base_ops.to_numpy(owner)),
                                  minlength=ex.size).astype(np.int64)
        matrix = ex.all_gather_counts(send_counts)
        recv_counts = matrix[:, ex.rank]
        recv_keys = ex.all_to_all(send_keys, send_counts, recv_counts, "keys")
        rows = xp.ascontiguousarray(self.placement.local(recv_keys, xp).astype(self.index_dtype))
        vectors = xp.empty((rows.size, cfg.embedding_size), dtype=self.dtype)
        self.ops.gather_count(self.table, rows, self.counts, vectors)
        got = ex.all_to_all(vectors, recv_counts, send_counts, "looked-up vectors")
        uniq_rows = xp.empty_like(got)
        uniq_rows[perm] = got
        sent = {"counts": (ex.size - 1) * send_counts.nbytes,
                "keys": _sent_elsewhere(send_keys, send_counts, ex.rank),
                "vectors": _sent_elsewhere(vectors, recv_counts, ex.rank)}
        ctx = {"inverse": inverse, "perm": perm, "uniques": int(uniq.size), "rows": rows,
               "send_counts": send_counts, "recv_counts": recv_counts, "matrix": matrix,
               "sent": sent}
        return xp.take(uniq_rows, inverse, axis=0), ctx

    # -- backward -------------------------------------------------------------------------
    def push_gradients(self, ctx: dict[str, Any], grads: Any, c: Any) -> Any:
        """Sum ``grads`` (one row per lookup) per distinct key, send each sum to its owner,
        and apply lazy Adam there. Returns the gradients this shard received."""
        xp, ex = self.xp, self.exchange
        inverse, uniques = ctx["inverse"], ctx["uniques"]
        summed = xp.stack([xp.bincount(inverse, weights=grads[:, j], minlength=uniques)
                           for j in range(grads.shape[1])], axis=1).astype(self.dtype)
        send = xp.ascontiguousarray(summed[ctx["perm"]])
        received = ex.all_to_all(send, ctx["send_counts"], ctx["recv_counts"],
                                 "lookup gradients")
        ctx["sent"]["gradients"] = _sent_elsewhere(send, ctx["send_counts"], ex.rank)
        rows = ctx["rows"]
        ends = xp.cumsum(self.counts, dtype=self.index_dtype)
        order = self.ops.order_by_key(rows, self.counts, ends)
        self.ops.segment_sum_adam(self.table, self.m, self.v, received, order, ends, c)
        return received

    # -- the step -------------------------------------------------------------------------
    def step(self, i: int) -> float:
        """One training step on this rank's slice of pool batch ``i``; the global loss."""
        xp, cfg, ex = self.xp, self.cfg, self.exchange
        ex.seconds = 0.0
        keys = self.keys[i % len(self.keys)]
        labels = self.labels[i % len(self.labels)]
        x, ctx = self.lookup(keys)
        x = x.reshape(self.slice_size, -1)
        record = StepRecord(lookups=self.base_ops.to_numpy(x).copy()) if self.record else None
        if self.mlp is None:
            grads, a, y = self.probe_grad, x, None
        else:
            z, d_x = mlp_forward_backward(xp, self.ops, self.mlp, x, labels)
            grads, a, y = d_x.reshape(-1, cfg.embedding_size), z, labels
        loss = xp.asarray([float(step_losses(xp, a, y, self.probe).sum())], dtype=np.float64)
        self.t += 1
        c = adam_coefficients(cfg.learning_rate, cfg.beta_1, cfg.beta_2, cfg.epsilon, self.t)
        if self.mlp is not None:
            ex.all_reduce_sum(self.mlp.grads, "MLP gradients")
            self.ops.adam_flat(self.mlp, c)
        ex.all_reduce_sum(loss, "loss")
        received = self.push_gradients(ctx, grads, c)
        sent = ctx["sent"]
        sent["all_reduce"] = ring_all_reduce_bytes(self.all_reduce_nbytes, ex.size)
        job = expected_step_bytes(ctx["matrix"], cfg.embedding_size,
                                  self.index_dtype.itemsize, self.dtype.itemsize,
                                  self.all_reduce_nbytes)
        self.last_bytes = StepBytes({k: sent[k] for k in BYTE_KINDS}, job)
        self.last_exchange_ms = ex.seconds * 1000.0
        if record is not None:
            rows = self.base_ops.to_numpy(ctx["rows"]).astype(np.int64)
            got = self.base_ops.to_numpy(received)
            record.row_grads = np.stack([np.bincount(rows, got[:, j], len(self.rows))
                                         for j in range(got.shape[1])], axis=1)
            if self.mlp is not None:
                record.mlp_grads = self.base_ops.to_numpy(self.mlp.grads).copy()
            self.records.append(record)
        return float(self.base_ops.to_numpy(loss)[0]) / cfg.batch

    def table_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(global rows, their current values) of this shard."""
        return self.rows, self.base_ops.to_numpy(self.table)


# -- N shards in one process --------------------------------------------------------------
def assemble_table(parts: Sequence[tuple[np.ndarray, np.ndarray]], vocabulary: int,
                   embedding_size: int) -> np.ndarray:
    """The whole table from each shard's (rows, values)."""
    table = np.full((vocabulary, embedding_size), np.nan)
    for rows, values in parts:
        table[rows] = values
    return table


class LoopbackTrainer:
    """N shards in this process over the loopback exchange; ``step(i) -> loss``.

    On one GPU (``ops`` a CuPy ops) this is the emulation: the exchange is a permutation in
    that GPU's memory, and no byte crosses NVLink or PCIe.
    """

    backend = "loopback"

    def __init__(self, cfg: WorkloadConfig, pool: BatchPool, shards: int,
                 placement: str = "key", ops_factory: Callable[[], Any] | None = None,
                 mode: str = "full", record: bool = False) -> None:
        check_shards(cfg, shards)
        self.cfg, self.shards = cfg, shards
        self.placement = placement_for(cfg, shards, placement)
        ops = (ops_factory or (lambda: NumpyOps(cfg.dtype)))()
        self.group = LoopbackGroup(shards, ops.xp)
        self.workers = [ShardWorker(cfg, pool, self.placement, self.group.member(r), ops,
                                    mode, record) for r in range(shards)]
        self.ops = ops
        self.tf32 = self.workers[0].tf32
        self.pool = ThreadPoolExecutor(max_workers=shards, thread_name_prefix="shard")

    def step(self, i: int) -> float:
        futures = [self.pool.submit(self._rank_step, w, i) for w in self.workers]
        losses = [f.result() for f in futures]
        return losses[0]

    def _rank_step(self, worker: ShardWorker, i: int) -> float:
        try:
            return worker.step(i)
        except threading.BrokenBarrierError:
            raise
        except BaseException:
            self.group.abort()  # the other ranks stop waiting for this one
            raise

    def step_bytes(self) -> dict[str, int]:
        """What the whole job moved in the last step (the formula, from rank 0's matrix)."""
        return dict(self.workers[0].last_bytes.job)

    def step_exchange_ms(self) -> float:
        """The slowest rank's time in collectives in the last step."""
        return max(w.last_exchange_ms for w in self.workers)

    def sent_bytes(self) -> list[dict[str, int]]:
        """What each rank sent in the last step, counted from its buffers."""
        return [dict(w.last_bytes.sent) for w in self.workers]

    def table(self) -> np.ndarray:
        return assemble_table([w.table_rows() for w in self.workers], self.cfg.vocabulary,
                              self.cfg.embedding_size)

    def ranks(self) -> list[dict[str, Any]]:
        import os

        return [{"rank": w.exchange.rank, "pid": os.getpid(), "rows": len(w.rows)}
                for w in self.workers]

    def peak_device_memory_bytes(self) -> int | None:
        return self.ops.peak_device_memory_bytes()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
