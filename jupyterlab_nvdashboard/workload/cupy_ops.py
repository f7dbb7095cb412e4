"""The CuPy pieces of the ``cupy-plugin`` path: four small CUDA kernels and four fused
elementwise ones. CuPy is imported lazily; this module imports without it.

The step itself (and the NumPy reference of every piece here) is
:mod:`.xp_path`. Kernels, all without a host sync:

* ``gather_count``: the forward gather ``out[j] = table[keys[j]]``, one thread per
  element, which also counts the lookups of each key (``atomicAdd`` on ``counts``).
* ``order_by_key``: the counting sort's scatter. Each lookup takes the next free slot of
  its key's run by counting the key's counter down, so the run of key ``k`` is
  ``order[ends[k-1]:ends[k]]`` and ``counts`` is zero again for the next step.
* ``segment_sum_adam``: one warp per key. The warp sums its run's gradient rows (lanes
  stride over the run, then a shuffle reduction), and lanes ``0..E-1`` apply lazy Adam to
  the row. Untouched keys exit at once.
* ``adam_flat``: Adam over the MLP's flat weight, moment and gradient buffers.

``adam_element`` is the only CUDA copy of Adam's math (the Python one is
:func:`.adam.adam_update`); ``benchmarks/gpu_check.py`` checks one against the other.
Kernels are compiled per (float type, index type); scalar arguments are passed as
NumPy scalars of exactly the C types below.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ._lazy import import_cupy
from .adam import AdamCoefficients

KERNEL_SOURCE = r"""
typedef REAL real;
typedef INDEX index_t;

#define WARP 32
#define CHUNK 8  /* embedding columns a warp sums at once (registers per lane) */

__device__ __forceinline__ void adam_element(
        real* w, real* m, real* v, real g,
        real one_minus_beta_1, real one_minus_beta_2, real alpha, real eps) {
    real mi = *m + (g - *m) * one_minus_beta_1;
    real vi = *v + (g * g - *v) * one_minus_beta_2;
    *m = mi;
    *v = vi;
    *w -= alpha * mi / (sqrt(vi) + eps);
}

__device__ __forceinline__ int add_and_get_old(int* p, int x) {
    return atomicAdd(p, x);
}

__device__ __forceinline__ long long add_and_get_old(long long* p, long long x) {
    /* Two's complement: adding the unsigned image of a negative x subtracts. */
    return (long long)atomicAdd((unsigned long long*)p, (unsigned long long)x);
}

extern "C" __global__ void gather_count(
        const index_t* keys, long long n, const real* table, int dim,
        real* out, index_t* counts) {
    long long total = n * dim;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += stride) {
        long long j = i / dim;
        int c = (int)(i - j * dim);
        index_t key = keys[j];
        out[i] = table[(long long)key * dim + c];
        if (c == 0) add_and_get_old(&counts[key], (index_t)1);
    }
}

extern "C" __global__ void order_by_key(
        const index_t* keys, long long n, const index_t* ends, index_t* counts,
        index_t* order) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < n;
         j += stride) {
        index_t key = keys[j];
        /* The old count runs from counts[key] down to 1 over the key's lookups. */
        index_t left = add_and_get_old(&counts[key], (index_t)-1);
        order[ends[key] - left] = (index_t)j;
    }
}

extern "C" __global__ void segment_sum_adam(
        const index_t* order, const index_t* ends, long long n_keys,
        const real* grads, int dim, real* table, real* m, real* v,
        real one_minus_beta_1, real one_minus_beta_2, real alpha, real eps) {
    /* Blocks are whole warps, so key is the same on all 32 lanes: every return below
       is taken by the whole warp, and the full-mask shuffles see all lanes. */
    long long key = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / WARP;
    int lane = threadIdx.x % WARP;
    if (key >= n_keys) return;
    index_t begin = key == 0 ? (index_t)0 : ends[key - 1];
    index_t end = ends[key];
    if (begin == end) return;  /* untouched row: lazy Adam leaves it alone */
    for (int c0 = 0; c0 < dim; c0 += CHUNK) {
        real acc[CHUNK];
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) acc[c] = 0;
#pragma unroll 4
        for (index_t j = begin + lane; j < end; j += WARP) {
            const real* g = grads + (long long)order[j] * dim + c0;
#pragma unroll
            for (int c = 0; c < CHUNK; ++c) {
                if (c0 + c < dim) acc[c] += g[c];
            }
        }
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) {
#pragma unroll
            for (int offset = WARP / 2; offset > 0; offset /= 2) {
                acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], offset);
            }
        }
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) {
            if (lane == c && c0 + c < dim) {
                long long p = key * dim + c0 + c;
                adam_element(table + p, m + p, v + p, acc[c],
                             one_minus_beta_1, one_minus_beta_2, alpha, eps);
            }
        }
    }
}

