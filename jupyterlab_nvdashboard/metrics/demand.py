"""Which consumer needs which reading family, at which pace: the one table of read rates.

The sampler reads each family (the core GPU pass with the host, GPM, health, the process
lists) at the fastest pace that any of its consumers asks for, and no faster. The server
says which consumers are there (``Sampler.set_consumers``): the routes of the pages open
now, ``HOLDING`` while a page is open and a process holds a GPU, ``AT_WORK`` while a GPU
is at work, page or not, and ``CELL_RUNNING`` while a kernel with GPU memory runs a cell.
The consumers in ``ALWAYS`` are there whatever is open. A consumer the table does not know
(a route added later, a further stream of a page) is read for as today's pages were:
everything at the sampling interval, so nothing a page shows is ever read more slowly than
it draws.

Why each pace:

- The bar pages (``apps/gpu.py``) show the newest core reading and repaint once a second
  (``apps/live.py::REPLACE_REDRAW_MS``): one core pass a second is every reading they show.
- The timelines draw every sample: the sampling interval.
- The store keeps 5-second buckets of the core readings; the idle judgment
  (``apps/usage.py``), the diagnosis (``diagnosis/``) and a ``/metrics`` scrape take what
  the history has, which with nobody watching has always been one pass per idle interval
  (``diagnosis/idle.py::evidence_gap_s`` is sized for that pace). A family read less often
  than the core pass is carried in every sample until its next reading (GPM and health
  keep their newest reading), so ``/metrics`` always exports one; the process lists mark
  each pass, as the diagnosis and the idle judgment count them.
- The process lists are read once per idle interval whatever runs: they are how a new
  holder of a GPU is noticed (the idle judgment's episodes start from them).
- GPM and health are read once per idle interval only while a GPU is at work (``AT_WORK``:
  a process holds one, or one is busy; the server says so within a second of the process
  pass that shows it). Until then nothing runs for the diagnosis to judge (its throttle and
  GPM causes need a busy GPU), the idle judgment has no holder to judge (it reads GPM for
  a holder's activity), and a ``/metrics`` scrape exports the newest reading: one at most
  ``QUIET_S`` old is as fresh as Prometheus's default scrape interval (15 s) shows.
  GPM's figures are means between two of its samples, so a longer span between them is
  still the true mean; a XID event waits in NVML's event set until the next health read.
- While a process holds a GPU and a page is open, the idle judgment and the diagnosis see a
  process pass (with the activity beside it) once a second, as they did with any page open.
- While a kernel that holds GPU memory runs a cell, the cell's verdict (``/cell.json``)
  reads the same: a pass and a core reading once a second, whatever pages are open, so a
  cell gets the same samples, and the same verdict, with a dashboard tab open or not
  (issue 53: a 1.5 s busy cell was "too short" at the idle pace and "busy" with a tab open).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import Enum

from .families import GPM_FAMILY, HEALTH_FAMILY, PROCESS_FAMILY

CORE = "core"  # NvmlReader.read and the host: the pass that makes a sample


class Pace(Enum):
    FAST = "the sampling interval (--interval)"
    SECOND = "once a second, or the sampling interval if that is longer"
    RESTING = "the idle interval (--idle-interval)"
    QUIET = "QUIET_S, or the idle interval if that is longer"


# Prometheus's default scrape interval (dcgm-exporter collects every 30 s by default).
QUIET_S = 15.0


ReadRates = Mapping[str, Pace]

# What today's pages were all read at: the default for a consumer the table does not know.
EVERYTHING: ReadRates = {CORE: Pace.FAST, HEALTH_FAMILY: Pace.FAST, GPM_FAMILY: Pace.SECOND,
                         PROCESS_FAMILY: Pace.SECOND}

STORE = "store"
IDLE_JUDGMENT = "idle judgment"
DIAGNOSIS = "diagnosis"
SCRAPE = "a /metrics scrape"
HOLDING = "a process holds a GPU"  # the server adds it while a page is open
CELL_RUNNING = "a kernel with GPU memory runs a cell"  # the server adds it, pages or not
AT_WORK = "a GPU is at work"  # the server adds it while a process holds a GPU or one is busy
# Consumers that are not somebody watching: with only these, the sampler is idle.
UNWATCHED = frozenset({AT_WORK})

_BARS: ReadRates = {CORE: Pace.SECOND}
_TIMELINE: ReadRates = {CORE: Pace.FAST}

READS: dict[str, ReadRates] = {
    STORE: {CORE: Pace.RESTING},
    IDLE_JUDGMENT: {CORE: Pace.RESTING, GPM_FAMILY: Pace.QUIET, PROCESS_FAMILY: Pace.RESTING},
    DIAGNOSIS: {CORE: Pace.RESTING, GPM_FAMILY: Pace.QUIET, HEALTH_FAMILY: Pace.QUIET,
                PROCESS_FAMILY: Pace.RESTING},
    SCRAPE: {CORE: Pace.RESTING, GPM_FAMILY: Pace.QUIET, HEALTH_FAMILY: Pace.QUIET},
    AT_WORK: {GPM_FAMILY: Pace.RESTING, HEALTH_FAMILY: Pace.RESTING},
    HOLDING: {CORE: Pace.SECOND, GPM_FAMILY: Pace.SECOND, PROCESS_FAMILY: Pace.SECOND},
    CELL_RUNNING: {CORE: Pace.SECOND, GPM_FAMILY: Pace.SECOND, PROCESS_FAMILY: Pace.SECOND},
    "/GPU-Utilization": _BARS,
    "/GPU-Memory": _BARS,
    "/PCIe-Throughput": _BARS,
    "/NVLink-Throughput": _BARS,
    "/GPU-Resources": _TIMELINE,
    "/NVLink-Timeline": _TIMELINE,
    "/Machine-Resources": _TIMELINE,
    "/GPU-Activity": {CORE: Pace.FAST, GPM_FAMILY: Pace.SECOND},
}
ALWAYS = (STORE, IDLE_JUDGMENT, DIAGNOSIS, SCRAPE)
# No consumer reads these faster: nvml.h asks for more than 100 ms between two GPM samples
# (DCGM's profiling default is 1 s), and a process pass costs more than a tick.
FASTEST: ReadRates = {GPM_FAMILY: Pace.SECOND, PROCESS_FAMILY: Pace.SECOND}


def read_intervals(consumers: Collection[str] | None, fast_s: float,
                   resting_s: float) -> dict[str, float]:
    """Seconds between two readings of each family (``CORE`` and the family names) for
    ``consumers`` besides ``ALWAYS``; None: not told yet, read as for an unknown page."""
    quiet_s = max(QUIET_S, resting_s)
    seconds = {Pace.FAST: fast_s, Pace.SECOND: max(1.0, fast_s), Pace.RESTING: resting_s,
               Pace.QUIET: quiet_s}
    wanted = [READS[name] for name in ALWAYS]
    wanted += [EVERYTHING] if consumers is None else \
        [READS.get(name, EVERYTHING) for name in consumers]
    intervals: dict[str, float] = {}
    for rates in wanted:
        for family, pace in rates.items():
            intervals[family] = min(intervals.get(family, quiet_s), seconds[pace])
    # Never slower than the quiet pace, never faster than the family's fastest.
    return {family: max(seconds[FASTEST.get(family, Pace.FAST)], min(quiet_s, interval))
            for family, interval in intervals.items()}


def watched(consumers: Collection[str] | None) -> bool:
    """Whether somebody watches (None: not told yet, as if a page were open)."""
    return consumers is None or bool(set(consumers) - UNWATCHED)
