"""Idle holders, judged honestly: does a kernel (with its child processes) that holds GPU
memory do any GPU work, and since when has it not?

Pure functions over plain values (issue 28, item 1). The stateful part, which feeds one
process pass at a time from the history and keeps a ``HolderTrack`` per holder, is
``apps/usage.py``; this module only says what one pass shows and what a track means.

**The signals, best first** (issue 28: "per-process SM samples where the driver gives
them; else the device's SM activity or utilization when the kernel is the only process on
that device; else 'cannot tell', and then nothing is said"):

1. ``per-process``: ``nvmlDeviceGetProcessUtilization``'s SM % of the holder's own
   processes (``metrics/identity.py`` keeps these only where the sample is certainly that
   process, so a host-PID sample in a container is never credited to a local one);
2. ``device``: the device's GPM SM activity, else NVML utilization, taken as the highest
   reading since the previous pass. It speaks for the holder when the holder's processes
   are the device's only entries; and when it shows no work at all, nobody on the device
   worked, so it speaks for every holder there;
3. otherwise the pass is ``unknown``: a device shared with a process that is working, and
   no per-process samples.

A pass is ``work`` when any of the holder's devices shows work by it, ``unknown`` when any
cannot tell, else ``no_work``. A judgment is ``busy`` when Jupyter says the kernel is
running (its execution state) or the newest pass showed work; ``cannot_tell`` when Jupyter
does not say the kernel is idle, or no pass has told anything for ``EVIDENCE_GAP_S`` (3
passes where they come more slowly);
else ``idle``, counted from the later of the last GPU work (or the first pass after a
stretch that could not be told) and the kernel's last cell run.

The server never applies the user's thresholds here (memory, minutes): it reports the state
and how long; the JupyterLab notice and the admin's cull decide (docs/idle-holders.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

# The user-facing defaults of the notice, from issue 28 ("Defaults: at least 1 GiB held, no
# work for 30 minutes"); the JupyterLab settings and /glance.json's unused_devices use them.
DEFAULT_MIN_HELD_BYTES = 2**30
DEFAULT_IDLE_S = 30 * 60.0

# What counts as GPU work: any SM time at all. NVML reports per-process SM and device
# utilization in whole percent, so 1% is the smallest reading that says a kernel ran. Our
# choice, low on purpose: calling a working kernel idle is the costly mistake (issue 28
# cites Colab's "overzealous and inaccurate" warning, googlecolab/colabtools#6082), while
# calling an idle one busy only delays a notice.
WORK_PCT = 1.0

# How long passes may tell nothing before the judgment says "cannot tell", and the longest
# stretch of silence an idle episode may span. Process passes come once a second, once
# every idle interval (2 s by default, 60 s at most) with nobody watching; a driver without
# a new utilization sample answers NotFound for a pass now and then. Our choice: 3 passes
# at the slowest default rate (2 s idle interval) plus slack, so one missed sample does not
# restart an episode, while a minute of silence is never counted as "no work". A server
# set to pass more slowly uses ``evidence_gap_s`` (3 of its passes; ``apps/usage.py``).
EVIDENCE_GAP_S = 10.0


def evidence_gap_s(pass_every_s: float) -> float:
    """The gap for process passes every ``pass_every_s``: ``EVIDENCE_GAP_S``, or 3 passes
    and a second when they come more slowly."""
    return max(EVIDENCE_GAP_S, 3 * pass_every_s + 1.0)

# Jupyter's execution states in which the kernel is running or about to run (jupyter_server
# ``kernels/kernelmanager.py`` sets "starting", "restarting", "autorestarting" and the
# kernel's own iopub "busy"/"idle" status). Issue 28: "A busy kernel is never called idle".
# Jupyter says "starting" until the kernel first answers a request (JupyterLab asks for its
# kernel_info on connecting): a kernel no client ever connected to is never called idle.
BUSY_STATES = frozenset({"busy", "starting", "restarting", "autorestarting"})

WORK, NO_WORK, UNKNOWN = "work", "no_work", "unknown"
OWN_SAMPLES = "per-process SM samples"  # the signal of a holder's own samples
IDLE, BUSY, CANNOT_TELL = "idle", "busy", "cannot_tell"


@dataclass(frozen=True, slots=True)  # slots: the passes of the history's span are kept
class DeviceEvidence:
    """What one pass shows of one holder on one device row."""

    row: int
    label: str  # "GPU 1", "GPU 0 · MIG 1"
    held_bytes: float | None  # the holder's memory there (None: not known on its own)
    process_sm_pct: float | None  # highest per-process SM % of its processes; None: no sample
    only_holder: bool  # its processes are the device's only entries
    device_pct: float | None  # the device's highest activity since the previous pass
    device_signal: str = "utilization"  # "SM activity" (GPM) or "utilization"
    # When the reader first listed the holder's processes there (wall time; None: not
    # known): a holder's first pass comes only once its processes' owners are known, a
    # few slow passes later, and the time held before it counts too.
    since_s: float | None = None


@dataclass(frozen=True)
class PassEvidence:
    """One pass over all of a holder's devices: work, no work, or unknown, and why."""

    kind: str  # WORK, NO_WORK or UNKNOWN
    signal: str  # in words: "per-process SM samples", "GPU 1's SM activity: ...", "none"
    pct: float | None  # the highest activity reading it rests on
    why: str = ""  # for UNKNOWN: why it cannot tell


