"""Checks the project's NVML reader against ``nvidia-smi`` on a real GPU.

On a GPU machine (needs cupy, nvidia-ml-py and nvidia-smi; never TensorFlow)::

    python benchmarks/gpu_truth.py              # about 100 s; writes $OUT/gpu_truth.json (or ./)

Four phases of about 20 s each load GPU 0 in turn: ``idle``, ``matmul`` (a CuPy float32
matmul loop), ``h2d`` and ``d2h`` (copy loops of a 256 MiB pinned host buffer, which measure
their own bytes/s). Every 0.5 s the reader and ``nvidia-smi --query-gpu`` are read together.
Per phase and GPU the medians are compared with the issue's tolerances: utilization
+/-5 points, memory used and total +/-1 MiB, temperature +/-2 C, power +/-5 %, clocks +/-1
bin, PCIe RX (h2d) and TX (d2h) within 10 % of the copy loop's rate, and SM activity (GPM,
Hopper and later) above 80 % under matmul and below 10 % when idle, with nvidia-smi's
utilization beside it: the two differ by design (utilization only says that a kernel ran).

The reader is read as the sampler reads it: ``NvmlReader.read()`` and then its reading
families (``GpmReader``, ``HealthReader``), so each reading carries GPM's SM activity and the
health clocks next to the core fields (GPM's own PCIe and NVLink rates as ``gpm_*``).

It prints a table and writes the table, the per-phase loads and the paired raw samples as
JSON. It exits 0 when it ran, whatever the checks say (it is a measurement), and 2 with one
line saying what is missing when it cannot run (no nvidia-smi, NVML, CuPy or GPU).

The pure parts (parsing nvidia-smi, medians, the tolerance checks, the table) are tested
without a GPU in ``tests/test_gpu_truth.py``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MIB = 2**20
PHASES = ("idle", "matmul", "h2d", "d2h")
# nvidia-smi's --query-gpu fields, in the order asked. An old nvidia-smi may reject one
# (memory.reserved is recent): the probe drops any rejected field except these two.
SMI_FIELDS = (
    "index", "uuid", "utilization.gpu", "memory.used", "memory.total", "memory.reserved",
    "temperature.gpu", "power.draw", "clocks.sm", "clocks.mem",
)
SMI_REQUIRED = ("index", "uuid")
SMI_OPTIONAL = ("memory.reserved",)
SMI_TIMEOUT_S = 10.0
# When the supported-clock list cannot be read, one clock bin is taken as 15 MHz (the
# graphics-clock step of recent NVIDIA data-centre GPUs).
DEFAULT_CLOCK_BIN_MHZ = 15.0
MAX_SAMPLES_PER_PHASE = 60  # raw samples kept in the JSON, evenly spread over the phase
MATMUL_SIZE = 8192  # float32 n x n: about 18 ms a matmul on an H100/H200
COPY_BUFFER_BYTES = 256 * MIB

PASS, FAIL, NA = "PASS", "FAIL", "N/A"
NOT_READ = "not read by the reader"


class CannotRun(Exception):
    """A prerequisite is missing; the message is the one line printed."""


# ----- nvidia-smi output ------------------------------------------------------------------
def parse_smi_value(text: str) -> int | float | str | None:
    """One CSV cell of ``--format=csv,noheader,nounits``: a number, a string or None.

    nvidia-smi writes ``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``, ``[GPU is lost]``
    and so on, always in brackets, for values it cannot give; older versions write ``N/A``.
    """
    value = text.strip()
    if not value or value == "N/A" or (value.startswith("[") and value.endswith("]")):
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        return value
    return number if math.isfinite(number) else None


def parse_smi_csv(output: str, fields: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits``."""
    rows = []
    for cells in csv.reader(line for line in output.splitlines() if line.strip()):
        if len(cells) != len(fields):
            raise ValueError(f"nvidia-smi row has {len(cells)} values for {len(fields)} "
                             f"fields: {', '.join(cells)[:200]!r}")
        rows.append({field: parse_smi_value(cell) for field, cell in zip(fields, cells,
                                                                         strict=True)})
    return rows


_REJECTED_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')


def rejected_field(output: str) -> str | None:
    """The field an nvidia-smi too old for it names in ``Field "x" is not a valid field``."""
    match = _REJECTED_FIELD.search(output)
    return match.group(1) if match else None


def fields_after_rejection(fields: Sequence[str], output: str) -> list[str] | None:
    """The fields to ask for next after nvidia-smi failed with ``output``, or None to give up.

    A field nvidia-smi names as invalid is dropped (never index or uuid). When it names no
    field, the optional fields are dropped once, in case its message changed wording.
    """
    field = rejected_field(output)
    if field is not None:
        if field in fields and field not in SMI_REQUIRED:
            return [name for name in fields if name != field]
        return None
    optional = [name for name in fields if name in SMI_OPTIONAL]
    return [name for name in fields if name not in SMI_OPTIONAL] if optional else None


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


class SmiResult(NamedTuple):
    rows: list[dict[str, Any]] | None
    error: str | None


