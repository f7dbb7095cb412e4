"""``/cell.json``: what one notebook cell did on the GPU (issue 45, item 2).

A cell is a span of a kernel. This module checks that the kernel is this server's to
report on, gathers the span's samples (the in-memory history, or before its oldest sample
the store's bucket means) and the kernel's process passes around it, as the idle judgment
read them (``usage.GpuUsage`` keeps them: the owners and identity rules of
``/processes.json``, so a kernel's children count as the kernel, in a container too), has
``diagnosis/cell.py``
judge them, and writes the verdict in the page's words. It reads the history, the store
and Jupyter's sessions; it blocks (on the store's file, on Jupyter, and for the pass that
closes a cell that just ended): call it off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import stat
import threading
import time
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..diagnosis.cell import (
    BUSY,
    CANNOT_TELL,
    HELD_NO_WORK,
    LOST,
    MEMORY,
    NO_GPU_WORK,
    STORE,
    TOO_SHORT,
    WORKED_SHARE,
    BucketEvidence,
    CellJudgment,
    DeviceCell,
    KernelPass,
    OtherCell,
    judge_cell,
    notice_cause,
)
from ..diagnosis.findings import NO_SIGNAL
from ..diagnosis.idle import DeviceEvidence
from ..jupyter_sessions import runtime_dir
from ..metrics import OWNER_FAMILY, PROCESS_FAMILY, Sample
from ..metrics.attribution import kernel_id_of
from ..metrics.processes import PROCESS_EVERY_S
from ..store.buckets import device_key
from .components import GIB, duration_text, format_memory
from .processes import current_user, newest_family

if TYPE_CHECKING:
    from .sources import DashboardSources

# How long after a process shows its holder's first pass may come: its owner is told by
# the slow thread, once a second or once an idle interval (2 s by default), a few passes on.
ATTRIBUTION_DELAY_S = 10.0
# An end this far ahead of this server's clock is refused, at once: the kernel's clock and
# this server's are the host's on one machine (a remote kernel's NTP-kept clock is within
# milliseconds), and the footer asks 1.5 s after a cell ended; a span in the future would be
# judged before it happened, and waiting for it held a shared thread (issue 53). Our choice.
FUTURE_SLACK_S = 2.0
# The most stored samples one span is judged from: the in-memory history's 10 minutes at the
# default tick (0.2 s) is 3,000, the size benchmarks/cell_report.py holds to its budget. A
# longer span is read at a coarser resolution (the store folds its buckets), never longer.
MAX_STORE_SAMPLES = 3000
_ONLY_HOLDER = attrgetter("only_holder")
# Two starts this close are the same cell's: both are its execute_input's header date,
# which the executions route keeps as a float of the same text.
SAME_START_S = 1e-3


class CellRefused(Exception):
    """A request /cell.json does not answer: its HTTP status and one line why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def pass_gap_s(sources: DashboardSources) -> float:
    """How far from the span the pass before it and the one after it may be: the reader's
    pace (a pass a second, or one an idle interval with nobody watching) and a little."""
    sampler = sources.metrics.sampler
    return max(PROCESS_EVERY_S, sampler.interval_s, sampler.current_interval_s) + 1.0