def device_evidence(device: DeviceEvidence) -> PassEvidence:
    """One device's verdict on one holder, best signal first."""
    if device.process_sm_pct is not None:
        kind = WORK if device.process_sm_pct >= WORK_PCT else NO_WORK
        return PassEvidence(kind, OWN_SAMPLES, device.process_sm_pct)
    pct = device.device_pct
    if pct is not None and pct < WORK_PCT:
        where = "the kernel is its only process" if device.only_holder else \
            "no process on it worked"
        return PassEvidence(NO_WORK, f"{device.label}'s {device.device_signal}: {where}", pct)
    if pct is not None and device.only_holder:
        return PassEvidence(WORK, f"{device.label}'s {device.device_signal}: the kernel is "
                                  "its only process", pct)
    if pct is None:
        why = (f"{device.label} gives neither per-process SM samples nor "
               "SM activity or utilization")
    else:
        why = (f"{device.label} is shared with another process that is working "
               f"({device.device_signal} {pct:.0f}%), and the driver gives no per-process "
               "SM samples")
    return PassEvidence(UNKNOWN, "none", None, why)


def pass_evidence(devices: Sequence[DeviceEvidence]) -> PassEvidence:
    """A holder's pass: work if any device shows its work, unknown if any cannot tell."""
    verdicts = [device_evidence(device) for device in devices]
    if not verdicts:
        return PassEvidence(UNKNOWN, "none", None, "it holds no GPU now")
    for kind in (WORK, UNKNOWN):
        found = [v for v in verdicts if v.kind == kind]
        if found:
            best = max(found, key=lambda v: -1.0 if v.pct is None else v.pct)
            return replace(best, why="; ".join(dict.fromkeys(v.why for v in found if v.why)))
    signals = "; ".join(dict.fromkeys(v.signal for v in verdicts))
    return PassEvidence(NO_WORK, signals, max(v.pct for v in verdicts if v.pct is not None))


@dataclass(frozen=True)
class HolderTrack:
    """What the passes so far showed of one holder (a kernel with its children, or one
    user's processes outside any kernel). Replaced whole by ``advance``."""

    first_s: float  # wall time of its first pass
    last_pass_s: float
    last: PassEvidence
    last_evidence_s: float | None = None  # the newest pass that told work or no work
    last_work_s: float | None = None
    quiet_since_s: float | None = None  # start of the current run of no-work passes
    quiet_passes: int = 0  # no-work passes in that run
    quiet_max_pct: float | None = None  # the highest activity reading in that run
    held_bytes: float = 0.0  # memory known held now (devices where it is known)
    held_known: bool = True  # False when some device's share is not known on its own
    gpus: tuple[str, ...] = ()
    # Since the server started (issue 28 item 6; Prometheus counters, item 5).
    byte_seconds: float = 0.0  # memory held x time
    held_s: float = 0.0
    working_s: float = 0.0  # time in passes that showed work
    known_s: float = 0.0  # time in passes that told work or no work
    no_work_s: float = 0.0  # time in passes that told no work

    @property
    def working_share(self) -> float | None:
        """The share of the time held that the GPU was working, where it could be told."""
        return self.working_s / self.known_s if self.known_s > 0 else None


# A pass this long after the previous one counts for at most this much held time: the
# sampler pauses for no longer than its idle interval (60 s at most, config.py), and a
# longer gap (a suspended machine, a stopped reader) is not time anyone saw held.
MAX_PASS_GAP_S = 60.0


