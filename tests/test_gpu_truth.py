"""benchmarks/gpu_truth.py without a GPU: its parsing, checks and table, and its way out.

nvidia-smi's output here is written as the tool prints it with
``--format=csv,noheader,nounits`` (", "-separated, ``[N/A]`` and ``[Not Supported]`` for
values it cannot give, ``Field "x" is not a valid field to query.`` and exit 2 for a field
it does not know). A fake ``nvidia-smi`` executable prints the same, so the subprocess code
is the one that runs on the GPU machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_truth  # noqa: E402
from gpu_truth import (  # noqa: E402
    FAIL,
    MIB,
    NA,
    NOT_READ,
    PASS,
    PCIE_CHECKS,
    SAME_MOMENT_CHECKS,
    SM_ACTIVITY_CHECKS,
    SMI_FIELDS,
    GpuPair,
    NvidiaSmi,
    Settings,
)

from jupyterlab_nvdashboard.metrics.binding import binding_loader  # noqa: E402
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader  # noqa: E402
from jupyterlab_nvdashboard.simnvml import SimulatedNvml  # noqa: E402

# The reader's contract (GpuReading), every field optional here.
CONTRACT_FIELDS = (
    "index", "lost", "utilization_pct", "memory_utilization_pct", "memory_used_bytes",
    "memory_total_bytes", "memory_reserved_bytes", "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s", "pcie_is_snapshot", "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s", "temperature_c", "power_w",
)
Reading = namedtuple("Reading", CONTRACT_FIELDS, defaults=[None] * len(CONTRACT_FIELDS))
# A later reader, with clocks and GPM's SM activity.
LaterReading = namedtuple(
    "LaterReading", CONTRACT_FIELDS + ("sm_clock_mhz", "memory_clock_mhz", "sm_activity_pct"),
    defaults=[None] * (len(CONTRACT_FIELDS) + 3),
)
Facts = namedtuple("Facts", "index label kind parent nvml_index cuda_index name uuid "
                            "memory_total_bytes")

UUID0 = "GPU-8d3c2a51-0e4b-4f7e-9a51-2b7c6d1e0f34"
UUID1 = "GPU-1f00aa02-3c44-4b1d-8e2f-77a9c0d5e6b1"
H200_ROW = f"0, {UUID0}, 100, 1234, 143771, 519, 45, 612.34, 1980, 3201"
H200_IDLE = f"0, {UUID0}, 0, 531, 143771, 519, 31, 75.52, 345, 3201"
CHECKS = {check.name: check for check in SAME_MOMENT_CHECKS}


def smi(**fields: Any) -> dict[str, Any]:
    """An nvidia-smi row as parse_smi_csv gives it (dots in names become underscores)."""
    return {name.replace("_", "."): value for name, value in fields.items()}


def pairs(reader_values: list[Any], smi_rows: list[dict[str, Any] | None]) -> list[GpuPair]:
    return [GpuPair(reading, row) for reading, row in zip(reader_values, smi_rows, strict=True)]


# ----- parsing nvidia-smi ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value"),
    [(" 100", 100), ("75.52", 75.52), ("[N/A]", None), (" [Not Supported]", None),
     ("[Unknown Error]", None), ("[GPU is lost]", None), ("N/A", None), ("", None),
     (UUID0, UUID0), ("nan", None)],
)
def test_smi_values(text: str, value: Any) -> None:
    assert gpu_truth.parse_smi_value(text) == value


def test_smi_csv_two_gpus_with_missing_values() -> None:
    output = (f"{H200_ROW}\n"
              f"1, {UUID1}, [N/A], 0, 81920, [Not Supported], 29, [N/A], 210, 1593\n\n")
    rows = gpu_truth.parse_smi_csv(output, SMI_FIELDS)
    assert rows[0] == {"index": 0, "uuid": UUID0, "utilization.gpu": 100, "memory.used": 1234,
                       "memory.total": 143771, "memory.reserved": 519, "temperature.gpu": 45,
                       "power.draw": 612.34, "clocks.sm": 1980, "clocks.mem": 3201}
    assert rows[1]["utilization.gpu"] is None and rows[1]["memory.reserved"] is None
    assert rows[1]["power.draw"] is None and rows[1]["index"] == 1


def test_smi_csv_rejects_a_row_of_the_wrong_width() -> None:
    with pytest.raises(ValueError, match="3 values for 10 fields"):
        gpu_truth.parse_smi_csv("0, GPU-x, 5\n", SMI_FIELDS)


def test_a_rejected_field_is_dropped_but_never_index_or_uuid() -> None:
    output = 'Field "memory.reserved" is not a valid field to query.\n\n'
    assert gpu_truth.rejected_field(output) == "memory.reserved"
    after = gpu_truth.fields_after_rejection(SMI_FIELDS, output)
    assert after == [f for f in SMI_FIELDS if f != "memory.reserved"]
    assert gpu_truth.fields_after_rejection(
        SMI_FIELDS, 'Field "uuid" is not a valid field to query.') is None
    assert gpu_truth.fields_after_rejection(
        SMI_FIELDS, 'Field "bogus" is not a valid field to query.') is None


def test_an_unexplained_failure_drops_the_optional_fields_once() -> None:
    output = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
    after = gpu_truth.fields_after_rejection(SMI_FIELDS, output)
    assert after == [f for f in SMI_FIELDS if f != "memory.reserved"]
    assert gpu_truth.fields_after_rejection(after, output) is None


FAKE_SMI = """\
import json, pathlib, sys, time
config = json.loads(pathlib.Path(__file__).with_suffix(".json").read_text())
time.sleep(config.get("sleep", 0))
if config.get("fail"):
    print(config["fail"])
    sys.exit(9)
