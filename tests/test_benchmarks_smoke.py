"""The benchmark scripts run and produce figures (no timing thresholds: that is their job)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.simnvml.profiles import PROFILES

ROOT = Path(__file__).resolve().parent.parent


def test_nvml_reader_cost_reader_part_gives_figures_for_every_profile(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "nvml_reader_cost.py"), "--only", "reader",
         "--passes", "3", "--warmup", "1"],
        env={**os.environ, "OUT": str(tmp_path)}, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "nvml_reader_cost.json").read_text())
    assert set(report["reader"]) == set(PROFILES)
    for profile, figures in report["reader"].items():
        assert figures["passes"] == 3, profile
        assert figures["device_rows"] >= 8, profile
        assert figures["nvml_calls_per_pass"] > 0, profile
        assert figures["replayed_calls_per_pass"] > 0, profile
        for key in ("wall_ms", "thread_cpu_ms", "simulator_alone_ms", "driver_alone_ms",
                    "driver_alone_thread_cpu_ms"):
            assert figures[key]["n"] == 3, (profile, key)
            assert figures[key]["min"] <= figures[key]["median"] <= figures[key]["max"]
        assert f"| {profile} |" in done.stdout
    assert "loop" not in report


def test_diagnosis_cost_writes_per_run_figures_and_every_gpus_findings(tmp_path: Path) -> None:
    out = tmp_path / "diagnosis_cost.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "diagnosis_cost.py"), "--minutes", "0.5",
         "--repeats", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["ticks"] == 150
    for case in report["cases"].values():
        assert len(case["wall_ms"]) == len(case["cpu_ms"]) == 2
    # One diagnosis per GPU, with and without the PID: what --baseline compares.
    assert len(report["findings"]) == 2 * 8
    assert all(diagnosis["findings"] for diagnosis in report["findings"])
    assert report["line"] in done.stdout


def test_reader_tick_cost_gives_figures_for_every_variant(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "reader_tick_cost.py"), "--passes", "3",
         "--warmup", "1"],
        env={**os.environ, "OUT": str(tmp_path)}, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "reader_tick_cost.json").read_text())
    assert set(report) == {"h200", "mixed"}
    for profile, variants in report.items():
        calls = {variant: figures["nvml_calls_per_pass"] for variant, figures in variants.items()}
        # Health and GPM add NVML calls to the pass; GPM every pass adds the most.
        assert calls["core"] < calls["+health"] < calls["+health+gpm (every pass)"], profile
        for figures in variants.values():
            wall = figures["wall_ms"]
            assert wall["n"] == 3 and wall["min"] <= wall["median"] <= wall["max"]
        assert f"| {profile} | +health+gpm (every pass) |" in done.stdout


def test_cluster_windows_gives_a_row_per_window() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cluster_windows.py"), "--hosts", "2",
         "--gpus", "2", "--seconds", "700", "--repeats", "1"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "min |" in line]
    assert [row.split(" |")[0] for row in rows] == ["| 2 min", "| 10 min", "| 30 min"]
    # 10 minutes of 4 GPUs: at most 241 columns as shipped, one per tick (601) without.
    shipped, every_tick = (int(part.split(" rows")[0].rsplit(" ", 1)[1])
                           for part in rows[1].split("|")[2:4])
    assert shipped <= 4 * 241 < every_tick


def test_dashboard_overhead_measures_a_baseline_beside_this_tree_and_removes_it(
        tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "dashboard_overhead.py"), "--window", "1",
         "--raw", "1", "--browser", "", "--hidden", "", "--baseline", "HEAD"],
        env={**os.environ, "TMPDIR": str(tmp_path)}, capture_output=True, text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if "| raw | 1 |" in line]
    assert [row.split(" |")[0] for row in rows] == ["| HEAD", f"| {ROOT.name}"], done.stdout
    # The baseline's copy of the tree was the benchmark's own: it is gone again.
    assert not list(tmp_path.glob("nvdashboard-baseline-*"))


def test_fd_scan_cost_finds_its_holders_and_prints_each_pass() -> None:
    from tests.support.pidns import unavailable

    if unavailable():
        import pytest

        pytest.skip(str(unavailable()))
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fd_scan_cost.py"), "--processes", "40",
         "--holders", "4", "--repeats", "3"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 holding a GPU node" in done.stdout, done.stdout
    for name in ("listing /proc alone", "steady pass", "full pass", "first pass"):
        assert name in done.stdout and "median" in done.stdout, done.stdout


def test_page_open_cost_gives_each_route_a_figure(tmp_path: Path) -> None:
    routes = ["/GPU-Utilization", "/GPU-Health"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "page_open_cost.py"), "--opens", "2",
         "--rounds", "1", "--routes", ",".join(routes)],
        env={**os.environ, "OUT": str(tmp_path)}, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "page_open_cost.json").read_text())
    assert list(report) == ["this tree"]
    assert list(report["this tree"]) == routes
    for route, figures in report["this tree"].items():
        assert len(figures) == 1 and figures[0] > 0, route  # one round, CPU ms per open
        assert f"| `{route}` |" in done.stdout


def test_free_rule_cost_gives_wall_and_cpu_figures() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "free_rule_cost.py"), "--gpus", "2",
         "--repeats", "3"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 GPUs, 600 samples" in done.stdout, done.stdout
    for name in ("wall: median", "CPU: median"):
        assert name in done.stdout and " ms, range " in done.stdout, done.stdout


def test_store_io_measures_the_loop_and_the_memory_while_the_store_is_read(
        tmp_path: Path) -> None:
    out = tmp_path / "store_io.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "store_io.py"), "--rounds", "1",
         "--pages", "2", "--csvs", "2", "--days", "0.5", "--csv-days", "0.5",
         "--quiet-s", "0.5", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert list(report) == ["this tree"]
    stall, csv = report["this tree"]["stall"], report["this tree"]["csv"]
    assert len(stall) == len(csv) == 1
    assert stall[0]["rows"] > 0 and stall[0]["wall_s"] > 0  # every page drew a first frame
    assert csv[0]["answered_200"] == 2 and csv[0]["mib_each"] > 0
    assert "2 pages open the 7-day window: the loop's longest stall median" in done.stdout
    assert "2 CSVs of 0.5 days at once: RSS above idle median" in done.stdout


@pytest.mark.browser
@pytest.mark.lab
def test_bare_lab_measures_a_lab_with_the_sidebar_closed_and_open() -> None:
    """It had stopped running (an import renamed under it) with nothing to tell."""
    window_s = 6
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bare_lab.py"), "--window", str(window_s),
         "--settle", "1", "--no-without"],
        capture_output=True, text=True, timeout=300,
    )
    # It measures only once the glance socket has brought a message: it fails otherwise.
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {tuple(cell.strip() for cell in line.split("|")[1:3]): line
            for line in done.stdout.splitlines() if line.startswith("| sidebar")}
    for case in ("sidebar closed", "sidebar open"):
        assert (case, "Chromium CPU %") in rows, done.stdout
        # The glance came over its socket: a poll every 2 s would be 3 requests in the
        # window; one is a socket that fell silent on a loaded machine and was asked once.
        per_min = float(rows[(case, "glance requests/min")].split("|")[3].split()[0])
        assert per_min * window_s / 60 < 1.5, done.stdout


@pytest.mark.browser
@pytest.mark.lab
def test_live_cells_measures_each_condition_and_the_server_judges_only_running_cells() -> None:
    """Two notebooks, one short round: every condition measured, each cost printed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "live_cells.py"), "--notebooks", "2",
         "--rounds", "1", "--window", "4", "--settle", "2"],
        capture_output=True, text=True, timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in done.stdout.splitlines() if line.startswith("| ")}
    judgments = [float(cell.split()[0]) for cell in rows["judgments/min"]]
    running, off, idle = judgments  # the columns: running, footers off, no cell running
    # The sitecustomize hook read the server's LiveCells: it judges running cells, footers
    # shown or not, and nothing once they ended.
    assert running > 0 and off > 0 and idle == 0, done.stdout
    assert "server: " in done.stdout and "browser: " in done.stdout
