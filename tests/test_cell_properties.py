"""Property tests of a cell's verdict over generated histories (issue 53, acceptance).

Hypothesis writes a minute of history: one or two GPUs (or an H100's two MIG devices); our
kernel (A, with a child
process) running back-to-back cells, each working some GPUs or none and allocating or
freeing memory at some moment inside it; another kernel (B) that may share a GPU with A and
works when it likes; a driver that gives per-process SM samples always, never or now and
then; process passes every one or two seconds, some missed. Every cell of A is then judged
as ``/cell.json`` judges it (``apps/cells.cell_report``, with the kernel's cells as
Jupyter's executions route lists them), and the verdict is held to what really happened:

- it never uses another kernel's samples: the same history with B busy instead of idle
  gives A's cell the same verdict, or "cannot tell";
- advice (any diagnosis finding) appears only where this cell did GPU work, alone on the
  GPU;
- a memory change is charged to the cell it happened in, or named as spanning cells (or
  said to be unknown), never charged to a neighbour.

The pace of the passes no longer depends on the pages open (``demand.CELL_RUNNING``,
``test_cell_report.py``); the same span from the store is ``test_cell_report.py``'s.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jupyterlab_nvdashboard.apps.cells import cell_report
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.diagnosis.cell import (
    BUSY_SHARE,
    CANNOT_TELL,
    DEVICE,
    TOO_SHORT,
)
from jupyterlab_nvdashboard.jupyter_sessions import JupyterServer, JupyterSessions
from jupyterlab_nvdashboard.metrics import (
    OWNER_FAMILY,
    PROCESS_FAMILY,
    GpuReading,
    History,
    Metrics,
    ProcessReading,
)
from jupyterlab_nvdashboard.metrics.families import GPM_FAMILY
from jupyterlab_nvdashboard.store import HistoryStore
from jupyterlab_nvdashboard.store.service import FINE_TIER, TIER_WIDTHS_S
from tests.test_cell_report import (
    GIB,
    KERNEL,
    NO_GPM,
    NO_HOST,
    OTHER_KERNEL,
    OWNERS,
    TICK_S,
    scripted,
)

HISTORY_S = 60.0
FIRST_CELL_S = 12.0  # cells start this long after the history does


@dataclass(frozen=True)
class Cell:
    count: int
    gap_before_s: float  # idle time before it (0: Run All's back-to-back cells)
    duration_s: float
    work_pct: tuple[float, ...]  # A's SM % on each GPU while it runs (0: none)
    memory_at: float  # where in the cell (0..1) its memory change happens
    memory_change: tuple[float, ...]  # GiB, on each GPU


@dataclass(frozen=True)
class World:
    gpus: int
    base_gib: tuple[float, ...]  # what A holds on each GPU before its first cell
    cells: tuple[Cell, ...]
    b_gpu: int | None  # where B holds 2 GiB (None: B holds nothing)
    b_busy: tuple[tuple[float, float, float], ...]  # (start, end, SM %) from the start
    samples: str  # "always", "never", "sometimes": the driver's per-process SM samples
    pass_every_s: int
    missed: frozenset[int]  # passes the reader missed (by their second)
    # An H100 in MIG mode: the "GPUs" are its two MIG devices, with GPM SM activity and no
    # utilization or per-process samples (the driver gives none under MIG).
    mig: bool = False
    # The server learns a process's owner a slow pass after the process first shows
    # (metrics/attribution.py): each pass then tells the owners of those listed before it.
    owners_late: bool = False

    def rows(self, facts_rows: list[int]) -> list[int]:
        """The device rows the world's GPUs are (MIG: the MIG devices' rows)."""
        return facts_rows[1:1 + self.gpus] if self.mig else list(range(self.gpus))


DURATIONS_S = (0.4, 1.5, 3.0, 6.0, 9.0)


@st.composite
def worlds(draw: st.DrawFn, durations_s: tuple[float, ...] = DURATIONS_S,
           most_cells: int = 4) -> World:
    gpus = draw(st.integers(1, 2))
    base = tuple(draw(st.sampled_from([0.0, 0.0, 2.0, 4.0])) for _ in range(gpus))
    cells = []
    for count in range(1, draw(st.integers(1, most_cells)) + 1):
        cells.append(Cell(
            count, draw(st.sampled_from([0.0, 0.0, 0.02, 1.3, 4.0])),
            draw(st.sampled_from(durations_s)),
            tuple(draw(st.sampled_from([0.0, 0.0, 40.0, 90.0])) for _ in range(gpus)),
            draw(st.floats(0.05, 0.95)),
            tuple(draw(st.sampled_from([0.0, 0.0, 2.0, 4.0, -2.0])) for _ in range(gpus))))
    b_gpu = draw(st.one_of(st.none(), st.integers(0, gpus - 1)))
    busy = tuple(draw(st.lists(st.tuples(st.floats(0, 50), st.floats(0.5, 15),
                                         st.sampled_from([30.0, 85.0])), max_size=3)))
    mig = draw(st.booleans())
    return World(gpus, base, tuple(cells), b_gpu,
                 tuple((s, s + d, pct) for s, d, pct in busy),
                 "never" if mig else draw(st.sampled_from(["always", "never", "sometimes"])),
                 draw(st.sampled_from([1, 2])),
                 frozenset(draw(st.lists(st.integers(0, int(HISTORY_S)), max_size=3))), mig,
                 draw(st.booleans()))


def spans(world: World, t0: float) -> list[tuple[Cell, float, float]]:
    """Each cell with its start and end (wall time), from ``t0``, the history's start."""
    found, at = [], t0 + FIRST_CELL_S
    for cell in world.cells:
        at += cell.gap_before_s
        found.append((cell, at, at + cell.duration_s))
        at += cell.duration_s
    return found