query = [a for a in sys.argv[1:] if a.startswith("--query-gpu=")][0]
fields = query.split("=", 1)[1].split(",")
for field in fields:
    if field in config.get("reject", []):
        print(f'Field "{field}" is not a valid field to query.')
        print()
        sys.exit(2)
for row in config["rows"]:
    print(", ".join(str(row.get(field, "[N/A]")) for field in fields))
"""


def fake_smi(folder: Path, **config: Any) -> Path:
    """An executable that answers --query-gpu as nvidia-smi does, from ``config``."""
    path = folder / "nvidia-smi"
    path.write_text(f"#!{sys.executable}\n{FAKE_SMI}")
    path.chmod(0o755)
    path.with_suffix(".json").write_text(json.dumps(config))
    return path


def smi_row(index: int, uuid: str, **values: Any) -> dict[str, Any]:
    row = {"index": index, "uuid": uuid, "utilization.gpu": 0, "memory.used": 531,
           "memory.total": 143771, "memory.reserved": 519, "temperature.gpu": 31,
           "power.draw": 75.5, "clocks.sm": 345, "clocks.mem": 3201}
    row.update({key.replace("_", "."): value for key, value in values.items()})
    return row


def test_probe_drops_a_field_an_old_nvidia_smi_rejects(tmp_path: Path) -> None:
    path = fake_smi(tmp_path, reject=["memory.reserved"],
                    rows=[smi_row(0, UUID0, power_draw="[N/A]")])
    runner = NvidiaSmi(str(path))
    assert runner.probe() is None
    assert runner.dropped == ["memory.reserved"] and "memory.reserved" not in runner.fields
    rows, error = runner.query()
    assert error is None
    assert rows == [{"index": 0, "uuid": UUID0, "utilization.gpu": 0, "memory.used": 531,
                     "memory.total": 143771, "temperature.gpu": 31, "power.draw": None,
                     "clocks.sm": 345, "clocks.mem": 3201}]


def test_probe_reports_a_broken_driver_in_one_line(tmp_path: Path) -> None:
    message = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n")
    runner = NvidiaSmi(str(fake_smi(tmp_path, fail=message, rows=[])))
    reason = runner.probe()
    assert reason.startswith("nvidia-smi exited 9: NVIDIA-SMI has failed") and "\n" not in reason


def test_a_hung_nvidia_smi_times_out(tmp_path: Path) -> None:
    runner = NvidiaSmi(str(fake_smi(tmp_path, sleep=30, rows=[])), timeout_s=0.5)
    started = time.monotonic()
    rows, error = runner.query()
    assert rows is None and "did not answer within 0.5 s" in error
    assert time.monotonic() - started < 10


def test_a_missing_nvidia_smi_is_an_error_not_an_exception(tmp_path: Path) -> None:
    rows, error = NvidiaSmi(str(tmp_path / "absent")).query()
    assert rows is None and error.startswith("cannot start")


# ----- medians and tolerances -----------------------------------------------------------------
def test_median_ignores_unknown_values() -> None:
    assert gpu_truth.median([3, None, 1, 2]) == 2
    assert gpu_truth.median([None, None]) is None and gpu_truth.median([]) is None


@pytest.mark.parametrize(
    ("kind", "reader", "reference", "tolerance", "status"),
    [("abs", 55.0, 50.0, 5.0, PASS), ("abs", 55.5, 50.0, 5.0, FAIL),
     ("rel", 105.0, 100.0, 0.05, PASS), ("rel", 94.0, 100.0, 0.05, FAIL),
     ("above", 81.0, None, 80.0, PASS), ("above", 80.0, None, 80.0, FAIL),
     ("below", 9.0, None, 10.0, PASS), ("below", 10.0, None, 10.0, FAIL),
     ("abs", None, 50.0, 5.0, NA), ("abs", 50.0, None, 5.0, NA), ("above", None, None, 80, NA)],
)
def test_compare(kind: str, reader: Any, reference: Any, tolerance: float, status: str) -> None:
    assert gpu_truth.compare(kind, reader, reference, tolerance) == status


# Pass and fail cases for each tolerance: (check, reader field, reader values, smi values).
SAME_MOMENT_CASES = [
    ("utilization", "utilization_pct", [97.0, 99.0, 100.0], [100, 100, 100], PASS),
    ("utilization", "utilization_pct", [90.0, 93.0, 94.0], [100, 100, 100], FAIL),
    ("memory used", "memory_used_bytes", [1234.4 * MIB] * 3, [1234, 1234, 1235], PASS),
    ("memory used", "memory_used_bytes", [1753 * MIB] * 3, [1234, 1234, 1234], FAIL),
    ("memory total", "memory_total_bytes", [143771 * MIB] * 3, [143771] * 3, PASS),
    ("memory total", "memory_total_bytes", [144290 * MIB] * 3, [143771] * 3, FAIL),
    ("memory reserved", "memory_reserved_bytes", [519 * MIB] * 3, [519] * 3, PASS),
    ("memory reserved", "memory_reserved_bytes", [0.0] * 3, [519] * 3, FAIL),
    ("temperature", "temperature_c", [44.0, 45.0, 47.0], [45, 46, 46], PASS),
    ("temperature", "temperature_c", [42.0, 43.0, 43.0], [46, 46, 46], FAIL),
    ("power", "power_w", [600.0, 610.0, 640.0], [612.3, 620.0, 605.0], PASS),
    ("power", "power_w", [560.0, 570.0, 575.0], [612.3, 620.0, 605.0], FAIL),
    ("SM clock", "sm_clock_mhz", [1965.0, 1980.0, 1980.0], [1980, 1980, 1965], PASS),
    ("SM clock", "sm_clock_mhz", [1755.0, 1755.0, 1755.0], [1980, 1980, 1980], FAIL),
    ("memory clock", "memory_clock_mhz", [3201.0] * 3, [3201] * 3, PASS),
    ("memory clock", "memory_clock_mhz", [2619.0] * 3, [3201] * 3, FAIL),
]


@pytest.mark.parametrize(("name", "field", "reader", "reference", "status"), SAME_MOMENT_CASES)
def test_same_moment_checks(name: str, field: str, reader: list[float], reference: list[float],
                            status: str) -> None:
    check = CHECKS[name]
    readings = [LaterReading(index=0, lost=False, **{field: value}) for value in reader]
    rows = [{check.smi_field: value} for value in reference]
    row = gpu_truth.check_row(check, "matmul", "0", pairs(readings, rows))
    assert row["status"] == status, row
    assert row["reader"] == pytest.approx(sorted(reader)[1] * check.reader_scale)
    assert row["reference"] == sorted(reference)[1]
    assert row["pairs_within_tolerance"].endswith("/3")


# A reader from before the contract: no memory_reserved_bytes yet.
OlderReading = namedtuple("OlderReading", "index lost utilization_pct memory_used_bytes")


@pytest.mark.parametrize("name", ["SM clock", "memory clock", "memory reserved"])
def test_a_field_the_reader_lacks_is_not_available(name: str) -> None:
    check = CHECKS[name]
    readings = [OlderReading(0, False, 5.0, 531.0 * MIB)] * 2
    row = gpu_truth.check_row(check, "idle", "0", pairs(readings, [{check.smi_field: 1}] * 2))
    assert row["status"] == NA and row["note"] == NOT_READ and row["reader"] is None


def test_samples_without_a_reading_or_a_row_are_left_out_of_the_medians() -> None:
    readings = [Reading(index=0, utilization_pct=v) for v in (99.0, 98.0, 100.0)]
    rows = [{"utilization.gpu": 100}, None, {"utilization.gpu": 97}, {"utilization.gpu": 98}]
    row = gpu_truth.check_row(CHECKS["utilization"], "matmul", "0",
                              pairs([readings[0], readings[1], None, readings[2]], rows))
    assert (row["reader"], row["reference"], row["status"]) == (99.0, 98.0, PASS)
    assert row["pairs_within_tolerance"] == "2/2"  # only pairs with both sides count


def test_a_field_the_reader_has_but_cannot_read_is_not_available() -> None:
    readings = [Reading(index=0, lost=False, power_w=None)] * 2
    row = gpu_truth.check_row(CHECKS["power"], "idle", "0",
                              pairs(readings, [{"power.draw": 75.0}] * 2))
    assert row["status"] == NA and "reader gave no value" in row["note"]


def test_a_field_nvidia_smi_does_not_know_is_not_available() -> None:
    readings = [Reading(index=0, lost=False, memory_reserved_bytes=519.0 * MIB)] * 2
    row = gpu_truth.check_row(CHECKS["memory reserved"], "idle", "0", pairs(readings, [{}] * 2),
                              dropped_smi_fields=["memory.reserved"])
    assert row["status"] == NA
    assert row["note"] == "this nvidia-smi does not know memory.reserved"


def test_clock_tolerance_is_one_bin_of_the_gpus_clock_list() -> None:
    assert gpu_truth.clock_bin_mhz([1980, 1965, 1950, 1935, 345]) == 15
    assert gpu_truth.clock_bin_mhz([3201]) is None and gpu_truth.clock_bin_mhz(None) is None
    readings = [LaterReading(index=0, lost=False, sm_clock_mhz=1950.0)] * 3
    rows = [{"clocks.sm": 1980}] * 3
    assert gpu_truth.check_row(CHECKS["SM clock"], "matmul", "0", pairs(readings, rows),
                               tolerance=15.0)["status"] == FAIL
    assert gpu_truth.check_row(CHECKS["SM clock"], "matmul", "0", pairs(readings, rows),
                               tolerance=30.0)["status"] == PASS


@pytest.mark.parametrize(
    ("phase", "field", "reader_gbps", "loop_gbps", "status"),
    [("h2d", "pcie_rx_bytes_per_s", [51.0, 52.0, 55.0], 53.0, PASS),
     ("h2d", "pcie_rx_bytes_per_s", [40.0, 44.0, 45.0], 53.0, FAIL),
     ("d2h", "pcie_tx_bytes_per_s", [49.0, 50.0, 51.0], 53.0, PASS),
     ("d2h", "pcie_tx_bytes_per_s", [0.1, 0.2, 0.3], 53.0, FAIL)],
)
def test_pcie_against_the_copy_loop(phase: str, field: str, reader_gbps: list[float],
                                    loop_gbps: float, status: str) -> None:
    readings = [Reading(index=0, lost=False, **{field: value * 1e9}) for value in reader_gbps]
    row = gpu_truth.check_row(PCIE_CHECKS[phase], phase, "0",
                              pairs(readings, [None] * len(readings)), reference=loop_gbps)
    assert row["status"] == status
    assert row["reader"] == pytest.approx(sorted(reader_gbps)[1])


def test_pcie_direction_is_what_the_gpu_receives_for_h2d() -> None:
    assert PCIE_CHECKS["h2d"].reader_fields == ("pcie_rx_bytes_per_s",)
    assert PCIE_CHECKS["d2h"].reader_fields == ("pcie_tx_bytes_per_s",)


@pytest.mark.parametrize(
    ("phase", "values", "status"),
    [("matmul", [92.0, 95.0, 96.0], PASS), ("matmul", [40.0, 60.0, 70.0], FAIL),
     ("idle", [0.0, 0.0, 1.0], PASS), ("idle", [12.0, 15.0, 30.0], FAIL)],
)
def test_sm_activity(phase: str, values: list[float], status: str) -> None:
    readings = [LaterReading(index=0, lost=False, sm_activity_pct=v) for v in values]
    row = gpu_truth.check_row(SM_ACTIVITY_CHECKS[phase], phase, "0",
                              pairs(readings, [None] * 3))
    assert row["status"] == status


# ----- GPUs, samples and the table ------------------------------------------------------------
def facts(uuid: str, index: int, kind: str = "gpu", cuda_index: int | None = None) -> Facts:
    return Facts(index, f"GPU {index}", kind, None, index, cuda_index, "NVIDIA H200", uuid,
                 143771 * MIB)


def test_gpus_are_matched_by_uuid_and_mig_rows_are_left_out() -> None:
    reader_facts = [facts(UUID0, 0), facts("MIG-aaaa", 1, kind="mig"), facts(UUID1, 2)]
    smi_rows = [smi_row(1, UUID1.upper()), smi_row(0, UUID0)]
    gpus = gpu_truth.match_gpus(reader_facts, smi_rows)
    assert [(g["uuid"], g["label"], g["index_agrees"]) for g in gpus] == [
        (UUID0, "0", True), (UUID1, "1", False)]  # reader's nvml_index 2, nvidia-smi's 1


def test_a_sample_pairs_readings_by_index_and_rows_by_uuid() -> None:
    reader_facts = [facts(UUID0, 0), facts(UUID1, 1)]
    readings = (Reading(index=1, utilization_pct=7.0), Reading(index=0, utilization_pct=99.0))
    sample = gpu_truth.pair_sample(readings, reader_facts, [smi_row(0, UUID0)])
    assert sample[UUID0].reading.utilization_pct == 99.0 and sample[UUID0].smi["index"] == 0
    assert sample[UUID1].reading.utilization_pct == 7.0 and sample[UUID1].smi is None
    assert gpu_truth.pair_sample((), reader_facts, None)[UUID0] == GpuPair(None, None)


def test_cuda_uuid_names_the_loaded_gpu_even_when_cut_at_a_zero_byte() -> None:
    raw = bytes.fromhex(UUID0[4:].replace("-", ""))
    assert gpu_truth.format_cuda_uuid(raw) == UUID0
    assert gpu_truth.match_cuda_uuid(raw, [UUID1, UUID0]) == UUID0
    assert gpu_truth.match_cuda_uuid(raw[:5], [UUID1, UUID0]) == UUID0
    twins = ["GPU-51510000-0000-4000-8000-000000000000", "GPU-51510001-0000-4000-8000-0000001"]
    assert gpu_truth.match_cuda_uuid(b"\x51\x51", twins) is None  # ambiguous prefix
    assert gpu_truth.match_cuda_uuid(None, twins) is None
    gpus = gpu_truth.match_gpus([facts(UUID0, 0), facts(UUID1, 1, cuda_index=0)],
                                [smi_row(0, UUID0), smi_row(1, UUID1)])
    assert gpu_truth.choose_loaded_gpu(gpus, [], raw) == (UUID0, "CUDA device 0's UUID")
    assert gpu_truth.choose_loaded_gpu(
        gpus, [facts(UUID0, 0), facts(UUID1, 1, cuda_index=0)], None)[0] == UUID1


def test_trim_keeps_first_and_last_evenly() -> None:
    assert gpu_truth.trim_evenly(list(range(100)), 5) == [0, 25, 50, 74, 99]
    assert gpu_truth.trim_evenly([1, 2], 5) == [1, 2]


def test_table_is_plain_ascii_with_one_line_per_check() -> None:
    rows = [
        {"check": "utilization", "phase": "matmul", "gpu": "0", "unit": "%", "reader": 99.5,
         "reference": 100, "tolerance": "+/-5 pts", "status": PASS, "note": ""},
        {"check": "PCIe RX", "phase": "h2d", "gpu": "0", "unit": "GB/s", "reader": 41.234,
         "reference": 53.1, "tolerance": "+/-10 % of copy loop", "status": FAIL, "note": ""},
        {"check": "SM clock", "phase": "idle", "gpu": "0", "unit": "MHz", "reader": None,
         "reference": 345.0, "tolerance": "+/-1 bin", "status": NA, "note": NOT_READ},
    ]
    table = gpu_truth.format_table(rows)
    lines = table.splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[0].split()[:3] == ["check", "phase", "GPU"] and set(lines[1]) <= {"-", " "}
    assert "99.5 %" in lines[2] and "100 %" in lines[2] and lines[2].split()[-1] == PASS
    assert "41.2 GB/s" in lines[3] and "53.1 GB/s" in lines[3] and FAIL in lines[3]
    assert re.search(rf"{NA} +{NOT_READ}$", lines[4]) and " - " in lines[4]
    assert "345 MHz" in lines[4]  # a whole median stays whole
    table.encode("ascii")
    assert gpu_truth.summarize(rows) == {PASS: 1, FAIL: 1, NA: 1}


def synthetic_samples(sm_activity: bool) -> list[dict[str, Any]]:
    kind = LaterReading if sm_activity else Reading
    samples = []
    for phase in ("idle", "h2d"):
        for _ in range(3):
            reading0 = kind(index=0, utilization_pct=1.0, pcie_rx_bytes_per_s=50e9,
                            **({"sm_activity_pct": 2.0} if sm_activity else {}))
            reading1 = kind(index=1, utilization_pct=0.0)
            samples.append({"phase": phase, "pairs": {
                UUID0: GpuPair(reading0, smi_row(0, UUID0, utilization_gpu=1)),
                UUID1: GpuPair(reading1, smi_row(1, UUID1)),
            }})
    return samples


def test_build_checks_puts_pcie_and_sm_activity_on_the_right_gpu() -> None:
    gpus = gpu_truth.match_gpus([facts(UUID0, 0), facts(UUID1, 1)],
                                [smi_row(0, UUID0), smi_row(1, UUID1)])
    phases = {"idle": {}, "h2d": {"load": {"bytes_per_s": 52e9}}}
    rows = gpu_truth.build_checks(phases, synthetic_samples(False), gpus, UUID0)
    assert len(rows) == 2 * 2 * len(SAME_MOMENT_CHECKS) + 1
    pcie = [row for row in rows if row["check"] == "PCIe RX"]
    assert len(pcie) == 1 and pcie[0]["gpu"] == "0" and pcie[0]["status"] == PASS
    assert not any(row["check"] == "SM activity" for row in rows)
    clock = next(row for row in rows if row["check"] == "SM clock")
    assert clock["note"] == NOT_READ and "assumed" in clock["tolerance"]

    rows = gpu_truth.build_checks(phases, synthetic_samples(True), gpus, UUID0,
                                  bins={UUID0: {"sm": 15.0, "memory": None}})
    activity = [row for row in rows if row["check"] == "SM activity"]
    assert [(r["phase"], r["gpu"], r["status"]) for r in activity] == [
        ("idle", "0", PASS), ("idle", "1", NA)]  # GPU 1's reading has the field, unset
    clock = next(r for r in rows if r["check"] == "SM clock" and r["gpu"] == "0")
    assert clock["tolerance"] == "+/-1 bin (15 MHz)"


def test_a_failed_copy_loop_leaves_pcie_not_available() -> None:
    gpus = gpu_truth.match_gpus([facts(UUID0, 0)], [smi_row(0, UUID0)])
    phases = {"h2d": {"load": {"bytes_per_s": None, "error": "CUDARuntimeError: oom"}}}
    samples = [s for s in synthetic_samples(False) if s["phase"] == "h2d"]
    row = next(r for r in gpu_truth.build_checks(phases, samples, gpus, UUID0)
               if r["check"] == "PCIe RX")
    assert row["status"] == NA and "copy loop: CUDARuntimeError: oom" in row["note"]
    phases = {"h2d": {"error": "OutOfMemoryError: pinned"}}  # setup failed: no load result
    row = next(r for r in gpu_truth.build_checks(phases, samples, gpus, UUID0)
               if r["check"] == "PCIe RX")
    assert row["status"] == NA and row["note"] == "copy loop: OutOfMemoryError: pinned"


# ----- the whole measurement, on the simulated NVML ------------------------------------------
class SteadyLoad(gpu_truth.Load):
    """Stands in for a copy loop: reports a known rate, as CopyLoad.result does."""

    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail, self.closed = name, fail, False

    def run(self, stop: threading.Event, warm: threading.Event) -> None:
        warm.set()
        if self.fail:
            raise RuntimeError("cudaErrorMemoryAllocation: out of memory")
        stop.wait()

    def result(self) -> dict[str, Any]:
        return {"bytes_per_s": 25e9}

    def close(self) -> None:
        self.closed = True


def test_measure_on_the_simulated_nvml_with_a_fake_nvidia_smi(tmp_path: Path) -> None:
    simulator = SimulatedNvml(gpu_count=2)
    reader = NvmlReader(binding_loader(simulator.library))
    reader.ensure_initialized()
    uuids = [fact.uuid for fact in reader.facts]
    path = fake_smi(tmp_path, reject=["memory.reserved"], rows=[
        smi_row(0, uuids[0], memory_total=143771), smi_row(1, uuids[1], memory_total=81920)])
    runner = NvidiaSmi(str(path))
    assert runner.probe() is None
    loads = {"idle": None, "matmul": SteadyLoad("matmul", fail=True),
             "h2d": SteadyLoad("h2d"), "d2h": SteadyLoad("d2h")}
    report: dict[str, Any] = {}
    lines: list[str] = []
    gpu_truth.measure(report, reader, runner, loads,
                      Settings(phase_s=0.8, warmup_s=0.1, interval_s=0.1),
                      cuda_uuid=bytes.fromhex(uuids[1][4:].replace("-", "")),
                      progress=lines.append)

    assert [line.split(":")[0] for line in lines] == [f"phase {p}" for p in gpu_truth.PHASES]
    assert report["complete"] and report["loaded_gpu"]["uuid"] == uuids[1]
    assert report["nvidia_smi"]["dropped_fields"] == ["memory.reserved"]
    assert all(load.closed for load in loads.values() if load is not None)
    assert report["phases"]["matmul"]["load"]["error"].startswith("RuntimeError: cudaError")
    for name in gpu_truth.PHASES:
        assert report["phases"][name]["samples"] >= 2, report["phases"][name]
        assert report["phases"][name]["smi_errors"] == []
    rows = report["checks"]
    assert {row["status"] for row in rows} <= {PASS, FAIL, NA}
    totals = [row for row in rows if row["check"] == "memory total"]
    assert len(totals) == 8 and all(row["status"] == PASS for row in totals)
    pcie = [(row["check"], row["phase"], row["gpu"]) for row in rows if "PCIe" in row["check"]]
    assert pcie == [("PCIe RX", "h2d", "1"), ("PCIe TX", "d2h", "1")]
    assert next(r for r in rows if r["check"] == "PCIe RX")["reference"] == pytest.approx(25)
    assert report["summary"][PASS] >= 8
    samples = report["samples"]
    assert samples and set(samples[0]["gpus"]) == set(uuids)
    assert samples[0]["gpus"][uuids[0]]["smi"]["memory.total"] == 143771
    assert samples[0]["t_smi_start"] <= samples[0]["t_reader"] <= samples[0]["t_smi_end"]
    json.dumps(report, default=str)
    assert "PCIe RX" in gpu_truth.format_table(rows)


def test_a_phase_shorter_than_one_sample_still_records_two() -> None:
    # On a busy machine one nvidia-smi run can outlast a short phase; a phase of one sample
    # has no interval and no rate, so it runs on until it has two.
    class Reader:
        def read(self) -> list:
            return []

    def slow_sample() -> dict[str, Any]:
        time.sleep(0.3)
        return {}

    samples = gpu_truth.sample_for(0.1, Reader(), Settings(interval_s=0.05), slow_sample)
    assert len(samples) == 2


def test_measure_cannot_run_when_no_gpu_matches(tmp_path: Path) -> None:
    reader = NvmlReader(binding_loader(SimulatedNvml(gpu_count=1).library))
    reader.ensure_initialized()
    runner = NvidiaSmi(str(fake_smi(tmp_path, rows=[smi_row(0, UUID0)])))
    with pytest.raises(gpu_truth.CannotRun, match="no GPU of the reader"):
        gpu_truth.measure({}, reader, runner, {}, Settings(phases=()))


# ----- the script without a GPU ---------------------------------------------------------------
def run_script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OUT=str(tmp_path), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_truth.py"), *args],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def assert_cannot_run(done: subprocess.CompletedProcess, out: Path) -> str:
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpu_truth: cannot run: "), output
    report = json.loads((out / "gpu_truth.json").read_text())
    assert report["status"] == "cannot_run"
    assert report["reason"] == lines[0].removeprefix("gpu_truth: cannot run: ")
    return report["reason"]


def test_script_without_nvidia_smi_exits_2_with_one_line(tmp_path: Path) -> None:
    reason = assert_cannot_run(run_script(tmp_path, "--nvidia-smi", "no-such-nvidia-smi"),
                               tmp_path)
    assert "no no-such-nvidia-smi on PATH" in reason


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_script_on_this_machine_says_what_is_missing(tmp_path: Path) -> None:
    reason = assert_cannot_run(run_script(tmp_path), tmp_path)
    assert "nvidia-smi" in reason and "NVML" in reason


class FakeCupy:
    """The slice of CuPy's API that the loads use, with CuPy's signatures, on NumPy.

    It proves the script's wiring (arguments, loads, threads, table, JSON, exit code), not
    CUDA: the real copies and matmuls only run on the GPU machine.
    """

    float32, uint8 = "float32", "uint8"

    def __init__(self) -> None:
        import numpy

        self.np = numpy
        fake = self

        class Pinned:  # cupy.cuda.PinnedMemoryPointer
            def __init__(self, size: int) -> None:
                self.buffer = numpy.zeros(size, dtype=numpy.uint8)
                self.ptr, self.size = self.buffer.ctypes.data, size

        class Stream:  # cupy.cuda.Stream(null=False, non_blocking=False, ptds=False, ...)
            def __init__(self, null: bool = False, non_blocking: bool = False) -> None:
                self.ptr = 0 if null else 1

            def __enter__(self) -> Stream:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def synchronize(self) -> None:
                time.sleep(0.001)

        class Device:  # cupy.cuda.Device(device=None)
            def __init__(self, device: int = 0) -> None:
                assert device == 0

            __enter__, __exit__ = Stream.__enter__, Stream.__exit__

            def synchronize(self) -> None:
                pass

        class Runtime:
            @staticmethod
            def getDeviceCount() -> int:  # noqa: N802 - CuPy's name
                return 1

            @staticmethod
            def getDeviceProperties(device: int) -> dict[str, Any]:  # noqa: N802
                return {"uuid": fake.uuid_bytes}

        class Cuda:
            runtime = Runtime

            @staticmethod
            def alloc_pinned_memory(size: int) -> Pinned:
                return Pinned(size)

        Cuda.Stream, Cuda.Device = Stream, Device
        self.cuda = Cuda
        self.uuid_bytes = b""

    def _array(self, values: Any) -> Any:
        stream_type = self.cuda.Stream

        class MemoryPointer:  # cupy.cuda.MemoryPointer
            def __init__(self, array: Any) -> None:
                self.array = array

            def copy_from_host_async(self, mem: int, size: int, stream: Any = None) -> None:
                assert isinstance(mem, int) and size == self.array.nbytes
                assert stream is None or isinstance(stream, stream_type)

            copy_to_host_async = copy_from_host_async

        class FakeArray(self.np.ndarray):
            data = property(MemoryPointer)

        return values.view(FakeArray)

    def empty(self, shape: Any, dtype: str) -> Any:
        return self._array(self.np.empty(shape, dtype=dtype))

    def full(self, shape: Any, fill_value: float, dtype: str) -> Any:
        return self._array(self.np.full(shape, fill_value, dtype=dtype))

    def matmul(self, x1: Any, x2: Any, /, out: Any = None) -> Any:
        return self.np.matmul(x1, x2, out=out)

    def get_default_memory_pool(self) -> Any:
        return type("Pool", (), {"free_all_blocks": lambda self: None})()

    get_default_pinned_memory_pool = get_default_memory_pool


def test_main_runs_every_phase_with_fake_cupy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    simulator = SimulatedNvml(gpu_count=1)
    reader = NvmlReader(binding_loader(simulator.library))
    reader.ensure_initialized()
    uuid = reader.facts[0].uuid
    cupy = FakeCupy()
    cupy.uuid_bytes = bytes.fromhex(uuid[4:].replace("-", ""))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(gpu_truth, "open_reader", lambda: (reader, None))
    monkeypatch.setattr(gpu_truth, "MATMUL_SIZE", 64)
    monkeypatch.setattr(gpu_truth, "COPY_BUFFER_BYTES", 4096)
    path = fake_smi(tmp_path, rows=[smi_row(0, uuid)])
    code = gpu_truth.main(["--phase-seconds", "0.4", "--warmup", "0.1", "--interval", "0.1",
                           "--nvidia-smi", str(path), "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads((tmp_path / "out" / "gpu_truth.json").read_text())
    assert report["status"] == "ran" and report["complete"]
    assert report["loaded_gpu"] == {"uuid": uuid, "found_by": "CUDA device 0's UUID"}
    for name in ("matmul", "h2d", "d2h"):
        load = report["phases"][name].get("load")
        assert load and "error" not in load, report["phases"][name]
    assert report["phases"]["h2d"]["load"]["bytes_per_s"] > 0
    assert report["phases"]["matmul"]["load"]["matmuls"] > 0
    assert "PCIe RX" in captured.out and captured.out.rstrip().splitlines()[-1].startswith(
        "checks: ")
    assert captured.err.count("phase ") == 4


def test_the_reader_imports_where_psutil_is_missing(tmp_path: Path) -> None:
    """A GPU machine may lack what metrics/__init__ needs besides the reader (psutil)."""
    (tmp_path / "psutil.py").write_text("raise ImportError('No module named psutil')\n")
    code = ("import gpu_truth\n"
            "module, how = gpu_truth.import_reader_module()\n"
            "print(module.NvmlReader.__name__, '|', how)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "benchmarks"),
                                                       str(ROOT)]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("NvmlReader | metrics/ without its __init__ (ImportError")


def test_sm_activity_from_gpm_sits_beside_nvidia_smi_utilization(tmp_path: Path) -> None:
    simulator = SimulatedNvml(gpu_count=2, profile="mixed")  # GPU 0 H200 (GPM), GPU 1 A100
    reader = NvmlReader(binding_loader(simulator.library))
    reader.ensure_initialized()
    combined, why_not = gpu_truth.with_families(reader, sys.modules[NvmlReader.__module__])
    assert why_not is None
    combined.read()
    time.sleep(0.25)  # more than GPM's 100 ms between two samples
    first, second = combined.read()
    assert first.sm_activity_pct is not None and second.sm_activity_pct is None
    assert first.gpm_pcie_tx_bytes_per_s is not None and first.pcie_tx_bytes_per_s is not None
    assert first.sm_clock_mhz is not None and second.sm_clock_mhz is not None
    uuids = [fact.uuid for fact in reader.facts]
    runner = NvidiaSmi(str(fake_smi(tmp_path, rows=[
        smi_row(0, uuids[0], utilization_gpu=97), smi_row(1, uuids[1], utilization_gpu=3)])))
    report: dict[str, Any] = {}
    gpu_truth.measure(report, combined, runner, {"idle": None},
                      Settings(phases=("idle",), phase_s=0.9, warmup_s=0.3, interval_s=0.25))
    rows = [row for row in report["checks"] if row["check"] == "SM activity"]
    assert [(row["gpu"], row["reference"]) for row in rows] == [("0", 97), ("1", 3)]
    assert rows[0]["reader"] is not None and rows[0]["status"] in (PASS, FAIL)
    assert rows[1]["reader"] is None and rows[1]["status"] == NA  # the A100 has no GPM
    assert "SM activity" in gpu_truth.format_table(report["checks"])
