"""What a diagnosis says: findings, each with its figures, its signal and one thing to try."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# The signal a finding rests on, best first, and how it says so in words.
# The signal of a finding that rests on none ("not enough samples", "GPU lost"): it is no
# cause of what the GPU did.
NO_SIGNAL = "none"
SIGNALS: dict[str, str] = {
    "gpm": "GPM counters",
    "per-process": "the run's own per-process SM utilization (time-based, not SM activity)",
    "utilization": "utilization only: it says a kernel was resident, not how much of the GPU "
                   "it used",
    "utilization-gaps": "NVML utilization tick by tick: whether any kernel ran at all",
    "clock-events": "the sampled clocks-event reasons",
    "link-counters": "the PCIe/NVLink byte counters",
    "steps": "the run's own step timings",
    "host": "the machine's CPU and utilization",
    "process-lists": "the driver's per-GPU process lists",
    NO_SIGNAL: "no signal",
}


def mean(values: Iterable[float | None], *, all_known: bool = False) -> float | None:
    """The mean of the values that are known; None when none is. The one helper: "not
    available" is never 0. ``all_known``: a list the caller already freed of None, which is
    not searched again (9,000 comparisons for a 30-minute window)."""
    known = values if isinstance(values, list) else list(values)
    if not all_known and None in known:
        known = [value for value in known if value is not None]
    return math.fsum(known) / len(known) if known else None  # type: ignore[arg-type]


@dataclass(frozen=True)
class Figure:
    """One supporting figure: its value with its unit, and how many readings it rests on."""

    name: str  # "SM activity"
    value: float | None  # None: not available
    unit: str  # "%", "GB/s", "s", "W"
    count: int  # readings it is the mean (or share) of
    of: str = "samples"  # what was counted: "samples", "GPM readings", "steps"

    def value_text(self) -> str:
        if self.value is None:
            return f"{self.name} not available"
        percent = self.unit.startswith("%")
        digits = 2 if self.unit.endswith("/s") else 1 if self.unit in ("s", "ms") else 0
        space = "" if percent or not self.unit else " "
        return f"{self.name} {self.value:.{digits}f}{space}{self.unit}"

    def text(self) -> str:
        return f"{self.value_text()} ({self.count} {self.of})"

    def to_json(self) -> dict[str, Any]:
        value = self.value if self.value is not None and math.isfinite(self.value) else None
        return {"name": self.name, "value": value, "unit": self.unit,
                "count": self.count, "of": self.of}


@dataclass(frozen=True)
class Finding:
    """One cause, in words, with its evidence and one thing to try."""

    cause: str  # a stable id: "launch-bound", "memory-bound", ... (the gauge's label)
    title: str  # the cause in words: "launch- or latency-bound"
    figures: tuple[Figure, ...]
    signal: str  # a key of SIGNALS
    advice: str  # one concrete thing to try ("" when there is nothing to change)
    needs: str | None = None  # what it would need to tell more, where the signals can't
    detail: str = ""  # a clause after the figures ("; longest gap 2.1 s")
    good: bool = False  # good news: the GPU is doing real work
    words: str = ""  # said in words instead of the figures (the figures still travel)

    @property
    def confidence(self) -> str:
        return SIGNALS.get(self.signal, self.signal)

    @property
    def count(self) -> int:
        return max((figure.count for figure in self.figures), default=0)

    @property
    def cause_words(self) -> str:
        """The cause in a few words. A title may go on after a colon or a semicolon
        ("throttled: hardware thermal slowdown ...", "busy; whether the SMs are full cannot
        be told"): the cause is what comes before it."""
        return self.title.replace(";", ":").split(":", 1)[0]

    def summary(self) -> str:
        """The cause and its figures: ``launch- or latency-bound: utilization 98%, SM
        activity 12% over 30 GPM readings (GPM counters)``."""
        if self.words:
            return f"{self.title}: {self.words} ({self.confidence})"
        figures = ", ".join(figure.value_text() for figure in self.figures)
        counted = _counted(self.figures)
        body = f"{self.title}: {figures}{counted}{self.detail}" if figures else \
            f"{self.title}{self.detail}"
        return f"{body} ({self.confidence})"

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "title": self.title, "summary": self.summary(),
                "figures": [figure.to_json() for figure in self.figures],
                "signal": self.signal, "confidence": self.confidence, "advice": self.advice,
                "needs": self.needs, "good": self.good}


def _counted(figures: tuple[Figure, ...]) -> str:
    """`` over 100 samples and 20 GPM readings``: each distinct count once, in order."""
    counts: list[str] = []
    for figure in figures:
        if figure.value is None:
            continue  # "not available" rests on no readings
        text = f"{figure.count} {figure.of}"
        if text not in counts:
            counts.append(text)
    return " over " + " and ".join(counts) if counts else ""


@dataclass(frozen=True)
class Diagnosis:
    """The findings for one GPU or MIG instance over one window, most important first."""

    row: int
    label: str  # "GPU 2", "GPU 0 · MIG 1", "SIMULATED GPU 2"
    uuid: str
    samples: int  # samples of this device in the window
    window_s: float
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def first(self) -> Finding:
        return self.findings[0]

    @property
    def cause(self) -> str:
        return self.first.cause

    def brief(self) -> str:
        """The first finding in a few words for a narrow place (the sidebar, the overview):
        the device, the cause and its first known figure, ``GPU 0: starved, utilization
        12%``. :meth:`line` has the rest."""
        first = self.first
        cause = first.cause_words
        figure = next((f for f in first.figures if f.value is not None), None)
        if figure is not None and not first.words:
            cause = f"{cause}, {figure.value_text()}"
        return f"{self.label}: {cause}"

    def line(self) -> str:
        """The first finding as one line, naming the device: the verdict."""
        return f"{self.label} {self.first.summary()}"

    def advice_line(self) -> str:
        first = self.first
        return f"try: {first.advice}" if first.advice else ""

    def rest_line(self) -> str:
        """The other findings, one clause each."""
        return "; also " + "; ".join(finding.summary() for finding in self.findings[1:]) \
            if len(self.findings) > 1 else ""

    def to_json(self) -> dict[str, Any]:
        return {"row": self.row, "label": self.label, "uuid": self.uuid,
                "samples": self.samples, "window_s": round(self.window_s, 3),
                "cause": self.cause, "line": self.line(),
                "findings": [finding.to_json() for finding in self.findings]}