def check_kernel(sources: DashboardSources, kernel_id: str) -> str | None:
    """The notebook of ``kernel_id`` (None where none is known), or ``CellRefused``: a text
    that is not a kernel id (400), a kernel of another user (403), or one this server does
    not know (404). Under Jupyter a kernel is known when that Jupyter lists it; standalone,
    when a connection file of this user names it, as ``/processes.json`` finds kernels (on a
    GPU process's command line, or in Jupyter's runtime folder)."""
    if not kernel_id or kernel_id_of([f"kernel-{kernel_id}.json"]) != kernel_id:
        raise CellRefused(400, "kernel must be a Jupyter kernel id")
    jupyter = sources.jupyter
    if jupyter is not None and jupyter.server is not None:
        if kernel_id not in jupyter.sessions:
            jupyter.refresh()  # a kernel started since the last refresh (or none was due)
        session = jupyter.sessions.get(kernel_id)
        if session is None:
            raise CellRefused(404, f"kernel {kernel_id} is not one of this Jupyter's kernels")
        return session.path
    me = current_user()
    # Its processes' owners: those that held GPU memory since this server started, and
    # the newest attribution's (a kernel whose processes just showed).
    users = {user for user, kernel in sources.usage.snapshot()[0] if kernel == kernel_id}
    owners = newest_family(sources.metrics.history, OWNER_FAMILY)
    if isinstance(owners, dict):
        users.update(o.user for o in owners.values() if o.kernel_id == kernel_id)
    if me in users:
        return None
    folder = runtime_dir(os.environ)
    if folder is not None and own_connection_file(folder / f"kernel-{kernel_id}.json"):
        return None
    if users:
        raise CellRefused(403, f"kernel {kernel_id} is another user's")
    raise CellRefused(404, f"kernel {kernel_id} is not a kernel of this server's user")


def gpu_kernel_runs_a_cell(sources: DashboardSources) -> bool:
    """Whether a kernel that held GPU memory in the newest pass runs a cell now (Jupyter
    says it is busy): then the sampler reads for the cell's verdict (``demand.CELL_RUNNING``)."""
    jupyter = sources.jupyter
    if jupyter is None:
        return False
    sessions = jupyter.sessions
    me = current_user() or ""
    for user, kernel in sources.usage.current:  # the holders of the newest pass
        session = sessions.get(kernel) if kernel and user == me else None
        if session is not None and session.execution_state == "busy":
            return True
    return False


def own_connection_file(path: Path) -> bool:
    """Whether ``path`` is a connection file of this server's user: a regular file, not a
    symlink (another user may plant one in a shared runtime folder, pointing at any file
    of ours), owned by us. Read with ``lstat``: the link itself is judged."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()


def _closes(sample: Sample, end_s: float) -> bool:
    """Whether ``sample`` carries a process pass after ``end_s``."""
    return sample.time_s > end_s and PROCESS_FAMILY in sample.extra


def _closed(sources: DashboardSources, end_s: float) -> bool:
    """Whether the history already holds a process pass after ``end_s``."""
    history = sources.metrics.history
    latest = history.latest()
    return latest is not None and latest.time_s > end_s and any(
        _closes(sample, end_s) for sample in history.since(latest.seq - 64))


def _wait_s(end_s: float, gap_s: float) -> float:
    """How long to wait for the pass after ``end_s``: until ``gap_s`` after it, and never
    longer than ``gap_s`` from now (an end ahead of this server's clock is judged on what
    there is, not waited for)."""
    return min(max(0.0, end_s + gap_s - time.time()), gap_s)


def wait_for_pass_after(sources: DashboardSources, end_s: float, gap_s: float) -> None:
    """Wait (at most until ``end_s + gap_s`` on the wall clock) for a process pass after
    ``end_s``: a cell that just ended is asked about at once, and what it left held shows
    in the pass after it."""
    history = sources.metrics.history
    arrived = threading.Event()

    def listen(sample: Sample) -> None:
        if _closes(sample, end_s):
            arrived.set()

    history.add_listener(listen)
    try:
        if not _closed(sources, end_s):
            arrived.wait(_wait_s(end_s, gap_s))
    finally:
        history.remove_listener(listen)


async def pass_after(sources: DashboardSources, end_s: float) -> None:
    """``wait_for_pass_after`` on the event loop: the route waits there, not on one of the
    few executor threads, which a notebook's "run all" would otherwise fill."""
    loop = asyncio.get_running_loop()
    history = sources.metrics.history
    arrived = asyncio.Event()

    def listen(sample: Sample) -> None:  # on the sampler's thread
        if _closes(sample, end_s):
            loop.call_soon_threadsafe(arrived.set)

    history.add_listener(listen)
    try:
        if not _closed(sources, end_s):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(arrived.wait(), _wait_s(end_s, pass_gap_s(sources)))
    finally:
        history.remove_listener(listen)