class Truth:
    """What A and B did, moment by moment."""

    def __init__(self, world: World, t0: float, b_works: bool) -> None:
        self.world, self.spans, self.b_works, self.t0 = world, spans(world, t0), b_works, t0

    def held_gib(self, gpu: int, t: float) -> float:
        held = self.world.base_gib[gpu]
        for cell, start, end in self.spans:
            if t >= start + cell.memory_at * (end - start):
                held = max(0.0, held + cell.memory_change[gpu])
        return held

    def a_pct(self, gpu: int, t: float) -> float:
        if self.held_gib(gpu, t) <= 0:
            return 0.0  # no context, no kernels
        return next((cell.work_pct[gpu] for cell, start, end in self.spans
                     if start <= t < end), 0.0)

    def b_pct(self, gpu: int, t: float) -> float:
        if not self.b_works or gpu != self.world.b_gpu:
            return 0.0
        return max((pct for s, e, pct in self.world.b_busy
                    if self.t0 + s <= t < self.t0 + e), default=0.0)

    @staticmethod
    def _ticks(start: float, end: float) -> list[float]:
        return [start + i * TICK_S for i in range(int((end - start) / TICK_S) + 1)]

    def worked(self, gpu: int, start: float, end: float) -> bool:
        return any(self.a_pct(gpu, t) >= 1.0 for t in self._ticks(start, end))

    def device_worked(self, gpu: int, start: float, end: float) -> bool:
        """Whether anyone, A or B, worked ``gpu`` from ``start`` to ``end``."""
        return any(max(self.a_pct(gpu, t), self.b_pct(gpu, t)) >= 1.0
                   for t in self._ticks(start, end))

    def memory_change_gib(self, gpu: int, start: float, end: float) -> float:
        return self.held_gib(gpu, end) - self.held_gib(gpu, start - 1e-9)

    def seen_held_gib(self, gpu: int, start: float, end: float) -> set[float]:
        """What the passes from ``start`` to ``end`` saw A hold on ``gpu``."""
        every, missed = self.world.pass_every_s, self.world.missed
        return {self.held_gib(gpu, self.t0 + second)
                for second in range(int(HISTORY_S) + 1)
                if second % every == 0 and second not in missed
                and start <= self.t0 + second <= end}


