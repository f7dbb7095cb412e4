"""``/cell.json`` on a real server over HTTP (issue 45, item 2): the simulated driver lists a
stand-in kernel (its connection file on its command line) and its child, the sampler reads
them, the attribution ties them to the kernel, and the route judges spans of it: busy,
held but idle, no GPU work; refusals in one line; and the span's times as Jupyter's
message headers carry them.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlencode

import pytest

from jupyterlab_nvdashboard.metrics import OWNER_FAMILY, PROCESS_FAMILY
from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess
from tests.support import pidns
from tests.support.servers import RunningServer, get, in_process_server
from tests.support.stand_in_kernel import Kernel, stand_in_kernel
from tests.support.waiting import until

GIB = 2**30
@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    with stand_in_kernel(tmp_path) as kernel:
        yield kernel


def cell(server: RunningServer, kernel_id: str, start: str, end: str) -> tuple[int, bytes]:
    query = urlencode({"kernel": kernel_id, "start": start, "end": end})
    return get(f"{server.url}/cell.json?{query}")


def passes_since(server: RunningServer, since_s: float) -> int:
    return sum(1 for s in server.metrics.history.window(server.metrics.history_s)
               if s.time_s > since_s and PROCESS_FAMILY in s.extra)


def run_cell(server: RunningServer, kernel: Kernel, passes: int = 6,
             sampled: bool = False, seconds: float = 0.0) -> tuple[float, float]:
    """A span of ``passes`` process passes and at least ``seconds``, once two passes have
    read what the driver was told the kernel does during it (a per-process sample covers
    the second before its pass, as the driver's do).

    ``sampled``: a span whose every pass carried the driver's per-process samples. The
    driver samples once a second and answers NotFound when asked twice within one; a pass
    that lands so on a loaded machine has none, and the cell then rightly reads the
    device (``diagnosis/cell.py``). Such a span is not the case asked for: run another."""
    told = time.time()
    until(lambda: passes_since(server, told) >= 2, "two process passes")
    for _ in range(3):
        start = time.time()
        until(lambda start=start: passes_since(server, start) >= passes
              and time.time() - start >= seconds, f"{passes} process passes")
        end = time.time()
        if not sampled or all_passes_sampled(server, start, end):
            return start, end
    raise AssertionError("three spans in a row had a process pass without samples")


def all_passes_sampled(server: RunningServer, start_s: float, end_s: float) -> bool:
    """Whether every process pass from ``start_s`` to ``end_s`` carried SM samples."""
    return all(all(reading.sm_pct is not None for reading in s.extra[PROCESS_FAMILY])
               for s in server.metrics.history.window(server.metrics.history_s)
               if start_s < s.time_s <= end_s and PROCESS_FAMILY in s.extra)


def iso(seconds: float) -> str:
    """As Jupyter's message headers carry a time."""
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat().replace("+00:00", "Z")


def test_busy_idle_and_cpu_only_cells_of_a_kernel(kernel: Kernel) -> None:
    with in_process_server(gpus=2, profile="h200", scenario="compute-bound") as server:
        server.simulator.set_processes([
            SimulatedProcess(1, kernel.pid, 12 * GIB, sm_pct=87),
            SimulatedProcess(1, kernel.child, 2 * GIB, sm_pct=87)])
        # The attribution has told who the kernel's processes are before the cell starts.
        until(lambda: attributed(server, kernel.kernel_id), "the kernel's processes attributed")
        start, end = run_cell(server, kernel, sampled=True)
        status, body = cell(server, kernel.kernel_id, iso(start), iso(end))
        assert status == 200, body
        busy = json.loads(body)
        [gpu] = busy["gpus"]
        assert busy["state"] == "busy" and busy["kernel"] == kernel.kernel_id, busy
        assert gpu["index"] == 1 and gpu["signal"] == "per-process"
        assert gpu["sm_pct"] == pytest.approx(87) and gpu["working_share"] == 1.0
        assert gpu["memory"]["peak_bytes"] == 14 * GIB and gpu["memory"]["change_bytes"] == 0
        assert busy["verdict"].startswith("GPU 1: busy 100% of ")
        assert busy["verdict"].endswith("peak 14.0 GiB (+0.0)")
        assert busy["start_s"] == pytest.approx(start, abs=1e-3)

        # Held, idle: a time.sleep cell. Unix seconds are a span's times too.
        server.simulator.set_scenario("idle")
        server.simulator.set_processes([
            SimulatedProcess(1, kernel.pid, 12 * GIB, sm_pct=0),
            SimulatedProcess(1, kernel.child, 2 * GIB, sm_pct=0)])
        start, end = run_cell(server, kernel)
        status, body = cell(server, kernel.kernel_id, f"{start:.3f}", f"{end:.3f}")
        idle = json.loads(body)
        assert status == 200 and idle["state"] == "held-no-work", idle
        # It did no GPU work: no finding, so no advice about code (issue 53).
        assert idle["verdict"] == "held 14.0 GiB on GPU 1; this cell did no GPU work", idle
        assert idle["gpus"][0]["findings"] == []

        # A CPU-only cell: the kernel holds no GPU.
        server.simulator.set_processes([])
        start, end = run_cell(server, kernel, passes=3)
        status, body = cell(server, kernel.kernel_id, iso(start), iso(end))
        none = json.loads(body)
        assert status == 200 and none["verdict"] == "no GPU work" and not none["touched_gpu"]


def attributed(server: RunningServer, kernel_id: str) -> bool:
    """Whether the server has told that a GPU process is the kernel's."""
    for sample in server.metrics.history.window(5.0):
        owners = sample.extra.get(OWNER_FAMILY)
        if isinstance(owners, dict) and any(o.kernel_id == kernel_id for o in owners.values()):
            return True
    return False


def test_bad_requests_get_one_line_and_the_server_keeps_serving(kernel: Kernel) -> None:
    with in_process_server(gpus=1, profile="h200") as server:
        # The kernel holds a GPU: this server knows it as this user's.
        server.simulator.set_processes([SimulatedProcess(0, kernel.pid, GIB)])
        until(lambda: attributed(server, kernel.kernel_id), "the kernel's processes attributed")
        now = time.time()
        good = (iso(now - 5), iso(now - 1))
        cases = [
            ({"kernel": kernel.kernel_id, "start": "yesterday", "end": good[1]}, 400,
             "start 'yesterday' is neither an ISO 8601 time nor Unix seconds"),
            ({"kernel": kernel.kernel_id, "start": "2026-12-05T12:00:00", "end": good[1]},
             400, "has no zone"),
            ({"kernel": kernel.kernel_id, "start": good[1], "end": good[0]}, 400,
             "end is before start"),
            ({"kernel": kernel.kernel_id, "end": good[1]}, 400, "start must be"),
            ({"kernel": kernel.kernel_id, "start": "nan", "end": good[1]}, 400, "finite"),
            ({"kernel": kernel.kernel_id, "start": "\u00e9t\u00e9", "end": good[1]}, 400,
             "neither an ISO 8601 time"),
            ({"start": good[0], "end": good[1]}, 400, "kernel must be a Jupyter kernel id"),
            ({"kernel": "../../etc/passwd", "start": good[0], "end": good[1]}, 400,
             "kernel must be a Jupyter kernel id"),
            ({"kernel": str(uuid.uuid4()), "start": good[0], "end": good[1]}, 404,
             "is not a kernel of this server's user"),
            ({"kernel": kernel.kernel_id, "start": good[0], "end": iso(now + 3600)}, 400,
             "ahead of this server's clock"),
        ]
        for query, status, words in cases:
            got, body = get(f"{server.url}/cell.json?{urlencode(query)}")
            text = html.unescape(body.decode())  # the server's error page, as for every route
            assert got == status and words in text, (query, got, text)
            assert "Traceback" not in text and text.count("\n") <= 1, text
        # Authentication: like every other route.
        query = urlencode({"kernel": kernel.kernel_id, "start": good[0], "end": good[1]})
        assert get(f"{server.url}/cell.json?{query}", token=None)[0] == 403
        assert get(f"{server.url}/processes.json")[0] == 200


@pytest.mark.skipif(pidns.unavailable() is not None, reason=str(pidns.unavailable()))
def test_a_cell_of_a_kernel_in_a_container() -> None:
    """The kernel and the server run in a container (a PID namespace of their own), as
    ``/processes.json`` sees them there (tests/test_containers.py's set-up). The driver
    names the kernel by its host PID: it is paired by the GPU node it holds, its per-process
    samples are not trusted, and the GPU's own activity speaks for it (its only process);
    by its local PID: its own samples speak."""
    judge_script = str(Path(__file__).with_name("support") / "ns_cell.py")
    kernel_id = str(uuid.uuid4())
    cases = {"host": ("compute-bound", 90, "busy", "device"),
             "local": ("idle", 0, "held-no-work", "per-process")}
    with pidns.PidNamespace(gpus=2) as ns:
        _, kernel = ns.spawn([sys.executable, "-c", "import os, time; os.open('/dev/nvidia0', "
                              "os.O_RDWR); time.sleep(600)", "-f",
                              f"/tmp/kernel-{kernel_id}.json"])
        judges = {}
        for behaviour, (scenario, sm, _, _) in cases.items():
            listing = Path(ns.folder) / f"{behaviour}.json"
            listing.write_text(json.dumps({
                "pid_behaviour": behaviour,
                "processes": [{"gpu": 0, "pid": kernel, "used_memory_bytes": 12 * GIB,
                               "sm_pct": sm,
                               "namespace_pids": pidns.namespace_pids(kernel, ns)}]}))
            judges[behaviour] = subprocess.Popen(
                ns.command([sys.executable, judge_script, str(listing), kernel_id, scenario]),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        reports = {}
        for behaviour, process in judges.items():
            out, err = process.communicate(timeout=240)
            assert process.returncode == 0, err[-3000:]
            reports[behaviour] = json.loads(out.strip().splitlines()[-1])
    for behaviour, (_, _, state, signal) in cases.items():
        report = reports[behaviour]
        [gpu] = report["gpus"]
        assert report["state"] == state and gpu["signal"] == signal, (behaviour, report)
        assert gpu["index"] == 0 and gpu["memory"]["peak_bytes"] == 12 * GIB, report
        assert gpu["memory"]["change_bytes"] == 0, report
    assert reports["local"]["gpus"][0]["sm_pct"] == 0.0
    assert "only process" in reports["host"]["gpus"][0]["signal_text"]
    assert reports["host"]["verdict"].startswith("GPU 0: busy 100% of ")


def test_the_same_span_from_memory_from_the_store_and_after_a_restart(
        kernel: Kernel, tmp_path: Path) -> None:
    """Issue 53, item 4: a busy cell and an idle one of a kernel, asked about while the
    in-memory history holds them, again once they have left it (a 20-second history) and
    the store's buckets of the kernel's own passes judge them, and again after a restart
    over the same store: the same verdict class on the same GPUs each time."""
    store = tmp_path / "store" / "history.sqlite"
    verdicts: dict[str, list[tuple[str, str, list[int]]]] = {}

    def ask(server: RunningServer, spans: list[tuple[float, float]], when: str) -> None:
        for start, end in spans:
            status, body = cell(server, kernel.kernel_id, iso(start), iso(end))
            assert status == 200, body
            data = json.loads(body)
            verdicts.setdefault(when, []).append(
                (data["judged_from"], data["state"], [g["index"] for g in data["gpus"]]))

    with in_process_server(gpus=2, profile="h200", scenario="compute-bound",
                           store_path=store, history_s=20.0) as server:
        server.simulator.set_processes([
            SimulatedProcess(1, kernel.pid, 12 * GIB, sm_pct=87),
            SimulatedProcess(1, kernel.child, 2 * GIB, sm_pct=87)])
        until(lambda: attributed(server, kernel.kernel_id), "the kernel's processes attributed")
        # From the store, a span is judged on the buckets of passes wholly in it: a bucket
        # stands for the time since the previous bucket's last pass. 15 s hold two whole
        # 5-second buckets whatever the span's phase and the passes' pace (a pass may come
        # up to half an interval early, so eleven passes alone may take under 10 s).
        busy = run_cell(server, kernel, passes=11, sampled=True, seconds=15.0)
        ask(server, [busy], "memory")
        server.simulator.set_scenario("idle")
        server.simulator.set_processes([
            SimulatedProcess(1, kernel.pid, 12 * GIB, sm_pct=0),
            SimulatedProcess(1, kernel.child, 2 * GIB, sm_pct=0)])
        idle = run_cell(server, kernel, passes=11, seconds=15.0)
        ask(server, [idle], "memory")
        history = server.metrics.history
        until(lambda: history.oldest().time_s > idle[1] + 3.0, "the spans out of memory",
              seconds=60)
        ask(server, [busy, idle], "store")
    with in_process_server(gpus=2, profile="h200", scenario="idle", store_path=store,
                           history_s=20.0) as restarted:
        restarted.simulator.set_processes([SimulatedProcess(1, kernel.pid, 12 * GIB,
                                                            sm_pct=0)])
        until(lambda: attributed(restarted, kernel.kernel_id),
              "the kernel's processes attributed")
        ask(restarted, [busy, idle], "restarted")
    assert [judged for judged, _, _ in verdicts["memory"]] == ["memory", "memory"], verdicts
    assert [judged for judged, _, _ in verdicts["store"]] == ["store", "store"], verdicts
    assert [judged for judged, _, _ in verdicts["restarted"]] == ["store", "store"], verdicts
    expected = [("busy", [1]), ("held-no-work", [1])]
    for when in ("memory", "store", "restarted"):
        assert [(state, gpus) for _, state, gpus in verdicts[when]] == expected, verdicts
