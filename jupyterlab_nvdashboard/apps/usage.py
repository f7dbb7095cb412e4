"""Who holds GPU memory, whether they use it, and for how long: the state behind the
``idle`` judgment of each kernel in ``/glance.json``, its ``unused_devices``, the usage
series on ``/metrics`` and the per-notebook usage on ``/GPU-Processes`` (issue 28).

``GpuUsage`` listens to the history (``History.add_listener``): on every sample it keeps
each device's highest activity (GPM SM activity, else utilization), and on every process
pass it turns the readings, their owners (``metrics/attribution.py``: a kernel's children
count as the kernel) and their identity (``metrics/identity.py``: which local process an
entry is, in a container too) into one ``DeviceEvidence`` per holder and device, and
advances the pure tracks of ``diagnosis/idle.py``. A holder is one user's kernel, or that
user's processes outside any kernel. It runs on the sampler's thread, a few dictionary
updates per pass; readers take a copy under the lock.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..diagnosis.idle import (
    CANNOT_TELL,
    DEFAULT_IDLE_S,
    IDLE,
    WORK_PCT,
    DeviceEvidence,
    DeviceTrack,
    HolderTrack,
    IdleJudgment,
    PassEvidence,
    advance,
    advance_device,
    evidence_gap_s,
    judge,
    unused_for,
)
from ..export.usage import HolderUsage
from ..metrics import (
    OWNER_FAMILY,
    PROCESS_FAMILY,
    GpuFacts,
    ProcessOwner,
    ProcessReading,
    Sample,
)
from ..metrics.families import GPM_FAMILY, GpmReading
from ..metrics.identity import SHARED
from ..metrics.processes import PROCESS_EVERY_S
from ..store.buckets import device_key
from ..store.holders import DeviceActivity, HolderReading, PassRecord
from .components import duration_text, format_memory

if TYPE_CHECKING:
    from ..jupyter_sessions import JupyterSessions
    from ..metrics import Metrics

# (user, kernel id): a kernel and its children, or ("alice", "") for alice's processes
# outside any kernel.
HolderKey = tuple[str, str]
# Holders kept after they stopped holding memory (their usage since the server started):
# the oldest are forgotten beyond this. Our choice: a busy shared server sees a few dozen
# kernels a day; this keeps memory bounded whatever it sees.
MAX_HOLDERS = 256
# The most samples between two process passes whose activity a pass reads: two minutes at
# the fastest tick (0.1 s). Passes come every second, or every idle interval (60 s at
# most), so only a reader that stopped leaves any out.
MAX_SAMPLES_PER_PASS = 1200
# How many passes a pass waits for its processes' owners (HolderPasses): the owners come a
# slow pass after a process first shows, the slow thread at the process passes' pace.
MAX_HELD_PASSES = 3
# A holder that stopped holding memory stays on /metrics this long: Prometheus scrapes
# every 15 s to 1 min by default, so its last increment is seen.
ENDED_KEEP_S = 300.0


def holder_of(owner: ProcessOwner | None) -> HolderKey | None:
    """The holder a local process counts for; None when it cannot be told."""
    if owner is None or owner.status != "ok":
        return None
    return (owner.user or "", owner.kernel_id or "")


def minutes_text(seconds: float) -> str:
    """``42 min`` (whole minutes from a minute on), ``35 s`` below."""
    return duration_text(seconds) if seconds < 60 else f"{int(seconds // 60)} min"


@dataclass
class _Series:
    """One activity reading's samples since the previous process pass: the highest, and
    their sum and how many of them were at or above ``WORK_PCT`` (the history store keeps a
    holder's device activity as a mean and a working share, ``store/holders.py``)."""

    top: float | None = None
    total: float = 0.0
    count: int = 0
    working: int = 0

    def add(self, value: float | None) -> None:
        if value is None:
            return
        if self.top is None or value > self.top:
            self.top = value
        self.total += value
        self.count += 1
        self.working += value >= WORK_PCT


@dataclass
class _Activity:
    """A device's readings since the previous process pass."""

    gpm: _Series = field(default_factory=_Series)
    utilization: _Series = field(default_factory=_Series)

    def add(self, gpm: float | None, utilization: float | None) -> None:
        self.gpm.add(gpm)
        self.utilization.add(utilization)

    def _best(self) -> tuple[_Series, str]:
        if self.gpm.top is not None:
            return self.gpm, "SM activity"
        return self.utilization, "utilization"

    def best(self) -> tuple[float | None, str]:
        """The highest reading of the best signal (GPM SM activity, else utilization)."""
        series, signal = self._best()
        return series.top, signal

    def spread(self) -> tuple[float | None, float | None]:
        """The best signal's mean and the share of its samples at or above ``WORK_PCT``."""
        series, _ = self._best()
        if not series.count:
            return None, None
        return series.total / series.count, series.working / series.count


def _activity_since(samples: Sequence[Sample], rows: Sequence[int]) -> dict[int, _Activity]:
    """Each row's highest readings in ``samples``."""
    out = {row: _Activity() for row in rows}
    for sample in samples:
        gpm = sample.extra.get(GPM_FAMILY)
        gpm = gpm if isinstance(gpm, dict) else {}
        for reading in sample.gpus:
            activity = out.get(reading.index)
            if activity is not None:
                found = gpm.get(reading.index)
                activity.add(found.sm_activity_pct if isinstance(found, GpmReading) else None,
                             reading.utilization_pct)
    return out


@dataclass(frozen=True)
class DevicePass:
    """One device row in one process pass: its highest activity since the previous pass
    (GPM SM activity, else utilization), and the entries the driver listed on it."""

    pct: float | None
    signal: str  # "SM activity" or "utilization"
    processes: int
    held_bytes: float  # the listed entries' known memory together
    # The same signal's mean since the previous pass, and the share of its samples at or
    # above WORK_PCT (None: no sample had it): what the history store keeps.
    mean_pct: float | None = None
    working_share: float | None = None


@dataclass(frozen=True, slots=True)
class HolderPass:
    """What one process pass shows: each holder's evidence on each device row it holds,
    and each device row."""

    time_s: float
    holders: dict[HolderKey, list[DeviceEvidence]]
    devices: dict[int, DevicePass]
    # Entries of local processes whose owners were not told yet (they come a slow pass
    # after a process first shows), or no owners told at all yet: whose they are, this
    # pass cannot say.
    unattributed: int = 0
    owners_known: bool = True


def _pass_time(seen: HolderPass) -> float:
    return seen.time_s


class HolderPasses:
    """Reads samples in the history's order and, at each process pass, says what it shows
    of every holder (``HolderPass``): the one reading of passes, which ``GpuUsage`` advances
    its tracks from and keeps (a cell's report, ``apps/cells.py``, reads them back).

    A process's owner is told a slow pass after it first shows (``metrics/attribution.py``
    reads the newest pass's PIDs), so a pass that lists a process whose owner is not told
    yet is held back until owners that name it come, and read with them: a kernel's first
    passes after a restart, or a new worker's, are then its own. Without that they were
    nobody's, and a 4-second cell that a loaded machine's slow thread left that long
    unattributed read "no GPU work". Passes go on in order: one behind a held pass waits
    with it, and a pass still unattributed ``MAX_HELD_PASSES`` passes later goes as it is.
    """

    def __init__(self, facts: Callable[[], Sequence[GpuFacts]]) -> None:
        self._facts = facts
        self._owners: Mapping[int, ProcessOwner] = {}
        # The samples since the previous pass: a device's activity is their highest, read
        # at the pass for the rows it concerns. Bounded: passes this far apart (a reader
        # that stopped) leave the oldest out.
        self._since_pass: deque[Sample] = deque(maxlen=MAX_SAMPLES_PER_PASS)
        # Whether a sample has told the owners yet: before, a pass's processes are nobody's.
        self.owners_known = False
        # The passes held back for their owners, oldest first: each one's time, readings
        # and the samples since the pass before it.
        self._held: deque[tuple[float, tuple[ProcessReading, ...], deque[Sample]]] = deque()

    def feed(self, sample: Sample) -> list[HolderPass]:
        """Take one sample; the passes read with it, oldest first (none while the oldest
        pass not read yet waits for its owners)."""
        self._since_pass.append(sample)
        owners = sample.extra.get(OWNER_FAMILY)
        if isinstance(owners, dict):
            self._owners, self.owners_known = owners, True
        readings = sample.extra.get(PROCESS_FAMILY)
        if isinstance(readings, tuple):
            since, self._since_pass = self._since_pass, deque(maxlen=MAX_SAMPLES_PER_PASS)
            self._held.append((sample.time_s, readings, since))
        out = []
        while self._held and (len(self._held) > MAX_HELD_PASSES
                              or not self._unattributed(self._held[0][1])):
            out.append(self._read(*self._held.popleft()))
        return out

    def _unattributed(self, readings: tuple[ProcessReading, ...]) -> int:
        """How many local processes of ``readings`` the owners told so far do not name."""
        return sum(1 for r in readings
                   if r.local_pid is not None and r.local_pid not in self._owners)

    def _read(self, time_s: float, readings: tuple[ProcessReading, ...],
              since: Sequence[Sample]) -> HolderPass:
        """What a pass at ``time_s`` shows, by the owners told so far; ``since``: the
        samples since the pass before it, its own last."""
        by_row: dict[int, list[ProcessReading]] = {}
        for reading in readings:
            by_row.setdefault(reading.device, []).append(reading)
        facts = self._facts()
        activity = _activity_since(since, [fact.index for fact in facts])
        holders: dict[HolderKey, list[DeviceEvidence]] = {}
        devices: dict[int, DevicePass] = {}
        for fact in facts:
            row = fact.index
            pct, signal = activity[row].best()
            entries = by_row.get(row, [])
            known = [r.used_memory_bytes for r in entries if r.used_memory_bytes is not None]
            devices[row] = DevicePass(pct, signal, len(entries), sum(known),
                                      *activity[row].spread())
            for key, device in self._holders_on(fact.label, row, entries, pct, signal):
                holders.setdefault(key, []).append(device)
        return HolderPass(time_s, holders, devices, self._unattributed(readings),
                          self.owners_known)

    def _holders_on(self, label: str, row: int, entries: Sequence[ProcessReading],
                    pct: float | None, signal: str) -> list[tuple[HolderKey, DeviceEvidence]]:
        """Each holder's evidence on one device row. An entry belongs to a holder when its
        local process (or every local process of a ``shared`` group it may be) does."""
        owners = self._owners
        memory: dict[HolderKey, float | None] = {}
        sm: dict[HolderKey, float | None] = {}
        since: dict[HolderKey, float] = {}
        unsampled: set[HolderKey] = set()  # holders with a process the samples left out
        entry_holders: list[HolderKey | None] = []
        for entry in entries:
            if entry.identity == SHARED and entry.group is not None:
                keys = {holder_of(owners.get(pid)) for pid in entry.group.holders}
                sole = next(iter(keys)) if len(keys) == 1 and \
                    entry.group.entries == len(entry.group.holders) else None
                for key in keys - {None}:
                    if key != sole:  # among others': its share is not known on its own
                        memory[key] = None
                        sm.setdefault(key, None)
            else:
                pid = entry.local_pid
                sole = holder_of(owners.get(pid)) if pid is not None else None
            entry_holders.append(sole)
            if sole is None:
                continue
            held = memory.get(sole, 0.0)
            memory[sole] = None if held is None or entry.used_memory_bytes is None \
                else held + entry.used_memory_bytes
            if entry.seen_since_s is not None:
                since[sole] = min(since.get(sole, entry.seen_since_s), entry.seen_since_s)
            top = sm.get(sole)
            if entry.sm_pct is None:
                unsampled.add(sole)
            elif top is None or entry.sm_pct > top:
                top = entry.sm_pct
            sm[sole] = top

        def own_samples(key: HolderKey) -> float | None:
            """Its processes' highest SM %: work if any worked; "no work" only when every
            one of them was sampled (else the device's activity decides)."""
            top = sm.get(key)
            return top if top is not None and (top >= WORK_PCT or key not in unsampled) \
                else None

        return [(key, DeviceEvidence(
            row, label, memory[key], own_samples(key),
            all(holder == key for holder in entry_holders), pct, signal, since.get(key)))
            for key in memory]


def pass_record(seen: HolderPass, facts: Sequence[GpuFacts]) -> PassRecord | None:
    """What the history store keeps of one pass (``store/holders.py``): each holder's
    evidence on each device it held memory on, keyed by the device's UUID, with the other
    holders there and the device's activity since the previous pass; None for a pass whose
    processes' owners were not all known (a cell's verdict skips it too, ``apps/cells.py``)."""
    if not seen.owners_known or seen.unattributed:
        return None
    keys = {fact.index: device_key(fact.index, fact.uuid) for fact in facts}
    on_row: dict[int, list[HolderKey]] = {}
    for key, devices in seen.holders.items():
        for device in devices:
            on_row.setdefault(device.row, []).append(key)
    readings = tuple(
        HolderReading(user, kernel, keys[device.row], device.held_bytes,
                      device.process_sm_pct, device.only_holder,
                      tuple(other for other in on_row[device.row] if other != (user, kernel)))
        for (user, kernel), devices in seen.holders.items() for device in devices
        if device.row in keys and device.held_bytes != 0.0)
    activity = tuple(DeviceActivity(keys[row], device.mean_pct, device.working_share,
                                    device.signal)
                     for row, device in seen.devices.items() if row in keys and row in on_row)
    return PassRecord(seen.time_s, readings, activity)


class GpuUsage:
    """The tracks of every holder and device; fed by the history, read by the pages."""

    def __init__(self, metrics: Metrics, jupyter: JupyterSessions | None = None,
                 max_holders: int = MAX_HOLDERS, unused_after_s: float = DEFAULT_IDLE_S
                 ) -> None:
        self.metrics, self.jupyter, self.max_holders = metrics, jupyter, max_holders
        # A device unused this long is "held but unused" on the overview and in
        # /glance.json (issue 28: "no work for 30 minutes", the notice's default too).
        self.unused_after_s = unused_after_s
        self._lock = threading.Lock()
        self._passes = HolderPasses(lambda: self.metrics.facts)
        # The passes of the history's span, newest last: a cell's report reads a span of
        # them (a pass comes with a sample, so the history's capacity bounds them too).
        self.recent: deque[HolderPass] = deque(maxlen=max(1, metrics.history.capacity))
        self.holders: dict[HolderKey, HolderTrack] = {}
        self.holder_rows: dict[tuple[HolderKey, int], HolderTrack] = {}
        self.devices: dict[int, DeviceTrack] = {}
        self.current: frozenset[HolderKey] = frozenset()  # holders in the newest pass
        # Kernel id -> the notebook it last served, kept after the session ends, so that a
        # notebook's usage since the server started includes its ended kernels.
        self.paths: dict[str, str] = {}
        self.passes = 0
        self._last_pass_s: float | None = None
        # Told each pass as the history store keeps it (``pass_record``): the store's
        # ``hear_pass``, a queue put.
        self.pass_listeners: list[Callable[[PassRecord], None]] = []
        # With nobody watching, the sampler (and so the process passes) slows to its idle
        # interval: silence that long is the reader's pace, not a gap in what it saw.
        sampler = metrics.sampler
        self.gap_s = evidence_gap_s(max(PROCESS_EVERY_S, sampler.interval_s,
                                        sampler.idle_interval_s))
        history = metrics.history
        for sample in history.window(metrics.history_s + 1):  # what came before this object
            self.on_sample(sample)
        history.add_listener(self.on_sample)

    # ----- fed by the history, on the sampler's thread -----------------------------------
    def on_sample(self, sample: Sample) -> None:
        with self._lock:
            passes = self._passes.feed(sample)
            for seen in passes:
                self._pass(seen)
        for seen in passes if self.pass_listeners else ():
            record = pass_record(seen, self.metrics.facts)
            if record is not None:
                for listener in self.pass_listeners:
                    listener(record)

    def _pass(self, seen: HolderPass) -> None:
        self.recent.append(replace(seen, devices={}))  # what a cell reads: the holders
        oldest = self.metrics.history.oldest()
        while oldest is not None and self.recent[0].time_s < oldest.time_s:
            self.recent.popleft()  # older than the history: the store keeps no process
        now_s = seen.time_s
        for fact in self.metrics.facts:
            device = seen.devices.get(fact.index)
            if device is not None and not fact.mig_enabled:
                # its MIG devices list the processes and are judged
                self.devices[fact.index] = advance_device(
                    self.devices.get(fact.index), now_s, device.pct, device.processes,
                    device.held_bytes)
        evidence = seen.holders
        sessions = self.jupyter.sessions if self.jupyter is not None else {}
        for key, devices in evidence.items():
            session = sessions.get(key[1]) if key[1] else None
            if session is not None:
                self.paths[key[1]] = session.path
            self.holders[key] = advance(self.holders.get(key), now_s, devices,
                                        self._last_pass_s, self.gap_s)
            for device in devices:
                self.holder_rows[(key, device.row)] = advance(
                    self.holder_rows.get((key, device.row)), now_s, [device],
                    self._last_pass_s, self.gap_s)
        self.current = frozenset(evidence)
        self._last_pass_s = now_s
        self.passes += 1
        self._forget_oldest()

    def _forget_oldest(self) -> None:
        excess = len(self.holders) - self.max_holders
        if excess <= 0:
            return
        gone = sorted((k for k in self.holders if k not in self.current),
                      key=lambda k: self.holders[k].last_pass_s)[:excess]
        for key in gone:
            del self.holders[key]
            self.paths.pop(key[1], None)
        for key, row in [k for k in self.holder_rows if k[0] in gone]:
            del self.holder_rows[(key, row)]

    # ----- read by the pages and /metrics ------------------------------------------------
    def snapshot(self) -> tuple[dict[HolderKey, HolderTrack],
                                dict[tuple[HolderKey, int], HolderTrack],
                                dict[int, DeviceTrack], frozenset[HolderKey]]:
        with self._lock:
            return dict(self.holders), dict(self.holder_rows), dict(self.devices), self.current

    def passes_between(self, start_s: float, end_s: float) -> list[HolderPass]:
        """The process passes from ``start_s`` to ``end_s`` (wall time), oldest first;
        found by bisection, so a cell's span costs what it holds."""
        with self._lock:
            passes = list(self.recent)
        low = bisect.bisect_left(passes, start_s, key=_pass_time)
        return passes[low:bisect.bisect_right(passes, end_s, lo=low, key=_pass_time)]

    def own_activity(self, user: str, kernel_id: str) -> PassEvidence | None:
        """What the newest pass told of ``user``'s kernel's own GPU work: its highest
        activity by its own signal (``idle.device_evidence``: its per-process samples, or
        its device's where it was the only process or nobody worked), or ``UNKNOWN``. The
        toolbar shows this, not a shared device's utilization, as the kernel's share."""
        with self._lock:
            track = self.holders.get((user, kernel_id))
        return None if track is None else track.last

    def judgment(self, user: str, kernel_id: str, now_s: float | None = None
                 ) -> IdleJudgment | None:
        """The idle judgment of ``user``'s kernel ``kernel_id`` now (None: never seen
        holding memory), with Jupyter's word on whether the kernel is running."""
        with self._lock:
            track = self.holders.get((user, kernel_id))
        if track is None:
            return None
        return self._judge((user, kernel_id), track, time.time() if now_s is None else now_s)

    def _judge(self, key: HolderKey, track: HolderTrack, now_s: float) -> IdleJudgment:
        """A kernel's judgment takes Jupyter's execution state (none known: cannot tell);
        processes outside any kernel are judged by their GPU work alone."""
        user, kernel_id = key
        # A stale copy of Jupyter's sessions says nothing: then "cannot tell", never idle.
        sessions = self.jupyter.current() if self.jupyter is not None else {}
        session = sessions.get(kernel_id) if kernel_id else None
        state = session.execution_state if session else None if kernel_id else "idle"
        return judge(kernel_id or f"{user}:", track, now_s, state,
                     session.last_cell_s if session else None, self.gap_s)

    def notebook_usage(self) -> dict[str, NotebookUsage]:
        """Each notebook's GPU usage since the server started (issue 28 item 6), over every
        kernel that served it: memory held x time, time held, and the share of the time
        whose GPU work could be told that its GPU was working."""
        with self._lock:
            holders, paths = dict(self.holders), dict(self.paths)
        out: dict[str, NotebookUsage] = {}
        for (_, kernel_id), track in holders.items():
            path = paths.get(kernel_id)
            if not kernel_id or path is None:
                continue
            before = out.get(path, NotebookUsage(path, 0, 0.0, 0.0, 0.0, 0.0))
            out[path] = NotebookUsage(path, before.kernels + 1,
                                      before.byte_seconds + track.byte_seconds,
                                      before.held_s + track.held_s,
                                      before.working_s + track.working_s,
                                      before.known_s + track.known_s)
        return out

    def holder_usage(self, now_s: float | None = None) -> list[HolderUsage]:
        """Each holder's usage of each device row, for ``/metrics``: the holders of the
        newest pass, and those that stopped holding in the last ``ENDED_KEEP_S`` (so that
        Prometheus scrapes their last increment)."""
        now_s = time.time() if now_s is None else now_s
        holders, rows, _, current = self.snapshot()
        out = []
        for (key, row), track in rows.items():
            holder = holders.get(key)
            if holder is None or (key not in current and
                                  now_s - track.last_pass_s > ENDED_KEEP_S):
                continue
            holding = key in current and track.last_pass_s == holder.last_pass_s
            idle_s = None
            if holding:
                judgment = self._judge(key, holder, now_s)
                idle_s = judgment.idle_s if judgment.state == IDLE else \
                    None if judgment.state == CANNOT_TELL else 0.0
            out.append(HolderUsage(key[0], key[1], row, track.held_bytes if holding else 0.0,
                                   idle_s, track.byte_seconds, track.held_s, track.no_work_s))
        return out

    def unused_devices(self, now_s: float | None = None) -> list[dict[str, Any]]:
        """The devices unused for at least ``unused_after_s``, as ``/glance.json`` lists
        them."""
        now_s = time.time() if now_s is None else now_s
        threshold_s = self.unused_after_s
        facts = {f.index: f for f in self.metrics.facts}
        out = []
        for row, track in sorted(self.snapshot()[2].items()):
            fact = facts.get(row)
            unused_s, grounds, since_start = unused_for(track, now_s)
            if fact is None or unused_s < threshold_s:
                continue
            held = (f"held by {track.processes} process{'es' if track.processes != 1 else ''}"
                    f" ({format_memory(track.held_bytes)})") if track.processes \
                else "no process holds it"
            out.append({"index": row, "label": fact.label, "uuid": fact.uuid,
                        "processes": track.processes,
                        "held_bytes": track.held_bytes, "unused_s": unused_s,
                        "why": f"{fact.label}: {held}; {grounds} for "
                               f"{minutes_text(unused_s)}"
                               + (" (since this server started)" if since_start else "")})
        return out


@dataclass(frozen=True)
class NotebookUsage:
    """One notebook's GPU usage since the server started."""

    path: str
    kernels: int  # kernels that served it and held GPU memory
    byte_seconds: float  # GPU memory held x seconds
    held_s: float
    working_s: float  # time whose passes showed GPU work
    known_s: float  # time whose passes told work or no work

    @property
    def working_share(self) -> float | None:
        return self.working_s / self.known_s if self.known_s > 0 else None

    def as_json(self) -> dict[str, Any]:
        return {**self.__dict__, "working_share": self.working_share}


def idle_json(judgment: IdleJudgment | None, path: str, kernel_id: str,
              held_bytes: float, gpus: Sequence[str], shared_bytes: float | None = None
              ) -> dict[str, Any]:
    """The contract's ``idle`` object of one kernel in ``/glance.json``. ``shared_bytes``:
    memory the kernel holds only together with other processes of its container (identity
    ``shared``), whose own share the driver's PIDs cannot tell."""
    name = os.path.basename(path) or path
    # The sentence names devices as nvidia-smi does ("GPU 1"); ``gpus`` are the page's labels.
    where = ", ".join(judgment.gpus if judgment is not None and judgment.gpus else gpus)
    memory = format_memory(held_bytes)
    if shared_bytes:
        memory = (f"{memory} and part of {format_memory(shared_bytes)} held with other "
                  "processes" if held_bytes else
                  f"part of {format_memory(shared_bytes)} held with other processes")
    holds = f"{name} holds {memory} on {where}"
    if judgment is None:
        return {"state": CANNOT_TELL, "signal": "none", "held_bytes": held_bytes,
                "gpus": list(gpus), "idle_s": None, "episode": f"{kernel_id}:unknown",
                "figures": {}, "text": f"{holds}; whether it works cannot be told yet: no "
                                       "process reading has been judged."}
    if judgment.state == IDLE:
        assert judgment.idle_s is not None
        text = f"{holds} and has done no GPU work for {minutes_text(judgment.idle_s)}."
    else:
        text = f"{holds}; {judgment.reason}."
    return {"state": judgment.state, "signal": judgment.signal, "held_bytes": held_bytes,
            "gpus": list(gpus), "idle_s": judgment.idle_s, "episode": judgment.episode,
            "figures": judgment.figures, "text": text}