def reaches_store(sources: DashboardSources, start_s: float) -> bool:
    """Whether a span from ``start_s`` begins before the in-memory history, where a store
    keeps it: then its report is a long read (``long_reads.py``)."""
    oldest, store = sources.metrics.history.oldest(), sources.store
    return oldest is not None and store is not None and store.readable and \
        start_s < oldest.time_s - sources.metrics.interval_s


def span_samples(sources: DashboardSources, start_s: float, end_s: float
                 ) -> tuple[float | None, list[Sample], str, float]:
    """(where the in-memory history starts, the span's samples to judge, where they come
    from, and their resolution). The store is read for the span's part before the
    in-memory history only (a cell of 20 days ago reads its minute, not the 20 days since),
    a piece at a time (``HistoryStore.past_in_pieces``, as ``/history.csv`` reads), at a
    resolution that keeps the span to ``MAX_STORE_SAMPLES``: what one request holds is
    bounded whatever the span's length."""
    metrics = sources.metrics
    history = metrics.history
    oldest = history.oldest()
    if oldest is None:
        return None, [], MEMORY, metrics.interval_s
    in_memory = history.between(start_s, end_s)
    first = oldest.time_s
    store = sources.store
    if store is None or not reaches_store(sources, start_s):
        return first, in_memory, MEMORY, metrics.interval_s
    until = min(end_s, first)
    wish = (until - start_s) / MAX_STORE_SAMPLES
    older: list[Sample] = []
    resolution = 0.0
    for piece in store.past_in_pieces(start_s, until, wish, rows="mean"):
        older += [sample for sample in piece.samples if sample.time_s < first]
        resolution = piece.resolution_s
    if not older:  # the store kept nothing of it
        return first, in_memory, MEMORY, metrics.interval_s
    return first, older + in_memory, STORE, resolution


def holder_words(user: str, kernel_id: str, me: str | None) -> str:
    """Another holder of a device, as a cell's verdict names it."""
    if user == me:
        return f"your kernel {kernel_id[:8]}" if kernel_id else "your process outside any kernel"
    return f"{user or 'another user'}'s process"


def kernel_passes(sources: DashboardSources, kernel_id: str, start_s: float, end_s: float
                  ) -> list[KernelPass]:
    """The kernel's process passes from ``start_s`` to ``end_s``, as the idle judgment read
    them (``usage.GpuUsage``), where their processes' owners were all known (a process's
    owner is told a slow pass after it first shows: until then, whether the kernel held
    anything cannot be told, and a pass is not taken for "held nothing"), with who else
    held each device the kernel held. The kernel's processes are those of this server's
    user in its process tree (``metrics/attribution.py``): another user's process whose
    command line names the kernel's connection file is another holder, not the kernel."""
    me = current_user()
    own = (me or "", kernel_id)
    found = []
    for seen in sources.usage.passes_between(start_s, end_s):
        if not seen.owners_known or seen.unattributed:
            continue
        mine = tuple(seen.holders.get(own, ()))
        # Most passes find the kernel alone on its devices: nobody else to name (read in
        # C: a span holds a pass a second).
        others = () if all(map(_ONLY_HOLDER, mine)) else tuple(
            (row, tuple(holder_words(user, kernel, me)
                        for (user, kernel), devices in seen.holders.items()
                        if (user, kernel) != own and any(d.row == row for d in devices))
             or ("another process",))
            for row in dict.fromkeys(d.row for d in mine if not d.only_holder))
        found.append(KernelPass(seen.time_s, mine, others))
    return found


