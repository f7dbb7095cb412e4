"""The history store: a consumer of the sampler's history that outlives the server.

It listens to ``History`` like the broadcaster does (a queue put per sample, on the sampler's
thread) and owns one thread that, every ``batch_s`` (5 s), folds the new samples into
5-second buckets and those into 1-minute buckets (mean, min and max of every reading), writes
what closed in one transaction, and now and then deletes buckets past their tier's
retention, counted back from now. "Now" is the wall clock, but no later than the newest
stored bucket at open plus the monotonic time since (``clock_check.py``): a clock wrong at
start deletes nothing. Buckets cut off ahead of the clock (written while it was set wrong)
are set aside at open (kept in the ``set_aside`` table, out of every window) with one log
line, and come back when the clock reaches them. The newest open bucket stays in memory until a
later sample closes it, so ``kill -9`` loses at most that bucket and the batch not yet
committed; a clean stop writes everything. At start the 1-minute tier is rebuilt from the
5-second buckets a kill left un-rolled.

Two servers of one user share one store: the one holding the writer lock writes, the
others only read (and take over the lock when that server ends). Readers never wait on the
writer (WAL).

Windows longer than the in-memory history read it through ``past``: the buckets of the
coarsest tier fine enough, folded into the width the window draws, with a gap wherever
nothing was recorded (the server was not running).
"""

from __future__ import annotations

import json
import logging
import math
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ..event_loop import on_event_loop
from ..metrics import History, Sample
from . import holders, upgraded_rows
from .buckets import (
    Bucket,
    BucketRun,
    IdentifiedSample,
    bucket_samples,
    fold_buckets,
    fold_samples,
    gap_sample,
    layout_text,
    parse_layout,
    rows_before_upgrade,
    rows_now,
)
from .clock_check import (
    AGREES,
    AHEAD,
    EMPTY,
    TRUSTED_AHEAD_S,
    ClockJudgment,
    StoreExtremes,
    judge_clock,
)
from .file import (
    Opened,
    StoreUnusable,
    WriterLock,
    check_readable,
    connect,
    make_folder,
    open_store,
)
from .holders import HolderBucket, PassRecord, fold_holder_buckets, fold_passes

log = logging.getLogger("nvdashboard")

FINE_TIER, COARSE_TIER = 0, 1
TIER_WIDTHS_S = {FINE_TIER: 5.0, COARSE_TIER: 60.0}
BATCH_S = 5.0  # one transaction this often: what kill -9 may lose
PRUNE_EVERY_S = 60.0
TAKE_OVER_EVERY_S = 30.0  # how often a reading server tries to become the writer
# Samples kept for the next try while writes fail (a full disk): an hour at 200 ms.
MAX_PENDING_SAMPLES = 18_000
# Why a bucket was set aside (the ``set_aside`` table's ``why``): "ahead" ones come back
# when the clock reaches them; "damaged" ones go after the longest retention.
AHEAD_OF_THE_CLOCK, DAMAGED = "ahead of the clock", "damaged"
# A read that comes while the store is still opening (the server has just started, or is
# migrating a big file) waits for it up to this long: a page opened at once drew its long
# window with nothing stored until its next read of the store.
OPEN_WAIT_S = 10.0
# Spans per piece of a window read in pieces (``past_in_pieces``): 12 hours of 1-minute
# buckets, about 2 MB of samples and 1 MB of CSV for 8 GPUs.
PIECE_ROWS = 720


class StoreReadOnEventLoop(RuntimeError):
    """A store read was asked for on an event loop: reading the file may take seconds (a
    week of buckets, a busy disk), and would stall every page, socket and route meanwhile.
    The caller must read on a thread of its own (``long_reads.py``, a diagnosis thread)."""


