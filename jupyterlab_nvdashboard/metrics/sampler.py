"""The one sampler per process, and the bounded history every dashboard reads.

The sampler owns three threads. The GPU reader thread calls NVML once per interval and
keeps the newest readings; the tick thread reads the host (psutil, fast) and appends one
timestamped ``Sample`` per tick with the freshest GPU readings; the slow thread, once a
second, takes the readings that block (the 20 ms PCIe snapshot on drivers without PCIe
counters), which the GPU reader then reports. A slow or hung NVML call therefore delays only
the GPU readings, never the tick: readings older than ``stale_after_s`` are stored as "not
available" (a gap on the charts) and every sample carries ``gpu_age_s``, the age of its GPU
readings, measured on the monotonic clock so a wall-clock step cannot make old readings
look fresh. Dashboards never touch hardware: they
ask the history for ``since(seq)`` and stream what is new, so N open tabs cost the same
NVML calls as one. Sleep is drift-corrected against the monotonic clock; a tick that runs
late skips ahead instead of bunching samples together.

Each family is read at the pace its consumers need (``demand.py``, the one table of read
rates): the server says which consumers are there (``set_consumers``: the open pages). With
nobody watching, all three threads slow to ``idle_interval_s``; the history keeps filling,
at a lower rate. A consumer that needs a faster pace wakes them at once, so the first
viewer sees its ticks within one idle interval at worst.
Listeners (``History.add_listener``) hear of every sample as it is appended: the server
publishes new rows to open pages from there, without polling.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .demand import CORE, read_intervals, watched
from .host import HostReader, HostReading
from .nvml import GpuReading, NvmlReader
from .rates import total

log = logging.getLogger(__name__)

# How often the slow thread runs: the PCIe snapshot is taken at most once a second per GPU.
SLOW_INTERVAL_S = 1.0


class FamilyReader(Protocol):
    """A reading family (``families.py``), read on the GPU reader thread after each NVML
    pass, at its own rate; its result goes into ``Sample.extra[name]`` (None: no reading).
    It travels with that NVML pass, so every sample built from the pass carries it.
    ``every_s``: the least time between two of its readings (the sampler sets it from
    ``demand.py`` once the server names the consumers)."""

    name: str
    every_s: float

    def read(self, gpus: tuple[GpuReading, ...]) -> object | None: ...


@dataclass(frozen=True)
class Sample:
    """Everything read in one tick. New per-tick metric families get a field of their own."""

    seq: int
    time_s: float  # unix epoch seconds at the start of the tick
    gpus: tuple[GpuReading, ...]
    host: HostReading
    # Seconds between the start of the GPU read these readings come from and this tick
    # (0 when read in the tick itself); None when there are no GPU readings at all.
    gpu_age_s: float | None = 0.0
    # Room for per-process, MIG and GPM readings, keyed by family name.
    extra: dict[str, object] = field(default_factory=dict)
    # The monotonic clock at the start of the tick: windows are cut by it, so a wall-clock
    # step (NTP) neither empties nor stretches them. None for samples made by hand.
    monotonic_s: float | None = None

    @property
    def clock_s(self) -> float:
        """The one stamp for durations, spans, gaps, windows and buckets: the monotonic
        clock (the wall clock only for a sample made by hand without it). ``time_s`` is for
        display and for matching a run's events, which carry the wall clock."""
        return self.time_s if self.monotonic_s is None else self.monotonic_s


def _wall_time(sample: Sample) -> float:
    return sample.time_s


