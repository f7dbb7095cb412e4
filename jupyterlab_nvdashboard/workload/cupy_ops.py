"""The CuPy-only parts of the ``cupy-plugin`` path: three RawKernels.

The rest of the step (dedup, gather, MLP via cuBLAS matmuls, dense Adam) is the shared
``xp`` code in :mod:`.xp_path`. CuPy is imported lazily; this module imports without it.

* ``hash_insert``: open-addressing hash table of int64 keys -> rows. A thread claims an
  empty slot with ``atomicCAS`` and takes a row from an ``atomicAdd`` counter; a thread
  that finds its key already claimed waits until the row is published. Keys are
  deduplicated before the kernel, so only distinct keys reach it.
* ``segment_sum``: one thread block per run of equal keys in the sorted lookups; threads
  stride over the run and reduce in shared memory. No atomics, so 8,000 repeats of a
  key cost a block-local reduction instead of 8,000 contended atomic adds.
* ``sparse_adam``: one thread per (touched row, column) doing the whole lazy-Adam update.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._lazy import import_cupy
from .config import WorkloadConfig

EMPTY_KEY = np.uint64(0xFFFFFFFFFFFFFFFF)

_SOURCE = r"""
typedef TYPE real;

__device__ unsigned long long mix64(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

extern "C" __global__ void hash_insert(
        const long long* keys, long long n, unsigned long long* slot_keys,
        long long* slot_rows, unsigned long long mask, unsigned long long* counter,
        long long capacity, long long* row_keys, long long* out_rows) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long key = (unsigned long long)keys[i];
    unsigned long long h = mix64(key) & mask;
    while (true) {
        unsigned long long prev = atomicCAS(&slot_keys[h], 0xFFFFFFFFFFFFFFFFULL, key);
        if (prev == 0xFFFFFFFFFFFFFFFFULL) {
            long long row = (long long)atomicAdd(counter, 1ULL);
            if (row >= capacity) row = -2;  /* table full: reported by the host */
            else row_keys[row] = (long long)key;
            atomicExch((unsigned long long*)&slot_rows[h], (unsigned long long)row);
            out_rows[i] = row;
            return;
        }
        if (prev == key) {
            long long row;
            do {
                row = ((volatile long long*)slot_rows)[h];
            } while (row == -1);
            out_rows[i] = row;
            return;
        }
        h = (h + 1) & mask;
    }
}

extern "C" __global__ void segment_sum(
        const real* values, const long long* order, const long long* starts,
        long long n_segments, long long n_rows, int dim, real* out) {
    extern __shared__ unsigned char shared_raw[];
    real* partial = (real*)shared_raw;
    long long seg = blockIdx.x;
    if (seg >= n_segments) return;
    long long begin = starts[seg];
    long long end = seg + 1 < n_segments ? starts[seg + 1] : n_rows;
    for (int c = 0; c < dim; ++c) {
        real acc = 0;
        for (long long j = begin + threadIdx.x; j < end; j += blockDim.x) {
            acc += values[order[j] * dim + c];
        }
        partial[threadIdx.x] = acc;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
            __syncthreads();
        }
        if (threadIdx.x == 0) out[seg * dim + c] = partial[0];
        __syncthreads();
    }
}

