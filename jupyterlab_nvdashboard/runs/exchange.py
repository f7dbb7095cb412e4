"""A sharded run's exchange: the bytes it must move beside what the dashboards measured, and
whether the exchange dominates its steps ("communication-bound").

Kept apart from the diagnosis rules (``diagnosis/`` judges a GPU from its samples; this
judges a run from its own events), and a pure function of the run and the history.

- **Expected:** the bytes all ranks send each other per step (the run's own count of its
  buffers, which ``tests/workload/test_sharded.py`` checks against the formula), divided by
  the median step time.
- **Measured:** the mean NVLink and PCIe transmit rates, summed over the run's GPUs, over its
  timed part. A CPU run's exchange goes through host memory (gloo over loopback sockets, or
  copies inside one process), and N shards emulated on one GPU exchange by a permutation in
  that GPU's own memory: no NVLink or PCIe counter sees either, so both are 0, and the
  panel says why.
- **Communication-bound:** the median share of a step spent in the collectives (waiting for
  the other ranks included) is at least ``COMMUNICATION_BOUND_SHARE``. Issue 22 asks for the
  cause when the exchange "dominates the step": more than half of it, as XProf's step
  breakdown calls a step input-bound when input takes most of it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from operator import attrgetter

from ..diagnosis import Figure, Finding, mean
from ..metrics import GpuFacts, Sample
from ..metrics.sampler import rows_total
from .verdict import Verdict, judge, samples_in, timed_window
from .watcher import Run

COMMUNICATION_BOUND_SHARE = 0.5
GB = 1e9
CPU_WHY = ("CPU shards exchange through host memory (gloo over loopback sockets), which no "
           "NVLink or PCIe counter sees")
EMULATED_WHY = ("{n} shards emulated in one process: the exchange is a copy in its own "
                "memory, so no byte crosses NVLink or PCIe")


@dataclass(frozen=True)
class ExchangeView:
    """What a sharded run moves and what the dashboards saw move."""

    shards: int
    backend: str
    placement: str
    bytes_per_step: float | None
    expected_bytes_per_s: float | None
    nvlink_bytes_per_s: float | None  # TX summed over the run's GPUs; None: not available
    pcie_bytes_per_s: float | None
    why_measured_zero: str  # "" when measured on the run's GPUs
    gpu_rows: tuple[int, ...]
    pids: tuple[int, ...]

    def text(self) -> str:
        """``4 shards (gloo, key): 1.23 MB/step, expected 0.45 GB/s, measured 0 (why)``."""
        head = f"{self.shards} shards ({self.backend}, {self.placement})"
        if self.bytes_per_step is None:
            return f"{head}: no timed step yet"
        expected = ("n/a" if self.expected_bytes_per_s is None
                    else f"{self.expected_bytes_per_s / GB:.3f} GB/s")
        if self.why_measured_zero:
            measured = f"measured 0 GB/s: {self.why_measured_zero}"
        else:
            measured = f"measured NVLink {_rate(self.nvlink_bytes_per_s)}, " \
                       f"PCIe {_rate(self.pcie_bytes_per_s)}"
        return (f"{head}: {self.bytes_per_step / 1e6:.2f} MB/step, expected {expected}, "
                f"{measured}")


def _rate(value: float | None) -> str:
    return "not available" if value is None else f"{value / GB:.3f} GB/s"


def _rows(run: Run, facts: Sequence[GpuFacts]) -> tuple[int, ...]:
    shards = run.shards or {}
    uuids = [r.get("gpu_uuid") for r in shards.get("ranks") or [] if r.get("gpu_uuid")]
    rows = [f.index for uuid in dict.fromkeys(uuids) for f in facts if f.uuid == uuid]
    return tuple(rows)


def exchange_view(run: Run, samples: Sequence[Sample],
                  facts: Sequence[GpuFacts]) -> ExchangeView | None:
    """The run's exchange beside the dashboards' link rates; None for an unsharded run."""
    shards = run.shards
    if not shards:
        return None
    steps = [e for e in run.iterations if e.get("exchange_bytes") is not None]
    per_step = statistics.median(e["exchange_bytes"] for e in steps) if steps else None
    median_ms = statistics.median(e["ms"] for e in steps) if steps else None
    expected = per_step / (median_ms / 1000.0) if per_step is not None and median_ms else None
    count = int(shards.get("count") or 1)
    rows = _rows(run, facts)
    why = ""
    nvlink = pcie = None
    if shards.get("emulated"):
        why, nvlink, pcie = EMULATED_WHY.format(n=count), 0.0, 0.0
    elif run.device != "gpu":
        why, nvlink, pcie = CPU_WHY, 0.0, 0.0
    else:
        span = timed_window(run)
        timed = samples_in(samples, span) if span else []
        nvlink = mean([rows_total(s, rows, attrgetter("nvlink_tx_bytes_per_s"))
                       for s in timed])
        pcie = mean([rows_total(s, rows, attrgetter("pcie_tx_bytes_per_s")) for s in timed])
    pids = tuple(r["pid"] for r in shards.get("ranks") or [] if r.get("pid"))
    return ExchangeView(count, str(shards.get("backend")), str(shards.get("placement")),
                        per_step, expected, nvlink, pcie, why, rows, pids)


def communication_finding(run: Run) -> Finding | None:
    """"communication-bound" when the collectives take at least half the median step."""
    steps = [e for e in run.iterations if e.get("exchange_ms") is not None and e["ms"] > 0]
    if not steps or not run.shards or int(run.shards.get("count") or 1) < 2:
        return None
    share = statistics.median(e["exchange_ms"] / e["ms"] for e in steps) * 100.0
    if share < COMMUNICATION_BOUND_SHARE * 100.0:
        return None
    return Finding(
        "communication-bound", "communication-bound",
        (Figure("exchange share of each step", share, "%", len(steps), "steps"),),
        "steps",
        "fewer shards, or a faster interconnect between them (NVLink rather than PCIe or "
        "host memory); larger batches per shard amortize the exchange")


def ranks_named(run: Run, facts: Sequence[GpuFacts]) -> str:
    """``shards 0-3 on GPU 0 (CUDA 0), GPU 1 (CUDA 1)`` or ``shards 0-3, pids 1 2 3 4``."""
    shards = run.shards or {}
    ranks = shards.get("ranks") or []
    count = int(shards.get("count") or len(ranks) or 1)
    names = [f.label for row in _rows(run, facts) for f in facts if f.index == row]
    where = ("on " + ", ".join(names)) if names else \
        ("pids " + " ".join(str(r["pid"]) for r in ranks if r.get("pid")))
    return f"shards 0-{count - 1} {where}".rstrip()


def rank_runs(run: Run) -> list[Run]:
    """One view of ``run`` per GPU its ranks hold (NCCL: one rank per GPU): the rank's own
    PID and GPU, so each GPU is judged on its own process. Empty when they share one GPU."""
    ranks = [r for r in (run.shards or {}).get("ranks") or [] if r.get("gpu_uuid")]
    if len({r["gpu_uuid"] for r in ranks}) < 2:
        return []
    views = []
    for rank in ranks:
        start = {**run.start, "pid": rank.get("pid") or run.pid,
                 "gpu": {"uuid": rank["gpu_uuid"], "index": None, "visible": None}}
        views.append(replace(run.copy(), start=start))
    return views


def judge_run(run: Run, samples: Sequence[Sample], facts: Sequence[GpuFacts],
              simulated: bool = False) -> Verdict:
    """``verdict.judge``; for a sharded run, "communication-bound" first when it is, the
    verdict names its shards and GPUs, and each GPU of a multi-GPU run is judged on its own
    (in the second line)."""
    verdict = judge(run, samples, facts, simulated)
    if not run.shards:
        return verdict
    each = [judge(view, samples, facts, simulated).text for view in rank_runs(run)]
    if each:
        verdict = replace(verdict, rest="; ".join(
            part for part in ("each GPU: " + "; ".join(each), verdict.rest) if part))
    named = ranks_named(run, facts)
    finding = communication_finding(run)
    if finding is None:
        return replace(verdict, text=f"{verdict.text} · {named}")
    also = "" if each else f"also: {verdict.text}"  # each GPU's line already says it
    rest = "; ".join(part for part in (also, verdict.rest) if part)
    return replace(verdict, text=f"{finding.summary()} · {named}", cause=finding.cause,
                   signal=finding.signal, advice=finding.advice, rest=rest,
                   findings=(finding, *verdict.findings))