class History:
    """A thread-safe ring buffer of samples, sized by a time window."""

    def __init__(self, max_samples: int) -> None:
        self._samples: deque[Sample] = deque(maxlen=max_samples)
        self._lock = threading.Lock()
        self._next_seq = 0
        self._listeners: list[Callable[[Sample], None]] = []

    def add_listener(self, listener: Callable[[Sample], None]) -> None:
        """Call ``listener(sample)`` after each append, on the appending thread; keep it short."""
        # A new list, never one changed in place: ``append`` may be iterating the old one on
        # the sampler's thread.
        self._listeners = [*self._listeners, listener]

    def remove_listener(self, listener: Callable[[Sample], None]) -> None:
        """Stop calling ``listener`` (from any thread; an append under way may still call it
        once)."""
        self._listeners = [known for known in self._listeners if known != listener]

    def append(self, time_s: float, gpus: tuple[GpuReading, ...], host: HostReading,
               gpu_age_s: float | None = 0.0, extra: dict[str, object] | None = None,
               monotonic_s: float | None = None) -> Sample:
        with self._lock:
            sample = Sample(self._next_seq, time_s, gpus, host, gpu_age_s, extra or {},
                            time.monotonic() if monotonic_s is None else monotonic_s)
            self._next_seq += 1
            self._samples.append(sample)
        for listener in self._listeners:
            try:
                listener(sample)
            except Exception:  # a broken listener must not stop the sampler
                log.exception("history listener failed")
        return sample

    def since(self, seq: int) -> list[Sample]:
        """Samples newer than ``seq``, oldest first; O(new samples)."""
        with self._lock:
            wanted = min(len(self._samples), self._next_seq - 1 - seq)
            if wanted <= 0:
                return []
            newest_first = list(itertools.islice(reversed(self._samples), wanted))
        newest_first.reverse()
        return newest_first

    def window(self, seconds: float) -> list[Sample]:
        """Samples from the last ``seconds`` of the monotonic clock, oldest first."""
        with self._lock:
            if not self._samples:
                return []
            cutoff = self._samples[-1].clock_s - seconds
            newest_first = list(itertools.takewhile(lambda s: s.clock_s >= cutoff,
                                                    reversed(self._samples)))
        newest_first.reverse()
        return newest_first

    def between(self, start_s: float, end_s: float) -> list[Sample]:
        """Samples stamped from ``start_s`` to ``end_s`` (wall time), oldest first: found by
        bisection, so a span costs what it holds, not the history before or after it (a
        wall clock set back meanwhile may leave a few out, as any wall-time cut would)."""
        with self._lock:
            held = list(self._samples)  # a C-level copy of references: microseconds
        low = bisect.bisect_left(held, start_s, key=_wall_time)
        high = bisect.bisect_right(held, end_s, lo=low, key=_wall_time)
        return held[low:high]

    def latest(self) -> Sample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def oldest(self) -> Sample | None:
        """The oldest sample held: where the history starts."""
        with self._lock:
            return self._samples[0] if self._samples else None

    @property
    def capacity(self) -> int:
        return self._samples.maxlen or 0

    @property
    def last_seq(self) -> int:
        """Sequence number of the newest sample (-1 when empty)."""
        with self._lock:
            return self._next_seq - 1


class PastSource(Protocol):
    """Samples from before the history's oldest one (the store, ``store/``; composed by the
    server: this layer never imports it)."""

    def past_samples(self, start_s: float, end_s: float, resolution_s: float,
                     rows: str = "minmax", monotonic_grid: bool = False
                     ) -> tuple[list[Sample], float]:
        """Samples from ``start_s`` to ``end_s`` (epoch seconds), oldest first, one row
        ("mean") or two ("minmax": minima, then maxima) per ``resolution_s`` or coarser; and
        the resolution they have (0: there are none). ``monotonic_grid``: spans on the
        monotonic clock's multiples of the resolution (a chart's buckets), not the wall
        clock's."""
        ...


def window_with_past(history: History, seconds: float, past: PastSource | None,
                     resolution_s: float, rows: str = "minmax",
                     now_s: float | None = None) -> tuple[list[Sample], float]:
    """The last ``seconds``: the history's samples, and before the oldest of them what
    ``past`` kept (at ``resolution_s`` or coarser). Returns the samples, oldest first, and
    the resolution of the part read from ``past`` (0: everything came from memory)."""
    return prepend_past(history.window(seconds), seconds, past, resolution_s, rows, now_s)


