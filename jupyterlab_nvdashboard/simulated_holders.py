"""Try the GPU-holder features without a GPU: list this process (a notebook's kernel) as
holding memory on a simulated GPU. In a notebook cell, one line:

    from jupyterlab_nvdashboard.simulated_holders import hold_gpu; hold_gpu(0, gib=4)

The dashboard server must be simulating its GPUs (``NVDASHBOARD_SIMULATE=2 jupyter lab``).
Its simulated driver re-reads its process list from a JSON file whenever the file changes
(``simnvml/processes.py`` has the format); the kernel and the server, started by one
JupyterLab with one environment, name the same file (``paths.simulated_processes_file``).
The driver then lists the kernel on that GPU until the kernel exits, as a real driver drops
a process's context, so "Your GPU kernels", the idle notice and the idle cull all have a
kernel to act on. ``busy_pct`` makes its work show (per-process SM samples); 0 is idle.

To train on the simulated GPU (``examples/embedding-paths.ipynb``), run a workload path on
the host with ``SimulatedTrainingGpu`` as its ``on_iteration``: once a second it says the
share of that second the path's own timed steps would have kept the GPU working
(``workload.events.device_share``: each step less its input wait and host-only stage).

Nothing here talks to NVML: it only writes the file this project's simulator reads, and
only that file, replaced whole (a reader never sees half of it).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from .config import load_config
from .paths import simulated_processes_file
from .simnvml.processes import SimulatedProcess
from .workload.events import device_share

GIB = 2**30
# What a process holds on a GPU once it has a CUDA context, before any tensor of its own: a
# few hundred MiB on current drivers and GPUs (it varies with the GPU, the driver and CUDA's
# lazy loading; this is a representative figure, for a simulated training run's memory).
CONTEXT_BYTES = 300 * 2**20


def _listed(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The file's wrapper object (``{}`` for the plain list form) and its process list.
    A file that is there but is no process list is not this project's: ValueError, and it
    is left as it is."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, []  # none yet: it is written anew
    try:
        items = json.loads(text)
    except ValueError:
        items = None
    if isinstance(items, dict) and isinstance(items.get("processes"), list):
        return items, list(items["processes"])
    if isinstance(items, list):
        return {}, list(items)
    raise ValueError(f"{path} is not a simulated process list (simnvml/processes.py); "
                     "it was left as it is")


def _alive(item: dict[str, Any]) -> bool:
    """Whether a listed process still runs (entries of ended kernels are dropped)."""
    try:
        return psutil.pid_exists(int(item["pid"]))
    except (KeyError, TypeError, ValueError):
        return False


def _write(path: Path, wrapper: dict[str, Any], processes: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    content = {**wrapper, "processes": processes} if wrapper else processes
    handle, temporary = tempfile.mkstemp(prefix=".simulated-processes-", dir=path.parent)
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        json.dump(content, file, indent=1)
    os.replace(temporary, path)


def _others(path: Path, pid: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    wrapper, listed = _listed(path)
    return wrapper, [item for item in listed if isinstance(item, dict)
                     and item.get("pid") != pid and _alive(item)]


def hold_gpu(gpu: int = 0, gib: float = 4.0, busy_pct: int = 0) -> str:
    """List this process on simulated GPU ``gpu`` holding ``gib`` GiB, with ``busy_pct``%
    of its SMs (0: idle), until it exits; returns what it did, in words."""
    if not 0 <= busy_pct <= 100:
        raise ValueError(f"busy_pct must be from 0 to 100, got {busy_pct}")
    path = simulated_processes_file()
    pid = os.getpid()
    wrapper, others = _others(path, pid)
    held = SimulatedProcess(int(gpu), pid, int(gib * GIB), sm_pct=int(busy_pct),
                            memory_pct=int(busy_pct) // 2, until_exit=True)
    _write(path, wrapper, [*others, held.to_json()])
    doing = f"{busy_pct}% of its SMs busy" if busy_pct else "no GPU work"
    return (f"the simulated driver lists pid {pid} on GPU {gpu} with {gib:g} GiB and {doing} "
            f"until it exits ({path})")


def release_gpu() -> str:
    """Stop listing this process as a GPU holder; returns what it did, in words."""
    path = simulated_processes_file()
    wrapper, others = _others(path, os.getpid())
    _write(path, wrapper, others)
    return f"the simulated driver no longer lists pid {os.getpid()} ({path})"


def simulating(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this environment's dashboard simulates its GPUs (``NVDASHBOARD_SIMULATE``, read
    as the server reads it): a kernel started by that JupyterLab shares its environment."""
    return load_config([], environ).simulation.gpu_count > 0


class SimulatedTrainingGpu:
    """A training run's simulated GPU: listed on ``gpu`` with ``gib`` GiB, and no work, from
    ``with`` to its end; in between, ``step`` (the run's ``on_iteration``) reads each timed
    step's event, and once every ``every_s`` the holder's SM share becomes what those steps
    kept the device working in that time (the driver samples once a second), as a real GPU
    reports it: the time kernels ran over the wall time."""

    def __init__(self, gpu: int = 0, gib: float = 1.0, every_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.gpu, self.gib, self.every_s, self.clock = gpu, gib, every_s, clock
        self.said: list[int] = []  # each busy_pct told the driver while training
        self._since = self.clock()
        self._worked_s = 0.0

    def __enter__(self) -> SimulatedTrainingGpu:
        hold_gpu(self.gpu, self.gib, busy_pct=0)  # start-up and warm-up: no steps yet
        self._since, self._worked_s = self.clock(), 0.0
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        # Trained: the kernel keeps its memory, as a framework keeps its context.
        hold_gpu(self.gpu, self.gib, busy_pct=0)

    def step(self, iteration: Mapping[str, Any]) -> None:
        share = device_share(iteration)
        if share is not None:
            self._worked_s += share * iteration["ms"] / 1000.0
        now = self.clock()
        if now - self._since >= self.every_s:
            busy = min(100, round(100 * self._worked_s / (now - self._since)))
            hold_gpu(self.gpu, self.gib, busy_pct=busy)
            self.said.append(busy)
            self._since, self._worked_s = now, 0.0

    def summary(self) -> str:
        """What it told the driver while training, in words."""
        if not self.said:
            return "the simulated GPU was told nothing: the timed steps took under a second"
        said = sorted(self.said)
        return (f"simulated GPU {self.gpu} told {said[len(said) // 2]}% busy (median of "
                f"{len(said)} s, {said[0]}-{said[-1]}%)")
