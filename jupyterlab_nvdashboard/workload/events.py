"""The workload's event stream: JSON lines, one object per line, flushed per event.

Every event has ``"event"``, ``"run_id"`` and ``"time"`` (Unix epoch seconds, float).
The README ("Event format") lists the fields of ``start``, ``iteration`` and ``end``.
:func:`read_events` tolerates a partially written last line, so a dashboard can read a
file while the run is still appending to it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import IO, Any


def new_run_id() -> str:
    """Sortable, unique: ``YYYYmmdd-HHMMSS-<8 hex>``."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


class EventWriter:
    """Appends events to a JSON lines file, one flushed line per event."""

    def __init__(self, path: str | os.PathLike[str], run_id: str) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"event": event, "run_id": self.run_id, "time": time.time(), **fields}
        self._file.write(json.dumps(record, allow_nan=False, default=_jsonable) + "\n")
        self._file.flush()
        return record

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # NumPy scalars
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete events in ``path``; a partially written last line is skipped.

    Lines that are not JSON objects (a torn write in the middle of the file) are skipped
    too, so a reader never fails on a file that is being written.
    """
    events: list[dict[str, Any]] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # still being written
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "event" in record:
                events.append(record)
    return events
