"""``/cell.json`` on scripted histories (issue 45, item 2): what a cell did on the GPU.

Each test writes a history by hand: a tick every 0.2 s with each GPU's utilization and
memory, a process pass every second listing what the driver would (the kernel's processes
and others, with or without per-process SM samples), and the owners of those processes (a
kernel's child counts as the kernel). Then the report over a span of it, gathered as the
route gathers it (``apps/cells.cell_report``), says what the cell did: every verdict class,
per-process samples against the device's signals, two kernels sharing a GPU, a span that
reaches into the history store, and a GPU lost during the span. The pure judgment
(``diagnosis/cell.py``) is tested directly for the memory of a cell shorter than a pass.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.apps.cells import CellRefused, cell_report, cells_text, device_clause
from jupyterlab_nvdashboard.apps.processes import current_user
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.diagnosis.cell import (
    BUSY,
    CANNOT_TELL,
    HELD_IDLE,
    HELD_NO_WORK,
    NO_GPU_WORK,
    TOO_SHORT,
    DeviceCell,
    KernelPass,
    MemoryChange,
    OtherCell,
    judge_cell,
)
from jupyterlab_nvdashboard.diagnosis.findings import NO_SIGNAL, Figure, Finding
from jupyterlab_nvdashboard.diagnosis.idle import DeviceEvidence
from jupyterlab_nvdashboard.jupyter_sessions import JupyterServer, JupyterSessions
from jupyterlab_nvdashboard.metrics import (
    OWNER_FAMILY,
    PROCESS_FAMILY,
    GpuReading,
    History,
    HostReading,
    Metrics,
    ProcessOwner,
    ProcessReading,
)
from jupyterlab_nvdashboard.metrics.families import GPM_FAMILY, GpmReading
from jupyterlab_nvdashboard.store import HistoryStore
from jupyterlab_nvdashboard.store.holders import DeviceActivity, HolderReading, PassRecord
from tests.support.store_clock import ScriptedClock

GIB = float(2**30)
TICK_S = 0.2
KERNEL = "6f1c2a8e-0d4b-4c55-9a1e-3b7d2c9e8f01"
OTHER_KERNEL = "b2e4d6f8-1a3c-4e5f-8a7b-9c0d1e2f3a4b"
ME = current_user() or "me"
NO_HOST = HostReading(*([None] * len(HostReading._fields)))
NO_GPM = GpmReading(*([None] * len(GpmReading._fields)))


@dataclass(frozen=True)
class Held:
    """One NVML entry: a process of ``kernel`` (its pid) on ``gpu``."""

    gpu: int
    pid: int
    memory_bytes: float
    sm_pct: float | None  # None: the driver gives no per-process sample


def owner(pid: int, kernel: str | None, kernel_pid: int, user: str = ME) -> ProcessOwner:
    command = f"python -m ipykernel_launcher -f kernel-{kernel}.json" if kernel else "python"
    return ProcessOwner(pid, "ok", user, command, None, kernel, kernel_pid if kernel else None)


# The kernel (pid 4100) and its child (4101, a DataLoader worker, say); another user's
# kernel is not ours; 4300 is a process outside any kernel.
OWNERS = {4100: owner(4100, KERNEL, 4100), 4101: owner(4101, KERNEL, 4100),
          4200: owner(4200, OTHER_KERNEL, 4200), 4300: owner(4300, None, 0)}


def scripted(tmp_path: Path, gpus: int = 2, store: HistoryStore | None = None,
             jupyter: JupyterSessions | None = None, profile: str = "mixed"
             ) -> tuple[Metrics, DashboardSources]:
    """Simulated GPUs whose history the test writes (nothing samples them)."""
    metrics = create_metrics(Config(interval_s=TICK_S, token=None, runs_dir=tmp_path,
                                    simulation=SimulationConfig(gpu_count=gpus,
                                                                profile=profile)), environ={})
    metrics.nvml.ensure_initialized()
    return metrics, DashboardSources(metrics, jupyter=jupyter, store=store)


def write(history: History, start_s: float, end_s: float, gpus: int,
          utilization: Callable[[int, float], float | None],
          held: Callable[[float], list[Held]],
          lost: Callable[[int, float], bool] = lambda g, t: False,
          gpm: Callable[[int, float], float | None] | None = None,
          owners: Callable[[float], dict[int, ProcessOwner]] = lambda t: OWNERS) -> None:
    """Ticks from ``start_s`` to ``end_s`` (wall time); a process pass and ``owners`` (the
    processes' owners told by then) on each whole second; ``gpm``: each GPU's GPM SM
    activity, in every sample (as the sampler carries a pass's reading). Memory used on a
    GPU is what its entries hold, plus 1 GiB."""
    now_wall, now_mono = time.time(), time.monotonic()
    for i in range(int(round((end_s - start_s) / TICK_S)) + 1):
        t = start_s + i * TICK_S
        entries = held(t)
        readings = []
        for gpu in range(gpus):
            if lost(gpu, t):
                readings.append(GpuReading.unavailable(gpu, True))
                continue
            used = GIB + sum(e.memory_bytes for e in entries if e.gpu == gpu)
            readings.append(GpuReading.unavailable(gpu, False)._replace(
                utilization_pct=utilization(gpu, t), memory_used_bytes=used,
                memory_total_bytes=80 * GIB))
        extra: dict[str, object] = {}
        if gpm is not None:
            extra[GPM_FAMILY] = {gpu: NO_GPM._replace(sm_activity_pct=gpm(gpu, t))
                                 for gpu in range(gpus)}
        if abs(t - round(t)) < TICK_S / 4:
            extra[PROCESS_FAMILY] = tuple(
                ProcessReading(e.gpu, e.pid, "compute", e.memory_bytes, e.sm_pct, None, start_s)
                for e in entries if not lost(e.gpu, t))
            extra[OWNER_FAMILY] = owners(t)
        history.append(t, tuple(readings), NO_HOST, extra=extra,
                       monotonic_s=now_mono + (t - now_wall))


def report(sources: DashboardSources, start_s: float, end_s: float,
           kernel: str = KERNEL) -> dict:
    return cell_report(sources, kernel, start_s, end_s)


@pytest.fixture
def now() -> float:
    """A whole second a little in the past: the scripted history ends there."""
    return float(int(time.time()) - 5)


def kernel_on_gpu1(memory: Callable[[float], float], sm: float | None,
                   others: Callable[[float], list[Held]] = lambda t: []
                   ) -> Callable[[float], list[Held]]:
    """The kernel (and its child, with no memory of its own) on GPU 1."""
    return lambda t: [Held(1, 4100, memory(t), sm), Held(1, 4101, 0.0, sm), *others(t)]


def test_busy_cell_with_per_process_samples(tmp_path: Path, now: float) -> None:
    """GPU 1 busy (utilization 90%), the kernel's own SM samples 80%; the cell, from
    now-60 to now-19, grows the kernel's memory from 12 to 14 GiB."""
    metrics, sources = scripted(tmp_path)
    start, end = now - 60, now - 19
    write(metrics.history, now - 100, now, 2, lambda g, t: 90.0 if g == 1 else 0.0,
          kernel_on_gpu1(lambda t: 12 * GIB if t < start + 20 else 14 * GIB, 80.0))
    data = report(sources, start, end)
    assert data["state"] == BUSY and data["touched_gpu"] and not data["too_short"]
    assert data["judged_from"] == "memory" and data["resolution_s"] == TICK_S
    assert data["duration_s"] == pytest.approx(41) and data["kernel"] == KERNEL
    [gpu] = data["gpus"]
    assert gpu["index"] == 1 and gpu["label"] == "GPU 1" and gpu["uuid"] == metrics.facts[1].uuid
    assert gpu["signal"] == "per-process" and gpu["sm_pct"] == pytest.approx(80.0)
    assert gpu["working_share"] == 1.0 and gpu["lost"] is False and gpu["mig"] is None
    assert gpu["memory"] == {"start_bytes": 12 * GIB, "end_bytes": 14 * GIB,
                             "peak_bytes": 14 * GIB, "change_bytes": 2 * GIB}
    assert data["verdict"] == "GPU 1: busy 100% of 41 s at 80% SM, peak 14.0 GiB (+2.0)"
    causes = [f["cause"] for f in gpu["findings"]]
    assert "busy" in causes, causes
    busy = gpu["findings"][causes.index("busy")]
    assert busy["line"].startswith("busy") and busy["figures"][0]["name"] == "utilization"
    assert busy["figures"][0]["value"] == pytest.approx(90.0)


def test_held_but_idle_cell_says_why_from_the_findings(tmp_path: Path, now: float) -> None:
    """The kernel holds 12 GiB; GPU 1 runs in bursts of 1 s every 4 s (it waits on the host
    between them): it worked a quarter of the span, and the finding says starved."""
    metrics, sources = scripted(tmp_path)
    start, end = now - 60, now - 20
    write(metrics.history, now - 100, now, 2,
          lambda g, t: 95.0 if g == 1 and (t - start) % 4 < 1 - 1e-6 else 0.0,
          kernel_on_gpu1(lambda t: 12 * GIB, None))
    data = report(sources, start, end)
    [gpu] = data["gpus"]
    assert data["state"] == HELD_IDLE and gpu["signal"] == "device", data
    assert gpu["working_share"] == pytest.approx(0.25, abs=0.03)
    assert gpu["findings"][0]["cause"] == "starved"
    assert data["verdict"] == "held 12.0 GiB on GPU 1, but this cell worked it 25% of 40 s: starved"
    # A time.sleep cell: nothing runs at all. It did no GPU work, and gets no advice.
    metrics, sources = scripted(tmp_path)
    write(metrics.history, now - 100, now, 2, lambda g, t: 0.0,
          kernel_on_gpu1(lambda t: 12 * GIB, 0.0))
    data = report(sources, start, end)
    assert data["state"] == HELD_NO_WORK and data["gpus"][0]["signal"] == "per-process"
    assert data["verdict"] == "held 12.0 GiB on GPU 1; this cell did no GPU work"
    assert data["gpus"][0]["findings"] == []


def test_per_process_samples_speak_over_the_device(tmp_path: Path, now: float) -> None:
    """Another user's process keeps GPU 1 at 95%; the kernel's own samples say 0%: the cell
    held its memory idle, whatever the device shows. Without per-process samples the
    same history cannot be told; alone on the GPU, the device's utilization speaks."""
    others = lambda t: [Held(1, 4300, 20 * GIB, 95.0)]  # noqa: E731
    start, end = now - 50, now - 10
    metrics, sources = scripted(tmp_path)
    write(metrics.history, now - 100, now, 2, lambda g, t: 95.0 if g == 1 else 0.0,
          kernel_on_gpu1(lambda t: 4 * GIB, 0.0, others))
    own = report(sources, start, end)
    assert own["state"] == HELD_NO_WORK and own["gpus"][0]["signal"] == "per-process", own
    # The device's findings are the other process's: no advice about this cell's code.
    assert own["gpus"][0]["findings"] == [] and own["gpus"][0]["whose"] == "gpu"
    assert own["gpus"][0]["sm_pct"] == 0.0 and own["gpus"][0]["working_share"] == 0.0
    metrics, sources = scripted(tmp_path)
    write(metrics.history, now - 100, now, 2, lambda g, t: 95.0 if g == 1 else 0.0,
          lambda t: [Held(1, 4100, 4 * GIB, None), Held(1, 4300, 20 * GIB, None)])
    shared = report(sources, start, end)
    assert shared["state"] == CANNOT_TELL and shared["gpus"][0]["sm_pct"] is None
    metrics, sources = scripted(tmp_path)
    write(metrics.history, now - 100, now, 2, lambda g, t: 60.0 if g == 1 else 0.0,
          lambda t: [Held(1, 4100, 4 * GIB, None)])
    alone = report(sources, start, end)
    [gpu] = alone["gpus"]
    assert alone["state"] == BUSY and gpu["signal"] == "device"
    assert gpu["sm_pct"] == pytest.approx(60.0) and "only process" in gpu["signal_text"]


def test_passes_without_the_kernels_own_samples_tell_nothing(tmp_path: Path,
                                                             now: float) -> None:
    """The kernel alone on GPU 1 with its own samples at 90% in most passes, and none in
    every third (the driver had no sample newer than the pass before: a loaded machine's
    passes slip). Those passes tell nothing; the device's 60% is not the kernel's. The cell
    reads 90% from its own samples (the full suite's lab test saw "SM 78% (the GPU's)")."""
    metrics, sources = scripted(tmp_path)
    start, end = now - 50, now - 10
    write(metrics.history, now - 100, now, 2, lambda g, t: 60.0 if g == 1 else 0.0,
          lambda t: [Held(1, 4100, 4 * GIB, None if int(round(t)) % 3 == 0 else 90.0)])
    [gpu] = report(sources, start, end)["gpus"]
    assert gpu["signal"] == "per-process", gpu
    assert gpu["sm_pct"] == pytest.approx(90.0), gpu


def test_a_cell_that_frees_its_gpu_at_its_start_did_no_work_there(tmp_path: Path,
                                                                   now: float) -> None:
    """The kernel held 6 GiB on GPU 1 until the cell's first line freed it; every pass in
    the cell lists none of its processes there. That is the driver's word that the kernel
    did no work on GPU 1, not "no process pass fell in the span" (the Run All lab test's
    release cell)."""
    metrics, sources = scripted(tmp_path)
    start, end = now - 50, now - 10
    write(metrics.history, now - 100, now, 2, lambda g, t: 0.0,
          lambda t: [Held(1, 4100, 6 * GIB, 0.0)] if t < start + 0.1 else [])
    data = report(sources, start, end)
    [gpu] = data["gpus"]
    assert gpu["signal"] == "per-process" and gpu["working_share"] == 0.0, gpu
    assert gpu["memory"]["change_bytes"] == -6 * GIB, gpu
    assert data["verdict"] == "held 6.0 GiB on GPU 1; this cell did no GPU work", data


def test_a_new_kernel_process_is_the_kernels_before_its_owner_is_told(tmp_path: Path,
                                                                      now: float) -> None:
    """After a restart the kernel's new process (4102) works GPU 1 for a 3-second cell and
    then frees it. Its owner is told a slow pass after it first shows, and a loaded
    machine's slow thread told it only as the cell ended: the passes that listed it are
    the kernel's all the same, not skipped (which left the passes after the cell, listing
    nothing, to say "no GPU work": the real-Lab restart test, under load)."""
    metrics, sources = scripted(tmp_path)
    start, end = now - 20, now - 17
    told = {**OWNERS, 4102: owner(4102, KERNEL, 4102)}
    write(metrics.history, now - 60, now, 2, lambda g, t: 90.0 if start <= t < end else 0.0,
          lambda t: [Held(1, 4102, GIB, 90.0)] if start <= t < end else [],
          owners=lambda t: told if t >= end else OWNERS)
    data = report(sources, start, end)
    assert [gpu["state"] for gpu in data["gpus"]] == [BUSY], data["verdict"]
    [gpu] = data["gpus"]
    assert gpu["signal"] == "per-process", data["verdict"]
    assert gpu["sm_pct"] == pytest.approx(90.0) and gpu["memory"]["peak_bytes"] == GIB, gpu


def test_two_kernels_sharing_a_gpu_cannot_tell(tmp_path: Path, now: float) -> None:
    """Two kernels on GPU 1, the GPU busy, no per-process samples: which kernel worked it
    cannot be told. The verdict says so, with the memory the cell held."""
    metrics, sources = scripted(tmp_path)
    start, end = now - 50, now - 10
    write(metrics.history, now - 100, now, 2, lambda g, t: 80.0 if g == 1 else 0.0,
          lambda t: [Held(1, 4100, 6 * GIB, None), Held(1, 4200, 10 * GIB, None)])
    data = report(sources, start, end)
    [gpu] = data["gpus"]
    assert data["state"] == CANNOT_TELL and gpu["signal"] == "cannot-tell"
    assert gpu["sm_pct"] is None and gpu["memory"]["peak_bytes"] == 6 * GIB
    assert "cannot tell what this cell did" in data["verdict"]
    assert "peak 6.0 GiB (+0.0)" in data["verdict"]
    assert f"GPU 1 is shared with your kernel {OTHER_KERNEL[:8]}" in data["verdict"]
    # The GPU's work is not the kernel's: no share, no findings, no advice.
    assert gpu["working_share"] is None and gpu["findings"] == []
    assert gpu["shared_with"] == [f"your kernel {OTHER_KERNEL[:8]}"]


def test_no_gpu_work_and_too_short(tmp_path: Path, now: float) -> None:
    """A CPU-only cell: no GPU work. A cell of 0.1 s that allocated 0.5 GiB: too short to
    judge, with the change from the pass before it to the pass after it."""
    metrics, sources = scripted(tmp_path)
    write(metrics.history, now - 100, now, 2, lambda g, t: 0.0,
          lambda t: [] if t < now - 30 else [Held(0, 4100, 0.5 * GIB, 0.0)])
    cpu = report(sources, now - 80, now - 40)
    assert cpu["state"] == NO_GPU_WORK and cpu["verdict"] == "no GPU work"
    assert cpu["touched_gpu"] is False and cpu["gpus"] == []
    short = report(sources, now - 30.55, now - 30.45)
    assert short["too_short"] and short["state"] == TOO_SHORT, short
    assert short["verdict"] == "too short to judge: +0.5 GiB on GPU 0"
    assert short["gpus"][0]["memory"]["change_bytes"] == 0.5 * GIB


def test_a_gpu_lost_during_the_span(tmp_path: Path, now: float) -> None:
    """GPU 1 stops answering halfway through the cell: the cell says so, with the memory it
    held before, and the diagnosis's own finding."""
    metrics, sources = scripted(tmp_path)
    start, end = now - 60, now - 20
    write(metrics.history, now - 100, now, 2, lambda g, t: 90.0,
          kernel_on_gpu1(lambda t: 8 * GIB, 70.0), lost=lambda g, t: g == 1 and t >= now - 40)
    data = report(sources, start, end)
    [gpu] = data["gpus"]
    assert gpu["lost"] is True and data["state"] == "lost"
    assert gpu["memory"]["peak_bytes"] == 8 * GIB
    assert data["verdict"].startswith("GPU 1 was lost") and "peak 8.0 GiB" in data["verdict"]
    assert gpu["findings"][0]["cause"] == "lost"
    # A cell that ended before the loss: lost since, and said so.
    before = report(sources, now - 90, now - 60)
    assert before["gpus"][0]["lost"] is True


def test_a_span_older_than_the_history_is_judged_from_the_store(tmp_path: Path,
                                                                 now: float) -> None:
    """The store kept 10 minutes from now-900 (GPU 1 held 12 GiB more than its 1 GiB and
    idle, the kernel's 12 GiB in every pass, its own samples 0%); the in-memory history
    starts at now-120. A cell from now-600 to now-300 is judged from the store's 5-second
    buckets of the kernel's own passes, and says so: the kernel's memory, not the
    device's."""
    path = tmp_path / "store.sqlite"
    metrics, _ = scripted(tmp_path)
    uuids = {fact.index: fact.uuid for fact in metrics.facts}
    clock = ScriptedClock(now - 900)
    writer = HistoryStore(path, clock=clock, device_uuids=lambda: uuids)
    writer.open()
    old = History(10)
    writer.attach(old)
    while clock.wall < now - 200:
        readings = tuple(GpuReading.unavailable(g, False)._replace(
            utilization_pct=0.0, memory_used_bytes=(13 if g == 1 else 1) * GIB,
            memory_total_bytes=80 * GIB) for g in range(2))
        old.append(clock.wall, readings, NO_HOST, monotonic_s=clock.mono)
        writer.hear_pass(PassRecord(clock.wall, (
            HolderReading(ME, KERNEL, uuids[1], 12 * GIB, 0.0, True),),
            (DeviceActivity(uuids[1], 0.0, 0.0, "utilization"),)))
        clock.advance(1.0)
    writer.step(final=True)
    writer.stop()
    store = HistoryStore(path, device_uuids=lambda: uuids)
    store.open()
    try:
        metrics, sources = scripted(tmp_path, store=store)
        write(metrics.history, now - 120, now, 2, lambda g, t: 0.0,
              kernel_on_gpu1(lambda t: 12 * GIB, 0.0))
        read: list[tuple[float, float]] = []
        pieces = store.past_in_pieces

        def recorded(start_s: float, end_s: float, *args: object, **kwargs: object):  # noqa: ANN202
            read.append((start_s, end_s))
            return pieces(start_s, end_s, *args, **kwargs)  # type: ignore[arg-type]

        store.past_in_pieces = recorded  # type: ignore[method-assign]
        data = report(sources, now - 600, now - 300)
        # The span's own part of the store, not everything up to the history (issue 53: a
        # minute 20 days ago read 20 days).
        assert read == [(now - 600, now - 300)], read
        assert data["judged_from"] == "store" and data["resolution_s"] == 5.0, data
        [gpu] = data["gpus"]
        assert gpu["index"] == 1 and gpu["signal"] == "per-process"
        assert gpu["memory"]["peak_bytes"] == pytest.approx(12 * GIB)
        assert gpu["working_share"] == 0.0
        assert data["verdict"] == ("held 12.0 GiB on GPU 1; this cell did no GPU work"
                                   " (from the history store's 5 s means)")
        assert data["samples"] == pytest.approx(60, abs=1)
    finally:
        store.stop()
        store.close()


def test_kernels_of_another_server_or_user_are_refused(tmp_path: Path, now: float) -> None:
    """Standalone, a kernel is ours when one of our processes is it: another user's kernel
    is refused (403), a kernel nobody here knows (404), a text that is no kernel id (400).
    Under Jupyter, only that Jupyter's kernels are answered."""
    OWNERS[4200] = owner(4200, OTHER_KERNEL, 4200, user="someone-else")
    try:
        metrics, sources = scripted(tmp_path)
        write(metrics.history, now - 20, now, 2, lambda g, t: 0.0,
              lambda t: [Held(0, 4100, GIB, 0.0), Held(1, 4200, GIB, 0.0)])
        assert report(sources, now - 10, now - 5)["state"] == HELD_NO_WORK
        for kernel, status in ((OTHER_KERNEL, 403), ("0d0e0f10-1112-4314-9516-171819202122", 404),
                               ("../../etc/passwd", 400), ("", 400)):
            with pytest.raises(CellRefused) as refused:
                report(sources, now - 10, now - 5, kernel=kernel)
            assert refused.value.status == status and "\n" not in refused.value.reason
    finally:
        OWNERS[4200] = owner(4200, OTHER_KERNEL, 4200)
    jupyter = JupyterSessions(JupyterServer("http://127.0.0.1:9/", "/", "t"),
                              fetch=lambda server: [{"path": "work/a.ipynb", "type": "notebook",
                                                     "kernel": {"id": OTHER_KERNEL}}],
                              fetch_executions=lambda server: {"kernels": {}})
    metrics, sources = scripted(tmp_path, jupyter=jupyter)
    write(metrics.history, now - 20, now, 2, lambda g, t: 0.0,
          lambda t: [Held(0, 4100, GIB, 0.0), Held(1, 4200, GIB, 0.0)])
    with pytest.raises(CellRefused) as refused:
        report(sources, now - 10, now - 5)  # ours by its processes, not this Jupyter's
    assert refused.value.status == 404 and "not one of this Jupyter's kernels" in \
        refused.value.reason
    other = report(sources, now - 10, now - 5, kernel=OTHER_KERNEL)
    assert other["notebook"] == "work/a.ipynb" and other["gpus"][0]["index"] == 1


def test_a_cell_on_a_mig_device(tmp_path: Path, now: float) -> None:
    """An H100 in MIG mode: its MIG devices are rows of their own (no utilization, no
    per-process samples under MIG); the kernel on MIG 1, alone there, is judged by that
    instance's GPM SM activity, and the cell names the MIG device."""
    metrics, sources = scripted(tmp_path, gpus=1, profile="h100-mig")
    [mig] = [f for f in metrics.facts if f.label == "GPU 0 · MIG 1"]
    write(metrics.history, now - 60, now, len(metrics.facts), lambda g, t: None,
          lambda t: [Held(mig.index, 4100, 5 * GIB, None)],
          gpm=lambda g, t: 70.0 if g == mig.index else None)
    data = report(sources, now - 40, now - 10)
    [gpu] = data["gpus"]
    assert gpu["index"] == mig.index and gpu["mig"] == "GPU 0 · MIG 1", gpu
    assert gpu["label"] == "GPU 0 · MIG 1" and gpu["signal"] == "device"
    assert gpu["sm_pct"] == pytest.approx(70.0) and "SM activity" in gpu["signal_text"]
    # The headline names what the details find (SM activity 70%: underused).
    assert data["verdict"].startswith("GPU 0 · MIG 1: busy 100% of 30 s at 70% SM (underused), "
                                      "peak 5.0 GiB")


def test_a_standalone_kernel_that_never_held_a_gpu_is_known_by_its_connection_file(
        tmp_path: Path, now: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU-only kernel has no GPU process to name it: standalone, its connection file in
    Jupyter's runtime folder, owned by this user, makes it this server's ("no GPU work")."""
    metrics, sources = scripted(tmp_path)
    write(metrics.history, now - 20, now, 2, lambda g, t: 0.0, lambda t: [])
    cpu_only = "0d0e0f10-1112-4314-9516-171819202122"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(CellRefused) as refused:
        report(sources, now - 10, now - 5, kernel=cpu_only)
    assert refused.value.status == 404
    (tmp_path / f"kernel-{cpu_only}.json").write_text("{}")
    data = report(sources, now - 10, now - 5, kernel=cpu_only)
    assert data["verdict"] == "no GPU work" and data["notebook"] is None


def test_the_memory_of_a_cell_between_two_passes() -> None:
    """The pure judgment: a cell of 0.3 s between two passes has no pass of its own; its
    memory is the pass before it and the one after it, and it held the GPU."""
    def on(held: float) -> tuple[DeviceEvidence, ...]:
        return (DeviceEvidence(0, "GPU 0", held, 50.0, True, 50.0),) if held else ()

    passes = [KernelPass(10.0, on(0.0)), KernelPass(11.0, on(3 * GIB)),
              KernelPass(12.0, on(3 * GIB))]
    judgment = judge_cell(10.4, 10.7, passes, [], [], gap_s=2.0)
    assert judgment.too_short and judgment.touched_gpu and judgment.state == TOO_SHORT
    [device] = judgment.devices
    assert device.memory.start_bytes == 0.0 and device.memory.end_bytes == 3 * GIB
    assert device.memory.change_bytes == 3 * GIB and not math.isnan(device.memory.peak_bytes)


def test_a_change_between_two_cells_is_named_over_those_two_alone() -> None:
    """The pure judgment, Run All's (b), (c), (c2): cell [3] runs on the CPU from 13 to 16 s
    holding 6 GiB, cell [4] frees it at its start. The passes place the change between the
    one at 15.5 s (in [3]) and the one at 16.5 s (in [4]); the unchanged interval from the
    pass in [2] names no change of [2]'s (the old rule named it: "cells [2]–[4]")."""
    def on(held: float) -> tuple[DeviceEvidence, ...]:
        return (DeviceEvidence(0, "GPU 0", held, 0.0, True, 0.0),) if held else ()

    passes = [KernelPass(t, on(6 * GIB)) for t in (12.5, 13.5, 14.5, 15.5)] + \
        [KernelPass(16.5, on(0.0))]
    neighbours = [OtherCell(2, 10.0, 13.0), OtherCell(4, 16.0, 19.0)]
    judgment = judge_cell(13.0, 16.0, passes, [], [], gap_s=2.5, others=neighbours, count=3)
    [device] = judgment.devices
    assert device.memory.change_bytes == 0.0
    assert device.memory.spanning_bytes == -6 * GIB
    assert device.memory.spanning_cells == (3, 4)
    assert cells_text(device.memory.spanning_cells) == "cells [3]–[4]"
    # Where nothing changed, the cells the passes cannot separate are all named.
    steady = judge_cell(13.0, 16.0, [KernelPass(t, on(6 * GIB)) for t in (12.5, 14.5, 16.5)],
                        [], [], gap_s=2.5, others=neighbours, count=3)
    assert steady.devices[0].memory.spanning_cells == (2, 3, 4)


def test_a_pass_speaks_for_the_second_before_it_not_the_cell_after() -> None:
    """The pure judgment: the kernel worked (SM 90%) until 10.9 s, then a cell from 10.9 to
    14.0 s only sleeps. The pass at 11 s carries the second before it (NVML's per-process
    samples and the device's highest reading are those since the previous pass): it tells
    of the previous cell, and this one did no GPU work."""
    def on(sm: float) -> tuple[DeviceEvidence, ...]:
        return (DeviceEvidence(0, "GPU 0", 6 * GIB, sm, True, sm),)

    passes = [KernelPass(10.0, on(90.0)), KernelPass(11.0, on(90.0)),
              *(KernelPass(t, on(0.0)) for t in (12.0, 13.0, 14.0))]
    judgment = judge_cell(10.9, 14.0, passes, [], [], gap_s=2.0)
    [device] = judgment.devices
    assert device.signal == "per-process"
    assert device.sm_pct == 0.0 and device.working_share == 0.0, device


def test_the_benchmark_gives_its_figures() -> None:
    """``benchmarks/cell_report.py`` runs, judges the kernel busy on the GPUs it holds, and
    prints a median and range for the report and for the route."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "cell_report.py"),
                           "--gpus", "2", "--held", "1", "--minutes", "1", "--repeats", "2"],
                          capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "1-minute span of 2 GPUs (the kernel on 1)" in lines[0], lines
    assert lines[1] == ("  verdict: GPU 0: busy 100% of 58 s at 48% SM (underused), "
                        "peak 13.0 GiB (+0.0)"), lines
    for what in ("the report, wall:", "the report, CPU:", "GET /cell.json:"):
        [line] = [line for line in lines if what in line]
        assert re.search(r"[\d.]+ ms \([\d.]+-[\d.]+\)", line), line


def test_a_running_cell_of_a_gpu_kernel_is_read_at_its_own_pace_with_no_page_open(
        tmp_path: Path, now: float) -> None:
    """Issue 53: the cell verdict is a consumer of the read-rate table. While a kernel that
    holds GPU memory runs a cell (Jupyter says busy), the server asks for a pass a second
    with no page open, as it does with one open: the cell's samples, and so its verdict, do
    not depend on the pages."""
    from jupyterlab_nvdashboard.apps.cells import gpu_kernel_runs_a_cell
    from jupyterlab_nvdashboard.metrics.demand import (
        AT_WORK,
        CELL_RUNNING,
        HOLDING,
        read_intervals,
    )
    from jupyterlab_nvdashboard.server import LiveSessions, ViewerWatch

    state = {"execution_state": "busy"}
    jupyter = JupyterSessions(JupyterServer("http://127.0.0.1:9/", "/", "t"),
                              fetch=lambda server: [{"path": "a.ipynb", "type": "notebook",
                                                     "kernel": {"id": KERNEL, **state}}],
                              fetch_executions=lambda server: {"kernels": {}})
    metrics, sources = scripted(tmp_path, jupyter=jupyter)
    write(metrics.history, now - 10, now, 2, lambda g, t: 50.0,
          kernel_on_gpu1(lambda t: GIB, 50.0))
    jupyter.refresh()
    watch = ViewerWatch(metrics, [], LiveSessions(), 0.0,
                        cell_running=lambda: gpu_kernel_runs_a_cell(sources))
    assert gpu_kernel_runs_a_cell(sources) and CELL_RUNNING in watch.consumers()
    with_page = read_intervals({"/GPU-Utilization", HOLDING}, TICK_S, 2.0)
    no_page = read_intervals(watch.consumers(), TICK_S, 2.0)
    assert no_page[PROCESS_FAMILY] == with_page[PROCESS_FAMILY] == 1.0
    assert no_page["core"] <= 1.0
    state["execution_state"] = "idle"
    jupyter.refresh()
    # The kernel still holds GPU 1, which still works: only AT_WORK is left (issue 51).
    assert not gpu_kernel_runs_a_cell(sources) and watch.consumers() == {AT_WORK}


def test_a_symlink_planted_as_a_connection_file_is_not_ours(
        tmp_path: Path, now: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53: another user may plant ``kernel-<their id>.json`` in a shared runtime
    folder as a symlink to any file of ours; a connection file counts only as a regular
    file of our own."""
    metrics, sources = scripted(tmp_path)
    write(metrics.history, now - 20, now, 2, lambda g, t: 0.0, lambda t: [])
    theirs = "0d0e0f10-1112-4314-9516-171819202122"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    mine = tmp_path / "notes.txt"
    mine.write_text("mine")
    (tmp_path / f"kernel-{theirs}.json").symlink_to(mine)
    with pytest.raises(CellRefused) as refused:
        report(sources, now - 10, now - 5, kernel=theirs)
    assert refused.value.status == 404


def test_another_users_process_naming_the_kernel_is_not_the_kernel(
        tmp_path: Path, now: float) -> None:
    """Issue 53: another user's process whose command line names this kernel's connection
    file is another holder of the GPU, not the kernel: its memory and its work are not the
    cell's, and it is named as sharing the GPU."""
    OWNERS[4400] = owner(4400, KERNEL, 4400, user="someone-else")
    try:
        metrics, sources = scripted(tmp_path)
        write(metrics.history, now - 60, now, 2, lambda g, t: 90.0 if g == 1 else 0.0,
              lambda t: [Held(1, 4100, 4 * GIB, 0.0), Held(1, 4400, 20 * GIB, 90.0)])
        data = report(sources, now - 40, now - 10)
    finally:
        del OWNERS[4400]
    [gpu] = data["gpus"]
    assert data["state"] == HELD_NO_WORK and gpu["memory"]["peak_bytes"] == 4 * GIB, data
    assert gpu["shared_with"] == ["someone-else's process"] and gpu["findings"] == []


def test_an_end_ahead_of_the_clock_is_refused_at_once(tmp_path: Path, now: float) -> None:
    """Issue 53: an end 59 s ahead of this server's clock held a shared thread for seconds;
    an end more than ``FUTURE_SLACK_S`` ahead is refused before anything waits."""
    from jupyterlab_nvdashboard.apps.cells import FUTURE_SLACK_S

    metrics, sources = scripted(tmp_path)
    write(metrics.history, now - 20, now, 2, lambda g, t: 0.0, kernel_on_gpu1(lambda t: GIB, 0.0))
    began = time.monotonic()
    with pytest.raises(CellRefused) as refused:
        report(sources, now - 10, time.time() + 59)
    assert refused.value.status == 400 and "ahead of this server's clock" in refused.value.reason
    assert time.monotonic() - began < 0.5 and FUTURE_SLACK_S <= 5


def test_the_benchmark_times_a_revision_beside_this_tree(tmp_path: Path) -> None:
    """``--baseline REV``: the revision and this tree in turn, over one history, each round
    a row a side; the same report on both; the revision's worktree removed again."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "cell_report.py"),
                           "--gpus", "2", "--held", "1", "--minutes", "1", "--repeats", "2",
                           "--baseline", "HEAD", "--rounds", "1"],
                          capture_output=True, text=True, timeout=600, cwd=root,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 1 |")]
    assert [row.split(" | ")[1] for row in rows] == ["HEAD", "this tree"], done.stdout
    assert "the same report on both sides: yes" in done.stdout
    assert "load average" in done.stdout
    assert not list(tmp_path.glob("nvdashboard-baseline-*"))


def test_a_kernels_pass_has_one_entry_per_gpu(tmp_path: Path, now: float) -> None:
    """What the judgment reads by row (``diagnosis.cell._by_row``): a pass holds one entry
    of the kernel's per GPU, its processes' memory summed (the kernel and its child on GPU
    1, both with memory), however many of its processes the driver lists there."""
    from jupyterlab_nvdashboard.apps.cells import kernel_passes

    metrics, sources = scripted(tmp_path)
    write(metrics.history, now - 30, now, 2, lambda g, t: 50.0,
          lambda t: [Held(1, 4100, 3 * GIB, 40.0), Held(1, 4101, 2 * GIB, 60.0),
                     Held(0, 4101, GIB, 10.0)])
    passes = kernel_passes(sources, KERNEL, now - 20, now - 5)
    assert len(passes) == 16
    for kernel_pass in passes:
        assert [d.row for d in kernel_pass.devices] == [0, 1], kernel_pass
        assert [d.held_bytes for d in kernel_pass.devices] == [GIB, 5 * GIB]
        assert [d.process_sm_pct for d in kernel_pass.devices] == [10.0, 60.0]


def test_a_spans_read_costs_what_it_holds() -> None:
    """Issue 53: the in-memory history and the passes are cut by bisection: a span reads
    its own samples, not the history before or after it."""
    from jupyterlab_nvdashboard.metrics import History

    history = History(1000)
    for i in range(1000):
        history.append(100.0 + i, (), NO_HOST, monotonic_s=float(i))
    assert [s.time_s for s in history.between(150.0, 152.5)] == [150.0, 151.0, 152.0]
    assert history.between(2000.0, 3000.0) == [] and len(history.between(0.0, 1e9)) == 1000


def test_the_glance_gives_the_kernels_own_share_not_the_shared_gpus(
        tmp_path: Path, now: float) -> None:
    """Issue 53: the toolbar showed 'GPU 1 · 4.0 GiB · 95%' for a kernel whose own samples
    said it did nothing: the glance now gives the kernel's own share by its own signal
    (``own_pct``), and none where its signal cannot tell."""
    from jupyterlab_nvdashboard.apps.processes import glance

    jupyter = JupyterSessions(JupyterServer("http://127.0.0.1:9/", "/", "t"),
                              fetch=lambda server: [{"path": "a.ipynb", "type": "notebook",
                                                     "kernel": {"id": KERNEL}}],
                              fetch_executions=lambda server: {"kernels": {}})
    jupyter.refresh()
    for sm, own in ((0.0, 0.0), (None, None)):
        metrics, sources = scripted(tmp_path, jupyter=jupyter)
        write(metrics.history, now - 20, now, 2, lambda g, t: 95.0 if g == 1 else 0.0,
              lambda t, sm=sm: [Held(1, 4100, 4 * GIB, sm), Held(1, 4300, 20 * GIB, sm)])
        [kernel] = glance(sources)["kernels"]
        assert kernel["own_pct"] == own, kernel
        assert (kernel["own_signal"] == "per-process SM samples") == (own is not None)


@pytest.mark.parametrize("duration_s", [0.6, 1.5, 2.5, 6.0])
@pytest.mark.parametrize("sm", [90.0, 0.0, None])
def test_the_verdict_does_not_change_with_the_pages_open(tmp_path: Path, now: float,
                                                         duration_s: float,
                                                         sm: float | None) -> None:
    """Issue 53: with a timeline open the server samples every 0.2 s; with none, while a
    kernel with GPU memory runs a cell, once a second (``CELL_RUNNING``). The same cell
    gets the same verdict either way: too short below a second, else judged."""
    start = now - 30.3
    end = start + duration_s
    busy = (lambda g, t: 90.0 if g == 1 and start <= t <= end else 0.0) if sm else \
        (lambda g, t: 0.0)
    states = []
    for page_open in (True, False):
        metrics, sources = scripted(tmp_path)
        write(metrics.history, now - 60, now, 2, busy, kernel_on_gpu1(lambda t: 4 * GIB, sm))
        if not page_open:  # only the samples of the 1 s pace: those that carry a pass
            kept = [s for s in metrics.history.window(1e9) if PROCESS_FAMILY in s.extra]
            metrics, sources = scripted(tmp_path)
            for sample in kept:
                metrics.history.append(sample.time_s, sample.gpus, sample.host,
                                       extra=sample.extra, monotonic_s=sample.clock_s)
        data = report(sources, start, end)
        states.append((data["state"], data["too_short"]))
    assert states[0] == states[1], (duration_s, sm, states)
    assert states[0][1] == (duration_s < 1.0)


def test_a_finding_on_no_signal_is_not_named_as_the_cells_cause() -> None:
    """A short busy cell's device has too few samples for the diagnosis: the headline said
    "busy 100% of 5 s (not enough samples)", as if that were why (the Run All lab test);
    a finding with a signal is still named."""
    too_few = Finding("not-enough-samples", "not enough samples",
                      (Figure("samples", 2.0, "", 2),), NO_SIGNAL,
                      "wait a few seconds for more samples")
    starved = Finding("starved", "starved: the GPU waits for work",
                      (Figure("utilization", 40.0, "%", 20),), "utilization-gaps",
                      "look at the input pipeline")
    memory = MemoryChange(6 * GIB, 6 * GIB, 6 * GIB, 0.0)

    def busy(*findings: Finding) -> str:
        return device_clause(DeviceCell(
            1, "GPU 1", "GPU-1", None, False, memory, "per-process", "per-process SM samples",
            90.0, 1.0, findings, BUSY), 5.0)

    assert busy(too_few) == "GPU 1: busy 100% of 5 s at 90% SM, peak 6.0 GiB (+0.0)"
    assert busy(too_few, starved) == \
        "GPU 1: busy 100% of 5 s at 90% SM (starved), peak 6.0 GiB (+0.0)"



def test_a_change_spanning_cells_too_small_to_say_is_not_said() -> None:
    """A change the passes could not place in one cell is named with the cells it spans,
    in tenths of a GiB: one that rounds to nothing said "+0.0 GiB over cells [1]–[2]" under
    the example notebook's first training cell."""

    def clause(spanning_bytes: float) -> str:
        memory = MemoryChange(1 * GIB, 1 * GIB, 1 * GIB, 0.0, spanning_bytes, (1, 2))
        return device_clause(DeviceCell(
            0, "GPU 0", "GPU-0", None, False, memory, "per-process", "per-process SM samples",
            62.0, 1.0, (), BUSY), 24.0)

    assert clause(2**20) == "GPU 0: busy 100% of 24 s at 62% SM, peak 1.0 GiB (+0.0)"
    assert clause(-(2**20)) == "GPU 0: busy 100% of 24 s at 62% SM, peak 1.0 GiB (+0.0)"
    assert clause(GIB) == ("GPU 0: busy 100% of 24 s at 62% SM, peak 1.0 GiB (+0.0); "
                           "+1.0 GiB over cells [1]–[2]")


def test_a_cell_that_worked_its_gpu_under_one_percent_is_not_given_the_gpus_cause(
        tmp_path: Path, now: float) -> None:
    """The cells lab test's sleeping cell (b) read "worked it 0% of 12 s: starved": one
    pass's sample of the second before it made the starved device's finding its own. A
    kernel alone on GPU 1 whose own samples show work in one pass of a 230 s cell (the
    device in bursts meanwhile): its share is said as "under 1%", and the GPU's findings
    stay the GPU's; at a few percent they are its own again."""
    metrics, sources = scripted(tmp_path)
    start, end = now - 250, now - 20  # 230 s: one pass of it is 0.4 %
    bursts = lambda g, t: 95.0 if g == 1 and (t - start) % 4 < 1 - 1e-6 else 0.0  # noqa: E731

    def once(t: float) -> float:  # the kernel's own samples: work in one pass only
        return 30.0 if abs(t - (start + 10)) < 0.5 else 0.0

    write(metrics.history, now - 300, now, 2, bursts,
          lambda t: [Held(1, 4100, 12 * GIB, once(t)), Held(1, 4101, 0.0, once(t))])
    data = report(sources, start, end)
    [gpu] = data["gpus"]
    assert gpu["signal"] == "per-process" and 0.0 < gpu["working_share"] < 0.01, gpu
    assert data["state"] == HELD_IDLE and gpu["findings"] == [], data
    assert data["verdict"] == \
        "held 12.0 GiB on GPU 1, but this cell worked it under 1% of 3 min 50 s"
    # Work in three passes of it (1.3 %): its own, and the GPU's findings are its own too.
    metrics, sources = scripted(tmp_path)
    write(metrics.history, now - 300, now, 2, bursts,
          lambda t: [Held(1, 4100, 12 * GIB, 30.0 if start + 10 <= t <= start + 12 else 0.0)])
    data = report(sources, start, end)
    [gpu] = data["gpus"]
    assert gpu["working_share"] >= 0.01 and gpu["findings"], data
