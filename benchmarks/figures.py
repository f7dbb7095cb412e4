"""What the benchmark scripts share: summary figures, and where their JSON goes."""

from __future__ import annotations

import json
import os
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
