"""The workload's event stream: JSON lines, one object per line, flushed per event.

Every event has ``"event"``, ``"run_id"`` and ``"time"`` (Unix epoch seconds, float).
The kinds, in the order a run writes them:

- ``start``: ``path``, ``device``, ``preset``, ``pid`` and ``pid_start_ticks`` (when that
  process started, in clock ticks since boot, on Linux: with the PID, it names the
  process), ``config``, ``iterations``, ``warmup`` and ``gpu`` (``{"uuid", "index",
  "visible"}``: the GPU the run is on, or was pinned to, and the run's
  ``CUDA_VISIBLE_DEVICES`` as it was set, which the server resolves against its own
  devices; any may be ``null``);
  A sharded run (``--shards``) adds ``shards``: ``{"count", "placement", "backend"}`` as
  asked for;
- ``warmup_step``: one untimed warm-up iteration is done: ``step`` (1-based; the start
  event's ``warmup`` says how many there are) and ``ms``, so a reader can show warm-up
  progress (a first step that traces or compiles can take seconds);
- ``warmup_end``: start-up (imports, building the table, tracing) and warm-up are over; the
  timed part starts here. A sharded run's carries ``shards`` as it runs: the backend chosen,
  ``emulated`` (N shards in one process), and ``ranks`` (``rank``, ``pid``, ``device``,
  ``gpu_uuid``, ``rows``);
- ``iteration``: ``iteration``, ``ms``, ``samples_per_s``, ``loss``, and ``input_ms`` (the
  part of ``ms`` spent waiting on the input stage), ``host_ms`` (the part spent in the
  path's host-only stage, the device waiting: the hashtable's CPU-only lookup; 0 for paths
  without one) and ``cpu_ms`` (CPU time the process used during the step, all its
  threads), where the run measures them (:func:`device_share` reads them); a sharded run's
  ``exchange_bytes``: what all its ranks sent each other in that step, and ``exchange_ms``:
  the wall time of the step's collectives (waits for the other ranks included);
- ``end``: the summary (``iterations``, ``median_ms``, ..., ``peak_device_memory_bytes``,
  ``interrupted``) and ``error``, the one-line message of a failure (``null`` when none);
  a sharded run's ``exchange``: median bytes per step by kind (``counts``, ``keys``,
  ``vectors``, ``gradients``, ``all_reduce``) and their ``total``.

:func:`parse_event` is the one parser: the workload's own reader and the dashboard server
both use it, so a line means the same to both. It validates a line once and returns only
the known fields, with their types checked; anything else is ``None`` (a bad line, which
readers skip and count).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

EVENT_KINDS = ("start", "warmup_step", "warmup_end", "iteration", "end")
MAX_LINE_BYTES = 64 * 1024  # a longer line is not an event; readers drop it unread
MAX_TEXT_CHARS = 500  # strings (an error message, a path name) are cut to this


def new_run_id() -> str:
    """Sortable, unique: ``YYYYmmdd-HHMMSS-<8 hex>``."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


class EventWriter:
    """Appends events to a JSON lines file, one flushed line per event."""

    def __init__(self, path: str | os.PathLike[str], run_id: str) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Never through a symlink: whoever can write the runs folder must not be able to
        # point a run's events at another file of this user's.
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                             | getattr(os, "O_CLOEXEC", 0), 0o666)
        self._file: IO[str] = open(descriptor, "a", encoding="utf-8")  # noqa: SIM115

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


# ---- the one parser ---------------------------------------------------------------------

class _Invalid(Exception):
    pass


# Ranges: a value outside them is a bad line, not a number to compute with. A 400-digit
# integer made ``math.isfinite`` raise (OverflowError) and lost the rest of its chunk.
MAX_COUNT = 10**12  # iterations, batch sizes, vocabulary sizes
MAX_MAGNITUDE = 1e300  # any other number (a loss, a rate, bytes)
MAX_EPOCH_S = 1e11  # event times: Unix seconds, up to the year 5138
MAX_STEP_MS = 1e9  # one step of eleven days
MAX_PID = 1 << 22  # Linux's largest pid_max
MAX_RUN_ID_CHARS = 100


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid
    if isinstance(value, int) and abs(value) > MAX_MAGNITUDE:
        raise _Invalid  # compared as integers: a huge int never becomes a float
    if not -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE:  # also refuses NaN and infinities
        raise _Invalid
    return float(value)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise _Invalid
    return value