extern "C" __global__ void sparse_adam(
        real* table, real* m, real* v, const long long* rows, const real* grad,
        long long n, int dim, double alpha, double beta_1, double beta_2, double eps) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n * dim) return;
    long long p = rows[i / dim] * dim + (i % dim);
    real g = grad[i];
    real mi = m[p] + (g - m[p]) * (real)(1.0 - beta_1);
    real vi = v[p] + (g * g - v[p]) * (real)(1.0 - beta_2);
    m[p] = mi;
    v[p] = vi;
    table[p] -= (real)alpha * mi / (sqrt(vi) + (real)eps);
}
"""

_THREADS = 256


class _Kernels:
    _cache: dict[str, Any] = {}

    @classmethod
    def get(cls, dtype: str) -> Any:
        if dtype not in cls._cache:
            cp = import_cupy()
            ctype = {"float32": "float", "float64": "double"}[dtype]
            cls._cache[dtype] = cp.RawModule(code=_SOURCE.replace("TYPE", ctype))
        return cls._cache[dtype]


class CupyKeyMap:
    """GPU open-addressing hash table, int64 key -> row, insert on miss."""

    def __init__(self, capacity: int, dtype: str, load_factor: float = 0.5) -> None:
        cp = import_cupy()
        self.cp, self.capacity, self.dtype = cp, capacity, dtype
        slots = 1 << max(4, int(np.ceil(np.log2(capacity / load_factor))))
        self.mask = np.uint64(slots - 1)
        self.slot_keys = cp.full(slots, EMPTY_KEY, dtype=cp.uint64)
        self.slot_rows = cp.full(slots, -1, dtype=cp.int64)
        self.row_keys = cp.full(capacity, -1, dtype=cp.int64)
        self.counter = cp.zeros(1, dtype=cp.uint64)
        self.size = 0

    def lookup_or_insert(self, unique_keys: Any) -> tuple[Any, Any]:
        cp = self.cp
        n = int(unique_keys.size)
        rows = cp.empty(n, dtype=cp.int64)
        if n:
            kernel = _Kernels.get(self.dtype).get_function("hash_insert")
            blocks = (n + _THREADS - 1) // _THREADS
            args = (
                cp.ascontiguousarray(unique_keys, dtype=cp.int64),
                np.int64(n),
                self.slot_keys,
                self.slot_rows,
                self.mask,
                self.counter,
                np.int64(self.capacity),
                self.row_keys,
                rows,
            )
            kernel((blocks,), (_THREADS,), args)
        new_size = min(int(self.counter[0]), self.capacity + 1)
        if new_size > self.capacity:
            raise ValueError(f"more distinct keys than table capacity {self.capacity}")
        new_keys = cp.sort(self.row_keys[self.size : new_size])
        self.size = new_size
        return rows, new_keys


class CupyOps:
    """The array-module-specific parts on the GPU."""

    name = "cupy"

    def __init__(self, dtype: str = "float32") -> None:
        self.xp = import_cupy()
        self.dtype = dtype
        self._peak = 0

    def key_map(self, capacity: int) -> CupyKeyMap:
        return CupyKeyMap(capacity, self.dtype)

    def segment_sum(self, values: Any, order: Any, starts: Any) -> Any:
        cp = self.xp
        values = cp.ascontiguousarray(values)
        n_segments = int(starts.size)
        dim = int(values.shape[1])
        out = cp.empty((n_segments, dim), dtype=values.dtype)
        if n_segments:
            kernel = _Kernels.get(self.dtype).get_function("segment_sum")
            args = (
                values,
                order,
                starts,
                np.int64(n_segments),
                np.int64(values.shape[0]),
                np.int32(dim),
                out,
            )
            shared = _THREADS * values.dtype.itemsize
            kernel((n_segments,), (_THREADS,), args, shared_mem=shared)
        return out

    def sparse_adam(
        self, table: Any, m: Any, v: Any, rows: Any, grad: Any, alpha: float, cfg: WorkloadConfig
    ) -> None:
        cp = self.xp
        n, dim = int(rows.size), int(table.shape[1])
        if not n:
            return
        kernel = _Kernels.get(self.dtype).get_function("sparse_adam")
        blocks = (n * dim + _THREADS - 1) // _THREADS
        args = (
            table,
            m,
            v,
            rows,
            cp.ascontiguousarray(grad),
            np.int64(n),
            np.int32(dim),
            np.float64(alpha),
            np.float64(cfg.beta_1),
            np.float64(cfg.beta_2),
            np.float64(cfg.epsilon),
        )
        kernel((blocks,), (_THREADS,), args)

    def sync(self) -> None:
        self.xp.cuda.get_current_stream().synchronize()
        self._peak = max(self._peak, int(self.xp.get_default_memory_pool().used_bytes()))

    def to_numpy(self, a: Any) -> np.ndarray:
        return self.xp.asnumpy(a)

    def peak_device_memory_bytes(self) -> int | None:
        return self._peak