def stored_kernel_passes(sources: DashboardSources, kernel_id: str, start_s: float,
                         end_s: float, resolution_s: float) -> list[KernelPass]:
    """The kernel's passes from ``start_s`` to ``end_s`` as the history store kept them
    (``store/holders.py``): one ``KernelPass`` per bucket that recorded passes, at its last
    pass, with the kernel's memory then and its bucket's summary per device row
    (``BucketEvidence``), by the row each device has now (by UUID; a GPU not shown now is
    left out). None where the store kept no pass there (written before it kept them)."""
    store = sources.store
    if store is None:
        return []
    me = current_user()
    found = store.holder_past(me or "", kernel_id, start_s, end_s, resolution_s)
    facts = {device_key(fact.index, fact.uuid): fact for fact in sources.metrics.facts}
    by_start: dict[float, list[Any]] = {}
    for bucket in found.rows:
        by_start.setdefault(bucket.start_s, []).append(bucket)
    passes = []
    for mark in found.marks:
        devices, summaries, others = [], [], []
        for bucket in by_start.get(mark.start_s, ()):
            fact = facts.get(bucket.device)
            if fact is None:
                continue
            devices.append(DeviceEvidence(
                fact.index, fact.label, bucket.held_last,
                bucket.sm_mean if bucket.sampled else None, bucket.alone, bucket.device_mean,
                bucket.device_signal or "utilization"))
            summaries.append(BucketEvidence(
                fact.index, bucket.sm_mean, bucket.sm_share, bucket.sampled_s,
                bucket.device_mean, bucket.device_share, bucket.covered_s, bucket.held_max))
            if not bucket.alone:
                others.append((fact.index, tuple(holder_words(user, kernel, me)
                                                 for user, kernel in bucket.others)
                               or ("another process",)))
        passes.append(KernelPass(mark.last_s, tuple(devices), tuple(others),
                                 tuple(summaries)))
    return passes


def kernel_cells(sources: DashboardSources, kernel_id: str, start_s: float
                 ) -> tuple[list[OtherCell], int | None]:
    """The kernel's other cells that Jupyter's executions route lists (``jupyter_sessions``)
    and this cell's execution count, found by its start (both are the ``execute_input``'s
    header date); none standalone."""
    jupyter = sources.jupyter
    spans = jupyter.cells.get(kernel_id, ()) if jupyter is not None else ()
    this = next((cell for cell in spans if abs(cell.start_s - start_s) < SAME_START_S), None)
    return ([OtherCell(cell.count, cell.start_s, cell.end_s) for cell in spans
             if cell is not this], this.count if this is not None else None)


def held_rows(sources: DashboardSources, kernel_id: str, start_s: float, end_s: float,
              history_first_s: float, gap_s: float) -> list[int]:
    """The rows the kernel held during the span, by its tracks (a span older than the
    in-memory passes: the store keeps no process). A row it let go of before the span is
    not the cell's, nor one it took after it: a track that began after the span counts only
    where it began as the history did (the kernel held it when this server started, and
    the store's readings of the row are the best word on it)."""
    seen_by = max(end_s, history_first_s + ATTRIBUTION_DELAY_S + gap_s)
    own = (current_user() or "", kernel_id)
    return [row for (key, row), track in sources.usage.snapshot()[1].items()
            if key == own and track.first_s <= seen_by
            and track.last_pass_s >= start_s]


def refuse_future(end_s: float, now_s: float | None = None) -> None:
    """``CellRefused`` (400) for an end ahead of this server's clock by more than
    ``FUTURE_SLACK_S``: at once, before any wait, so it holds no thread."""
    now = time.time() if now_s is None else now_s
    if end_s > now + FUTURE_SLACK_S:
        raise CellRefused(400, f"end is {end_s - now:.1f} s ahead of this server's clock")


