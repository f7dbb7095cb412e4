"""Whose a GPU's finding is: the one rule the sidebar (``/glance.json``'s ``diagnoses``),
the notebook toolbar and a cell's footer (``/cell.json``) all apply (issues 44 and 53).

A diagnosis finding (starved, launch-bound, underused…) describes a GPU's activity over a
window, not one process's. Its advice is about code, so it is given to a holder only where
that holder's code is the activity it describes:

- the holder's processes are the **only** processes on the GPU over the window (anyone
  else's work would be in the same readings), and
- the holder **did GPU work** there (an idle holder is told it is idle, not how to feed the
  GPU; a CPU-only cell in a kernel that holds memory is told it did no GPU work).

Otherwise the finding is **the GPU's**: shown, where at all, as the device's and without
advice.
"""

from __future__ import annotations

YOURS = "yours"  # the holder is all that runs on the GPU, and it works
THE_GPUS = "gpu"  # other processes share the GPU, or the holder did no GPU work


def whose_finding(alone: bool, worked: bool) -> str:
    """``YOURS`` when the holder was the GPU's only process and did GPU work there, else
    ``THE_GPUS``."""
    return YOURS if alone and worked else THE_GPUS
