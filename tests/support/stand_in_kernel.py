"""A stand-in Jupyter kernel for tests that need a real local process to be a kernel: its
connection file (``kernel-<id>.json``) on its command line, as ``jupyter_client`` starts
one, and one child (a training loop's worker, or a pip subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# The kernel forks its child, prints the child's PID, and both wait to be killed.
_KERNEL = """
import os, sys, time
child = os.fork()
if child == 0:
    time.sleep(600); os._exit(0)
print(child, flush=True)
time.sleep(600)
"""


@dataclass
class Kernel:
    kernel_id: str
    pid: int
    child: int


@contextmanager
def stand_in_kernel(folder: Path) -> Iterator[Kernel]:
    """A stand-in kernel whose connection file would be in ``folder``; killed, with its
    child, on leaving."""
    kernel_id = str(uuid.uuid4())
    process = subprocess.Popen([sys.executable, "-c", _KERNEL, "-f",
                                str(folder / f"kernel-{kernel_id}.json")],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = int(process.stdout.readline())  # type: ignore[union-attr]
        yield Kernel(kernel_id, process.pid, child)
    finally:
        os.killpg(process.pid, 9)
        process.wait()
