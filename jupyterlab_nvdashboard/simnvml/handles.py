"""Device handles as this driver hands them out.

``nvmlDevice_t`` is an opaque pointer in ``nvml.h``: the driver writes one into the
caller's handle and the caller passes it back unchanged. This driver's pointers are tokens
that name a GPU (and a MIG device on it); nothing ever dereferences them.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

_BASE = 0x5100_0000  # any nonzero address: a NULL handle is an invalid argument
_NO_MIG = 0xFF


@dataclass(frozen=True)
class SimulatedHandle:
    index: int  # the GPU's nvidia-smi index
    mig: int | None = None  # position among the parent's MIG devices

    @property
    def token(self) -> int:
        return _BASE + (self.index << 8) + (_NO_MIG if self.mig is None else self.mig)


def address_of(pointer: Any) -> int:
    """The address a ctypes pointer (or a token written into one) holds; 0 for None."""
    if pointer is None:
        return 0
    if isinstance(pointer, int):
        return pointer
    try:  # a ctypes pointer variable: read the address it holds (3x cheaper than a cast)
        return ctypes.c_void_p.from_buffer(pointer).value or 0
    except TypeError:
        return ctypes.cast(pointer, ctypes.c_void_p).value or 0


def handle_from(pointer: Any) -> SimulatedHandle | None:
    """The handle a caller passed back, or None when it is not one of this driver's."""
    address = address_of(pointer) - _BASE
    if address < 0:
        return None
    handle = _HANDLES.get(address)
    if handle is None:  # handles are immutable values: one per address serves every call
        index, mig = address >> 8, address & 0xFF
        handle = _HANDLES[address] = SimulatedHandle(index, None if mig == _NO_MIG else mig)
    return handle


_HANDLES: dict[int, SimulatedHandle] = {}


def write_pointer(target: Any, address: int) -> None:
    """Store ``address`` in the caller's pointer variable (an ``nvmlDevice_t *`` out-param)."""
    ctypes.c_void_p.from_buffer(target).value = address
