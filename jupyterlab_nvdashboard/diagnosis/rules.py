"""The rules: a window of samples of one GPU or MIG instance in, ordered findings out.

A pure function of its arguments: no NVML, no clock, no I/O, so tests feed it synthetic
histories and the server calls it on a snapshot of the history. Thresholds live in
``thresholds.py``, each with its source.

Signals, best first, and what each can tell:

- **GPM** (Hopper and later, per MIG GPU instance too): SM activity, tensor activity, DRAM
  bandwidth. Only GPM tells launch-bound from compute-bound from memory-bound. A finding from
  GPM needs ``MIN_SAMPLES`` GPM readings of its own: GPM is derived once a second, so the
  same reading rides in several samples and is counted once.
- **Per-process** SM utilization of a run's own PID (``nvmlDeviceGetProcessUtilization``):
  not someone else's work, but time-based like utilization.
- **Utilization**: a kernel was resident. It can say idle or starved (gaps), not why busy.

Clock-event reasons (sampled bits) say throttled; the PCIe/NVLink rates against the link's
own maximum say link-bound; a run's step timings say input-bound; the run's CPU time per
step (or, for a device window, the machine's CPU) says host-CPU-bound.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from functools import cached_property
from itertools import chain, compress, count, repeat
from operator import attrgetter, is_not, itemgetter
from typing import NamedTuple

from ..metrics import GpuFacts, GpuReading, Sample, parent_facts
from ..metrics.device_nodes import HOLDER_FAMILY, holding_rows
from ..metrics.families import (
    GPM_FAMILY,
    HEALTH_FAMILY,
    PROCESS_FAMILY,
    GpmReading,
    HealthReading,
    ProcessReading,
)
from ..metrics.gpm import gpm_unavailable_reason
from ..metrics.health import CLOCK_EVENT_REASONS
from ..metrics.identity import UNKNOWN, certain, runs_as
from . import thresholds as T
from .findings import NO_SIGNAL, Diagnosis, Figure, Finding, mean

GB = 1e9
MAX_READINGS = 900  # per share or rate: one every 2 s over 30 minutes
FAMILY_EVERY_S = 1.0  # GPM and the process lists are read once a second (metrics/)
NEEDS_PCIE_LINK = ("a PCIe link below its maximum generation or width needs the current link "
                   "generation and width (nvmlDeviceGetCurrPcieLinkGeneration/Width)")
NEEDS_HOST_CPU = ("host-CPU-bound needs the run's own CPU time per step, or the machine's CPU")


class Step(NamedTuple):
    """One timed step of a run, from its ``iteration`` event."""

    time_s: float  # unix time the step ended
    ms: float  # wall time of the step
    input_ms: float | None = None  # of which, waiting on the input pipeline
    cpu_ms: float | None = None  # CPU time the run's process used during the step


class PcieLink(NamedTuple):
    """The PCIe link's current state, where the reader has it."""

    generation: int | None
    width: int | None


def window(samples: Sequence[Sample], start_s: float, end_s: float) -> Sequence[Sample]:
    """The samples whose wall-clock stamp lies in [start_s, end_s] (a run's events carry the
    wall clock), in the history's order. A step of the wall clock unsorts the stamps, so
    each sample is looked at: a search by halves would cut the wrong ones."""
    return [sample for sample in samples if start_s <= sample.time_s <= end_s]


def process_presence(samples: Sequence[Sample], pid: int,
                     certain_only: bool = False) -> tuple[int, set[int]]:
    """(reading passes of the driver's process lists, device rows where local process
    ``pid`` held a context in any of them, as ``metrics/identity.py`` ties NVML's entries
    to this namespace's processes; ``certain_only``: only where that tie is certain)."""
    passes = list_passes(samples)
    wanted = (pid,)
    rows = {reading.device for readings in passes for reading in readings  # type: ignore[attr-defined]
            if isinstance(reading, ProcessReading) and runs_as(reading, wanted)
            and (not certain_only or certain(reading))}
    return len(passes), rows


def identity_hidden(samples: Sequence[Sample]) -> bool:
    """Whether any list pass has entries this server could not tie to its processes or rule
    out (``unknown``: outside the host's namespace, with no device node to scan)."""
    return any(isinstance(reading, ProcessReading) and reading.identity == UNKNOWN
               for readings in list_passes(samples) for reading in readings)  # type: ignore[attr-defined]


def node_presence(samples: Sequence[Sample], pid: int) -> set[int]:
    """Device rows whose node a process of ``pid``'s tree held open in any holder pass
    (``metrics/device_nodes.py``): ground truth for this server's own processes, in any
    PID namespace."""
    rows: set[int] = set()
    for holders in _passes(list(map(_EXTRA, samples)), HOLDER_FAMILY):
        if isinstance(holders, dict):
            rows |= holding_rows(holders, (pid,))
    return rows