def prepend_past(recent: list[Sample], seconds: float, past: PastSource | None,
                 resolution_s: float, rows: str = "minmax", now_s: float | None = None,
                 before_s: float | None = None, monotonic_grid: bool = False
                 ) -> tuple[list[Sample], float]:
    """``recent`` (the newest samples of a window of ``seconds``, oldest first) with, before
    them, what ``past`` kept of the rest of the window (``window_with_past``). The window
    ends at ``now_s`` (default: the newest of ``recent``, else the wall clock); ``past`` is
    read up to ``before_s`` (default: the oldest of ``recent``), where the history starts;
    ``monotonic_grid`` as ``PastSource.past_samples`` takes it."""
    if past is None:
        return recent, 0.0
    span = past_span(recent, seconds, resolution_s, now_s, before_s)
    if span is None:
        return recent, 0.0
    start, first = span
    older, resolution = past.past_samples(start, first, resolution_s, rows,
                                          monotonic_grid=monotonic_grid)
    older = [sample for sample in older if sample.time_s < first]
    return (older + recent, resolution) if older else (recent, 0.0)


def past_span(recent: list[Sample], seconds: float, resolution_s: float,
              now_s: float | None = None, before_s: float | None = None
              ) -> tuple[float, float] | None:
    """The part of a window of ``seconds`` before ``recent`` (its newest samples, oldest
    first), from its start to where the history starts, in epoch seconds; None when the
    history holds the whole window. ``now_s`` and ``before_s`` as in ``prepend_past``."""
    now = now_s if now_s is not None else recent[-1].time_s if recent else time.time()
    start = now - seconds
    first = before_s if before_s is not None else recent[0].time_s if recent else now
    if first - start <= max(resolution_s, 1.0):
        return None  # memory holds the whole window
    return start, first


def _stale(readings: tuple[GpuReading, ...]) -> tuple[GpuReading, ...]:
    """Readings too old to show: keep which GPU is lost, drop every value."""
    return tuple(GpuReading.unavailable(reading.index, reading.lost) for reading in readings)