class NvidiaSmi:
    """Runs ``nvidia-smi --query-gpu`` as a subprocess, with a timeout.

    ``start()`` launches it and returns at once, so the reader can be read while it runs;
    ``finish()`` collects and parses its answer.
    """

    def __init__(self, executable: str = "nvidia-smi", fields: Sequence[str] = SMI_FIELDS,
                 timeout_s: float = SMI_TIMEOUT_S) -> None:
        self.executable = executable
        self.fields = list(fields)
        self.dropped: list[str] = []
        self.timeout_s = timeout_s

    def command(self) -> list[str]:
        return [self.executable, f"--query-gpu={','.join(self.fields)}",
                "--format=csv,noheader,nounits"]

    def start(self) -> subprocess.Popen | OSError:
        try:
            return subprocess.Popen(self.command(), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        except OSError as error:
            return error

    def _wait(self, handle: subprocess.Popen | OSError) -> tuple[int | None, str, str | None]:
        """(return code, stdout + stderr, error) of one run."""
        if isinstance(handle, OSError):
            return None, "", f"cannot start {self.executable}: {handle}"
        try:
            stdout, stderr = handle.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            handle.kill()
            handle.communicate()
            return None, "", f"nvidia-smi did not answer within {self.timeout_s:g} s"
        return handle.returncode, (stdout or "") + (stderr or ""), None

    def finish(self, handle: subprocess.Popen | OSError) -> SmiResult:
        code, output, error = self._wait(handle)
        if error is not None:
            return SmiResult(None, error)
        if code != 0:
            return SmiResult(None, f"nvidia-smi exited {code}: {first_line(output)}")
        try:
            return SmiResult(parse_smi_csv(output, self.fields), None)
        except ValueError as parse_error:
            return SmiResult(None, str(parse_error))

    def query(self) -> SmiResult:
        return self.finish(self.start())

    def probe(self) -> str | None:
        """Settle the fields this nvidia-smi accepts; None when it answers, else why not."""
        for _ in range(len(SMI_FIELDS) + 1):
            code, output, error = self._wait(self.start())
            if error is not None:
                return error
            if code == 0:
                try:
                    parse_smi_csv(output, self.fields)
                except ValueError as parse_error:
                    return str(parse_error)
                return None
            fields = fields_after_rejection(self.fields, output)
            if fields is None:
                return f"nvidia-smi exited {code}: {first_line(output) or '(no output)'}"
            self.dropped += [name for name in self.fields if name not in fields]
            self.fields = fields
        return "nvidia-smi rejected every field"


# ----- numbers and the tolerance checks ---------------------------------------------------
def median(values: Iterable[float | None]) -> float | None:
    """The median of the known values, or None when none is known."""
    known = [float(value) for value in values if value is not None]
    return statistics.median(known) if known else None


def within_abs(reader: float, reference: float, tolerance: float) -> bool:
    return abs(reader - reference) <= tolerance + 1e-9


def within_rel(reader: float, reference: float, fraction: float) -> bool:
    return abs(reader - reference) <= fraction * abs(reference) + 1e-12


def compare(kind: str, reader: float | None, reference: float | None,
            tolerance: float) -> str:
    """PASS, FAIL or N/A for one check.

    ``abs``: within ``tolerance`` units; ``rel``: within ``tolerance`` of the reference, as
    a fraction; ``above`` / ``below``: the reader's value against the threshold
    ``tolerance`` (``reference`` is unused).
    """
    if reader is None:
        return NA
    if kind == "above":
        return PASS if reader > tolerance else FAIL
    if kind == "below":
        return PASS if reader < tolerance else FAIL
    if reference is None:
        return NA
    if kind == "abs":
        return PASS if within_abs(reader, reference, tolerance) else FAIL
    if kind == "rel":
        return PASS if within_rel(reader, reference, tolerance) else FAIL
    raise ValueError(f"unknown check kind {kind!r}")


def clock_bin_mhz(supported: Iterable[float] | None) -> float | None:
    """One step of a GPU's clock: the smallest gap between its supported clocks."""
    values = sorted({float(value) for value in supported or () if value})
    gaps = [b - a for a, b in zip(values, values[1:], strict=False) if b > a]
    return min(gaps) if gaps else None


def format_cuda_uuid(raw: bytes | str | None) -> str | None:
    """CUDA's 16-byte device UUID as NVML and nvidia-smi write it (``GPU-8-4-4-4-12``)."""
    if isinstance(raw, str):
        return raw if raw.startswith(("GPU-", "MIG-")) else None
    if not isinstance(raw, bytes | bytearray) or len(raw) != 16:
        return None
    text = raw.hex()
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def match_cuda_uuid(raw: bytes | str | None, uuids: Sequence[str]) -> str | None:
    """The one of ``uuids`` that CUDA's device UUID names, or None.

    CuPy's ``getDeviceProperties()["uuid"]`` converts a C char[16], which Cython cuts at
    the first zero byte, so fewer than 16 bytes are matched as a prefix.
    """
    full = format_cuda_uuid(raw)
    if full is not None:
        return next((uuid for uuid in uuids if same_uuid(uuid, full)), None)
    if not isinstance(raw, bytes | bytearray) or not raw:
        return None
    prefix = bytes(raw).hex()
    found = [uuid for uuid in uuids
             if uuid.lower().removeprefix("gpu-").replace("-", "").startswith(prefix)]
    return found[0] if len(found) == 1 else None


def same_uuid(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and str(a).strip().lower() == str(b).strip().lower()


def reader_value(reading: Any, names: Sequence[str]) -> tuple[bool, float | None]:
    """(whether the reading has any of these fields, its value) for the first that exists."""
    for name in names:
        if hasattr(reading, name):
            value = getattr(reading, name, None)
            return True, None if value is None else float(value)
    return False, None


@dataclass(frozen=True)
class Check:
    """One comparison of a reader field with an nvidia-smi field, in display units."""

    name: str
    reader_fields: tuple[str, ...]  # the first one the reading has is used
    smi_field: str | None
    unit: str
    kind: str  # abs, rel, above, below (see compare)
    tolerance: float
    tolerance_text: str
    reader_scale: float = 1.0  # reader's unit -> display unit


SAME_MOMENT_CHECKS = (
    Check("utilization", ("utilization_pct",), "utilization.gpu", "%", "abs", 5.0,
          "+/-5 pts"),
    Check("memory used", ("memory_used_bytes",), "memory.used", "MiB", "abs", 1.0,
          "+/-1 MiB", 1 / MIB),
    Check("memory total", ("memory_total_bytes",), "memory.total", "MiB", "abs", 1.0,
          "+/-1 MiB", 1 / MIB),
    Check("memory reserved", ("memory_reserved_bytes",), "memory.reserved", "MiB", "abs",
          1.0, "+/-1 MiB", 1 / MIB),
    Check("temperature", ("temperature_c",), "temperature.gpu", "C", "abs", 2.0, "+/-2 C"),
    Check("power", ("power_w",), "power.draw", "W", "rel", 0.05, "+/-5 %"),
    # Clocks: the reader has none yet; these are the names it is expected to grow.
    Check("SM clock", ("sm_clock_mhz", "clock_sm_mhz", "clocks_sm_mhz"), "clocks.sm", "MHz",
          "abs", DEFAULT_CLOCK_BIN_MHZ, "+/-1 bin"),
    Check("memory clock", ("memory_clock_mhz", "clock_memory_mhz", "clocks_mem_mhz"),
          "clocks.mem", "MHz", "abs", DEFAULT_CLOCK_BIN_MHZ, "+/-1 bin"),
)
PCIE_CHECKS = {
    # RX is what the GPU receives: host-to-device copies.
    "h2d": Check("PCIe RX", ("pcie_rx_bytes_per_s",), None, "GB/s", "rel", 0.10,
                 "+/-10 % of copy loop", 1e-9),
    "d2h": Check("PCIe TX", ("pcie_tx_bytes_per_s",), None, "GB/s", "rel", 0.10,
                 "+/-10 % of copy loop", 1e-9),
}
SM_ACTIVITY_FIELD = "sm_activity_pct"
# The verdict is on SM activity alone; nvidia-smi's utilization is shown beside it.
SM_ACTIVITY_CHECKS = {
    "matmul": Check("SM activity", (SM_ACTIVITY_FIELD,), "utilization.gpu", "%", "above", 80.0,
                    "> 80 % (beside: smi util.)"),
    "idle": Check("SM activity", (SM_ACTIVITY_FIELD,), "utilization.gpu", "%", "below", 10.0,
                  "< 10 % (beside: smi util.)"),
}
GPM_EVERY_S = 0.2  # nvml.h: more than 100 ms between two GPM samples; we read every 0.5 s


class GpuPair(NamedTuple):
    """One GPU's reader reading and nvidia-smi row taken at the same moment."""

    reading: Any  # a GpuReading, or None when the reader gave none for this GPU
    smi: dict[str, Any] | None


def check_row(check: Check, phase: str, gpu: str, pairs: Sequence[GpuPair],
              reference: float | None = None, reference_note: str = "",
              dropped_smi_fields: Sequence[str] = (),
              tolerance: float | None = None, tolerance_text: str | None = None,
              ) -> dict[str, Any]:
    """One row of the result table: the medians over ``pairs`` and the verdict.

    The reference is nvidia-smi's ``check.smi_field`` unless ``reference`` is given (the
    copy loop's rate). ``tolerance`` overrides the check's own (a clock's bin size).
    """
    tolerance = check.tolerance if tolerance is None else tolerance
    row: dict[str, Any] = {
        "check": check.name, "phase": phase, "gpu": gpu, "unit": check.unit,
        "reader": None, "reference": None,
        "tolerance": tolerance_text or check.tolerance_text, "status": NA, "note": "",
    }
    present = [(False, None) if pair.reading is None
               else reader_value(pair.reading, check.reader_fields) for pair in pairs]
    if not any(has for has, _ in present):
        row["note"] = NOT_READ
        return row
    reader_values = [None if value is None else value * check.reader_scale
                     for _, value in present]  # one per pair, None where unknown
    row["reader"] = median(reader_values)
    notes = []
    if check.smi_field is not None:
        smi_values = [pair.smi.get(check.smi_field) if pair.smi else None for pair in pairs]
        row["reference"] = median(v if isinstance(v, int | float) else None
                                  for v in smi_values)
        if check.smi_field in dropped_smi_fields:
            notes.append(f"this nvidia-smi does not know {check.smi_field}")
        elif row["reference"] is None:
            notes.append(f"nvidia-smi gave no {check.smi_field}")
        # How often single pairs agree, as well as the medians.
        if check.kind in ("abs", "rel"):
            both = [(r, s) for r, s in zip(reader_values, smi_values, strict=True)
                    if r is not None and isinstance(s, int | float)]
            if both:
                agree = sum(compare(check.kind, r, float(s), tolerance) == PASS
                            for r, s in both)
                row["pairs_within_tolerance"] = f"{agree}/{len(both)}"
    else:
        row["reference"] = reference
    if reference_note:
        notes.append(reference_note)
    if row["reader"] is None:
        notes.insert(0, "the reader gave no value")
    row["status"] = compare(check.kind, row["reader"], row["reference"], tolerance)
    row["note"] = "; ".join(notes)
    return row


# ----- the table --------------------------------------------------------------------------
TABLE_COLUMNS = (("check", "check"), ("phase", "phase"), ("gpu", "GPU"),
                 ("reader", "reader median"), ("reference", "nvidia-smi / reference"),
                 ("tolerance", "tolerance"), ("status", "result"), ("note", "note"))


def format_number(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)  # nvidia-smi's whole numbers stay whole
    if isinstance(value, float):
        magnitude = abs(value)
        text = f"{value:.0f}" if magnitude >= 1000 else f"{value:.2f}" if magnitude < 10 \
            else f"{value:.1f}"
    else:
        text = str(value)
    return f"{text} {unit}".strip()


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A plain-text (ASCII) table of check rows."""
    cells = [[title for _, title in TABLE_COLUMNS]]
    for row in rows:
        line = []
        for key, _ in TABLE_COLUMNS:
            value = row.get(key)
            if key in ("reader", "reference"):
                text = format_number(value, row.get("unit", ""))
            else:
                text = "" if value is None else str(value)
            line.append(text)
        cells.append(line)
    widths = [max(len(line[i]) for line in cells) for i in range(len(TABLE_COLUMNS))]
    numeric = {i for i, (key, _) in enumerate(TABLE_COLUMNS) if key in ("reader", "reference")}
    out = []
    for number, line in enumerate(cells):
        parts = [text.rjust(width) if i in numeric and number else text.ljust(width)
                 for i, (text, width) in enumerate(zip(line, widths, strict=True))]
        out.append("  ".join(parts).rstrip())
        if number == 0:
            out.append("  ".join("-" * width for width in widths))
    return "\n".join(out)


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {status: sum(row["status"] == status for row in rows) for status in (PASS, FAIL, NA)}


# ----- samples ----------------------------------------------------------------------------
def as_dict(value: Any) -> dict[str, Any]:
    if hasattr(value, "_asdict"):
        return dict(value._asdict())
    return dict(vars(value)) if hasattr(value, "__dict__") else {"value": repr(value)}


def physical_gpus(facts: Sequence[Any]) -> list[Any]:
    """The reader's whole-GPU rows (MIG instances are not in ``nvidia-smi --query-gpu``)."""
    return [fact for fact in facts if getattr(fact, "kind", "gpu") == "gpu"]


def match_gpus(facts: Sequence[Any], smi_rows: Sequence[dict[str, Any]]) -> list[dict]:
    """Pair the reader's GPUs with nvidia-smi's rows by UUID."""
    matched = []
    for fact in physical_gpus(facts):
        row = next((r for r in smi_rows if same_uuid(r.get("uuid"), fact.uuid)), None)
        if row is None:
            continue
        nvml_index = getattr(fact, "nvml_index", None)
        matched.append({
            "uuid": fact.uuid, "label": str(row.get("index")), "reader_index": fact.index,
            "nvml_index": nvml_index, "smi_index": row.get("index"),
            "name": getattr(fact, "name", None),
            "index_agrees": nvml_index == row.get("index"),
        })
    return matched


def pair_sample(readings: Sequence[Any], facts: Sequence[Any],
                smi_rows: Sequence[dict[str, Any]] | None) -> dict[str, GpuPair]:
    """uuid -> GpuPair for one sample: readings by their index, nvidia-smi rows by UUID."""
    by_index = {getattr(reading, "index", None): reading for reading in readings}
    pairs = {}
    for fact in physical_gpus(facts):
        smi = next((r for r in smi_rows or () if same_uuid(r.get("uuid"), fact.uuid)), None)
        pairs[fact.uuid] = GpuPair(by_index.get(fact.index), smi)
    return pairs


def trim_evenly(items: Sequence[Any], limit: int) -> list[Any]:
    """At most ``limit`` items, evenly spread, first and last kept."""
    if len(items) <= limit:
        return list(items)
    if limit <= 1:
        return list(items[:limit])
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


def sample_to_json(sample: dict[str, Any]) -> dict[str, Any]:
    out = {key: value for key, value in sample.items() if key != "pairs"}
    out["gpus"] = {
        uuid: {"reader": None if pair.reading is None else as_dict(pair.reading),
               "smi": pair.smi}
        for uuid, pair in sample["pairs"].items()
    }
    return out


def spread(values: Sequence[float]) -> dict[str, float | None]:
    return {"median": median(values), "max": max(values) if values else None}


# ----- loads on GPU 0 ---------------------------------------------------------------------
class Load:
    """A loop that keeps GPU 0 busy in one way until told to stop."""

    name = "load"

    def setup(self) -> None:
        """Allocate, so memory stays constant while the phase is sampled."""

    def run(self, stop: threading.Event, warm: threading.Event) -> None:
        """Loop until ``stop``; set ``warm`` after the first round (not counted)."""
        raise NotImplementedError

    def result(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        """Free what ``setup`` allocated."""


class CopyLoad(Load):
    """Host<->device copies of one pinned buffer, timed with synchronize + perf_counter."""

    def __init__(self, cp: Any, direction: str, buffer_bytes: int = 256 * MIB,
                 copies_per_round: int = 8) -> None:
        if direction not in ("h2d", "d2h"):
            raise ValueError(direction)
        self.cp, self.name, self.buffer_bytes = cp, direction, buffer_bytes
        self.copies_per_round = copies_per_round
        self.bytes = 0
        self.seconds = 0.0
        self.round_rates: list[float] = []

    def setup(self) -> None:
        cp = self.cp
        with cp.cuda.Device(0):
            self.host = cp.cuda.alloc_pinned_memory(self.buffer_bytes)
            self.device = cp.empty(self.buffer_bytes, dtype=cp.uint8)
            self.device.fill(1)
            self.stream = cp.cuda.Stream(non_blocking=True)
            cp.cuda.Device(0).synchronize()

    def _copy(self) -> None:
        if self.name == "h2d":
            self.device.data.copy_from_host_async(self.host.ptr, self.buffer_bytes, self.stream)
        else:
            self.device.data.copy_to_host_async(self.host.ptr, self.buffer_bytes, self.stream)

    def run(self, stop: threading.Event, warm: threading.Event) -> None:
        with self.cp.cuda.Device(0):
            for _ in range(self.copies_per_round):
                self._copy()
            self.stream.synchronize()
            warm.set()
            start = time.perf_counter()
            while not stop.is_set():
                round_start = time.perf_counter()
                for _ in range(self.copies_per_round):
                    self._copy()
                self.stream.synchronize()
                round_bytes = self.copies_per_round * self.buffer_bytes
                self.bytes += round_bytes
                self.round_rates.append(round_bytes / (time.perf_counter() - round_start))
            self.seconds = time.perf_counter() - start

    def result(self) -> dict[str, Any]:
        rate = self.bytes / self.seconds if self.seconds > 0 else None
        return {"direction": self.name, "buffer_bytes": self.buffer_bytes,
                "bytes": self.bytes, "seconds": self.seconds, "bytes_per_s": rate,
                "round_bytes_per_s": spread(self.round_rates)}

    def close(self) -> None:
        self.device = self.host = self.stream = None
        self.cp.get_default_memory_pool().free_all_blocks()
        self.cp.get_default_pinned_memory_pool().free_all_blocks()


class MatmulLoad(Load):
    """Back-to-back float32 matmuls on GPU 0, synchronized every few launches."""

    name = "matmul"

    def __init__(self, cp: Any, size: int = 8192, launches_per_round: int = 8) -> None:
        self.cp, self.size, self.launches_per_round = cp, size, launches_per_round
        self.matmuls = 0
        self.seconds = 0.0

    def setup(self) -> None:
        cp = self.cp
        with cp.cuda.Device(0):
            self.a = cp.full((self.size, self.size), 1.0 / self.size, dtype=cp.float32)
            self.b = cp.full((self.size, self.size), 0.5, dtype=cp.float32)
            self.c = cp.empty((self.size, self.size), dtype=cp.float32)
            self.stream = cp.cuda.Stream(non_blocking=True)
            cp.cuda.Device(0).synchronize()

    def _round(self) -> None:
        with self.stream:
            for _ in range(self.launches_per_round):
                self.cp.matmul(self.a, self.b, out=self.c)
        self.stream.synchronize()

    def run(self, stop: threading.Event, warm: threading.Event) -> None:
        with self.cp.cuda.Device(0):
            self._round()
            warm.set()
            start = time.perf_counter()
            while not stop.is_set():
                self._round()
                self.matmuls += self.launches_per_round
            self.seconds = time.perf_counter() - start

    def result(self) -> dict[str, Any]:
        flops = 2.0 * self.size**3 * self.matmuls
        return {"size": self.size, "dtype": "float32", "matmuls": self.matmuls,
                "seconds": self.seconds,
                "tflops": flops / self.seconds / 1e12 if self.seconds > 0 else None}

    def close(self) -> None:
        self.a = self.b = self.c = self.stream = None
        self.cp.get_default_memory_pool().free_all_blocks()


class LoadThread:
    """Runs a Load in a thread; its exception is kept, not raised."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.stop_event = threading.Event()
        self.warm = threading.Event()
        self.error: str | None = None
        self.thread = threading.Thread(target=self._main, name=f"load-{load.name}",
                                       daemon=True)

    def _main(self) -> None:
        try:
            self.load.run(self.stop_event, self.warm)
        except Exception as error:  # reported in the JSON; the phase still gets sampled
            self.error = f"{type(error).__name__}: {error}".splitlines()[0]
        finally:
            self.warm.set()

    def start(self, warm_timeout_s: float = 30.0) -> None:
        self.thread.start()
        self.warm.wait(warm_timeout_s)

    def stop(self, timeout_s: float = 30.0) -> None:
        self.stop_event.set()
        self.thread.join(timeout_s)
        if self.thread.is_alive() and self.error is None:
            self.error = f"the load did not stop within {timeout_s:g} s"


# ----- sampling ---------------------------------------------------------------------------
@dataclass
class Settings:
    phases: tuple[str, ...] = PHASES
    phase_s: float = 20.0
    warmup_s: float = 1.5
    interval_s: float = 0.5
    slow_interval_s: float = 1.0
    # A phase's figures (intervals, rates) need two samples: a phase runs past its seconds
    # until it has them (nvidia-smi on a busy machine can take longer than a short phase).
    min_samples: int = 2


def take_sample(reader: Any, smi: NvidiaSmi, facts: Sequence[Any],
                phase: str) -> dict[str, Any]:
    """nvidia-smi is started first and the reader read while it runs: the same moment."""
    smi_start = time.time()
    handle = smi.start()
    reader_start = time.time()
    try:
        readings, reader_error = tuple(reader.read()), None
    except Exception as error:  # the reader must not raise; if it does, say so and go on
        readings, reader_error = (), f"{type(error).__name__}: {error}"
    reader_end = time.time()
    rows, smi_error = smi.finish(handle)
    smi_end = time.time()
    return {
        "phase": phase, "t_reader": (reader_start + reader_end) / 2,
        "reader_seconds": reader_end - reader_start, "reader_error": reader_error,
        "t_smi_start": smi_start, "t_smi_end": smi_end, "smi_error": smi_error,
        "pairs": pair_sample(readings, facts, rows),
    }


def sample_for(seconds: float, reader: Any, settings: Settings,
               take: Callable[[], dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Read the reader every ``interval_s`` for ``seconds``; with ``take``, record samples,
    at least ``settings.min_samples`` of them however long that takes.

    Without ``take`` the reader is still read, so the counter-based rates of the first
    recorded sample cover an interval inside the phase.
    """
    samples: list[dict[str, Any]] = []
    deadline = time.monotonic() + seconds
    next_tick = time.monotonic()
    last_slow = -math.inf
    while True:
        now = time.monotonic()
        if now >= deadline and (take is None or len(samples) >= settings.min_samples):
            return samples
        if now < next_tick:
            time.sleep((next_tick if now >= deadline else min(next_tick, deadline)) - now)
            continue
        next_tick = max(next_tick + settings.interval_s, now)  # fell behind: no burst
        if take is not None:
            samples.append(take())
        else:
            try:
                reader.read()
            except Exception:  # take_sample records the same failure when it recurs
                pass
        if now - last_slow >= settings.slow_interval_s and hasattr(reader, "read_slow"):
            last_slow = now
            try:
                reader.read_slow()
            except Exception:  # an optional refresh; read() shows what is wrong
                pass


def run_phase(name: str, load: Load | None, reader: Any, smi: NvidiaSmi, facts: Sequence[Any],
              settings: Settings, progress: Callable[[str], None]
              ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    info: dict[str, Any] = {"name": name}
    runner = None
    samples: list[dict[str, Any]] = []
    progress(f"phase {name}: {settings.warmup_s + settings.phase_s:g} s")
    try:
        if load is not None:
            load.setup()
            runner = LoadThread(load)
            runner.start()
        sample_for(settings.warmup_s, reader, settings, None)
        info["start"] = time.time()
        samples = sample_for(settings.phase_s, reader, settings,
                             lambda: take_sample(reader, smi, facts, name))
        info["end"] = time.time()
    except Exception as error:
        info["error"] = f"{type(error).__name__}: {error}".splitlines()[0]
    finally:
        if runner is not None:
            runner.stop()
            info["load"] = load.result()
            if runner.error:
                info["load"]["error"] = runner.error
        if load is not None:
            try:
                load.close()
            except Exception as error:
                info["close_error"] = f"{type(error).__name__}: {error}"
    intervals = [b["t_reader"] - a["t_reader"] for a, b in zip(samples, samples[1:],
                                                                 strict=False)]
    info.update(
        samples=len(samples),
        sample_interval_s=spread(intervals),
        smi_seconds=spread([s["t_smi_end"] - s["t_smi_start"] for s in samples]),
        reader_smi_offset_s=spread([abs(s["t_reader"] - (s["t_smi_start"] + s["t_smi_end"]) / 2)
                                    for s in samples]),
        smi_errors=sorted({s["smi_error"] for s in samples if s["smi_error"]}),
        reader_errors=sorted({s["reader_error"] for s in samples if s["reader_error"]}),
    )
    return info, samples


def clock_bins(gpus: Sequence[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """uuid -> {"sm": MHz, "memory": MHz}: one step of each clock, from NVML's own lists."""
    bins: dict[str, dict[str, float | None]] = {}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return bins
    for gpu in gpus:
        sm = memory = None
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(gpu["smi_index"]))
            memory_clocks = list(pynvml.nvmlDeviceGetSupportedMemoryClocks(handle))
            memory = clock_bin_mhz(memory_clocks)
            graphics = [pynvml.nvmlDeviceGetSupportedGraphicsClocks(handle, clock)
                        for clock in memory_clocks[:1]]
            sm = clock_bin_mhz(graphics[0]) if graphics else None
        except Exception:  # the default bin is used, and the table says so
            pass
        bins[gpu["uuid"]] = {"sm": sm, "memory": memory}
    return bins


def build_checks(phases: dict[str, dict[str, Any]], samples: Sequence[dict[str, Any]],
                 gpus: Sequence[dict[str, Any]], loaded_uuid: str | None,
                 dropped_smi_fields: Sequence[str] = (),
                 bins: dict[str, dict[str, float | None]] | None = None,
                 ) -> list[dict[str, Any]]:
    """Every row of the result table, phase by phase and GPU by GPU."""
    rows = []
    bins = bins or {}
    has_sm_activity = any(hasattr(pair.reading, SM_ACTIVITY_FIELD)
                          for sample in samples for pair in sample["pairs"].values()
                          if pair.reading is not None)
    for phase in phases:
        in_phase = [sample for sample in samples if sample["phase"] == phase]
        for gpu in gpus:
            pairs = [s["pairs"][gpu["uuid"]] for s in in_phase if gpu["uuid"] in s["pairs"]]
            loaded = same_uuid(gpu["uuid"], loaded_uuid)
            todo: list[tuple[Check, dict[str, Any]]] = []
            for check in SAME_MOMENT_CHECKS:
                extra: dict[str, Any] = {"dropped_smi_fields": dropped_smi_fields}
                if check.name in ("SM clock", "memory clock"):
                    size = bins.get(gpu["uuid"], {}).get("sm" if check.name == "SM clock"
                                                         else "memory")
                    extra["tolerance"] = size or DEFAULT_CLOCK_BIN_MHZ
                    extra["tolerance_text"] = (f"+/-1 bin ({extra['tolerance']:g} MHz"
                                               f"{'' if size else ', assumed'})")
                todo.append((check, extra))
            if loaded and phase in PCIE_CHECKS:
                load = phases[phase].get("load") or {}
                error = load.get("error") or phases[phase].get("error")
                note = f"copy loop: {error}" if error else ""
                if any(getattr(p.reading, "pcie_is_snapshot", False) for p in pairs):
                    note = "; ".join(filter(None, [note, "reader used the PCIe snapshot"]))
                rate = load.get("bytes_per_s")
                todo.append((PCIE_CHECKS[phase],
                             {"reference": None if rate is None else rate * 1e-9,
                              "reference_note": note}))
            if has_sm_activity and phase in SM_ACTIVITY_CHECKS and (loaded or phase == "idle"):
                todo.append((SM_ACTIVITY_CHECKS[phase], {}))
            for check, extra in todo:
                try:
                    rows.append(check_row(check, phase, gpu["label"], pairs, **extra))
                except Exception as error:  # one bad check must not lose the others
                    rows.append({"check": check.name, "phase": phase, "gpu": gpu["label"],
                                 "unit": check.unit, "reader": None, "reference": None,
                                 "tolerance": check.tolerance_text, "status": NA,
                                 "note": f"error: {type(error).__name__}: {error}"})
    return rows


# ----- setting up -------------------------------------------------------------------------
def load_cupy() -> tuple[Any, str | None]:
    """(cupy, None) when a CUDA GPU is usable through CuPy, else (None, why not)."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import cupy as cp

            if cp.cuda.runtime.getDeviceCount() < 1:
                return None, "CuPy sees no CUDA device"
    except ImportError as error:
        return None, f"CuPy is not installed ({error}; pip install cupy-cuda12x)"
    except Exception as error:  # CUDARuntimeError: no driver, no device
        return None, f"CuPy cannot use a GPU: {type(error).__name__}: {first_line(str(error))}"
    return cp, None


def cuda_device_uuid(cp: Any) -> bytes | str | None:
    """CUDA device 0's UUID as CuPy gives it (see match_cuda_uuid), or None."""
    try:
        return cp.cuda.runtime.getDeviceProperties(0).get("uuid")
    except Exception:
        return None


def import_reader_module() -> tuple[Any, str]:
    """The reader's module (``metrics.nvml``), and how it was imported.

    ``metrics/__init__`` also imports the host reader (psutil), the sampler and the NVML
    simulator, which the reader does not need. A GPU machine without one of them still gets
    the reader: ``metrics/`` is then set up as a bare package, without its ``__init__``.
    """
    import importlib
    import types

    name = "jupyterlab_nvdashboard.metrics"
    try:
        return importlib.import_module(f"{name}.nvml"), "the package"
    except ImportError as error:
        first_error = error
    package = types.ModuleType(name)
    package.__path__ = [str(ROOT / "jupyterlab_nvdashboard" / "metrics")]
    package.__package__ = name
    sys.modules[name] = package
    try:
        module = importlib.import_module(f"{name}.nvml")
    except ImportError:
        del sys.modules[name]
        raise first_error from None
    return module, f"metrics/ without its __init__ ({type(first_error).__name__}: {first_error})"


class ReaderWithFamilies:
    """The NVML reader and its reading families, read together as the sampler does.

    ``read()`` returns one reading per device row with the ``GpuReading`` fields, then the
    GPM fields (its PCIe and NVLink rates prefixed ``gpm_``) and the health clocks.
    """

    def __init__(self, reader: Any, gpm: Any, health: Any) -> None:
        self.reader, self.gpm, self.health = reader, gpm, health
        self._types: dict[tuple[str, ...], Any] = {}

    def __getattr__(self, name: str) -> Any:  # facts, state, message, read_slow, ...
        return getattr(self.reader, name)

    def read(self) -> tuple[Any, ...]:
        from collections import namedtuple

        readings = tuple(self.reader.read())
        gpm = self.gpm.read(readings) or {}
        health = self.health.read(readings) or {}
        merged = []
        for reading in readings:
            fields = dict(reading._asdict())
            activity = gpm.get(reading.index)
            for name in type(activity)._fields if activity is not None else ():
                key = f"gpm_{name}" if name in fields else name
                fields[key] = getattr(activity, name)
            if activity is None:
                fields[SM_ACTIVITY_FIELD] = None
            clocks = health.get(reading.index)
            fields["sm_clock_mhz"] = getattr(clocks, "sm_clock_mhz", None)
            fields["memory_clock_mhz"] = getattr(clocks, "memory_clock_mhz", None)
            names = tuple(fields)
            kind = self._types.setdefault(names, namedtuple("ReadingWithFamilies", names))
            merged.append(kind(**fields))
        return tuple(merged)


def with_families(reader: Any, nvml_module: Any) -> tuple[Any, str | None]:
    """The reader with GPM and health beside it; the bare reader (and why) if they are missing."""
    import importlib

    package = nvml_module.__name__.rpartition(".")[0]
    try:
        gpm = importlib.import_module(f"{package}.gpm")
        health = importlib.import_module(f"{package}.health")
    except ImportError as error:
        return reader, f"no GPM or health readings: {error}"
    return ReaderWithFamilies(reader, gpm.GpmReader(reader, every_s=GPM_EVERY_S),
                              health.HealthReader(reader)), None


def open_reader() -> tuple[Any, str | None]:
    """(the project's NVML reader, None) when it reads GPUs, else (None, why not)."""
    try:
        nvml, _ = import_reader_module()
    except Exception as error:
        return None, f"cannot import the project's NVML reader: {type(error).__name__}: {error}"
    try:
        reader = nvml.NvmlReader()
        state = reader.ensure_initialized()
    except Exception as error:
        return None, f"the NVML reader failed to start: {type(error).__name__}: {error}"
    if state is not nvml.NvmlState.OK:
        return None, f"NVML: {first_line(str(reader.message))}"
    combined, why_not = with_families(reader, nvml)
    if why_not:
        print(f"gpu_truth: {why_not}", file=sys.stderr)
    return combined, None


def choose_loaded_gpu(gpus: Sequence[dict[str, Any]], facts: Sequence[Any],
                      cuda_uuid: bytes | str | None) -> tuple[str | None, str]:
    """(uuid, how it was found) of the GPU the loads run on: CUDA device 0."""
    found = match_cuda_uuid(cuda_uuid, [g["uuid"] for g in gpus])
    if found is not None:
        return found, "CUDA device 0's UUID"
    for fact in physical_gpus(facts):
        if getattr(fact, "cuda_index", None) == 0 and any(same_uuid(g["uuid"], fact.uuid)
                                                          for g in gpus):
            return fact.uuid, "the reader's cuda_index 0"
    if len(gpus) == 1:
        return gpus[0]["uuid"], "the only GPU"
    if gpus:
        return gpus[0]["uuid"], "assumed: the reader's first GPU (CUDA's UUID unknown)"
    return None, "no GPU"


def write_report(report: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "gpu_truth.json"
    path.write_text(json.dumps(report, indent=1, default=str))
    return path


def measure(report: dict[str, Any], reader: Any, smi: NvidiaSmi,
            loads: dict[str, Load | None], settings: Settings,
            cuda_uuid: bytes | str | None = None,
            progress: Callable[[str], None] = lambda line: None) -> None:
    """Run the phases and compare, filling ``report`` as it goes (so Ctrl-C keeps it)."""
    facts = list(reader.facts)
    first = smi.query()
    if first.error is not None:
        raise CannotRun(first.error)
    gpus = match_gpus(facts, first.rows or [])
    if not gpus:
        raise CannotRun("no GPU of the reader has a UUID that nvidia-smi lists")
    loaded_uuid, loaded_how = choose_loaded_gpu(gpus, facts, cuda_uuid)
    report.update({
        "facts": [as_dict(fact) for fact in facts],
        "gpus": gpus, "loaded_gpu": {"uuid": loaded_uuid, "found_by": loaded_how},
        "nvidia_smi": {"command": smi.command(), "fields": smi.fields,
                       "dropped_fields": smi.dropped},
    })
    phases: dict[str, dict[str, Any]] = {}
    samples: list[dict[str, Any]] = []
    try:
        for name in settings.phases:
            info, phase_samples = run_phase(name, loads.get(name), reader, smi, facts,
                                            settings, progress)
            phases[name] = info
            samples += phase_samples
    finally:
        report["phases"] = phases
        report["complete"] = list(phases) == list(settings.phases)
        bins = clock_bins(gpus)
        report["clock_bins_mhz"] = bins
        report["checks"] = build_checks(phases, samples, gpus, loaded_uuid, smi.dropped, bins)
        report["summary"] = summarize(report["checks"])
        report["samples"] = [
            sample_to_json(sample) for name in phases for sample in trim_evenly(
                [s for s in samples if s["phase"] == name], MAX_SAMPLES_PER_PHASE)
        ]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase-seconds", type=float, default=Settings.phase_s)
    parser.add_argument("--interval", type=float, default=Settings.interval_s)
    parser.add_argument("--warmup", type=float, default=Settings.warmup_s)
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"comma-separated subset of {','.join(PHASES)}")
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="the nvidia-smi to run")
    parser.add_argument("--out", default=os.environ.get("OUT") or ".",
                        help="folder for gpu_truth.json (default $OUT, else .)")
    args = parser.parse_args(argv)
    unknown = [p for p in args.phases.split(",") if p and p not in PHASES]
    if unknown:
        parser.error(f"unknown phase(s): {', '.join(unknown)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings(phases=tuple(p for p in args.phases.split(",") if p),
                        phase_s=args.phase_seconds, warmup_s=args.warmup,
                        interval_s=args.interval)
    out_dir = Path(args.out)
    report: dict[str, Any] = {
        "status": "cannot_run", "reason": None, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(), "python": sys.version.split()[0],
        "settings": vars(settings),
    }
    missing = []
    executable = shutil.which(args.nvidia_smi)
    if executable is None:
        missing.append(f"no {args.nvidia_smi} on PATH")
    reader, reason = open_reader()
    if reason:
        missing.append(reason)
    cp, reason = load_cupy()
    if reason:
        missing.append(reason)
    smi = NvidiaSmi(executable or args.nvidia_smi)
    if executable is not None:
        reason = smi.probe()
        if reason:
            missing.append(reason)
    if reader is not None:
        report["reader"] = {"state": getattr(reader.state, "value", str(reader.state)),
                            "message": reader.message}

    def cannot_run(reason: str) -> int:
        report["reason"] = reason
        write_report(report, out_dir)
        print(f"gpu_truth: cannot run: {reason}", file=sys.stderr)
        return 2

    if missing:
        return cannot_run("; ".join(missing))
    loads: dict[str, Load | None] = {
        "idle": None, "matmul": MatmulLoad(cp, MATMUL_SIZE),
        "h2d": CopyLoad(cp, "h2d", COPY_BUFFER_BYTES),
        "d2h": CopyLoad(cp, "d2h", COPY_BUFFER_BYTES),
    }
    try:
        measure(report, reader, smi, loads, settings, cuda_device_uuid(cp),
                progress=lambda line: print(line, file=sys.stderr, flush=True))
    except CannotRun as error:
        return cannot_run(str(error))
    except KeyboardInterrupt:
        report["status"] = "interrupted"
    else:
        report["status"] = "ran"
    path = write_report(report, out_dir)
    print(format_table(report.get("checks", [])))
    summary = report.get("summary", {})
    print(f"\nchecks: {summary.get(PASS, 0)} PASS, {summary.get(FAIL, 0)} FAIL, "
          f"{summary.get(NA, 0)} N/A; JSON: {path}")
    return 130 if report["status"] == "interrupted" else 0


if __name__ == "__main__":
    sys.exit(main())