def host_findings(steps: Sequence[Step]) -> list[Finding]:
    """What a run's own step timings say on their own: input-bound, host-CPU-bound."""
    return _step_findings(steps, [])


# What to try when a run did not use a GPU, unless the caller knows better (runs/verdict.py).
FRAMEWORK_SEES_NO_GPU = ("check that the framework sees a GPU (TensorFlow: "
                         "tf.config.list_physical_devices('GPU'); a CPU-only build never "
                         "does) and that the run asked for one")


def not_using_gpu(gpu: str, lists: int, advice: str | None = None) -> Finding:
    """A run whose process held no context on any GPU in ``lists`` samples of the process
    lists (``process_presence``); ``gpu``: the GPU it was pinned to or judged against;
    ``advice``: what to try, where the caller knows more than the framework check."""
    return Finding("not-using-gpu", f"not using {gpu}",
                   (Figure("GPU contexts its process held", 0.0, "", lists,
                           "process-list readings"),),
                   "process-lists", advice or FRAMEWORK_SEES_NO_GPU,
                   words=f"its process held no context on any GPU, over {lists} "
                         "process-list readings")


def _fact(facts: Sequence[GpuFacts], row: int) -> GpuFacts | None:
    for fact in facts:
        if fact.index == row:
            return fact
    return None


# A 30-minute window at 0.2 s holds 9,000 samples: the readings are pulled out with map()
# and getters, in C, and no tuple is made per sample (less work for the garbage collector).
# NamedTuple fields are read by position (itemgetter), which skips the attribute lookup; the
# readings they are read from are GpuReadings, or family readings checked by type first.
# A sample's ``extra`` is always a dict: ``dict.get`` is called directly (methodcaller looks
# the method up again for each sample, three times the cost).
_EXTRA = attrgetter("extra")
_CLOCK = attrgetter("clock_s")
_HOST = attrgetter("host")
_CPU = attrgetter("cpu_pct")
_GPUS = attrgetter("gpus")
_INDEX = itemgetter(GpuReading._fields.index("index"))
_UTILIZATION = itemgetter(GpuReading._fields.index("utilization_pct"))
_SM_ACTIVITY = itemgetter(GpmReading._fields.index("sm_activity_pct"))
_DRAM = itemgetter(GpmReading._fields.index("dram_bandwidth_pct"))
_TENSOR = itemgetter(GpmReading._fields.index("tensor_activity_pct"))
_CLOCK_EVENTS = itemgetter(HealthReading._fields.index("clock_event_reasons"))


def _passes(extras: Sequence[dict[str, object]], family: str) -> list[object]:
    """Each reading of a family that is cached between its passes (GPM: the reader hands the
    same object to every tick until it reads again) once, oldest first."""
    readings = list(map(dict.get, extras, repeat(family)))
    previous = [None, *readings[:-1]]
    return [reading for reading, before in zip(readings, previous, strict=True)
            if reading is not None and reading is not before]


def _iter_list_passes(samples: Sequence[Sample]) -> Iterator[object]:
    """Each reading pass of the process lists once, lazily (``_held`` stops at the first
    that answers). The reader returns them only on its pass (once a second), and every
    sample built from that NVML pass carries them: a pass is told by its GPU readings, not
    by the list (an unchanged list may be the same object)."""
    lists = map(dict.get, map(_EXTRA, samples), repeat(PROCESS_FAMILY))
    for i in compress(count(), map(is_not, lists, repeat(None))):
        if i == 0 or samples[i].gpus is not samples[i - 1].gpus:
            yield samples[i].extra[PROCESS_FAMILY]


def list_passes(samples: Sequence[Sample]) -> list[object]:
    """Each reading pass of the process lists once, oldest first: the one way to count
    them (``_iter_list_passes`` says how a pass is told)."""
    return list(_iter_list_passes(samples))


def _held(samples: Sequence[Sample], row: int, passes: Sequence[object] | None = None) -> bool:
    """Whether the process lists show any process with a context on ``row`` (a GPU with no
    process waits for nobody, however busy the machine's CPUs are). True where the lists are
    not read at all, so a machine without them keeps the machine-wide rule. ``passes``: the
    list passes of ``samples``, where already made."""
    remaining = iter(_iter_list_passes(samples) if passes is None else passes)
    first = next(remaining, None)  # a pass's list is never None
    if first is None:
        return True
    return any(isinstance(reading, ProcessReading) and reading.device == row
               for readings in chain((first,), remaining) for reading in readings)  # type: ignore[attr-defined]