def advance(track: HolderTrack | None, now_s: float, devices: Sequence[DeviceEvidence],
            previous_pass_s: float | None = None, gap_s: float = EVIDENCE_GAP_S
            ) -> HolderTrack:
    """The track after one more pass at ``now_s`` (wall time) over the holder's devices.
    ``previous_pass_s``: the reader's pass before this one; a holder absent from it (its
    memory freed, or its owner not known then) is counted held from it, not across the
    passes it missed."""
    evidence = pass_evidence(devices)
    known = [d.held_bytes for d in devices if d.held_bytes is not None]
    held = math.fsum(known)
    gpus = tuple(dict.fromkeys(d.label for d in devices))
    first = track is None
    if track is None:
        track = HolderTrack(now_s, now_s, evidence)
        listed = [d.since_s for d in devices if d.since_s is not None]
        dt = min(max(0.0, now_s - min(listed)), MAX_PASS_GAP_S) if listed else 0.0
    else:
        since = track.last_pass_s if previous_pass_s is None else \
            max(track.last_pass_s, previous_pass_s)
        dt = min(max(0.0, now_s - since), MAX_PASS_GAP_S)
    changes: dict[str, Any] = {
        "last_pass_s": now_s, "last": evidence, "held_bytes": held,
        "held_known": len(known) == len(devices), "gpus": gpus,
        "byte_seconds": track.byte_seconds + held * dt,
        "held_s": track.held_s + (dt if devices else 0.0)}
    if track.first_s == now_s:
        dt = 0.0  # before its first pass, whether it worked was not seen
    if (not first and devices and track.last.signal == OWN_SAMPLES
            and all(d.process_sm_pct is None for d in devices)
            and track.last_evidence_s is not None and now_s - track.last_evidence_s <= gap_s):
        # Its own samples spoke in a recent pass and none came in this one: a pass between
        # two of the driver's samples (NOT_FOUND, nothing newer than the pass before) tells
        # nothing of the holder's own work, and the device's figure is not its word in their
        # place (a loaded machine's passes slip into one second of the driver's). The track
        # keeps its word, and the time goes to what it last said, until the next sample.
        changes["last"] = track.last
        known = {WORK: "working_s", NO_WORK: "no_work_s"}.get(track.last.kind)
        if known is not None:
            changes.update(known_s=track.known_s + dt, **{known: getattr(track, known) + dt})
        return replace(track, **changes)
    if evidence.kind == WORK:
        changes.update(last_evidence_s=now_s, last_work_s=now_s, quiet_since_s=None,
                       quiet_passes=0, quiet_max_pct=None, known_s=track.known_s + dt,
                       working_s=track.working_s + dt)
    elif evidence.kind == NO_WORK:
        gap = track.last_evidence_s is None or now_s - track.last_evidence_s > gap_s
        if gap or track.quiet_since_s is None:
            # Nothing vouches for the time before: the episode starts with this pass.
            changes.update(quiet_since_s=now_s, quiet_passes=1, quiet_max_pct=evidence.pct)
        else:
            top = track.quiet_max_pct
            changes.update(quiet_passes=track.quiet_passes + 1,
                           quiet_max_pct=evidence.pct if top is None or
                           (evidence.pct is not None and evidence.pct > top) else top)
        changes.update(last_evidence_s=now_s, known_s=track.known_s + (0.0 if gap else dt),
                       no_work_s=track.no_work_s + (0.0 if gap else dt))
    return replace(track, **changes)


@dataclass(frozen=True)
class IdleJudgment:
    """The contract's ``idle`` object (docs: issue 28 contract), less its sentence, which
    the page writes in its own units (``apps/usage.py``)."""

    state: str  # IDLE, BUSY or CANNOT_TELL
    signal: str
    held_bytes: float
    gpus: tuple[str, ...]
    idle_s: float | None  # IDLE only
    episode: str
    figures: dict[str, Any] = field(default_factory=dict)
    reason: str = ""  # BUSY / CANNOT_TELL: why, in words (a clause)


