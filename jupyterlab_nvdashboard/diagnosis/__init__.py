"""Why is this GPU slow: findings from a window of samples of one GPU or MIG instance.

Pure rules over the history (``rules.py``), thresholds with their sources
(``thresholds.py``), and what a finding says (``findings.py``). Imports only the types of
``metrics/``; the workload verdict, ``/diagnosis.json``, ``/GPU-Activity`` and the
``/metrics`` gauge all come from ``diagnose``.
"""

from __future__ import annotations

from .findings import SIGNALS, Diagnosis, Figure, Finding, mean
from .rules import (
    ORDER,
    PcieLink,
    Step,
    diagnose,
    host_findings,
    identity_hidden,
    list_passes,
    node_presence,
    not_using_gpu,
    process_presence,
    window,
)
from .thresholds import MIN_LIST_READINGS, MIN_SAMPLES

CAUSES = tuple(ORDER)

__all__ = ["CAUSES", "Diagnosis", "Figure", "Finding", "MIN_LIST_READINGS", "MIN_SAMPLES",
           "ORDER", "PcieLink", "SIGNALS", "Step", "diagnose", "host_findings", "identity_hidden",
           "list_passes", "mean", "node_presence", "not_using_gpu", "process_presence", "window"]