def cell_report(sources: DashboardSources, kernel_id: str, start_s: float, end_s: float,
                running: bool = False) -> dict[str, Any]:
    """``/cell.json``'s answer for ``kernel_id`` from ``start_s`` to ``end_s`` (wall time),
    or ``CellRefused``. ``running``: the cell runs on, and ``end_s`` is the newest reading
    (``running_span``): nothing is waited for, and the answer says "so far". Blocks: call it
    off the event loop."""
    refuse_future(end_s)
    notebook = check_kernel(sources, kernel_id)
    metrics = sources.metrics
    gap_s = pass_gap_s(sources)
    if not running:
        wait_for_pass_after(sources, end_s, gap_s)
    first, samples, judged_from, resolution = span_samples(sources, start_s, end_s)
    if not samples and first is not None and end_s < first:
        raise CellRefused(404, "the span is older than this server's history, and no "
                               "history store keeps it")
    passes = kernel_passes(sources, kernel_id, start_s - gap_s, end_s + gap_s)
    others, count = kernel_cells(sources, kernel_id, start_s)
    rows_held: list[int] = []
    if judged_from == STORE and first is not None:
        # The span's part before the in-memory history, as the store kept the kernel's
        # passes (a bucket's pass stands at its last: the one before the span is up to a
        # bucket and a pass away), then the in-memory passes.
        gap_s += resolution
        stored = stored_kernel_passes(sources, kernel_id, start_s - gap_s,
                                      min(end_s + gap_s, first), resolution)
        passes = [p for p in stored if p.time_s < first] + \
            [p for p in passes if p.time_s >= first]
        if not stored:  # a store from before it kept passes: the kernel's tracks say
            rows_held = held_rows(sources, kernel_id, start_s, end_s, first, gap_s)
    latest = metrics.history.latest()
    lost_rows = [r.index for r in latest.gpus if r.lost] if latest is not None else []
    judgment = judge_cell(start_s, end_s, passes, samples, metrics.facts,
                          judged_from=judged_from, resolution_s=resolution, gap_s=gap_s,
                          rows_held=rows_held, lost_rows=lost_rows,
                          simulated=metrics.simulated, others=others, count=count)
    return cell_json(judgment, kernel_id, notebook, running)


def running_span(sources: DashboardSources, kernel_id: str, start_s: float
                 ) -> tuple[float, bool]:
    """``/cell.json`` without an end: (the end to judge the cell to, whether it still runs).
    A cell that Jupyter's executions route says has ended (the same start) is judged to its
    end; otherwise to the newest reading, so far (standalone, with no Jupyter to say, the
    cell is taken as running)."""
    jupyter = sources.jupyter
    spans = jupyter.cells.get(kernel_id, ()) if jupyter is not None else ()
    this = next((cell for cell in reversed(spans)
                 if abs(cell.start_s - start_s) < SAME_START_S), None)
    if this is not None and this.end_s is not None:
        return this.end_s, False
    latest = sources.metrics.history.latest()
    newest = latest.time_s if latest is not None else time.time()
    return max(start_s, min(newest, time.time())), True


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def change_text(change: float | None) -> str:
    """``+2.1`` (GiB, one decimal, as ``format_memory``); ``+0.0`` for no change."""
    return "" if change is None else f"{change / GIB:+.1f}"


def device_json(device: DeviceCell) -> dict[str, Any]:
    memory = device.memory
    return {"index": device.row, "label": device.label, "uuid": device.uuid,
            "mig": device.mig, "lost": device.lost, "state": device.state,
            "memory": {"start_bytes": _finite(memory.start_bytes),
                       "end_bytes": _finite(memory.end_bytes),
                       "peak_bytes": _finite(memory.peak_bytes),
                       "change_bytes": _finite(memory.change_bytes)},
            "signal": device.signal, "signal_text": device.signal_words,
            "sm_pct": _finite(device.sm_pct), "working_share": _finite(device.working_share),
            "shared_with": list(device.shared_with), "whose": device.whose,
            "memory_spanning": {"change_bytes": _finite(device.memory.spanning_bytes),
                                "cells": list(device.memory.spanning_cells)},
            "findings": [{**finding.to_json(), "line": finding.summary()}
                         for finding in device.findings]}


def cells_text(counts: tuple[int | None, ...]) -> str:
    """``cells [3]–[4]`` (the first and last execution counts, ``[?]`` where none)."""
    names = [f"[{'?' if count is None else count}]" for count in counts]
    return f"cells {names[0]}–{names[-1]}" if len(names) > 1 else f"cell {names[0]}"