def judge(key: str, track: HolderTrack, now_s: float, execution_state: str | None,
          last_cell_s: float | None, gap_s: float = EVIDENCE_GAP_S) -> IdleJudgment:
    """The judgment of one holder now. ``execution_state``: Jupyter's for the kernel (None:
    not a kernel Jupyter told about); ``last_cell_s``: when the kernel last ran a cell (wall
    time; ``Session.last_cell_s``): "no cell run" counts from it, not from any message."""
    figures: dict[str, Any] = {
        "held_bytes": track.held_bytes, "held_known": track.held_known,
        "last_pct": track.last.pct, "quiet_passes": track.quiet_passes,
        "quiet_max_pct": track.quiet_max_pct, "work_pct": WORK_PCT,
        "last_work_age_s": None if track.last_work_s is None else now_s - track.last_work_s,
        "observed_s": now_s - track.first_s, "execution_state": execution_state}
    common = {"held_bytes": track.held_bytes, "gpus": track.gpus, "figures": figures}
    if execution_state in BUSY_STATES:
        return IdleJudgment(BUSY, "Jupyter's execution state", idle_s=None,
                            episode=f"{key}:busy", reason=f"the kernel is {execution_state} "
                            "in Jupyter" + (" (running a cell)" if execution_state == "busy"
                                            else ""), **common)
    last = track.last
    if last.kind == WORK:
        return IdleJudgment(BUSY, last.signal, idle_s=None, episode=f"{key}:busy",
                            reason=f"it is doing GPU work ({last.pct:.0f}% by "
                            f"{last.signal})", **common)
    if execution_state != "idle":
        return IdleJudgment(CANNOT_TELL, "none", idle_s=None, episode=f"{key}:unknown",
                            reason="Jupyter does not say this kernel is idle "
                            f"(execution state: {execution_state or 'not known'})", **common)
    stale = track.last_evidence_s is None or now_s - track.last_evidence_s > gap_s
    if stale or track.quiet_since_s is None:
        why = last.why or f"no reading told for {gap_s:.0f} s"
        return IdleJudgment(CANNOT_TELL, "none", idle_s=None, episode=f"{key}:unknown",
                            reason=f"whether it works cannot be told: {why}", **common)
    since = track.quiet_since_s
    if last_cell_s is not None and last_cell_s > since:
        since = min(last_cell_s, now_s)
    return IdleJudgment(IDLE, last.signal, idle_s=max(0.0, now_s - since),
                        episode=f"{key}:{int(since)}", **common)


@dataclass(frozen=True)
class DeviceTrack:
    """One device row over the passes so far (issue 28 item 4: held but unused devices;
    item 5: the per-GPU counters)."""

    first_s: float
    last_pass_s: float
    last_work_s: float | None = None  # the newest pass whose activity showed work
    last_held_s: float | None = None  # the newest pass that listed a process on it
    activity_known: bool = False  # some pass had an activity reading
    processes: int = 0  # entries listed in the newest pass
    held_bytes: float = 0.0  # their known memory together
    byte_seconds: float = 0.0  # memory held x time, since the server started
    held_s: float = 0.0  # time with at least one process listed
    idle_held_s: float = 0.0  # of that, time whose activity showed no work


def advance_device(track: DeviceTrack | None, now_s: float, activity_pct: float | None,
                   processes: int, held_bytes: float) -> DeviceTrack:
    """The device's track after one more pass: ``activity_pct`` is its highest activity
    since the previous pass (None: no reading), ``processes`` the entries listed."""
    if track is None:
        track = DeviceTrack(now_s, now_s)
        dt = 0.0
    else:
        dt = min(max(0.0, now_s - track.last_pass_s), MAX_PASS_GAP_S)
    worked = activity_pct is not None and activity_pct >= WORK_PCT
    quiet = activity_pct is not None and not worked
    return replace(
        track, last_pass_s=now_s, processes=processes, held_bytes=held_bytes,
        last_work_s=now_s if worked else track.last_work_s,
        last_held_s=now_s if processes else track.last_held_s,
        activity_known=track.activity_known or activity_pct is not None,
        byte_seconds=track.byte_seconds + held_bytes * dt,
        held_s=track.held_s + (dt if processes else 0.0),
        idle_held_s=track.idle_held_s + (dt if processes and quiet else 0.0))


def unused_for(track: DeviceTrack, now_s: float) -> tuple[float, str, bool]:
    """How long the device has been unused; what it did not do, in words ("no GPU work",
    by its activity readings where it has them, held or not; else "no process on it");
    and whether that is since the server's first pass (before it, nothing was seen)."""
    if track.activity_known:
        last, grounds = track.last_work_s, "no GPU work"
    else:
        last, grounds = track.last_held_s, "no process on it"
    since = last if last is not None else track.first_s
    return max(0.0, now_s - since), grounds, last is None
