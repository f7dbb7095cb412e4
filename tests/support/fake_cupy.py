"""A stand-in ``cupy`` module for tests without a GPU: NumPy arrays, and the project's
CUDA source compiled for the CPU with ``cuda_on_host.h`` (g++).

Only what :mod:`jupyterlab_nvdashboard.workload.cupy_ops` and the ``xp`` step use is
provided. ``RawModule`` kernels run the real CUDA source, and their arguments are
checked more strictly than CuPy does: every pointer must be a C-contiguous array of
exactly the kernel's element type, every scalar a NumPy scalar of exactly its C type.
``ElementwiseKernel`` runs its real operation string, compiled as a C++ loop.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
import types
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

HEADER = Path(__file__).with_name("cuda_on_host.h")
C_TO_NUMPY = {
    "float": np.float32, "double": np.float64, "int": np.int32, "long long": np.int64,
    "unsigned long long": np.uint64, "unsigned": np.uint32,
}
_BUILD_DIR = Path(tempfile.mkdtemp(prefix="fake_cupy_"))
# The compiled kernels live as long as this test process, and not a moment longer.
atexit.register(shutil.rmtree, _BUILD_DIR, ignore_errors=True)
_CACHE: dict[str, ctypes.CDLL] = {}
#: Kernels launched through this module, by name (RawModule and ElementwiseKernel).
LAUNCHES: Counter = Counter()


def available() -> bool:
    return shutil.which("g++") is not None


def _compile(source: str) -> ctypes.CDLL:
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    if key not in _CACHE:
        src, lib = _BUILD_DIR / f"{key}.cpp", _BUILD_DIR / f"{key}.so"
        src.write_text(source)
        done = subprocess.run(
            ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread",
             "-Wall", "-Werror", "-Wno-unknown-pragmas", f"-I{HEADER.parent}",
             "-o", str(lib), str(src)],
            capture_output=True, text=True, timeout=300,
        )
        if done.returncode:
            raise RuntimeError(f"host compile failed:\n{done.stderr}")
        _CACHE[key] = ctypes.CDLL(str(lib))
    return _CACHE[key]


def _param(text: str) -> tuple[str, str, bool]:
    """("const index_t*", "keys", True) from "const index_t* keys"."""
    text = " ".join(text.split())
    ctype, name = text.rsplit(" ", 1)
    while name.startswith("*"):
        ctype, name = ctype + "*", name[1:]
    return ctype, name, "*" in ctype


class _HostKernel:
    def __init__(self, lib: ctypes.CDLL, name: str, params: list, typedefs: dict) -> None:
        self.fn = getattr(lib, f"host_launch_{name}")
        self.fn.restype = ctypes.c_int
        self.name, self.params, self.typedefs = name, params, typedefs

    def _dtype(self, ctype: str) -> Any:
        base = " ".join(w for w in ctype.replace("*", " ").split() if w != "const")
        return np.dtype(C_TO_NUMPY[self.typedefs.get(base, base)])

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        assert len(args) == len(self.params), f"{self.name}: {len(args)} arguments"
        keep, ptrs = [], []
        for (ctype, pname, is_ptr), arg in zip(self.params, args, strict=True):
            want = self._dtype(ctype)
            if is_ptr:
                assert isinstance(arg, np.ndarray), f"{self.name}.{pname}: not an array"
                assert arg.dtype == want, f"{self.name}.{pname}: {arg.dtype}, want {want}"
                assert arg.flags.c_contiguous, f"{self.name}.{pname}: not contiguous"
                ptrs.append(arg.ctypes.data)
            else:
                assert isinstance(arg, np.generic), f"{self.name}.{pname}: {type(arg)}"
                assert arg.dtype == want, f"{self.name}.{pname}: {arg.dtype}, want {want}"
                holder = np.array(arg)
                keep.append(holder)
                ptrs.append(holder.ctypes.data)
        LAUNCHES[self.name] += 1
        array = (ctypes.c_void_p * max(1, len(ptrs)))(*ptrs)
        errors = self.fn(ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), array)
        assert errors == 0, f"{self.name}: {errors} lane errors (block not whole warps, " \
                            "or a shuffle missing a lane)"


class RawModule:
    """Compiles the CUDA ``code`` for the host; ``get_function`` returns a launcher."""

    def __init__(self, code: str, **_: Any) -> None:
        typedefs = dict(
            (alias, ctype) for ctype, alias in re.findall(r"typedef ([\w ]+?) (\w+);", code))
        kernels = {
            name: [_param(p) for p in plist.split(",")]
            for name, plist in re.findall(
                r'extern "C" __global__ void (\w+)\(([^)]*)\)', code)
        }
        wrappers = []
        for name, params in kernels.items():
            call = ", ".join(
                f"({ctype})a[{i}]" if is_ptr else f"*({ctype}*)a[{i}]"
                for i, (ctype, _, is_ptr) in enumerate(params))
            wrappers.append(
                f'extern "C" int host_launch_{name}(unsigned grid, unsigned block, void** a) '
                f"{{ return cuda_on_host_launch(grid, block, [&] {{ {name}({call}); }}); }}")
        lib = _compile('#include "cuda_on_host.h"\n' + code + "\n" + "\n".join(wrappers))
        self._kernels = {n: _HostKernel(lib, n, p, typedefs) for n, p in kernels.items()}

    def get_function(self, name: str) -> _HostKernel:
        return self._kernels[name]


class ElementwiseKernel:
    """Runs ``operation`` (CUDA C) over broadcast inputs, in place on the outputs."""

    def __init__(self, in_params: str, out_params: str, operation: str, name: str) -> None:
        self.ins = [p.split()[1] for p in in_params.split(",")]
        self.outs = [p.split()[1] for p in out_params.split(",")]
        self.operation, self.name = operation, name

    def __call__(self, *args: Any) -> None:
        ins, outs = args[: len(self.ins)], args[len(self.ins):]
        assert len(outs) == len(self.outs), f"{self.name}: outputs must be given"
        dtype = outs[0].dtype
        shape = outs[0].shape
        ctype = {np.float32: "float", np.float64: "double"}[dtype.type]
        arrays = []
        for name, a in zip(self.ins, ins, strict=True):
            assert np.asarray(a).dtype == dtype, f"{self.name}.{name}: {np.asarray(a).dtype}"
            arrays.append(np.ascontiguousarray(np.broadcast_to(a, shape)))
        for name, a in zip(self.outs, outs, strict=True):
            assert isinstance(a, np.ndarray) and a.flags.c_contiguous, f"{self.name}.{name}"
            assert a.shape == shape and a.dtype == dtype
            arrays.append(a)
        loads = [f"const T {n} = ((const T*)_raw[{k}])[i];" for k, n in enumerate(self.ins)]
        loads += [f"T& {n} = ((T*)_raw[{len(self.ins) + k}])[i];"
                  for k, n in enumerate(self.outs)]
        source = (
            f"#include <cmath>\nusing std::exp; using std::sqrt;\ntypedef {ctype} T;\n"
            f'extern "C" void run(long long n, void** _raw) {{ for (long long i = 0; i < n; ++i)'
            f" {{ {' '.join(loads)} {self.operation}; }} }}"
        )
        fn = _compile(source).run
        LAUNCHES[self.name] += 1
        ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        fn(ctypes.c_longlong(int(np.prod(shape))), ptrs)


#: CuPy functions whose result size depends on the data, or that copy to the host: each
#: waits for the GPU. Missing from the stand-in, so code that calls them fails loudly.
HOST_SYNCING = ("nonzero", "flatnonzero", "argwhere", "unique", "bincount", "extract",
                "compress", "asnumpy")


def make_module(forbid_host_sync: bool = False) -> types.ModuleType:
    """A ``cupy`` module: NumPy's functions plus the pieces above (``forbid_host_sync``:
    without the functions in HOST_SYNCING)."""
    module = types.ModuleType("cupy")
    module.__dict__.update({k: getattr(np, k) for k in dir(np) if not k.startswith("_")})
    if forbid_host_sync:
        for name in HOST_SYNCING:
            module.__dict__.pop(name, None)
    module.RawModule = RawModule
    module.ElementwiseKernel = ElementwiseKernel
    if not forbid_host_sync:
        module.asnumpy = np.asarray
    stream = types.SimpleNamespace(synchronize=lambda: None)
    module.cuda = types.SimpleNamespace(
        get_current_stream=lambda: stream,
        Device=lambda: types.SimpleNamespace(compute_capability="90"),
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
    )
    pool = types.SimpleNamespace(total_bytes=lambda: 0, free_all_blocks=lambda: None)
    module.get_default_memory_pool = lambda: pool
    return module
