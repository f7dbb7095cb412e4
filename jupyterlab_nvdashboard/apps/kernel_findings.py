"""A GPU's diagnosis told to the user whose kernels it holds (``/glance.json``'s
``diagnoses``, the JupyterLab sidebar's "why slow" lines; issue 44).

A finding is about a GPU's activity over a window, not about one process on it. The sidebar
used to put "GPU 1: starved … Try: find what the GPU waits for" under a kernel of the user's
that was idle on GPU 1, while GPU 1's work was another user's job. So the server says whose
the finding is (``diagnosis/whose.py``, the rule a cell's footer applies too), and gives the
advice only where it can be about the user's own kernel:

- the finding is **the user's** when the user's kernels are the only processes on the GPU
  and at least one of them does GPU work (judged ``busy`` by ``usage.py``): their work is
  the work the finding describes, and the advice is theirs to follow;
- otherwise it is **the GPU's**, with its other processes (how many, and their users where
  known), and no advice: an idle holder is told it is idle, not how to feed the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..diagnosis.idle import BUSY, IDLE
from ..diagnosis.whose import THE_GPUS, YOURS, whose_finding

if TYPE_CHECKING:
    from ..diagnosis.findings import Diagnosis

__all__ = ["THE_GPUS", "YOURS", "ProcessRow", "told_to_the_user"]


class ProcessRow(Protocol):
    """What a finding's owner is read from: one row of the process table."""

    device: Any
    kernel_id: str | None
    mine: bool
    notebook: str | None
    user: str | None


def told_to_the_user(diagnosis: Diagnosis, rows: Sequence[ProcessRow],
                     idle_states: Mapping[str, str]) -> dict[str, Any]:
    """One ``diagnoses`` entry of ``/glance.json``: the finding (``brief``, ``line``), whose
    it is (``whose``), the user's kernels on that GPU and which of them are idle holders,
    the GPU's other processes, and ``advice`` only when the finding is the user's.

    ``rows``: the process table (``process_rows``); ``idle_states``: each of the user's
    kernels' ``idle`` state by kernel id (``idle``, ``busy``, ``cannot_tell``)."""
    on_gpu = [row for row in rows if row.device == diagnosis.row]
    kernels = [row for row in on_gpu if row.mine and row.kernel_id and row.notebook]
    others = [row for row in on_gpu if row not in kernels]
    paths = sorted({row.notebook for row in kernels if row.notebook})
    idle = sorted({row.notebook for row in kernels
                   if row.notebook and idle_states.get(row.kernel_id or "") == IDLE})
    working = any(idle_states.get(row.kernel_id or "") == BUSY for row in kernels)
    whose = whose_finding(alone=bool(kernels) and not others, worked=working)
    return {"index": diagnosis.row, "label": diagnosis.label, "cause": diagnosis.cause,
            "brief": diagnosis.brief(), "line": diagnosis.line(),
            "advice": diagnosis.first.advice if whose == YOURS else "",
            "whose": whose, "your_kernels": paths, "idle_kernels": idle,
            "other_processes": len(others),
            "other_users": sorted({row.user for row in others if row.user})}