class Clock(Protocol):
    def time(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


@dataclass
class StoreStats:
    """What the writer did (``/info.json`` shows it; benchmarks read its CPU time)."""

    batches: int = 0
    buckets_written: int = 0
    merged: int = 0  # buckets added to one already stored (a restart or a clock step back)
    pruned: int = 0
    set_aside: int = 0  # buckets taken out of the history: ahead of the clock, or damaged
    brought_back: int = 0  # buckets set aside as ahead that the clock has reached since
    cpu_s: float = 0.0  # the writer thread's own CPU time
    errors: int = 0


@dataclass(frozen=True)
class PastWindow:
    """Stored history over a span: ``resolution_s`` is the width each row stands for, read
    from the tier of ``tier_s`` buckets; samples are oldest first."""

    tier_s: float
    resolution_s: float
    samples: list[Sample] = field(default_factory=list)


@dataclass(frozen=True)
class StoredPasses:
    """What the store kept of one holder's passes over a span (``holders.py``): each
    bucket's pass mark and the holder's rows (device keys as stored), oldest first, from
    the tier of ``tier_s`` buckets."""

    tier_s: float
    marks: list[HolderBucket] = field(default_factory=list)
    rows: list[HolderBucket] = field(default_factory=list)


class HistoryStore:
    """One store file, its writer thread (when this server is the writer) and its reader.

    ``device_uuids`` answers the UUID of each device row now (``GpuReading.index`` ->
    UUID): stored series are keyed by it, and read back under the row each device has now.
    """

    def __init__(self, path: Path, retention_5s_s: float = 24 * 3600.0,
                 retention_1min_s: float = 30 * 24 * 3600.0, slack_s: float = 10.0,
                 clock: Clock | None = None, batch_s: float = BATCH_S, *,
                 device_uuids: Callable[[], Mapping[int, str]]) -> None:
        self.path = Path(path)
        self.device_uuids = device_uuids
        self.retention_s = {FINE_TIER: retention_5s_s, COARSE_TIER: retention_1min_s}
        # More than this between two buckets is a gap (the idle interval may leave a 5 s
        # bucket empty now and then; the server calls it with twice that interval).
        self.slack_s = slack_s
        self.clock: Clock = clock or SystemClock()
        self.batch_s = batch_s
        self.stats = StoreStats()
        self.role = "starting"  # "writer", "reader" or "off"
        self._opened = threading.Event()  # set when the role is no longer "starting"
        self.problem = ""  # why "off", in one line
        self._queue: queue.SimpleQueue[IdentifiedSample] = queue.SimpleQueue()
        self._history: History | None = None  # the one ``attach`` listens to
        self._lock = WriterLock(self.path)
        self._connection: sqlite3.Connection | None = None
        # Samples of the 5-second bucket still open.
        self._open_fine: list[IdentifiedSample] = []
        self._before_open: Sample | None = None  # the sample before those (its interval)
        self._open_coarse: list[Bucket] = []  # 5-second buckets of the open minute
        # Process passes (``holders.py``) heard and not yet written, and the same for them:
        # the passes of the open 5-second bucket, the pass before those, and the closed
        # 5-second holder buckets of the open minute.
        self._pass_queue: queue.SimpleQueue[PassRecord] = queue.SimpleQueue()
        self._open_passes: list[PassRecord] = []
        self._before_passes_s: float | None = None
        self._open_holder_minute: list[HolderBucket] = []
        self._layout_ids: dict[tuple[str, ...], int] = {}
        self._last_prune = -float("inf")
        # What the writer made of the wall clock at open (``clock_check``), and the
        # monotonic clock then: the present a prune counts back from is the judgment's
        # anchor plus the monotonic time since, never past the wall clock.
        self.clock_judgment: ClockJudgment | None = None
        self._opened_at_monotonic = 0.0
        self._last_take_over = -float("inf")
        # A version 1 store's row-numbered GPU history waits for the first sample's UUIDs
        # (``upgraded_rows``).
        self._rows_pending = False
        # The rows of the GPUs from before the upgrade that no sample could key and that
        # still have buckets (``upgraded_rows.rows_kept``): the timelines draw each as
        # "GPU N (before upgrade)". Noted at open and when the rows are keyed, on the
        # store's thread, so reading it reads no file.
        self.rows_before_upgrade: tuple[int, ...] = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- writing ---------------------------------------------------------------------------

    def attach(self, history: History) -> None:
        """Hear every sample ``history`` appends (a queue put on the sampler's thread) while
        the store is on, with the devices' UUIDs as they are when it is appended."""
        self._history = history
        history.add_listener(self._hear)

    def _hear(self, sample: Sample) -> None:
        # An off store has no thread left to drain the queue: what it took would stay.
        if self.role != "off":
            self._queue.put(IdentifiedSample(sample, self.device_uuids()))

    def hear_pass(self, record: PassRecord) -> None:
        """Take one process pass's holder evidence (a queue put, on the sampler's thread:
        ``apps/usage.py`` hears the passes and hands them here)."""
        if self.role != "off":
            self._pass_queue.put(record)

    def _stop_hearing(self) -> None:
        """An off store listens no more and lets go of what it had taken (an hour of 8 GPUs
        at 200 ms is about 80 MB)."""
        if self._history is not None:
            self._history.remove_listener(self._hear)
        for waiting in (self._queue, self._pass_queue):
            while True:
                try:
                    waiting.get_nowait()
                except queue.Empty:
                    break

    def open(self) -> None:
        """Take the writer's role if free (making or migrating the store), else read. One log
        line, never an exception, when there can be no store."""
        if self.role == "off":
            return
        try:
            self._open()
        finally:
            self._opened.set()

    def _open(self) -> None:
        try:
            make_folder(self.path)
            if self._lock.try_acquire():
                opened = open_store(self.path)
                self._become_writer(opened)
            else:
                check_readable(self.path)
                self._note_rows_before_upgrade()
                self.role = "reader"
                log.info("history store %s: another nvdashboard server writes it; this one "
                         "reads it", self.path)
        except StoreUnusable as error:
            self._turn_off(str(error))
        except (sqlite3.Error, OSError) as error:
            self._turn_off(f"cannot use {self.path}: {error}")

    def _note_rows_before_upgrade(self) -> None:
        """A reader's ``rows_before_upgrade``, read once at open: the writer's notes them
        on its own connection."""
        try:
            connection = connect(self.path, read_only=True)
            try:
                self.rows_before_upgrade = upgraded_rows.rows_kept(connection)
            finally:
                connection.close()
        except sqlite3.Error as error:  # the history is still read; only those rows wait
            log.warning("history store %s: cannot read which GPUs it kept from before an "
                        "upgrade: %s", self.path, error)

    def _turn_off(self, why: str) -> None:
        self._lock.release()
        self.role, self.problem = "off", why
        self._stop_hearing()
        log.warning("history store: %s; the server carries on without one", why)

    def _become_writer(self, opened: Opened) -> None:
        self._connection = opened.connection
        self.role = "writer"
        with self._connection:
            self._set_aside_damaged()
            # Before judging: what an earlier start set aside as ahead and the clock has
            # reached since is history again (and what an older nvdashboard set aside under
            # a clock that was behind comes back).
            self._bring_back_reached()
            self._judge_clock()
            # Before the roll-up: a minute stamped in the future would hide every 5-second
            # bucket after the real newest minute from it.
            self._set_aside_ahead()
            self._roll_up_left_over()
            self._rows_pending = upgraded_rows.pending(self._connection)
            self.rows_before_upgrade = upgraded_rows.rows_kept(self._connection)

    def _roll_up_left_over(self) -> None:
        """Fold into minutes the 5-second buckets newer than the newest minute: what a
        server killed mid-minute wrote to the fine tier only."""
        assert self._connection is not None
        newest_minute = self._connection.execute(
            "SELECT max(start_s) FROM buckets WHERE tier=?", (COARSE_TIER,)).fetchone()[0]
        since = -1 if newest_minute is None else newest_minute + TIER_WIDTHS_S[COARSE_TIER]
        fine = self._read_buckets(self._connection, FINE_TIER, since, float("inf"))
        if fine:
            self._write(COARSE_TIER, fold_buckets(fine, TIER_WIDTHS_S[COARSE_TIER]))
        newest_minute = self._connection.execute(
            "SELECT max(start_s) FROM holder_buckets WHERE tier=?", (COARSE_TIER,)).fetchone()[0]
        since = -1 if newest_minute is None else newest_minute + TIER_WIDTHS_S[COARSE_TIER]
        left = self._read_holder_rows(self._connection, FINE_TIER, since, float("inf"))
        if left:
            self._write_holders(COARSE_TIER, fold_holder_buckets(
                left, TIER_WIDTHS_S[COARSE_TIER]))

    def step(self, final: bool = False) -> None:
        """Write what the samples since the last step closed, in one transaction (and every
        open bucket when ``final``); prune now and then. Public: tests drive it by hand."""
        started = time.thread_time()
        try:
            self._step(final)
        except sqlite3.Error as error:
            self.stats.errors += 1
            if self.stats.errors == 1 or self.stats.errors % 100 == 0:
                log.warning("history store %s: a write failed (%s); its samples are kept "
                            "(an hour at most) and written at the next try", self.path, error)
        finally:
            self.stats.cpu_s += time.thread_time() - started

    def _step(self, final: bool) -> None:
        new: list[IdentifiedSample] = []
        while True:
            try:
                new.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if self.role == "reader":
            self._try_take_over()
        if self.role != "writer" or self._connection is None:
            return
        if self._rows_pending and new:
            self._key_upgraded_rows(new[0].uuids)
        passes = self._drain_passes()
        samples = [*self._open_fine, *new]
        fine = fold_samples(samples, TIER_WIDTHS_S[FINE_TIER], self.slack_s,
                            self._before_open)
        closed_fine = fine if final else fine[:-1]
        still_open = [] if final or not fine else fine[-1:]
        minutes: list[Bucket] = []
        open_coarse = list(self._open_coarse)
        for bucket in closed_fine:
            start = _floor(bucket.start_s, TIER_WIDTHS_S[COARSE_TIER])
            if open_coarse and (
                    _floor(open_coarse[0].start_s, TIER_WIDTHS_S[COARSE_TIER]) != start
                    or open_coarse[0].layout != bucket.layout):
                minutes += fold_buckets(open_coarse, TIER_WIDTHS_S[COARSE_TIER])
                open_coarse = []
            open_coarse.append(bucket)
        if final and open_coarse:
            minutes += fold_buckets(open_coarse, TIER_WIDTHS_S[COARSE_TIER])
            open_coarse = []
        holder_fine, holder_minutes, open_passes, open_minute = self._fold_passes(passes,
                                                                                final)
        if closed_fine or minutes or holder_fine or holder_minutes:
            try:
                with self._connection:
                    self._write(FINE_TIER, closed_fine)
                    self._write(COARSE_TIER, minutes)
                    self._write_holders(FINE_TIER, holder_fine)
                    self._write_holders(COARSE_TIER, holder_minutes)
            except sqlite3.Error:
                # Nothing of this batch was written (the transaction rolled back): its
                # samples and passes wait for the next step, an hour of them at most.
                self._open_fine = samples[-MAX_PENDING_SAMPLES:]
                self._open_passes = passes[-MAX_PENDING_SAMPLES:]
                raise
            self.stats.batches += 1
        if passes:
            kept = len(open_passes)
            if len(passes) > kept:
                self._before_passes_s = passes[-kept - 1].time_s
            self._open_passes, self._open_holder_minute = open_passes, open_minute
        # The open bucket's own samples stay in memory until a later sample closes it.
        self._open_fine = [s for s in samples if still_open and _in(s, still_open[0])]
        if len(samples) > len(self._open_fine):
            self._before_open = samples[-len(self._open_fine) - 1].sample
        self._open_coarse = open_coarse
        now = self.clock.monotonic()
        if final or now - self._last_prune >= PRUNE_EVERY_S:
            self._last_prune = now
            self._prune()

    def _drain_passes(self) -> list[PassRecord]:
        """The passes of the open bucket and those heard since the last step."""
        passes = list(self._open_passes)
        while True:
            try:
                passes.append(self._pass_queue.get_nowait())
            except queue.Empty:
                return passes

    def _fold_passes(self, passes: list[PassRecord], final: bool
                     ) -> tuple[list[HolderBucket], list[HolderBucket], list[PassRecord],
                                list[HolderBucket]]:
        """(closed 5-second holder buckets, closed minutes, the open bucket's passes, the
        open minute's 5-second buckets): as the device buckets are closed and rolled up."""
        fine_s, coarse_s = TIER_WIDTHS_S[FINE_TIER], TIER_WIDTHS_S[COARSE_TIER]
        if not passes and not final:
            return [], [], [], self._open_holder_minute
        # The open bucket: the trailing passes in the last pass's bucket.
        kept = 0
        if not final:
            open_start = _floor(passes[-1].time_s, fine_s)
            while kept < len(passes) and _floor(passes[-kept - 1].time_s, fine_s) == open_start:
                kept += 1
        still_open = passes[len(passes) - kept:]
        closed = fold_passes(passes[:len(passes) - kept], fine_s, self.slack_s,
                             self._before_passes_s)
        minutes: list[HolderBucket] = []
        open_minute = list(self._open_holder_minute)
        for bucket in closed:
            if bucket.is_mark and open_minute and \
                    _floor(open_minute[0].start_s, coarse_s) != _floor(bucket.start_s,
                                                                       coarse_s):
                minutes += fold_holder_buckets(open_minute, coarse_s)
                open_minute = []
            open_minute.append(bucket)
        if final and open_minute:
            minutes += fold_holder_buckets(open_minute, coarse_s)
            open_minute = []
        return closed, minutes, still_open, open_minute

    def _write_holders(self, tier: int, buckets: Sequence[HolderBucket]) -> None:
        """Insert each holder bucket; one already there is merged with it."""
        assert self._connection is not None
        columns = ", ".join(("tier", "start_s", *holders.COLUMNS))
        marks = ", ".join("?" * (2 + len(holders.COLUMNS)))
        for bucket in buckets:
            inserted = self._connection.execute(
                f"INSERT OR IGNORE INTO holder_buckets ({columns}) VALUES ({marks})",
                holders.to_row(tier, bucket)).rowcount
            if inserted:
                continue
            key = (tier, int(bucket.start_s), bucket.user, bucket.kernel, bucket.device)
            where = "tier=? AND start_s=? AND user=? AND kernel=? AND device=?"
            row = self._connection.execute(
                f"SELECT start_s, {', '.join(holders.COLUMNS)} FROM holder_buckets "
                f"WHERE {where}", key).fetchone()
            stored = holders.from_row(bucket.width_s, row) if row is not None else None
            if stored is not None:
                bucket = holders.merged(stored, bucket)
            self._connection.execute(f"DELETE FROM holder_buckets WHERE {where}", key)
            self._connection.execute(
                f"INSERT INTO holder_buckets ({columns}) VALUES ({marks})",
                holders.to_row(tier, bucket))

    def _read_holder_rows(self, connection: sqlite3.Connection, tier: int, start_s: float,
                          end_s: float, holder: tuple[str, str] | None = None
                          ) -> list[HolderBucket]:
        """The tier's holder buckets that overlap ``start_s`` to ``end_s``, oldest first: the
        pass marks and ``holder``'s rows (every holder's: None)."""
        width = TIER_WIDTHS_S[tier]
        which = "" if holder is None else \
            " AND ((user=? AND kernel=?) OR (device='' AND user='' AND kernel=''))"
        rows = connection.execute(
            f"SELECT start_s, {', '.join(holders.COLUMNS)} FROM holder_buckets WHERE tier=? "
            f"AND start_s > ? AND start_s < ?{which} ORDER BY start_s",
            (tier, start_s - width, end_s if end_s != float("inf") else 2**62,
             *(holder or ()))).fetchall()
        found = (holders.from_row(width, row) for row in rows)
        return [bucket for bucket in found if bucket is not None]

    def _key_upgraded_rows(self, uuids: Mapping[int, str]) -> None:
        """The first sample after the upgrade from version 1 names the GPUs the stored rows
        were read from: key their history by those UUIDs (``upgraded_rows``)."""
        assert self._connection is not None
        try:
            with self._connection:
                rewritten = upgraded_rows.key_by_uuid(self._connection, uuids)
        except sqlite3.Error as error:
            # Before this batch's samples are written: they must not be lost with it. The
            # rows stay pending, for the next step.
            log.warning("history store %s: keying the history stored before the upgrade "
                        "failed (%s); tried again at the next write", self.path, error)
            return
        if not uuids:
            return  # no GPU read yet: the next sample's
        self._rows_pending = False
        self._layout_ids.clear()
        self.rows_before_upgrade = upgraded_rows.rows_kept(self._connection)
        if rewritten:
            log.info("history store %s: the GPU history stored before the upgrade (by row "
                     "number) is keyed by the UUIDs of this machine's GPUs now", self.path)

    def _try_take_over(self) -> None:
        now = self.clock.monotonic()
        if now - self._last_take_over < TAKE_OVER_EVERY_S:
            return
        self._last_take_over = now
        try:
            if not self._lock.try_acquire():
                return
            self._become_writer(open_store(self.path))
            log.info("history store %s: the server that wrote it has stopped; this one "
                     "writes it now", self.path)
        except StoreUnusable as error:
            self._turn_off(str(error))

    def _layout_id(self, layout: tuple[str, ...]) -> int:
        assert self._connection is not None
        known = self._layout_ids.get(layout)
        if known is not None:
            return known
        text = layout_text(layout)
        self._connection.execute("INSERT OR IGNORE INTO layouts (gpus) VALUES (?)", (text,))
        layout_id = self._connection.execute("SELECT id FROM layouts WHERE gpus=?",
                                             (text,)).fetchone()[0]
        self._layout_ids[layout] = layout_id
        return layout_id

    def _write(self, tier: int, buckets: Sequence[Bucket]) -> None:
        """Insert each bucket; one already there (a restart inside its span, a wall-clock
        step back) is merged with it."""
        assert self._connection is not None
        for bucket in buckets:
            layout = self._layout_id(bucket.layout)
            key = (tier, int(bucket.start_s), layout)
            inserted = self._connection.execute(
                "INSERT OR IGNORE INTO buckets (tier, start_s, layout, samples, covered_s, "
                "data) VALUES (?, ?, ?, ?, ?, ?)",
                (*key, bucket.samples, bucket.covered_s, bucket.encode())).rowcount
            if not inserted:
                samples, covered, blob = self._connection.execute(
                    "SELECT samples, covered_s, data FROM buckets WHERE tier=? AND start_s=? "
                    "AND layout=?", key).fetchone()
                try:
                    stored = Bucket.decode(bucket.start_s, bucket.width_s, bucket.layout,
                                           samples, covered, blob)
                    bucket = stored.merged(bucket)
                except ValueError:
                    pass  # a damaged bucket is replaced by the new one
                self._connection.execute(
                    "UPDATE buckets SET samples=?, covered_s=?, data=? WHERE tier=? AND "
                    "start_s=? AND layout=?",
                    (bucket.samples, bucket.covered_s, bucket.encode(), *key))
                self.stats.merged += 1
            self.stats.buckets_written += 1

    def _prune(self) -> None:
        """Delete each tier's buckets older than its retention, counted back from the
        present (``_present``); bring back first what was set aside as ahead and the clock
        has reached. Counting from the newest bucket instead would let one bucket from a
        clock set a year ahead delete the whole store."""
        assert self._connection is not None
        now = self._present()
        pruned = 0
        with self._connection:
            self._bring_back_reached()
            for tier, retention in self.retention_s.items():
                pruned += self._connection.execute(
                    "DELETE FROM buckets WHERE tier=? AND start_s < ?",
                    (tier, int(now - retention))).rowcount
                self._connection.execute(
                    "DELETE FROM holder_buckets WHERE tier=? AND start_s < ?",
                    (tier, int(now - retention)))
            self.stats.pruned += pruned
            # What was set aside as damaged goes when it is past the longest retention as
            # well; what was set aside as ahead never goes as such: it comes back when the
            # clock reaches it, and is pruned as history then.
            self._connection.execute("DELETE FROM set_aside WHERE why != ? AND start_s < ?",
                                     (AHEAD_OF_THE_CLOCK,
                                      int(now - max(self.retention_s.values()))))
        if pruned and self.rows_before_upgrade:
            # The GPUs from before the upgrade whose last buckets went: no longer drawn.
            self.rows_before_upgrade = upgraded_rows.rows_kept(self._connection)

    def _present(self) -> float:
        """The wall clock, but never past the anchor judged at open (the newest stored
        bucket, or the wall clock when they agreed) plus the monotonic time since: a clock
        ahead at start, or stepped forward while the server runs (``date -s``, a bad NTP
        step), deletes nothing (a suspend or a server that was off only defers a
        deletion)."""
        now = self.clock.time()
        if self.clock_judgment is None:
            return now
        return min(now, self.clock_judgment.anchor_s
                   + self.clock.monotonic() - self._opened_at_monotonic)

    def _judge_clock(self) -> None:
        """Compare the wall clock with the stored buckets' extremes (``clock_check``); one
        log line when they do not agree. In the caller's transaction."""
        assert self._connection is not None
        wall = self.clock.time()
        reach = int(wall + TRUSTED_AHEAD_S)
        end = f"start_s + CASE tier WHEN {FINE_TIER} THEN {TIER_WIDTHS_S[FINE_TIER]} " \
              f"ELSE {TIER_WIDTHS_S[COARSE_TIER]} END"
        oldest, newest_end, reached_end, beyond = self._connection.execute(
            f"SELECT min(start_s), max({end}), max(CASE WHEN start_s <= ? THEN {end} END), "
            "min(CASE WHEN start_s > ? THEN start_s END) FROM buckets",
            (reach, reach)).fetchone()
        judgment = judge_clock(wall, StoreExtremes(oldest, newest_end, reached_end, beyond))
        self.clock_judgment = judgment
        self._opened_at_monotonic = self.clock.monotonic()
        if judgment.state in (AGREES, EMPTY):
            return
        assert judgment.offset_s is not None and newest_end is not None
        if judgment.state == AHEAD:
            # An ordinary start after the server was off looks the same: info, not a warning.
            log.info("history store %s: the wall clock (%s UTC) is %s past the newest stored "
                     "bucket (%s UTC): the server was off that long, or the clock is ahead; "
                     "retention counts from the newest bucket plus the time since start, so "
                     "nothing is deleted early", self.path, _utc(wall),
                     _duration(judgment.offset_s), _utc(newest_end))
        else:
            log.warning("history store %s: the wall clock (%s UTC) is %s behind the newest "
                        "stored bucket (%s UTC), which the history reaches without a break: "
                        "the clock is behind; nothing is set aside as ahead of it, and what "
                        "it stamps is added to the buckets already stored", self.path,
                        _utc(wall), _duration(-judgment.offset_s), _utc(newest_end))

    def _set_aside_ahead(self) -> None:
        """Move the buckets the clock judgment cut off ahead of the clock out of the history
        into ``set_aside`` (one log line); in the caller's transaction."""
        judgment = self.clock_judgment
        if judgment is None or judgment.set_aside_from_s is None:
            return
        ahead, newest = self._set_aside(AHEAD_OF_THE_CLOCK, "start_s > ?",
                                        (int(judgment.set_aside_from_s),))
        if ahead:
            log.warning("history store %s: %d buckets stamped ahead of the clock, apart from "
                        "the history (up to %s UTC; the clock was wrong when they were "
                        "written) are set aside until the clock reaches them; the rest of the "
                        "history is kept", self.path, ahead, _utc(newest))

    def _bring_back_reached(self) -> None:
        """Put the buckets set aside as ahead of the clock that the clock has reached back
        into the history (merged with any written there since); in the caller's
        transaction."""
        assert self._connection is not None
        rows = self._connection.execute(
            "SELECT s.rowid, s.tier, s.start_s, l.gpus, s.samples, s.covered_s, s.data "
            "FROM set_aside s JOIN layouts l ON l.id = s.layout WHERE s.why = ? AND "
            "s.start_s <= ? ORDER BY s.tier, s.start_s",
            (AHEAD_OF_THE_CLOCK, int(self.clock.time() + TRUSTED_AHEAD_S))).fetchall()
        for rowid, tier, start, gpus, samples, covered, blob in rows:
            layout = parse_layout(gpus)
            if layout is None or tier not in TIER_WIDTHS_S:
                continue  # not a row this nvdashboard writes: it stays aside
            try:
                bucket = Bucket.decode(float(start), TIER_WIDTHS_S[tier], layout, samples,
                                       covered, blob)
            except (ValueError, TypeError):
                continue
            self._write(tier, [bucket])
            self._connection.execute("DELETE FROM set_aside WHERE rowid = ?", (rowid,))
            self.stats.brought_back += 1

    def _set_aside_damaged(self) -> None:
        """Move the buckets this nvdashboard would not have written (a layout that is not a
        list of device keys, a value of the wrong type: an edited or damaged row) out of
        the history into ``set_aside`` (one log line): the writer and every reader then
        meet only rows they expect. In the caller's transaction."""
        assert self._connection is not None
        unexpected = [layout_id for layout_id, text in
                      self._connection.execute("SELECT id, gpus FROM layouts")
                      if parse_layout(text) is None]
        damaged, _ = self._set_aside(
            DAMAGED,
            "typeof(start_s) != 'integer' OR typeof(samples) != 'integer' OR "
            "typeof(covered_s) NOT IN ('integer', 'real') OR typeof(data) != 'blob' OR "
            "layout NOT IN (SELECT id FROM layouts) OR layout IN (SELECT value FROM "
            "json_each(?))", (json.dumps(unexpected),))
        if damaged:
            log.warning("history store %s: %d buckets with a layout or values this "
                        "nvdashboard does not write (the file was edited or damaged) are set "
                        "aside; the rest of the history is kept", self.path, damaged)

    def _set_aside(self, why: str, where: str, parameters: tuple[object, ...]
                   ) -> tuple[int, object]:
        """Move the buckets ``where`` holds out of the history into ``set_aside``, kept
        with ``why``; returns how many, and the newest one's start."""
        assert self._connection is not None
        count, newest = self._connection.execute(
            f"SELECT count(*), max(start_s) FROM buckets WHERE {where}", parameters).fetchone()
        if count:
            self._connection.execute(
                "INSERT INTO set_aside (why, tier, start_s, layout, samples, covered_s, data) "
                f"SELECT ?, tier, start_s, layout, samples, covered_s, data FROM buckets "
                f"WHERE {where}", (why, *parameters))
            self._connection.execute(f"DELETE FROM buckets WHERE {where}", parameters)
            self.stats.set_aside += count
        return count, newest

    def start(self) -> None:
        """Open the store and start the writer thread (never blocks the caller)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nvdashboard-store",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.open()
            while self.role != "off" and not self._stop.wait(self.batch_s):
                self.step()
        except Exception as error:  # a store damaged in a way no check foresaw, or a defect
            # One line, and /info.json says "off": a writer that died silently looked alive.
            self.close()
            self._turn_off(f"the writer stopped: {type(error).__name__}: {error}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Write every open bucket, then close: a clean stop loses nothing."""
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout_s)
        if self.role == "writer":
            self.step(final=True)
        self.close()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._lock.release()

    # -- reading ---------------------------------------------------------------------------

    def _readable_once_open(self) -> bool:
        """``readable``, once the writer thread has opened the store: while it opens, a read
        waits for it (``OPEN_WAIT_S`` at most). Raises StoreReadOnEventLoop on an event
        loop: every read asks this first (``past``, ``past_in_pieces``)."""
        refuse_on_event_loop()
        if self.role == "starting" and self._thread is not None:
            self._opened.wait(OPEN_WAIT_S)
        return self.readable

    @property
    def readable(self) -> bool:
        return self.role in ("writer", "reader")

    @property
    def longest_s(self) -> float:
        """The longest span the store keeps (0 without a store)."""
        return 0.0 if self.role == "off" else max(self.retention_s.values())

    def _read_runs(self, connection: sqlite3.Connection, tier: int, start_s: float,
                   end_s: float) -> list[BucketRun]:
        """The tier's buckets that overlap ``start_s`` to ``end_s``, in runs of one layout."""
        width = TIER_WIDTHS_S[tier]
        rows = connection.execute(
            "SELECT b.start_s, l.gpus, b.samples, b.data, b.covered_s FROM buckets b "
            "JOIN layouts l "
            "ON l.id = b.layout WHERE b.tier=? AND b.start_s > ? AND b.start_s < ? "
            "ORDER BY b.start_s, b.layout",
            (tier, start_s - width, end_s if end_s != float("inf") else 2**62)).fetchall()
        runs: list[BucketRun] = []
        position = 0
        while position < len(rows):
            gpus = rows[position][1]
            end = position
            while end < len(rows) and rows[end][1] == gpus:
                end += 1
            part = rows[position:end]
            layout = parse_layout(gpus)
            if layout is None:  # not a layout the writer makes: none of its buckets is read
                position = end
                continue
            run = BucketRun.decode(layout, width, [r[0] for r in part], [r[2] for r in part],
                                   [r[4] for r in part], [r[3] for r in part])
            if len(run):
                runs.append(run)
            position = end
        return runs

    def _read_buckets(self, connection: sqlite3.Connection, tier: int, start_s: float,
                      end_s: float) -> list[Bucket]:
        return [b for run in self._read_runs(connection, tier, start_s, end_s)
                for b in run.buckets()]

    def tier_for(self, start_s: float, resolution_s: float) -> int:
        """The coarsest tier no coarser than ``resolution_s`` that still holds ``start_s``;
        the finest that holds it when both are coarser; the longest-kept one otherwise."""
        # A minute's leeway: a 24-hour window asked for a moment after the last prune still
        # reads the 24-hour tier (its oldest minute may be gone: a short gap at the start).
        now = self.clock.time() - 60
        holding = [tier for tier, kept in self.retention_s.items() if start_s >= now - kept]
        fine_enough = [t for t in holding if TIER_WIDTHS_S[t] <= resolution_s]
        if fine_enough:
            return max(fine_enough, key=TIER_WIDTHS_S.__getitem__)
        if holding:
            return min(holding, key=TIER_WIDTHS_S.__getitem__)
        return max(self.retention_s, key=self.retention_s.__getitem__)

    def past(self, start_s: float, end_s: float, resolution_s: float,
             rows: str = "minmax", monotonic_grid: bool = False) -> PastWindow:
        """Stored history from ``start_s`` to ``end_s`` (epoch seconds), one row per
        ``resolution_s`` (at least the tier's width): "minmax", each span's minima at its
        first stored bucket and maxima halfway from there to its end (what a chart's
        min/max downsampling draws, stream/downsample.py), or "mean", each span's means at
        that middle (what diagnosis and the CSV read). A gap
        sample (nothing available) marks each span where nothing was recorded.

        Spans coarser than the tier's buckets lie on the wall clock's multiples of
        ``resolution_s``; ``monotonic_grid``: on the monotonic clock's, as a chart's
        downsampling cuts its buckets (``stream/downsample.py``), so that each span falls
        in one of the chart's buckets and not across two of them."""
        if not self._readable_once_open() or end_s <= start_s:
            return PastWindow(0.0, 0.0)
        tier = self.tier_for(start_s, resolution_s)
        return self._past_at(tier, max(resolution_s, TIER_WIDTHS_S[tier]), start_s, end_s,
                             rows, monotonic_grid)

    def past_in_pieces(self, start_s: float, end_s: float, resolution_s: float,
                       rows: str = "minmax", piece_rows: int = PIECE_ROWS
                       ) -> Iterator[PastWindow]:
        """``past`` read a piece at a time, each of at most ``piece_rows`` spans, all from
        the tier and at the resolution ``past`` would read the whole window at: a reader
        that streams a month (``/history.csv``) holds one piece at a time, not the month.
        Pieces end on multiples of their length, so no span is cut in two; a piece with
        nothing stored has no samples. Each ``next`` reads the file: call it off the event
        loop."""
        if not self._readable_once_open() or end_s <= start_s:
            return
        tier = self.tier_for(start_s, resolution_s)
        resolution = max(resolution_s, TIER_WIDTHS_S[tier])
        length = resolution * piece_rows
        edge = start_s
        while edge < end_s:
            next_edge = min(end_s, (math.floor(edge / length) + 1) * length)
            yield self._past_at(tier, resolution, edge, next_edge, rows)
            edge = next_edge

    def _past_at(self, tier: int, resolution: float, start_s: float, end_s: float,
                 rows: str, monotonic_grid: bool = False) -> PastWindow:
        """``past`` from the given tier at the given resolution."""
        width = TIER_WIDTHS_S[tier]
        refuse_on_event_loop()  # each piece of ``past_in_pieces`` too
        try:
            connection = connect(self.path, read_only=True)
            try:
                stored = self._read_runs(connection, tier, start_s, end_s)
                by_row = upgraded_rows.kept_by_row(connection)
            finally:
                connection.close()
        except sqlite3.Error as error:
            log.warning("history store %s: cannot read it: %s", self.path, error)
            return PastWindow(width, resolution)
        # Monotonic times for these samples, as if read now: windows cut by it line them up.
        offset = self.clock.monotonic() - self.clock.time()
        # Each stored device under the row it has now (by UUID); one not shown now is left out.
        uuids = self.device_uuids()
        shown = {run.layout: rows_now(run.layout, uuids) for run in stored}
        # ... and a GPU known only by its row before the upgrade, under a device of its own.
        before = {run.layout: rows_before_upgrade(run.layout, run.layout in by_row)
                  for run in stored}
        gaps: list[tuple[float, float, list[int]]] = []
        previous_end = None
        for run in stored:  # nothing stored for longer than the slack: not running
            ends = run.starts + width
            devices = [row for row in shown[run.layout] if row is not None]
            if previous_end is not None and run.starts[0] - previous_end > self.slack_s:
                gaps.append((previous_end, float(run.starts[0]), devices))
            apart = np.flatnonzero(run.starts[1:] - ends[:-1] > self.slack_s)
            gaps += [(float(ends[i]), float(run.starts[i + 1]), devices) for i in apart]
            previous_end = float(ends[-1])
        if previous_end is not None and end_s - previous_end > self.slack_s:
            # Nothing recorded from the last bucket to the end: the server was not running.
            gaps.append((previous_end, end_s,
                         [row for row in shown[stored[-1].layout] if row is not None]))
        # The spans' grid: the wall clock's, or the monotonic clock's (``past``).
        origin = -offset % resolution if monotonic_grid and resolution > width else 0.0
        samples: list[Sample] = []
        for stored_run in stored:
            run = stored_run.folded(resolution, origin)
            # A span stands for what it holds: the first after a gap (or the store's first)
            # holds nothing before its first stored bucket (issue 51), so its rows start
            # there and its middle is halfway from there to its end, or to the read's end
            # where the span reaches past it (a window whose history starts in that span
            # reads the store up to there, and drops the rows after it).
            firsts = stored_run.starts[np.searchsorted(stored_run.starts, run.starts)]
            middles = (firsts + np.minimum(run.starts + resolution, end_s)) / 2
            if rows == "mean":
                times, values, highs = middles, run.mean, run.high
            else:  # each span's minima at its first stored bucket, maxima at its middle
                times = np.column_stack([firsts, middles]).ravel()
                values = np.stack([run.low, run.high], axis=1).reshape(-1, run.low.shape[1])
                highs = np.repeat(run.high, 2, axis=0)
            samples += bucket_samples(shown[run.layout], values, highs, times.tolist(),
                                      (times + offset).tolist(), before[run.layout])
        for gap_start, gap_end, devices in gaps:
            middle = (gap_start + gap_end) / 2
            samples.append(gap_sample(devices, middle, middle + offset))
        samples.sort(key=lambda sample: sample.time_s)
        return PastWindow(width, resolution, samples)

    def holder_past(self, user: str, kernel: str, start_s: float, end_s: float,
                    resolution_s: float) -> StoredPasses:
        """What the store kept of holder (``user``, ``kernel``)'s passes from ``start_s`` to
        ``end_s``, from the tier ``past`` reads at ``resolution_s``. Reads the file: off the
        event loop only."""
        if not self._readable_once_open() or end_s <= start_s:
            return StoredPasses(0.0)
        tier = self.tier_for(start_s, resolution_s)
        try:
            connection = connect(self.path, read_only=True)
            try:
                found = self._read_holder_rows(connection, tier, start_s, end_s,
                                               (user, kernel))
            finally:
                connection.close()
        except sqlite3.Error as error:
            log.warning("history store %s: cannot read it: %s", self.path, error)
            return StoredPasses(TIER_WIDTHS_S[tier])
        return StoredPasses(TIER_WIDTHS_S[tier], [b for b in found if b.is_mark],
                            [b for b in found if not b.is_mark])

    def past_samples(self, start_s: float, end_s: float, resolution_s: float,
                     rows: str = "minmax", monotonic_grid: bool = False
                     ) -> tuple[list[Sample], float]:
        """``past`` as ``metrics.PastSource`` reads it."""
        window = self.past(start_s, end_s, resolution_s, rows, monotonic_grid)
        return window.samples, window.resolution_s

    def info(self) -> dict[str, object]:
        """``/info.json``'s ``store``."""
        try:
            size = sum(Path(f"{self.path}{s}").stat().st_size for s in ("", "-wal")
                       if Path(f"{self.path}{s}").exists())
        except OSError:
            size = None
        return {"path": str(self.path), "role": self.role, "problem": self.problem,
                "size_bytes": size if self.role != "off" else None,
                "retention_s": {f"{TIER_WIDTHS_S[t]:g}": kept
                                for t, kept in self.retention_s.items()},
                "batches": self.stats.batches, "buckets_written": self.stats.buckets_written,
                "writer_cpu_s": round(self.stats.cpu_s, 4),
                # The writer's reading of the wall clock at open (None: not the writer).
                "clock": (self.clock_judgment.as_info()
                          if self.clock_judgment is not None else None)}


def refuse_on_event_loop() -> None:
    """Raise StoreReadOnEventLoop when called on an event loop: the one rule every read of
    the store's file obeys, so none can stall the pages, by construction."""
    if on_event_loop():
        raise StoreReadOnEventLoop("the history store is read off the event loop only "
                                   "(long_reads.py)")


def _utc(time_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(time_s))


def _duration(seconds: float) -> str:
    """A span in words a log reader takes in at once: "365 d 0 h 2 min"."""
    days, left = divmod(abs(seconds), 86400)
    hours, left = divmod(left, 3600)
    parts = ([f"{days:.0f} d"] if days else []) + ([f"{hours:.0f} h"] if hours or days else [])
    return " ".join([*parts, f"{left // 60:.0f} min"])


def _floor(time_s: float, width_s: float) -> float:
    return float(np.floor(time_s / width_s) * width_s)


def _in(sample: IdentifiedSample, bucket: Bucket) -> bool:
    return bucket.start_s <= sample.sample.time_s < bucket.start_s + bucket.width_s