def _by_device(passes: Sequence[object]) -> list[dict]:
    """A family's reading passes (``_passes``) that hold readings by device row."""
    return [readings for readings in passes if type(readings) is dict]


def _distinct(passes: Sequence[dict], row: int, kind: type) -> list:
    """The readings of ``row`` in a family's passes by device (``_by_device``), one per
    pass (looked up in C: a window holds a pass a second)."""
    return [reading for reading in map(dict.get, passes, repeat(row))
            if type(reading) is kind]


def _own_process(passes: Sequence[object], row: int, pid: int) -> list[float]:
    """The SM utilization of process ``pid`` on ``row``, one per list pass where known."""
    return [reading.sm_pct for readings in passes for reading in readings  # type: ignore[attr-defined]
            if isinstance(reading, ProcessReading) and reading.local_pid == pid
            and reading.device == row and reading.sm_pct is not None]


def device_readings(samples: Sequence[Sample], row: int) -> tuple[list[GpuReading | None], bool]:
    """Device ``row``'s reading in each sample (None where a sample lacks it), and whether
    every sample had it. Rows are stored in row order, so the reading is looked up by
    position, and searched otherwise."""
    try:
        rows = list(map(itemgetter(row), map(_GPUS, samples)))
    except IndexError:
        rows = []
    if len(rows) == len(samples) and set(map(_INDEX, rows)) <= {row}:
        return rows, True  # type: ignore[return-value]
    found = [next((g for g in sample.gpus if g.index == row), None) for sample in samples]
    return found, None not in found


def _known(values: Iterable[float | None]) -> list[float]:
    return [value for value in values if value is not None]


def _gaps(times: list[float], utilization: list[float | None], interval: float) -> list[float]:
    """Durations of the spans with activity under IDLE_PCT, each from its first idle sample
    to the next sample that is not idle (an unknown reading ends a span too)."""
    idle = [i for i, value in enumerate(utilization) if value is not None and value < T.IDLE_PCT]
    gaps: list[float] = []
    if not idle:
        return gaps
    start = previous = idle[0]
    for index in idle[1:] + [-2]:
        if index != previous + 1:
            end = previous + 1
            gaps.append((times[end] if end < len(times) else times[-1] + interval)
                        - times[start])
            start = index
        previous = index
    return gaps


def _pct_of(values: Sequence[float | None], predicate: object) -> tuple[float | None, int]:
    known = [value for value in values if value is not None]
    if not known:
        return None, 0
    return 100.0 * sum(1 for value in known if predicate(value)) / len(known), len(known)  # type: ignore[operator]


def diagnose(samples: Sequence[Sample], facts: Sequence[GpuFacts], row: int, *,
             pid: int | None = None, steps: Sequence[Step] = (),
             pcie_link: PcieLink | None = None, simulated: bool = False,
             skip_first_gpm: bool = False) -> Diagnosis:
    """The findings for device ``row`` over ``samples`` (already cut to the window).

    ``pid``: a run's own process, for the per-process signal. ``steps``: a run's timed steps
    (input and CPU time per step, where the run reports them). ``pcie_link``: the link's
    current generation and width, where known. ``skip_first_gpm``: drop the first GPM
    reading, which may have been derived across the window's start (a run's warm-up).
    Several devices over one window: ``DiagnosisWindow(samples, facts).diagnose(row)`` for
    each reads what they share once.
    """
    return DiagnosisWindow(samples, facts, simulated=simulated).diagnose(
        row, pid=pid, steps=steps, pcie_link=pcie_link, skip_first_gpm=skip_first_gpm)