def _positive(value: Any) -> int:
    if _count(value) == 0:
        raise _Invalid
    return value


def _pid(value: Any) -> int:
    if _count(value) == 0 or value > MAX_PID:
        raise _Invalid
    return value


def _epoch(value: Any) -> float:
    number = _number(value)
    if not 0 < number <= MAX_EPOCH_S:
        raise _Invalid
    return number


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid
    return value[:MAX_TEXT_CHARS]


def _run_id(value: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_RUN_ID_CHARS \
            or not value.isprintable():
        raise _Invalid
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid
    return value


def _duration(value: Any) -> float:
    number = _number(value)
    if number < 0:
        raise _Invalid
    return number


def _step_ms(value: Any) -> float:
    number = _duration(value)
    if number > MAX_STEP_MS:
        raise _Invalid
    return number


# The workload settings a start event carries (workload/config.py::WorkloadConfig), each
# with its type: a table row computes with them (``batch / median``), so a string there
# made every /Workload load answer 500. A setting of the wrong type makes the line bad.
_CONFIG_FIELDS: dict[str, Callable[[Any], Any]] = {
    **dict.fromkeys(("fields", "hotness", "vocabulary", "embedding_size", "hidden_units",
                     "batch", "pool_batches"), _positive),
    **dict.fromkeys(("hidden_layers", "seed"), _count),  # 0 is a valid setting for both
    **dict.fromkeys(("learning_rate", "beta_1", "beta_2", "epsilon", "zipf_exponent"),
                    _number),
    **dict.fromkeys(("distribution", "dtype"), _text),
    "tf32": _flag,
}


def _config(value: Any) -> dict[str, Any]:
    """The workload settings: the known ones type-checked, others kept if plain and small."""
    if not isinstance(value, dict) or len(value) > 64:
        raise _Invalid
    kept: dict[str, Any] = {}
    for key, item in value.items():
        name = str(key)[:64]
        check = _CONFIG_FIELDS.get(name)
        if check is not None:
            if item is not None:
                kept[name] = check(item)
            continue
        try:  # a setting this release does not know: shown if it is a plain value
            kept[name] = _text(item) if isinstance(item, str) else _number(item)
        except _Invalid:
            continue
    return kept


def _gpu(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid
    uuid_text, index, visible = value.get("uuid"), value.get("index"), value.get("visible")
    return {"uuid": None if uuid_text is None else _text(uuid_text),
            "index": None if index is None else _count(index),
            "visible": None if visible is None else _text(visible)}


MAX_RANKS = 64  # ranks of a sharded run named in its events (workload/config.py MAX_SHARDS)
_EXCHANGE_KINDS = ("counts", "keys", "vectors", "gradients", "all_reduce", "total")


def _rank(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid
    pid, device, uuid_text = value.get("pid"), value.get("device"), value.get("gpu_uuid")
    rows = value.get("rows")
    return {"rank": _count(value.get("rank")), "pid": None if pid is None else _pid(pid),
            "device": None if device is None else _text(device),
            "gpu_uuid": None if uuid_text is None else _text(uuid_text),
            "rows": None if rows is None else _count(rows)}


def _shards(value: Any) -> dict[str, Any]:
    """A sharded run's shards: count, placement, backend, emulated, and (after warm-up)
    each rank's process and device."""
    if not isinstance(value, dict):
        raise _Invalid
    count = _positive(value.get("count"))
    if count > MAX_RANKS:
        raise _Invalid
    ranks = value.get("ranks")
    if ranks is not None and (not isinstance(ranks, list) or len(ranks) > MAX_RANKS):
        raise _Invalid
    emulated = value.get("emulated")
    return {"count": count, "placement": _text(value.get("placement", "key")),
            "backend": _text(value.get("backend", "auto")),
            "emulated": None if emulated is None else _flag(emulated),
            "ranks": None if ranks is None else [_rank(r) for r in ranks]}


def _exchange(value: Any) -> dict[str, float]:
    """Bytes the whole job moves between shards per step, by kind (medians)."""
    if not isinstance(value, dict):
        raise _Invalid
    return {kind: _duration(value[kind]) for kind in _EXCHANGE_KINDS if kind in value}


Field = tuple[Callable[[Any], Any], bool]  # (checker, required)
_COMMON: dict[str, Field] = {"run_id": (_run_id, True), "time": (_epoch, True)}
_FIELDS: dict[str, dict[str, Field]] = {
    "start": {"path": (_text, False), "device": (_text, False), "preset": (_text, False),
              "pid": (_pid, False), "pid_start_ticks": (_count, False),
              "config": (_config, False), "iterations": (_count, False),
              "warmup": (_count, False), "gpu": (_gpu, False), "events_file": (_text, False),
              "shards": (_shards, False), "blas_threads": (_text, False)},
    "warmup_step": {"step": (_positive, True), "ms": (_step_ms, False)},
    "warmup_end": {"shards": (_shards, False)},
    "iteration": {"iteration": (_count, False), "ms": (_step_ms, True),
                  "samples_per_s": (_duration, False), "loss": (_number, False),
                  "input_ms": (_step_ms, False), "host_ms": (_step_ms, False),
                  "cpu_ms": (_step_ms, False), "exchange_bytes": (_duration, False),
                  "exchange_ms": (_step_ms, False)},
    "end": {"iterations": (_count, False), "median_ms": (_step_ms, False),
            "p10_ms": (_step_ms, False), "p90_ms": (_step_ms, False),
            "samples_per_s": (_duration, False), "peak_host_memory_bytes": (_duration, False),
            "peak_device_memory_bytes": (_duration, False), "interrupted": (_flag, False),
            "error": (_text, False), "exchange": (_exchange, False)},
}


def device_share(iteration: Mapping[str, Any]) -> float | None:
    """The share of an ``iteration`` event's step its training device worked: what is left
    of ``ms`` after the input wait (``input_ms``) and the host-only stage (``host_ms``), in
    which the device has nothing to do; ``None`` without a step time."""
    ms = iteration.get("ms")
    if not ms or ms <= 0:
        return None
    waiting = (iteration.get("input_ms") or 0.0) + (iteration.get("host_ms") or 0.0)
    return min(1.0, max(0.0, (ms - waiting) / ms))


def parse_event(line: bytes | str) -> dict[str, Any] | None:
    """The event on one line, with only its known fields and their types checked; else None.

    Optional fields that are missing or ``null`` come back as ``None``; a required field
    missing, or any field of the wrong type or out of its range, makes the whole line bad.
    Never raises, whatever the bytes.
    """
    try:
        return _parse(line)
    except Exception:  # noqa: BLE001 - one bad line must never cost its neighbours
        return None


def _parse(line: bytes | str) -> dict[str, Any] | None:
    if not isinstance(line, bytes | str) or len(line) > MAX_LINE_BYTES:
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("event") not in EVENT_KINDS:
        return None
    kind = record["event"]
    event: dict[str, Any] = {"event": kind}
    try:
        for name, (check, required) in {**_COMMON, **_FIELDS[kind]}.items():
            value = record.get(name)
            if value is None:
                if required:
                    raise _Invalid
                event[name] = None
            else:
                event[name] = check(value)
    except _Invalid:
        return None
    return event


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All valid events in ``path``; a partially written last line is skipped.

    Lines that are not valid events (a torn write in the middle of the file) are skipped
    too, so a reader never fails on a file that is being written.
    """
    events: list[dict[str, Any]] = []
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break  # still being written
            event = parse_event(line)
            if event is not None:
                events.append(event)
    return events