def _peak(device: DeviceCell) -> str:
    """``peak 12.3 GiB (+2.1)``; what is known of the memory, and a change the passes could
    not place in one cell (``+6.0 GiB over cells [3]–[4]``)."""
    memory = device.memory
    change = change_text(memory.change_bytes)
    text = f"peak {format_memory(memory.peak_bytes)}" + (f" ({change})" if change else "")
    spanning = change_text(memory.spanning_bytes)
    if memory.spanning_bytes and spanning not in ("+0.0", "-0.0"):  # none to say at 0.1 GiB
        text += f"; {spanning} GiB over {cells_text(memory.spanning_cells)}"
    return text


def _cause(device: DeviceCell) -> str:
    """The first finding with something to try, where the findings are the kernel's
    (``whose.py``): the headline names what the details advise on. A finding that rests on
    no signal ("not enough samples") is no cause of what the cell did: the details say it."""
    return next((f.cause_words for f in device.findings
                 if not f.good and f.advice and f.signal != NO_SIGNAL), "")


def device_clause(device: DeviceCell, duration_s: float) -> str:
    """One device's part of the verdict, in the issue's words; it agrees with the details
    (the worst finding's cause is named in it)."""
    label, span = device.label, duration_text(duration_s)
    share = device.working_share
    worked = "" if share is None else "under 1%" if 0.0 < share < WORKED_SHARE \
        else f"{100 * share:.0f}%"
    if device.state == LOST:
        return f"{label} was lost (it stopped answering the driver); {_peak(device)}"
    if device.state == CANNOT_TELL:
        return f"{label}: {device.signal_words}; {_peak(device)}"
    cause = _cause(device)
    if device.state == BUSY:
        # The mean SM beside the share of time it worked: two cells busy every second can
        # differ in how much of each second they kept the GPU working (the example
        # notebook's two embedding paths).
        sm = "" if device.sm_pct is None else f" at {device.sm_pct:.0f}% SM"
        return f"{label}: busy {worked} of {span}{sm}" + (f" ({cause})" if cause else "") + \
            f", {_peak(device)}"
    held = format_memory(device.memory.peak_bytes)
    if device.state == HELD_NO_WORK:
        spanning = _peak(device).partition("; ")[2]
        return f"held {held} on {label}; this cell did no GPU work" + \
            (f" ({spanning})" if spanning else "")
    return (f"held {held} on {label}, but this cell worked it {worked or 'an unknown share'} of "
            f"{span}" + (f": {cause}" if cause else ""))


def verdict(judgment: CellJudgment) -> str:
    """The cell's one line: "no GPU work", "too short to judge: +0.5 GiB on GPU 1", or each
    device's clause; from the store, it says so."""
    state = judgment.state
    if state == NO_GPU_WORK:
        return "no GPU work"
    if state == TOO_SHORT:
        changes = [f"{change_text(d.memory.change_bytes) or 'memory change unknown'}"
                   f"{' GiB' if d.memory.change_bytes is not None else ''} on {d.label}"
                   for d in judgment.devices]
        return "too short to judge: " + ", ".join(changes)
    line = "; ".join(device_clause(d, judgment.duration_s) for d in judgment.devices)
    if judgment.judged_from == STORE:
        line += f" (from the history store's {judgment.resolution_s:g} s means)"
    return line


def cell_json(judgment: CellJudgment, kernel_id: str, notebook: str | None,
              running: bool = False) -> dict[str, Any]:
    """The answer. ``running``: the span so far of a cell that runs on; ``notice`` names
    what it is worth a notice for (``notice_cause``), ``held_s`` how long of it the kernel
    held a GPU: the Lab says so once the user's set time has passed (issue 55)."""
    return {"kernel": kernel_id, "notebook": notebook, "start_s": judgment.start_s,
            "end_s": judgment.end_s, "duration_s": judgment.duration_s,
            "running": running, "held_s": judgment.held_s,
            "notice": notice_cause(judgment),
            "count": judgment.count,
            "judged_from": judgment.judged_from, "resolution_s": judgment.resolution_s,
            "samples": judgment.samples, "too_short": judgment.too_short,
            "touched_gpu": judgment.touched_gpu, "state": judgment.state,
            "gpus": [device_json(device) for device in judgment.devices],
            "verdict": verdict(judgment)}