def write_world(history: History, truth: Truth, rows: list[int], all_rows: int) -> None:
    """The world's samples: ``rows[g]`` is GPU ``g``'s device row, of ``all_rows``."""
    world, t0 = truth.world, truth.t0
    now_wall, now_mono = time.time(), time.monotonic()
    last_pass = t0
    told: set[int] = set()  # the processes listed so far, whose owners the next pass tells
    for i in range(int(round(HISTORY_S / TICK_S)) + 1):
        t = t0 + i * TICK_S
        readings = []
        activity: dict[int, float] = {}
        for row in range(all_rows):
            gpu = rows.index(row) if row in rows else None
            if gpu is None:
                readings.append(GpuReading.unavailable(row, False)._replace(
                    utilization_pct=None if world.mig else 0.0, memory_used_bytes=GIB,
                    memory_total_bytes=80 * GIB))
                continue
            used = GIB * (1 + truth.held_gib(gpu, t) + (2 if gpu == world.b_gpu else 0))
            activity[row] = max(truth.a_pct(gpu, t), truth.b_pct(gpu, t))
            readings.append(GpuReading.unavailable(row, False)._replace(
                utilization_pct=None if world.mig else activity[row],
                memory_used_bytes=used, memory_total_bytes=80 * GIB))
        extra: dict[str, object] = {}
        if world.mig:
            extra[GPM_FAMILY] = {row: NO_GPM._replace(sm_activity_pct=pct)
                                 for row, pct in activity.items()}
        second = round(t - t0)
        if abs(t - t0 - second) < TICK_S / 4 and second % world.pass_every_s == 0 \
                and second not in world.missed:
            ticks = [last_pass + k * TICK_S for k in range(1, int(round(
                (t - last_pass) / TICK_S)) + 1)] or [t]
            entries = []
            for gpu in range(world.gpus):
                sampled = world.samples == "always" or (
                    world.samples == "sometimes" and (second // world.pass_every_s) % 3 != 0)
                held = truth.held_gib(gpu, t)
                if held > 0:
                    sm = max(truth.a_pct(gpu, tick) for tick in ticks) if sampled else None
                    entries.append(ProcessReading(rows[gpu], 4100, "compute", held * GIB, sm,
                                                  None, t0))
                if gpu == world.b_gpu:
                    sm = max(truth.b_pct(gpu, tick) for tick in ticks) if sampled else None
                    entries.append(ProcessReading(rows[gpu], 4200, "compute", 2 * GIB, sm,
                                                  None, t0))
            extra[PROCESS_FAMILY] = tuple(entries)
            extra[OWNER_FAMILY] = {pid: owner for pid, owner in OWNERS.items()
                                   if pid in told} if world.owners_late else OWNERS
            told.update(entry.pid for entry in entries)
            last_pass = t
        history.append(t, tuple(readings), NO_HOST, extra=extra,
                       monotonic_s=now_mono + (t - now_wall))


def sessions(truth: Truth) -> JupyterSessions:
    """Jupyter's sessions of A and B, with A's cells as its executions route lists them."""
    listed = [{"count": cell.count, "start_s": start, "end_s": end}
              for cell, start, end in truth.spans]
    jupyter = JupyterSessions(
        JupyterServer("http://127.0.0.1:9/", "/", "t"),
        fetch=lambda server: [{"path": "a.ipynb", "type": "notebook",
                               "kernel": {"id": KERNEL}},
                              {"path": "b.ipynb", "type": "notebook",
                               "kernel": {"id": OTHER_KERNEL}}],
        fetch_executions=lambda server: {"kernels": {}, "cells": {KERNEL: listed}})
    jupyter.refresh()
    return jupyter


def world_sources(world: World, truth: Truth, folder: Path, store: HistoryStore | None = None
                  ) -> tuple[Metrics, DashboardSources]:
    if world.mig:
        return scripted(folder, gpus=1, jupyter=sessions(truth), profile="h100-mig",
                        store=store)
    return scripted(folder, gpus=world.gpus, jupyter=sessions(truth), store=store)


def judge_spans(sources: DashboardSources, truth: Truth, rows: list[int],
                spans: list[tuple[Cell, float, float]] | None = None
                ) -> list[tuple[Cell, float, float, dict]]:
    judged = []
    for cell, start, end in truth.spans if spans is None else spans:
        data = cell_report(sources, KERNEL, start, end)
        # By the world's GPU numbers (a MIG device's row is not its GPU's number).
        data["gpus"] = [{**gpu, "index": rows.index(gpu["index"])} for gpu in data["gpus"]]
        judged.append((cell, start, end, data))
    return judged


def judge_all(world: World, t0: float, b_works: bool, folder: Path
              ) -> tuple[Truth, list[tuple[Cell, float, float, dict]]]:
    truth = Truth(world, t0, b_works)
    metrics, sources = world_sources(world, truth, folder)
    rows = world.rows([fact.index for fact in metrics.facts])
    write_world(metrics.history, truth, rows, len(metrics.facts))
    return truth, judge_spans(sources, truth, rows)


SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def now_t0() -> float:
    return float(int(time.time()) - 5) - HISTORY_S


# The issue's own case: a CPU-only cell of a kernel that holds 4 GiB on a GPU another
# kernel works in bursts, per-process samples in every pass (they say A did nothing).
SHARED_WITH_A_BUSY_KERNEL = World(
    1, (4.0,), (Cell(1, 0.0, 9.0, (0.0,), 0.5, (0.0,)),), 0,
    ((12.0, 12.6, 85.0), (13.2, 13.8, 85.0), (14.4, 15.0, 85.0), (15.6, 19.0, 71.0)),
    "always", 1, frozenset())


@SETTINGS
@example(SHARED_WITH_A_BUSY_KERNEL)
@given(worlds())
def test_a_cells_verdict_never_uses_another_kernels_samples(world: World) -> None:
    """B idle or B busy on a GPU it shares with A: A's cell gets the same verdict on every
    GPU, or it cannot tell. Another kernel's work is never this cell's."""
    t0 = now_t0()
    with tempfile.TemporaryDirectory() as folder:
        _, quiet = judge_all(world, t0, False, Path(folder))
        _, loud = judge_all(world, t0, True, Path(folder))
    for (_, _, _, calm), (cell, _, _, busy) in zip(quiet, loud, strict=True):
        calm_gpus = {g["index"]: g for g in calm["gpus"]}
        for gpu in busy["gpus"]:
            if gpu["state"] == CANNOT_TELL:
                continue
            other = calm_gpus.get(gpu["index"])
            assert other is not None, (cell, busy["verdict"], calm["verdict"])
            for key in ("state", "signal", "sm_pct", "working_share", "findings"):
                assert gpu[key] == other[key], (cell, key, busy["verdict"], calm["verdict"])


@SETTINGS
@given(worlds(), st.booleans())
def test_advice_only_where_this_cell_did_gpu_work_alone(world: World, b_works: bool) -> None:
    """A finding (a cause, and its advice about code) is given only where this cell worked
    the GPU and nobody else's process was on it."""
    with tempfile.TemporaryDirectory() as folder:
        truth, judged = judge_all(world, now_t0(), b_works, Path(folder))
    for cell, start, end, data in judged:
        for gpu in data["gpus"]:
            if gpu["findings"]:
                index = gpu["index"]
                assert truth.worked(index, start, end), (cell, data["verdict"])
                assert index != world.b_gpu, (cell, data["verdict"])


@SETTINGS
@given(worlds(), st.booleans())
def test_memory_is_charged_to_the_cell_that_changed_it(world: World, b_works: bool) -> None:
    """A cell's change is what happened in it; a change the passes cannot place is named as
    spanning this cell and another, or unknown: never a neighbour's charged to it."""
    with tempfile.TemporaryDirectory() as folder:
        truth, judged = judge_all(world, now_t0(), b_works, Path(folder))
    for cell, start, end, data in judged:
        seen = {gpu["index"]: gpu for gpu in data["gpus"]}
        for index in range(world.gpus):
            real = truth.memory_change_gib(index, start, end)
            gpu = seen.get(index)
            if gpu is None:
                # Left out only where no pass near the span saw A hold anything there (a
                # change no pass saw, such as memory taken and given back between two
                # passes, cannot be told).
                held = truth.seen_held_gib(index, start - 3.0, end + 3.0)
                assert real == 0.0 or held <= {0.0}, (cell, index, real, held,
                                                      data["verdict"])
                continue
            spanning = gpu.get("memory_spanning", {"cells": []})
            change = gpu["memory"]["change_bytes"]
            if spanning["cells"]:
                assert cell.count in spanning["cells"] and len(spanning["cells"]) > 1, spanning
            elif change is not None:
                assert change / GIB == real, (cell, index, real, data["verdict"])


BUCKET_S = TIER_WIDTHS_S[FINE_TIER]


def t0_at_phase(phase_s: int) -> float:
    """A history's start ``phase_s`` seconds past the start of one of the store's buckets
    (they are wall-aligned): the phase decides which samples share a bucket, so a test of
    the store draws it rather than taking the wall clock's."""
    aligned = int(time.time()) // int(BUCKET_S) * int(BUCKET_S)
    return float(aligned - 2 * int(BUCKET_S) + phase_s) - HISTORY_S


def judged_from_memory_and_store(world: World, folder: Path, t0: float
                                 ) -> tuple[list[tuple[Cell, float, float]],
                                            list[tuple[dict, dict]]]:
    """Each cell of A judged from the in-memory history, and again from the store the same
    samples and passes were written through (its writer's own path: the history's
    listener and the usage's pass listener), by a server whose in-memory history began
    after the cells."""
    truth = Truth(world, t0, True)
    # The cells the world's history closes (a pass after their end).
    spans = [(cell, start, end) for cell, start, end in truth.spans
             if end < t0 + HISTORY_S - 3]
    path = folder / "store" / "history.sqlite"
    metrics, _ = world_sources(world, truth, folder)
    uuids = {fact.index: fact.uuid for fact in metrics.facts}
    store = HistoryStore(path, device_uuids=lambda: uuids)
    store.open()
    try:
        metrics, sources = world_sources(world, truth, folder, store)
        store.attach(metrics.history)
        rows = world.rows([fact.index for fact in metrics.facts])
        write_world(metrics.history, truth, rows, len(metrics.facts))
        store.step(final=True)
        from_memory = judge_spans(sources, truth, rows, spans)
        # A restarted server: its in-memory history holds only the seconds after the cells.
        later, restarted = world_sources(world, truth, folder, store)
        end = t0 + HISTORY_S
        for i in range(1, 11):
            later.history.append(end + i * TICK_S, metrics.history.latest().gpus, NO_HOST,
                                 monotonic_s=time.monotonic())
        from_store = judge_spans(restarted, truth, rows, spans)
    finally:
        store.stop()
        store.close()
    return spans, [(memory, stored) for (_, _, _, memory), (_, _, _, stored)
                   in zip(from_memory, from_store, strict=True)]


# CI's find (stop 59): another kernel works the MIG device A holds, but not A's, only in
# the edges of A's cells 2 and 3; at these phases the store's whole buckets leave all of it
# out.
NEIGHBOUR_IN_THE_EDGES = World(
    2, (2.0, 4.0),
    (Cell(1, 0.02, 6.0, (0.0, 40.0), 0.75, (4.0, -2.0)),
     Cell(2, 1.3, 11.0, (0.0, 40.0), 0.74, (-2.0, 4.0)),
     Cell(3, 1.3, 19.0, (0.0, 40.0), 0.88, (0.0, 0.0))),
    0, ((0.0, 1.96, 85.0), (26.5, 34.9, 85.0), (5.0, 19.5, 85.0)),
    "never", 1, frozenset({10, 23}), mig=True)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@example(NEIGHBOUR_IN_THE_EDGES, 3)
@example(NEIGHBOUR_IN_THE_EDGES, 4)
@given(worlds(durations_s=(6.0, 11.0, 14.0, 19.0), most_cells=3),
       st.integers(0, int(BUCKET_S) - 1))
def test_memory_and_store_verdicts_agree_within_resolution(world: World, phase_s: int
                                                           ) -> None:
    """The same span judged from memory and, after it left memory (a restart), from the
    store's 5-second buckets of the same samples and passes, gets the same verdict within
    the store's resolution. Precisely, for each cell of A whose span the world wrote:

    - the store judges a span on the buckets of passes that lie wholly in it: one that
      holds none (shorter than a bucket and two passes) is "too short" from the store,
      and only such a span is;
    - otherwise the GPUs listed are the same, but for a GPU where one of the two names a
      memory change over this cell and a neighbour (the store's passes stand at its
      buckets' last, so a neighbour's change may fall between two of them that reach into
      this cell: it is named over both cells, never charged to this one);
    - on each GPU both list, the signal is the same (but where the kernel held the GPU
      only in the span's edges: the store's whole buckets then say the driver listed none
      of its processes, share 0, and the memory's share is within the edges' part of 0;
      and where another process worked the shared GPU only in the span's edges: memory
      cannot tell what the kernel did there, and the store's whole buckets, where nobody
      worked, say the kernel did not either);
      the working share differs by no more
      than the part of the span the store's whole buckets leave out at its two edges (at
      most a bucket and a pass at each: ``2 * (BUCKET_S + pass)`` over the span), and the
      state is the same unless the memory's share is within that much of a line between
      states (0, or ``BUSY_SHARE``).
    """
    t0 = t0_at_phase(phase_s)
    with tempfile.TemporaryDirectory() as folder:
        spans, pairs = judged_from_memory_and_store(world, Path(folder), t0)
    truth = Truth(world, t0, True)
    edge_s = 2 * (BUCKET_S + world.pass_every_s)
    for (cell, start, end), (memory, stored) in zip(spans, pairs, strict=True):
        assert stored["judged_from"] == "store", stored
        why = (cell, memory["verdict"], stored["verdict"])
        if stored["state"] == TOO_SHORT:
            assert end - start < BUCKET_S + 2 * world.pass_every_s or \
                memory["state"] == TOO_SHORT, why
            continue
        mine_by = {g["index"]: g for g in memory["gpus"]}
        kept_by = {g["index"]: g for g in stored["gpus"]}
        for index in set(mine_by) ^ set(kept_by):
            listed = mine_by.get(index) or kept_by[index]
            named = listed["memory_spanning"]["cells"]
            assert cell.count in named and len(named) > 1, (index, why)
        tolerance = min(1.0, edge_s / (end - start))
        for index in set(mine_by) & set(kept_by):
            mine, kept = mine_by[index], kept_by[index]
            if mine["signal"] == CANNOT_TELL and kept["signal"] == DEVICE:
                # Another process worked the GPU only in the span's edges, which the
                # store's whole buckets leave out: nobody worked in them.
                inner = (start + edge_s / 2, end - edge_s / 2)
                assert "no process on it worked" in kept["signal_text"], why
                assert not truth.device_worked(index, *inner), why
                assert kept["working_share"] == 0.0, why
                continue
            if kept["signal"] != mine["signal"]:
                # The kernel was on the GPU only in the span's edges, which the store's whole
                # buckets leave out: they say it listed nothing there, so it did no work.
                assert "listed none" in kept["signal_text"], why
                assert kept["working_share"] == 0.0, why
                assert (mine["working_share"] or 0.0) <= tolerance, why
                continue
            if mine["working_share"] is None:
                assert kept["working_share"] is None, why
                continue
            share = mine["working_share"]
            assert abs(kept["working_share"] - share) <= tolerance + 1e-9, why
            near_a_line = share <= tolerance or abs(share - BUSY_SHARE) <= tolerance
            if not near_a_line:
                assert kept["state"] == mine["state"], why