extern "C" __global__ void adam_flat(
        real* w, real* m, real* v, const real* g, long long n,
        real one_minus_beta_1, real one_minus_beta_2, real alpha, real eps) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += stride) {
        adam_element(w + i, m + i, v + i, g[i],
                     one_minus_beta_1, one_minus_beta_2, alpha, eps);
    }
}
"""

C_TYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long"}
THREADS = 256  # a multiple of 32: segment_sum_adam relies on whole warps
MAX_BLOCKS = 1 << 16  # grid-stride kernels: enough blocks to fill any current GPU
KERNELS = ("gather_count", "order_by_key", "segment_sum_adam", "adam_flat")


def kernel_source(dtype: str, index: str) -> str:
    """The CUDA source for float type ``dtype`` and index type ``index``."""
    return KERNEL_SOURCE.replace("REAL", C_TYPES[dtype]).replace("INDEX", C_TYPES[index])


def grid_stride_blocks(work_items: int) -> int:
    return max(1, min(MAX_BLOCKS, -(-work_items // THREADS)))


def warp_per_item_blocks(items: int) -> int:
    return max(1, -(-items * 32 // THREADS))


def set_cupy_tf32(cp: Any, enabled: bool) -> bool:
    """Set TF32 for CuPy's float32 matmuls; return whether it is now in effect.

    CuPy keeps the cuBLAS compute type per dtype in ``_routines_linalg`` (set from
    ``CUPY_TF32`` on first use; 7 is its TF32 value, 1 its default). TF32 exists from
    compute capability 8.0 on.
    """
    try:
        from cupy._core import _routines_linalg as linalg
    except ImportError:  # a CuPy without that module: the documented variable
        os.environ["CUPY_TF32"] = "1" if enabled else "0"
        on = enabled
    else:
        tf32 = getattr(linalg, "COMPUTE_TYPE_TF32", 7)
        linalg.set_compute_type(np.float32, tf32 if enabled else getattr(
            linalg, "COMPUTE_TYPE_DEFAULT", 1))
        on = linalg.get_compute_type(np.float32) == tf32
    major = int(cp.cuda.Device().compute_capability) // 10
    return bool(on and major >= 8)


class CupyOps:
    """The fused pieces on the GPU, with the same signatures as :class:`.xp_path.NumpyOps`."""

    name = "cupy"

    def __init__(self, dtype: str = "float32") -> None:
        cp = self.xp = import_cupy()
        self.dtype = dtype
        self.real = np.dtype(dtype).type
        self._modules: dict[str, Any] = {}
        self._bias_relu = cp.ElementwiseKernel(
            "T b", "T h", "T s = h + b; h = s > (T)0 ? s : (T)0", "nvd_bias_relu")
        self._bias = cp.ElementwiseKernel("T b", "T h", "h += b", "nvd_bias")
        self._relu_grad = cp.ElementwiseKernel(
            "T a", "T dz", "if (!(a > (T)0)) dz = 0", "nvd_relu_grad")
        self._bce_grad = cp.ElementwiseKernel(
            "T z, T y, T batch", "T out",
            "out = ((T)1 / ((T)1 + exp(-z)) - y) / batch", "nvd_bce_grad")

    def _kernel(self, name: str, index: Any) -> Any:
        index = np.dtype(index).name
        if index not in self._modules:
            code = kernel_source(self.dtype, index)
            self._modules[index] = self.xp.RawModule(code=code)
        return self._modules[index].get_function(name)

    def _adam_args(self, c: AdamCoefficients) -> tuple[Any, ...]:
        r = self.real
        return (r(c.one_minus_beta_1), r(c.one_minus_beta_2), r(c.alpha), r(c.epsilon))

    def use_tf32(self, enabled: bool) -> bool:
        return set_cupy_tf32(self.xp, enabled)

    def gather_count(self, table: Any, keys: Any, counts: Any, out: Any) -> None:
        n, dim = int(keys.size), int(table.shape[1])
        if n:
            kernel = self._kernel("gather_count", keys.dtype)
            args = (keys, np.int64(n), table, np.int32(dim), out, counts)
            kernel((grid_stride_blocks(n * dim),), (THREADS,), args)

    def order_by_key(self, keys: Any, counts: Any, ends: Any) -> Any:
        n = int(keys.size)
        order = self.xp.empty(n, dtype=keys.dtype)
        if n:
            kernel = self._kernel("order_by_key", keys.dtype)
            kernel((grid_stride_blocks(n),), (THREADS,), (keys, np.int64(n), ends, counts, order))
        return order

    def segment_sum_adam(
        self, table: Any, m: Any, v: Any, grads: Any, order: Any, ends: Any,
        c: AdamCoefficients,
    ) -> None:
        n_keys, dim = int(ends.size), int(table.shape[1])
        grads = self.xp.ascontiguousarray(grads)
        kernel = self._kernel("segment_sum_adam", order.dtype)
        args = (order, ends, np.int64(n_keys), grads, np.int32(dim), table, m, v,
                *self._adam_args(c))
        kernel((warp_per_item_blocks(n_keys),), (THREADS,), args)

    def adam_flat(self, p: Any, c: AdamCoefficients) -> None:
        kernel = self._kernel("adam_flat", np.int32)
        args = (p.weights, p.m, p.v, p.grads, np.int64(p.size), *self._adam_args(c))
        kernel((grid_stride_blocks(p.size),), (THREADS,), args)

    def matmul_into(self, a: Any, b: Any, out: Any) -> None:
        """cuBLAS writes the product straight into ``out`` (a view of the flat buffer)."""
        self.xp.matmul(a, b, out=out)

    def bias_relu(self, h: Any, b: Any) -> None:
        self._bias_relu(b, h)

    def bias(self, h: Any, b: Any) -> None:
        self._bias(b, h)

    def relu_grad(self, activation: Any, dz: Any) -> None:
        self._relu_grad(activation, dz)

    def bce_grad(self, z: Any, labels: Any, out: Any) -> None:
        self._bce_grad(z, labels, self.real(z.shape[0]), out)

    def to_numpy(self, a: Any) -> np.ndarray:
        return self.xp.asnumpy(a)

    def synchronize(self) -> None:
        self.xp.cuda.get_current_stream().synchronize()

    def peak_device_memory_bytes(self) -> int | None:
        """Bytes CuPy's memory pool has reserved: it keeps freed blocks, so this is the
        high-water mark of the path's allocations (rounded up to the pool's blocks)."""
        return int(self.xp.get_default_memory_pool().total_bytes())