class DiagnosisWindow:
    """A window of samples that devices are diagnosed over, one ``diagnose(row)`` each.

    What every device's diagnosis reads alike is read once, when first asked for, however
    many devices are diagnosed: the samples' spacing, the GPM, health and process-list
    passes, the machine's CPU, the samples' clock, and each device's readings (one
    transposition of the samples' rows, not one walk of the window per device). A cell's
    report and ``/diagnosis.json`` diagnose every device over one window: with 8 GPUs these
    were most of their cost, eight times over (issue 53)."""

    def __init__(self, samples: Sequence[Sample], facts: Sequence[GpuFacts], *,
                 simulated: bool = False) -> None:
        self.samples = samples if isinstance(samples, list) else list(samples)
        self.facts = facts
        self.simulated = simulated
        mine = self.samples
        self.count = count = len(mine)
        self.span_s = mine[-1].clock_s - mine[0].clock_s if count else 0.0  # monotonic
        self.interval_s = interval = self.span_s / (count - 1) if count > 1 else 0.0
        # Shares and rates (clock events, links, host CPU) rest on at most MAX_READINGS
        # samples, evenly spaced. A family read at its own 1 s rate (GPM, processes) keeps
        # each reading for at least 1 s of ticks (the reader refreshes it no sooner), so
        # looking at every sample a little under 1 s apart still sees every reading pass,
        # and counts it once.
        self.coarse = coarse = max(1, -(-count // MAX_READINGS))
        self.fine = max(1, min(coarse, int(FAMILY_EVERY_S / interval) - 1)) \
            if interval > 0 else 1
        self.window_s = self.span_s + interval if count else 0.0

    @cached_property
    def _columns(self) -> list[tuple[GpuReading, ...]]:
        """The samples' readings by position: a column exists where every sample has a
        reading there (zip stops at the shortest)."""
        return list(zip(*map(_GPUS, self.samples), strict=False))

    def readings(self, row: int) -> tuple[Sequence[GpuReading | None], bool]:
        """``device_readings(samples, row)``, read off one transposition of the samples'
        rows made for every device, where each sample holds ``row``'s reading at its
        position (as the history stores them); searched otherwise."""
        columns = self._columns
        if 0 <= row < len(columns) and set(map(_INDEX, columns[row])) <= {row}:
            return columns[row], True
        return device_readings(self.samples, row)

    @cached_property
    def _gpm_passes(self) -> list[dict]:
        return _by_device(_passes(list(map(_EXTRA, self.samples[::self.fine])), GPM_FAMILY))

    @cached_property
    def _health_passes(self) -> list[dict]:
        return _by_device(_passes(list(map(_EXTRA, self.samples[::self.coarse])),
                                  HEALTH_FAMILY))

    @cached_property
    def _list_passes(self) -> list[object]:
        return list_passes(self.samples)

    @cached_property
    def _clock(self) -> list[float]:
        return list(map(_CLOCK, self.samples))

    @cached_property
    def _machine_cpu(self) -> list[float | None] | None:
        """The machine's CPU in every ``coarse``-th sample; None where it is never over
        ``HOST_CPU_HIGH_PCT``: then no device waits on it (``_machine_cpu_findings`` would
        find nothing for any), and no device's samples are walked for it."""
        cpu = list(map(_CPU, map(_HOST, self.samples[::self.coarse])))
        return cpu if any(c is not None and c > T.HOST_CPU_HIGH_PCT for c in cpu) else None

    def diagnose(self, row: int, *, pid: int | None = None, steps: Sequence[Step] = (),
                 pcie_link: PcieLink | None = None, skip_first_gpm: bool = False
                 ) -> Diagnosis:
        """``diagnose(samples, facts, row, ...)`` over this window."""
        own_rows, complete = self.readings(row)
        if not complete:  # the device's own samples are its window
            mine = [s for s, r in zip(self.samples, own_rows, strict=True) if r is not None]
            return DiagnosisWindow(mine, self.facts, simulated=self.simulated).diagnose(
                row, pid=pid, steps=steps, pcie_link=pcie_link, skip_first_gpm=skip_first_gpm)
        facts, mine, count = self.facts, self.samples, self.count
        fact = _fact(facts, row)
        prefix = "SIMULATED " if self.simulated else ""
        label = f"{prefix}{fact.label if fact else f'GPU row {row}'}"
        uuid = fact.uuid if fact else ""
        interval, coarse, window_s = self.interval_s, self.coarse, self.window_s

        def done(findings: list[Finding]) -> Diagnosis:
            return Diagnosis(row, label, uuid, count, window_s, tuple(findings))

        lost_since, lost_count = None, 0  # the readings at the window's end that say lost
        for sample, reading in zip(reversed(mine), reversed(own_rows), strict=True):
            if reading is None or not reading.lost:
                break
            lost_since, lost_count = sample.clock_s, lost_count + 1
        if lost_since is not None:  # lost now: nothing it does can be read
            lost_for_s = mine[-1].clock_s - lost_since
            return done([Finding(
                "lost", "GPU lost", (Figure("lost for", lost_for_s, "s", lost_count),),
                NO_SIGNAL, "look for an XID error in the kernel log (dmesg) and in "
                "nvidia-smi -q; the GPU may need a reset", words=f"it stopped answering NVML "
                f"{lost_for_s:.0f} s ago, and nothing since can be judged")])
        if count < T.MIN_SAMPLES:
            return done([Finding("not-enough-samples", "not enough samples",
                                 (Figure("samples", float(count), "", count),), NO_SIGNAL,
                                 "wait a few seconds for more samples",
                                 needs=f"at least {T.MIN_SAMPLES} samples of this device",
                                 words=f"{count} of {T.MIN_SAMPLES} needed")])
        parent = parent_facts(facts, fact) if fact else None
        physical = parent or fact
        physical_row = physical.index if physical else row
        utilization: list[float | None] = list(map(attrgetter("utilization_pct"), own_rows))
        # A lost GPU's readings are all "not available" (GpuReading.unavailable), never 0.
        util_known = _known(utilization)
        gpm = _distinct(self._gpm_passes, row, GpmReading)
        if skip_first_gpm and gpm:
            gpm = gpm[1:]
        sm_values = _known(map(_SM_ACTIVITY, gpm))
        has_gpm = len(sm_values) >= T.MIN_SAMPLES
        sm_mean = mean(sm_values, all_known=True) if has_gpm else None
        # The process lists ride only in the samples of their pass: every sample is looked at.
        lists = self._list_passes if pid is not None else None
        own = _own_process(lists, row, pid) if lists is not None and pid is not None \
            else []
        has_own = len(own) >= T.MIN_SAMPLES
        has_util = len(util_known) >= T.MIN_SAMPLES
        gpm_count = len(sm_values)
        gpm_needs = None
        if not has_gpm and fact is not None:
            reason = gpm_unavailable_reason(fact, parent, {})
            gpm_needs = ("SM activity needs GPM: " + reason) if reason else \
                (f"SM activity needs {T.MIN_SAMPLES} GPM readings ({gpm_count} so far)")

        findings: list[Finding] = []
        util_mean = mean(util_known, all_known=True)
        util_fig = Figure("utilization", util_mean, "%", len(util_known))

        # ----- the run's own steps: input-bound, host-CPU-bound -----------------------------
        findings += _step_findings(steps, util_known)
        # ----- activity level ---------------------------------------------------------------
        if has_gpm:
            findings += _gpm_findings(gpm, sm_values, sm_mean, util_fig if has_util else None)
        elif has_own:
            own_mean = mean(own, all_known=True)
            own_fig = Figure("its own SM utilization", own_mean, "%", len(own),
                             "process readings")
            findings += _level_findings(own_mean, own_fig, "per-process", gpm_needs)
        elif has_util:
            findings += _level_findings(util_mean, util_fig, "utilization", gpm_needs)
        if has_util and not any(f.cause == "idle" for f in findings) and \
                min(util_known) < T.IDLE_PCT:
            times = self._clock  # where a gap may be
            findings += _gap_findings(times, utilization, interval, window_s, count)
        # ----- links, clocks ----------------------------------------------------------------
        physical_rows = own_rows[::coarse] if physical_row == row else \
            self.readings(physical_row)[0][::coarse]
        health = _distinct(self._health_passes, physical_row, HealthReading)
        if pcie_link is None:
            pcie_link = _current_pcie_link(health)
        whole_gpu = _link_findings(physical_rows, physical, sm_mean, pcie_link) + \
            _throttle_findings(health)
        if parent is not None:  # a MIG device: these are its GPU's, whatever instance caused them
            whole_gpu = [replace(finding, title=f"on its GPU ({parent.label}, shared by its "
                                                f"MIG instances): {finding.title}")
                         for finding in whole_gpu]
        findings += whole_gpu
        if not any(f.cause.startswith("host") for f in findings) and not steps and \
                self._machine_cpu is not None and _held(mine, row, lists):
            findings += _machine_cpu_findings(self._machine_cpu, utilization[::coarse])
        if not findings:
            needs = gpm_needs or "utilization (MIG devices have none: their activity needs GPM)"
            findings.append(Finding("unknown", "no activity signal", (util_fig,), NO_SIGNAL,
                                    "watch it on a GPU that reports GPM or utilization",
                                    needs=needs, words=needs))
        findings.sort(key=lambda finding: ORDER.get(finding.cause, len(ORDER)))
        return done(findings)


# The order findings are shown in: host-side causes first (they explain a starved GPU), then
# starvation, a saturated link (it explains SMs that wait), the GPU-side limits, throttling,
# weaker readings, and good news last.
ORDER = {cause: rank for rank, cause in enumerate((
    "not-using-gpu", "input-bound", "host-cpu-bound", "idle", "starved", "pcie-bound",
    "nvlink-bound", "launch-bound", "memory-bound", "throttled", "pcie-downtrained",
    "underused", "busy", "compute-bound", "unknown", "not-enough-samples", "lost"))}


def _step_findings(steps: Sequence[Step], util: list[float]) -> list[Finding]:
    if len(steps) < T.MIN_SAMPLES:
        return []
    out: list[Finding] = []
    wall = sum(step.ms for step in steps)
    inputs = [step for step in steps if step.input_ms is not None]
    if len(inputs) >= T.MIN_SAMPLES and wall > 0:
        share = 100.0 * sum(step.input_ms or 0.0 for step in inputs) / \
            sum(step.ms for step in inputs)
        if share >= T.STARVED_MODERATE_PCT:  # XProf: 5% moderately, 20% highly input-bound
            degree = "highly" if share >= T.STARVED_HIGH_PCT else "moderately"
            out.append(Finding(
                "input-bound", f"{degree} input-bound",
                (Figure("step time waiting on input", share, "%", len(inputs), "steps"),
                 Figure("median step", _median([s.ms for s in inputs]), "ms", len(inputs),
                        "steps")),
                "steps", "more input workers or prefetching (tf.data prefetch and "
                "num_parallel_calls, DataLoader num_workers), so the next batch is ready"))
    cpu = [100.0 * step.cpu_ms / step.ms for step in steps
           if step.cpu_ms is not None and step.ms > 0]
    if len(cpu) >= T.MIN_SAMPLES:
        busy_share, _ = _pct_of(cpu, lambda v: v > T.HOST_CPU_HIGH_PCT)
        gpu_low, _ = _pct_of(util, lambda v: v < T.HOST_GPU_LOW_PCT)
        # SageMaker CPUBottleneck: GPU < 10% while CPU > 90%, in > 50% of samples. Without a
        # GPU reading the GPU side is taken as waiting (a CPU run's GPU does nothing for it).
        gpu_waits = gpu_low is None or gpu_low > T.HOST_SHARE_PCT
        if busy_share is not None and busy_share > T.HOST_SHARE_PCT and gpu_waits:
            figures = [Figure("its process's CPU", mean(cpu), "% of a core", len(cpu), "steps"),
                       Figure("steps over 90% of a core", busy_share, "%", len(cpu), "steps")]
            out.append(Finding(
                "host-cpu-bound", "host-CPU-bound: its own process keeps a core busy",
                tuple(figures), "steps",
                "move the Python work per step to the GPU or to input workers (fuse the "
                "step, tf.function / torch.compile), or launch fewer, bigger kernels"))
    return out


def _median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else None


def _gpm_findings(gpm: list[GpmReading], sm_values: list[float], sm: float | None,
                  util_fig: Figure | None) -> list[Finding]:
    """``sm``: the mean of ``sm_values``."""
    count = len(sm_values)
    dram_values = _known(map(_DRAM, gpm))
    tensor_values = _known(map(_TENSOR, gpm))
    dram = mean(dram_values, all_known=True) if len(dram_values) >= T.MIN_SAMPLES else None
    tensor = mean(tensor_values, all_known=True) if len(tensor_values) >= T.MIN_SAMPLES else None
    sm_fig = Figure("SM activity", sm, "%", count, "GPM readings")
    dram_fig = Figure("DRAM bandwidth", dram, "%", len(dram_values), "GPM readings")
    tensor_fig = Figure("tensor activity", tensor, "%", len(tensor_values), "GPM readings")
    assert sm is not None
    util = util_fig.value if util_fig is not None else None
    figs = tuple(f for f in (util_fig, sm_fig, dram_fig) if f is not None)
    if sm < T.IDLE_PCT and (dram is None or dram < T.IDLE_PCT) and (util is None or
                                                                   util < T.IDLE_PCT):
        return [Finding("idle", "idle", figs, "gpm",
                        "nothing runs here: check that the job sees this GPU "
                        "(CUDA_VISIBLE_DEVICES) and is not waiting on something else")]
    out: list[Finding] = []
    # DCGM: ~0.8 is DRAM's practical peak, whatever SM activity says (a streaming kernel
    # keeps every SM "active": its warps are resident, waiting on memory); KempnerPulse:
    # DRAM >= 50 with SM < 50.
    if dram is not None and (dram >= T.DRAM_PRACTICAL_PEAK_PCT or
                             (dram >= T.DRAM_HIGH_PCT and sm < T.SM_INEFFECTIVE_PCT)):
        near = "near its practical peak of about 80%" if dram >= T.DRAM_PRACTICAL_PEAK_PCT \
            else "high, below the practical peak of about 80%"
        out.append(Finding("memory-bound", "memory-bandwidth-bound",
                           (sm_fig, dram_fig), "gpm",
                           "move fewer bytes per step: fuse ops that reread the same tensors, "
                           "use a lower precision (BF16/FP8), or keep reused data in shared "
                           "memory", detail=f"; DRAM {near}"))
    elif util is not None and util >= T.BUSY_UTILIZATION_PCT and sm < T.SM_INEFFECTIVE_PCT:
        # DCGM: SM Active < 0.5 "likely ineffective"; utilization says kernels were resident.
        out.append(Finding("launch-bound", "launch- or latency-bound: kernels are resident "
                           "but few SMs work", figs, "gpm",
                           "launch fewer, bigger kernels: CUDA Graphs, fusing ops "
                           "(XLA / torch.compile), or a bigger batch"))
    good = sm >= T.SM_GOOD_PCT or (tensor is not None and tensor >= T.TENSOR_HEAVY_PCT
                                    and sm >= T.TENSOR_HEAVY_SM_PCT)
    if good and not out:
        tensor_note = (Figure("tensor activity", tensor, "%", len(tensor_values),
                              "GPM readings"),) if tensor is not None else ()
        advice = ("the GPU does the work: to go faster, use the tensor cores (mixed precision "
                  "or TF32)" if tensor is not None and tensor < T.TENSOR_HEAVY_PCT else
                  "the GPU does the work: to go faster, a faster GPU or more of them")
        out.append(Finding("compute-bound", "compute-bound: that is good news",
                           (sm_fig,) + tensor_note, "gpm", advice, good=True))
    elif not out:
        below = sm < T.SM_INEFFECTIVE_PCT
        out.append(Finding("underused", "underused: SM activity below DCGM's "
                           + ("50% 'likely ineffective'" if below else "80% for good use"),
                           figs + ((tensor_fig,) if tensor is not None else ()), "gpm",
                           "a bigger batch, or more work per kernel"))
    return out


def _level_findings(level: float | None, figure: Figure, signal: str,
                    needs: str | None) -> list[Finding]:
    if level is None:
        return []
    if level < T.IDLE_PCT:
        return [Finding("idle", "idle", (figure,), signal,
                        "nothing runs here: check that the job sees this GPU "
                        "(CUDA_VISIBLE_DEVICES) and is not waiting on something else")]
    if level < T.LOW_UTILIZATION_PCT:
        # Nsight gpu_time_util: < 50% in use; PyTorch profiler: util < 0.5 -> bigger batch.
        return [Finding("underused", "underused: in use less than half the time", (figure,),
                        signal, "a bigger batch, or more work per step on the GPU",
                        needs=needs)]
    return [Finding("busy", "busy; whether the SMs are full cannot be told", (figure,),
                    signal, "", needs=needs)]


def _gap_findings(times: list[float], utilization: list[float | None], interval: float,
                  window_s: float, count: int) -> list[Finding]:
    gaps = [gap for gap in _gaps(times, utilization, interval) if gap >= T.GAP_S]  # Nsight
    if not gaps or window_s <= 0:
        return []
    share = 100.0 * sum(gaps) / window_s
    if share < T.STARVED_MODERATE_PCT or share >= 100.0 - T.STARVED_MODERATE_PCT:
        return []  # a few short gaps, or idle throughout (the "idle" finding says so)
    return [Finding("starved", "starved: idle gaps of 0.5 s or more between bursts of work",
                    (Figure("time in gaps", share, "%", count),
                     Figure("longest gap", max(gaps), "s", count)), "utilization-gaps",
                    "find what the GPU waits for between steps (input pipeline, Python, "
                    "host syncs): more input workers, prefetching, or asynchronous copies",
                    detail=f"; {len(gaps)} gap{'s' if len(gaps) != 1 else ''}")]


def _link_findings(physical_rows: Sequence[GpuReading | None], physical: GpuFacts | None,
                   sm_mean: float | None, pcie_link: PcieLink | None) -> list[Finding]:
    if physical is None:
        return []
    out: list[Finding] = []
    # A link is only "bound" while the SMs wait for it (KempnerPulse I/O): where they do
    # not, its rates are not read.
    waiting = sm_mean is None or sm_mean < T.LINK_SM_WAITING_PCT
    readings = [r for r in physical_rows if r is not None and not r.lost] if waiting else []
    for name, cause, maximum, tx_field, rx_field, advice in (
        ("PCIe", "pcie-bound", physical.pcie_max_bytes_per_s, "pcie_tx_bytes_per_s",
         "pcie_rx_bytes_per_s", "pinned (page-locked) host memory and fewer, larger copies; "
         "keep data on the GPU between steps"),
        ("NVLink", "nvlink-bound", physical.nvlink_max_bytes_per_s, "nvlink_tx_bytes_per_s",
         "nvlink_rx_bytes_per_s", "overlap communication with compute, and fewer, larger "
         "collectives"),
    ):
        if not maximum or not waiting:
            continue
        tx_known = _known(map(attrgetter(tx_field), readings))
        rx_known = _known(map(attrgetter(rx_field), readings))
        if len(tx_known) < T.MIN_SAMPLES and len(rx_known) < T.MIN_SAMPLES:
            continue
        busiest = max(mean(tx_known, all_known=True) or 0.0,
                      mean(rx_known, all_known=True) or 0.0)
        share = busiest / maximum
        if share >= T.LINK_NEAR_MAX:
            n = max(len(tx_known), len(rx_known))
            out.append(Finding(cause, f"{name}-bound: the link runs near its own maximum",
                               (Figure(f"{name} busiest direction", busiest / GB, "GB/s", n),
                                Figure(f"share of its {maximum / GB:.0f} GB/s", 100 * share,
                                       "%", n)),
                               "link-counters", advice,
                               needs=None if sm_mean is not None else
                               "whether the SMs wait for it needs GPM SM activity"))
    if pcie_link is not None and physical.pcie_max_generation and physical.pcie_max_width:
        gen, width = pcie_link
        low = [part for part, now, top in (("generation", gen, physical.pcie_max_generation),
                                           ("width", width, physical.pcie_max_width))
               if now is not None and now < top]
        if low:
            out.append(Finding("pcie-downtrained", "PCIe link below its maximum " +
                               " and ".join(low),
                               (Figure("link generation", gen, "", 1, "reading"),
                                Figure("link width", width, "lanes", 1, "reading")),
                               "link-counters",
                               "reseat the card or check the slot and BIOS link settings; "
                               "an idle GPU may downshift to save power, so check under load",
                               detail=f"; maximum Gen{physical.pcie_max_generation} "
                                      f"x{physical.pcie_max_width}"))
    return out


def _current_pcie_link(health: Sequence[HealthReading]) -> PcieLink | None:
    """The newest current link generation and width the health readings (one per pass,
    oldest first) have, if any."""
    for reading in reversed(health):
        if reading.pcie_link_generation is not None or reading.pcie_link_width is not None:
            return PcieLink(reading.pcie_link_generation, reading.pcie_link_width)
    return None


THROTTLE_WORDS = [(bit, words) for bit, words, throttles in CLOCK_EVENT_REASONS if throttles]


def _throttle_findings(health: Sequence[HealthReading]) -> list[Finding]:
    """``health``: the physical GPU's health readings, one per pass."""
    masks = _known(map(_CLOCK_EVENTS, health))
    if len(masks) < T.MIN_SAMPLES:
        return []
    # A window holds a few distinct masks: each is counted once, then weighed by its count.
    throttled = [(mask, n) for mask, n in Counter(masks).items() if mask & T.THROTTLE_BITS]
    share = 100.0 * sum(n for _, n in throttled) / len(masks)
    if share < T.THROTTLED_SHARE_PCT:  # our choice: no source sets it
        return []
    counts = sorted(((sum(n for mask, n in throttled if mask & bit), bit, words)
                     for bit, words in THROTTLE_WORDS), reverse=True)
    named = [f"{words} ({100.0 * n / len(masks):.0f}%)" for n, bit, words in counts if n]
    top_bit = counts[0][1]
    if top_bit == 0x4:
        advice = ("check the power limit (nvidia-smi -q -d POWER); at the cap, more work "
                  "costs clock speed")
    elif top_bit in (0x20, 0x40):
        advice = "check cooling: airflow, fans, inlet temperature"
    else:
        advice = "check the power supply and cooling: the hardware asked for slower clocks"
    return [Finding("throttled", "throttled: " + "; ".join(named),
                    (Figure("time with clocks held down", share, "%", len(masks)),),
                    "clock-events", advice,
                    needs="exact throttle time needs the cumulative clocks-event time fields "
                          "(FI 74, 269-271), which this reader does not read")]


def _machine_cpu_findings(cpu: Sequence[float | None],
                          utilization: list[float | None]) -> list[Finding]:
    """``cpu``: the machine's CPU % in the samples ``utilization`` is the device's of."""
    # Parallel lists, no tuple per sample: a window holds thousands of samples.
    machine: list[float] = []  # the machine's CPU where both are known, in order
    both = 0
    for u, c in zip(utilization, cpu, strict=True):
        if u is not None and c is not None:
            machine.append(c)
            if u < T.HOST_GPU_LOW_PCT and c > T.HOST_CPU_HIGH_PCT:
                both += 1
    known = len(machine)
    if known < T.MIN_SAMPLES:
        return []
    share = 100.0 * both / known
    if share <= T.HOST_SHARE_PCT:  # SageMaker CPUBottleneck: > 50% of samples
        return []
    return [Finding("host-cpu-bound", "host-CPU-bound: the machine's CPUs are full while "
                    "the GPU waits",
                    (Figure("samples with GPU < 10% and CPU > 90%", share, "%", known),
                     Figure("machine CPU", mean(machine, all_known=True), "%", known)),
                    "host", "free CPU for the job that feeds this GPU (fewer competing "
                    "processes, more cores), or move its preprocessing to the GPU")]
