"""The binary frame every live page decodes: one JSON header, then float64 columns.

Layout (all little-endian)::

    b"NVD1"                      4 bytes, format and version
    header length H              uint32
    header                       H bytes of UTF-8 JSON
    zero padding                 to a multiple of 8 bytes from the frame's start
    column 0 .. column C-1       rows x float64 each, in the order of header["columns"]

The header says which history it continues (``after``: the last sequence number the page
already has, -1 for none) and where it ends (``seq``), how many ``rows`` it carries, the
numeric ``columns`` and any ``text`` columns (short strings, e.g. bar labels), and whether it
replaces what the page shows (``reset``). A long window's frame may carry ``open``: rows
the page draws after its own until the next frame replaces them (the bucket still open and
the newest sample), as JSON columns with null for "not available". NaN in a column
means "not available": binary float64 carries it exactly, where JSON has no NaN at all.
The padding lets the browser view each column as a ``Float64Array`` without copying.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAGIC = b"NVD1"
_PREFIX = struct.Struct("<4sI")
FLOAT = np.dtype("<f8")


@dataclass
class Rows:
    """Columns of equal length: numeric (float64, NaN = not available) and text."""

    numeric: dict[str, np.ndarray]
    text: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        for column in self.numeric.values():
            return len(column)
        for column in self.text.values():
            return len(column)
        return 0


def encode(rows: Rows, after: int, seq: int, reset: bool, **extra: Any) -> bytes:
    """One frame: ``rows`` continue the page's history after ``after`` and end at ``seq``."""
    header = {"after": after, "seq": seq, "reset": reset, "rows": rows.count,
              "columns": list(rows.numeric), "text": rows.text, **extra}
    header_bytes = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    start = _PREFIX.size + len(header_bytes)
    padding = -start % 8
    body = b"".join(np.ascontiguousarray(column, dtype=FLOAT).tobytes()
                    for column in rows.numeric.values())
    return b"".join((_PREFIX.pack(MAGIC, len(header_bytes)), header_bytes,
                     b"\0" * padding, body))


def decode(frame: bytes) -> tuple[dict[str, Any], Rows]:
    """The header and rows of one frame (tests, benchmarks and Python clients)."""
    magic, header_length = _PREFIX.unpack_from(frame)
    if magic != MAGIC:
        raise ValueError(f"not an nvdashboard frame (starts with {magic!r})")
    header = json.loads(frame[_PREFIX.size:_PREFIX.size + header_length])
    offset = _PREFIX.size + header_length
    offset += -offset % 8
    count = header["rows"]
    numeric = {}
    for name in header["columns"]:
        numeric[name] = np.frombuffer(frame, dtype=FLOAT, count=count, offset=offset)
        offset += count * FLOAT.itemsize
    return header, Rows(numeric, header["text"])
