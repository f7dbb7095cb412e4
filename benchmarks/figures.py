"""What the benchmark scripts share to report: summary figures (percentiles, medians with
their range, the load line), and where their JSON goes."""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def write_json(report: Any, path: Path | None, name: str) -> Path | None:
    """Write ``report`` to ``path``, else to ``$OUT/name`` when ``$OUT`` is set (the device
    machine brings back what is under it), else nowhere; says where on stderr."""
    if path is None and os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / name
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1))
        print(f"wrote {path}", file=sys.stderr, flush=True)
    return path


def spread(values: Sequence[float], digits: int = 1, unit: str = "") -> str:
    """``median (min-max)``, e.g. ``4.42 ms (3.49-40.93)`` with ``unit=" ms"``."""
    return (f"{statistics.median(values):.{digits}f}{unit} "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})")


def summary(values: Sequence[float], unit: str, digits: int) -> str:
    """``median 1.150 s (range 0.512-2.525, n=5)``."""
    return (f"median {statistics.median(values):.{digits}f} {unit} "
            f"(range {min(values):.{digits}f}-{max(values):.{digits}f}, n={len(values)})")


def load_line() -> str:
    """The machine's load averages over 1, 5 and 15 minutes: ``1.89-6.96-8.99``."""
    return "-".join(f"{value:.2f}" for value in os.getloadavg())