def _sleep_until_next(
    deadline: float, interval_s: float, wake: threading.Event
) -> tuple[float, int]:
    """Drift-corrected wait; returns the next deadline and how many ticks were skipped."""
    deadline += interval_s
    missed = 0
    delay = deadline - time.monotonic()
    if delay < 0:
        missed = int(-delay // interval_s) + 1
        deadline += missed * interval_s
        delay = deadline - time.monotonic()
    wake.wait(max(0.0, delay))
    return deadline, missed


class Sampler:
    """Owns the threads that read hardware: one GPU reader and one tick thread."""

    def __init__(
        self, nvml: NvmlReader, host: HostReader, history: History, interval_s: float,
        idle_interval_s: float | None = None, families: Sequence[FamilyReader] = (),
    ) -> None:
        self.nvml, self.host, self.history = nvml, host, history
        self.families = tuple(families)
        self.interval_s = interval_s
        self.idle_interval_s = max(interval_s, idle_interval_s or interval_s)
        self.idle = False
        # Who reads the history now (demand.py); None: not told yet, read for any page.
        self.consumers: frozenset[str] | None = None
        self.read_intervals = read_intervals(None, self.interval_s, self.idle_interval_s)
        self._stop = threading.Event()
        self._lifecycle = threading.Lock()  # start and stop may run on different threads
        self._wakes: list[threading.Event] = []
        self._thread: threading.Thread | None = None
        self._gpu_thread: threading.Thread | None = None
        self._gpu_lock = threading.Lock()
        # (monotonic start of the read, readings, the interval then, the families' readings)
        # from the GPU reader.
        self._gpu_latest: tuple[float, tuple[GpuReading, ...], float,
                                dict[str, object]] | None = None
        self._slow_thread: threading.Thread | None = None
        self.slow_interval_s = SLOW_INTERVAL_S
        self.ticks = 0
        self.late_ticks = 0
        self.gpu_reads = 0
        self.late_gpu_reads = 0
        # Families that block on the OS rather than NVML (process owners from /proc) run on
        # the slow thread; each returns {family: reading} or {} when nothing changed, and the
        # next sample carries what they returned.
        self.slow_families: list[Callable[[], dict[str, object]]] = []
        self._pending_slow: dict[str, object] = {}
        # Family readings of GPU passes no tick has taken yet: a family that reads once a
        # second must not lose its reading when two passes land between two ticks.
        self._pending_family: dict[str, object] = {}

    @property
    def current_interval_s(self) -> float:
        """Seconds between two ticks (and two core passes) now."""
        return self.read_intervals[CORE]

    @staticmethod
    def stale_after_s(interval_s: float) -> float:
        """GPU readings read at ``interval_s`` and older than this count as not available."""
        return max(3 * interval_s, 1.0)

    def set_idle(self, idle: bool) -> None:
        """Slow down with nobody watching; speed up (at once, for any page) when somebody
        is."""
        self.set_consumers(() if idle else None)

    def set_consumers(self, consumers: Collection[str] | None) -> None:
        """Read each family at the pace ``consumers`` need (``demand.py``: open routes and
        the like; empty, or only ``demand.UNWATCHED`` ones: nobody watching; None: as for
        any page). A faster pace starts at once."""
        chosen = None if consumers is None else frozenset(consumers)
        if chosen == self.consumers:
            return
        before = self.current_interval_s
        self.consumers = chosen
        self.idle = not watched(chosen)
        self.read_intervals = read_intervals(chosen, self.interval_s, self.idle_interval_s)
        core = self.current_interval_s
        for family in self.families:
            wanted = self.read_intervals.get(family.name)
            if wanted is not None:
                # Due on the pass nearest its interval: passes start up to half an interval
                # late or early, and a reading due at 0.999 s must not wait a whole pass.
                family.every_s = wanted - core / 2 if wanted > core else 0.0
        if core < before:
            for wake in self._wakes:
                wake.set()

    def read_gpus(self) -> tuple[GpuReading, ...]:
        """One NVML pass (retrying a failed init when due); stores it as the latest."""
        started = time.monotonic()
        self.nvml.retry_if_due()
        readings = self.nvml.read()
        extra: dict[str, object] = {}
        for family in self.families:
            try:
                reading = family.read(readings)
            except Exception:  # one family's bug must not cost the GPU readings
                log.exception("reading family %s failed", family.name)
                continue
            if reading is not None:
                extra[family.name] = reading
        with self._gpu_lock:
            self._gpu_latest = (started, readings, self.current_interval_s, extra)
            self._pending_family.update(extra)
            self.gpu_reads += 1
        return readings

    def read_slow(self) -> None:
        """Readings that block (see NvmlReader.read_slow); on their own thread."""
        self.nvml.read_slow()
        extra: dict[str, object] = {}
        for family in self.slow_families:
            try:
                extra.update(family())
            except Exception:  # one broken family must not stop the other readings
                log.exception("reading family %s failed", getattr(family, "__qualname__", family))
        if extra:
            with self._gpu_lock:
                self._pending_slow.update(extra)

    def _take_pending(self) -> dict[str, object]:
        """What the slow thread and the GPU passes since the last tick read, once."""
        with self._gpu_lock:
            taken = {**self._pending_family, **self._pending_slow}
            self._pending_family, self._pending_slow = {}, {}
        return taken

    def _freshest_gpus(self, now: float
                       ) -> tuple[tuple[GpuReading, ...], float | None, dict[str, object]]:
        with self._gpu_lock:
            latest = self._gpu_latest
        if latest is None:
            return (), None, {}
        read_at, readings, interval_s, extra = latest
        age = max(0.0, now - read_at)
        if not readings:
            return (), None, {}
        # Judged by the interval they were read at: the first tick after an idle spell
        # still shows the idle-rate reading, not a gap.
        fresh = age <= self.stale_after_s(interval_s)
        return (readings, age, extra) if fresh else (_stale(readings), age, {})

    def tick(self) -> Sample:
        """Record one sample (public so tests can drive it).

        With the threads running, the GPU readings are the GPU reader's newest; driven by
        hand (no threads), the tick reads the GPUs itself.
        """
        started, started_monotonic = time.time(), time.monotonic()
        if self._gpu_thread is None:
            self.read_slow()
            gpus: tuple[GpuReading, ...] = self.read_gpus()
            age: float | None = 0.0 if gpus else None
            extra = self._gpu_latest[3] if self._gpu_latest and gpus else {}
        else:
            gpus, age, extra = self._freshest_gpus(started_monotonic)
        host = self.host.read()
        self.ticks += 1
        return self.history.append(started, gpus, host, age,
                                   extra={**extra, **self._take_pending()},
                                   monotonic_s=started_monotonic)

    def _repeat(self, step: Callable[[], object], late_counter: str | None,
                interval_s: Callable[[], float], wake: threading.Event) -> None:
        """Run ``step`` once per interval until stopped, counting skipped intervals."""
        deadline = time.monotonic()
        while not self._stop.is_set():
            try:
                step()
            except Exception:  # a bug in one reading must not end the dashboards
                log.exception("%s failed", getattr(step, "__name__", "sampler step"))
            deadline, missed = _sleep_until_next(deadline, interval_s(), wake)
            if wake.is_set():  # woken (a viewer arrived, or stop): run now, on a new schedule
                wake.clear()
                deadline, missed = time.monotonic(), 0
            if late_counter:
                setattr(self, late_counter, getattr(self, late_counter) + missed)

    def _thread_for(self, name: str, step: Callable[[], object], late_counter: str | None,
                    interval_s: Callable[[], float]) -> threading.Thread:
        wake = threading.Event()
        self._wakes.append(wake)
        return threading.Thread(target=self._repeat, args=(step, late_counter, interval_s, wake),
                                name=name, daemon=True)

    def start(self) -> None:
        """Read the GPUs once, then start the reader threads. It may run on a thread of its
        own (NVML's first init and read can take minutes) while ``stop`` is called: the
        threads are then never started."""
        with self._lifecycle:
            if self._thread is not None:
                return
            self._stop.clear()
        self.nvml.ensure_initialized()
        self.read_gpus()  # the first sample already has GPU readings
        with self._lifecycle:
            if self._stop.is_set() or self._thread is not None:
                return  # stopped while NVML was starting
            self._wakes.clear()
            current = lambda: self.current_interval_s  # noqa: E731
            threads = (
                self._thread_for("nvdashboard-slow-reader", self.read_slow, None,
                                 lambda: max(self.slow_interval_s, self.current_interval_s)),
                self._thread_for("nvdashboard-gpu-reader", self.read_gpus, "late_gpu_reads",
                                 current),
                self._thread_for("nvdashboard-sampler", self.tick, "late_ticks", current),
            )
            for thread in threads:
                thread.start()
            self._slow_thread, self._gpu_thread, self._thread = threads

    def stop(self, timeout_s: float = 5.0) -> None:
        with self._lifecycle:
            self._stop.set()
            for wake in self._wakes:
                wake.set()
            threads = (self._thread, self._gpu_thread, self._slow_thread)
            self._thread = self._gpu_thread = self._slow_thread = None
        for thread in threads:
            if thread is not None:
                thread.join(timeout_s)


def rows_total(sample: Sample, rows: Sequence[int],
               read: Callable[[GpuReading], float | None]) -> float | None:
    """``rates.total`` of one reading of the device ``rows`` in ``sample`` (a row the sample
    lacks is an unknown part)."""
    by_row = {reading.index: reading for reading in sample.gpus}
    return total(read(by_row[row]) if row in by_row else None for row in rows)
