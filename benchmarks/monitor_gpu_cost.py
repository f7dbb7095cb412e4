"""What the monitor costs a GPU: NVML call latency per function the reader calls, and a CUDA
workload's slowdown with the sampler off and at 1 s, 200 ms and 50 ms.

The monitor here is the server's own sampler (``composition.create_metrics``: the core
reader, GPM, health, the process lists and their owners), in a process of its own as in
real use, so it competes with the workload for the driver and the GPU, not for the
workload's GIL. There is one such process per interval, each with NVML started, alive for
the whole run; in each condition at most one of them samples. Which NVML functions it
calls is not written down anywhere in this script: the session's choke point
(``NvmlSession.observe``) reports every call the reader makes, with its duration, and
those calls are the list.

1. **NVML call latency** on an idle GPU: the monitor runs at the shortest interval for
   ``--latency-seconds``; per function, the calls per second, median, p99 and max of the
   call's duration as the reader sees it (the binding included), and the same figures
   under load (every monitor run of part 2 together). Functions called only while the
   reader starts (static facts) are listed apart.
2. **Slowdown of a workload**: a kernel-launch-bound loop (one tiny in-place add per
   iteration, synchronised at the end) and a large matmul loop, each sized to take
   ``--seconds`` with the monitor off, run with the monitor off, then at each
   ``--intervals`` value, in interleaved rounds (off, 1 s, 200 ms, 50 ms, off, ...), so
   drift in the machine hits every condition alike. Per round, a condition's time over the
   same round's "off" time is its slowdown ratio; the script prints their median and range
   over the rounds, the noise floor (half the range of the "off" times, as a fraction of
   their median: a slowdown smaller than it cannot be seen), the monitor's NVML calls per
   second and the share of each second spent inside NVML calls.
3. **The schedule it supports**: for a budget of 0.5 % (``--budget``), the shortest
   interval whose median slowdown stays within the budget for both workloads, with every
   longer interval also within it; or why none can be named (see benchmarks/README.md).

On a GPU machine (torch with CUDA, else CuPy; nvidia-ml-py)::

    python benchmarks/monitor_gpu_cost.py --json "$OUT/gpu_cost.json"      # about 3 min

With ``--simulate N`` (no GPU needed) it runs over the simulated driver, with a CPU
stand-in for the CUDA workload (NumPy on the host, labelled as such: its ratios are the
monitor's competition for this host's CPU, not its cost on a GPU). That run tests the
script (``tests/test_monitor_gpu_cost.py``)::

    python benchmarks/monitor_gpu_cost.py --simulate 4 --rounds 3 --seconds 1 --latency-seconds 5

The JSON goes to ``--json FILE``, else to ``$OUT/gpu_cost.json`` when ``$OUT`` is set. It
exits 0 when it ran, whatever the figures say (it is a measurement), and 2 with one line
when it cannot run (no NVML, no GPU, a bad setting).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import signal
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.figures import percentile, write_json  # noqa: E402
from jupyterlab_nvdashboard.composition import create_metrics  # noqa: E402
from jupyterlab_nvdashboard.config import Config, ConfigError, load_config  # noqa: E402
from jupyterlab_nvdashboard.metrics import NvmlState  # noqa: E402

INTERVALS_S = (1.0, 0.2, 0.05)
BUDGET = 0.005  # the issue's: the sampler may cost a GPU workload at most 0.5 %
OFF = "off"
MIN_ROUNDS = 3  # fewer "off" runs give no noise floor worth the name
READY_TIMEOUT_S = 300.0  # NVML's first init can take minutes on a large machine
CPU_STAND_IN = ("cpu stand-in: NumPy on the host, no GPU; its ratios are the monitor's "
                "competition for this host's CPU, not its cost on a GPU")


class CannotRun(Exception):
    """A prerequisite is missing; the message is the one line printed."""


# ----- the monitor, in a process of its own ---------------------------------------------
class CallLog:
    """Every NVML call the session reports: function -> durations in seconds."""

    def __init__(self) -> None:
        self.calls: dict[str, list[float]] = {}

    def heard(self, function: str, seconds: float) -> None:
        durations = self.calls.get(function)
        if durations is None:
            durations = self.calls.setdefault(function, [])
        durations.append(seconds)

    def take(self) -> dict[str, list[float]]:
        """The calls so far; later calls start a new log (one assignment, so the sampler's
        threads never see a half-swapped log)."""
        taken, self.calls = self.calls, {}
        return taken


def monitor_config(interval_s: float, simulate: int, profile: str | None) -> Config:
    """The server's settings at ``interval_s`` (the environment's NVDASHBOARD_* included),
    over ``simulate`` simulated GPUs when it is not 0."""
    argv = ["--interval", repr(interval_s)]
    if simulate:
        argv += ["--simulate", str(simulate)]
    if profile:
        argv += ["--simulate-profile", profile]
    return load_config(argv)


def run_monitor(interval_s: float, simulate: int, profile: str | None,
                connection: Connection) -> None:
    """The child process: start NVML and read the static facts, say so, then run the
    server's sampler from each "start" to the next "stop" and send back every NVML call it
    made in between, until "exit"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it closes us
    try:
        metrics = create_metrics(monitor_config(interval_s, simulate, profile))
    except ConfigError as error:
        connection.send({"ready": False, "why": str(error)})
        return
    log = CallLog()
    nvml = metrics.nvml
    nvml.session.observe(log.heard)
    nvml.ensure_initialized()  # NVML's init and the static facts: start-up, once
    if nvml.state is not NvmlState.OK or not nvml.facts:
        connection.send({"ready": False, "why": nvml.message})
        return
    startup = log.take()
    connection.send({
        "ready": True, "simulated": metrics.simulated, "versions": dict(nvml.versions),
        "devices": [{"label": f.label, "name": f.name, "kind": f.kind} for f in nvml.facts],
    })
    while connection.recv() == "start":
        metrics.start()  # one pass, then the sampler's threads
        started = time.perf_counter()
        # The first pass also reads what each family reads once (health's maximum clocks
        # and thresholds, GPM's buffers, the XID event set): start-up as well, the first
        # time; a restart's first pass is left out of the timed part.
        first_pass = log.take()
        if startup is not None:
            for function, durations in first_pass.items():
                startup.setdefault(function, []).extend(durations)
        connection.send({"started": True})
        connection.recv()  # "stop"
        seconds = time.perf_counter() - started
        calls = log.take()
        ticks, late = metrics.sampler.ticks, metrics.sampler.late_ticks
        metrics.stop()
        connection.send({"startup": startup, "calls": calls, "seconds": seconds,
                         "ticks": ticks, "late_ticks": late})
        startup = None
        metrics.sampler.ticks = metrics.sampler.late_ticks = 0


class Monitor:
    """The server's sampler at one interval, in a child process of its own (as in real use:
    it competes with the workload for the driver and the GPU, not for its GIL). ``launch``
    starts NVML there; each ``start`` .. ``stop`` is one sampling run."""

    def __init__(self, interval_s: float, simulate: int, profile: str | None) -> None:
        self.interval_s = interval_s
        context = multiprocessing.get_context("spawn")  # no CUDA context or threads inherited
        self._connection, child = context.Pipe()
        self._process = context.Process(target=run_monitor, name="nvdashboard-monitor",
                                        args=(interval_s, simulate, profile, child), daemon=True)

    def launch(self) -> None:
        """Start the process; it starts NVML (``opened`` waits for it)."""
        self._process.start()

    def opened(self) -> dict[str, Any]:
        """The devices and versions it found, once NVML has started there."""
        ready = self._receive(READY_TIMEOUT_S)
        if not ready.get("ready"):
            self.close()
            raise CannotRun(str(ready.get("why", "the monitor could not start")))
        return ready

    def start(self) -> None:
        """Sampling from now (its first pass done) until ``stop``."""
        self._connection.send("start")
        self._receive(READY_TIMEOUT_S)

    def stop(self) -> dict[str, Any]:
        """What the run called, and for how long; the sampler's threads have ended."""
        self._connection.send("stop")
        return self._receive(READY_TIMEOUT_S)

    def close(self) -> None:
        """End the process: "exit" (twice: once more in case it was sampling and takes the
        first as "stop"), then kill it if it has not gone."""
        if self._process.is_alive():
            try:
                self._connection.send("exit")
                self._connection.send("exit")
            except OSError:
                pass
            self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        if not self._connection.poll(timeout_s):
            self.close()
            raise CannotRun(f"the monitor did not answer within {timeout_s:.0f} s")
        try:
            return self._connection.recv()
        except EOFError:
            self.close()
            raise CannotRun(f"the monitor process ended (exit code {self._process.exitcode})"
                            ) from None


# ----- the workload ---------------------------------------------------------------------
@dataclass
class Workload:
    """One timed loop: ``run(n)`` runs ``n`` iterations, waits for the device, returns
    seconds."""

    name: str
    what: str
    run: Callable[[int], float]
    iterations: int = 1

    def calibrate(self, seconds: float) -> None:
        """Choose ``iterations`` so one run takes about ``seconds`` (monitor off)."""
        self.run(2)  # warm-up: kernels compiled, allocations cached
        n = 1
        while True:
            took = self.run(n)
            if took >= min(0.2, seconds / 2) or n >= 1 << 26:
                break
            n *= 4
        took = min([took, self.run(n), self.run(n)])  # a busy moment must not halve the runs
        self.iterations = max(1, round(n * seconds / max(took, 1e-9)))

    def timed(self) -> float:
        return self.run(self.iterations)


def _timer(step: Callable[[], None], sync: Callable[[], None]) -> Callable[[int], float]:
    def run(n: int) -> float:
        sync()
        started = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        return time.perf_counter() - started

    return run


def torch_workloads(matmul_size: int) -> tuple[str, list[Workload]] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    device = torch.device("cuda", 0)
    counter = torch.zeros(1, device=device)
    a = torch.randn(matmul_size, matmul_size, device=device)
    b = torch.randn(matmul_size, matmul_size, device=device)
    out = torch.empty_like(a)
    sync = torch.cuda.synchronize
    label = (f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
             f"{torch.cuda.get_device_name(device)}")
    return label, [
        Workload("launch_bound", "counter.add_(1) on a 1-element tensor: one kernel each",
                 _timer(lambda: counter.add_(1.0), sync)),
        Workload("matmul", f"torch.matmul float32 {matmul_size}x{matmul_size}",
                 _timer(lambda: torch.matmul(a, b, out=out), sync)),
    ]


def cupy_workloads(matmul_size: int) -> tuple[str, list[Workload]] | None:
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:  # ImportError, or CUDARuntimeError without a driver
        return None
    counter = cupy.zeros(1, dtype=cupy.float32)
    a = cupy.random.standard_normal((matmul_size, matmul_size), dtype=cupy.float32)
    b = cupy.random.standard_normal((matmul_size, matmul_size), dtype=cupy.float32)
    out = cupy.empty_like(a)
    sync = cupy.cuda.Device(0).synchronize

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    label = f"cupy {cupy.__version__}, {name.decode() if isinstance(name, bytes) else name}"
    return label, [
        Workload("launch_bound", "counter += 1 on a 1-element array: one kernel each",
                 _timer(lambda: cupy.add(counter, 1.0, out=counter), sync)),
        Workload("matmul", f"cupy.matmul float32 {matmul_size}x{matmul_size}",
                 _timer(lambda: cupy.matmul(a, b, out=out), sync)),
    ]


def cpu_workloads(matmul_size: int) -> tuple[str, list[Workload]]:
    import numpy as np

    counter = np.zeros(1, dtype=np.float32)
    a = np.random.default_rng(0).standard_normal((matmul_size, matmul_size), dtype=np.float32)
    b = a.T.copy()
    out = np.empty_like(a)

    def add() -> None:
        np.add(counter, 1.0, out=counter)

    def nothing() -> None:
        pass

    return f"{CPU_STAND_IN} (NumPy {np.__version__})", [
        Workload("launch_bound", "np.add on a 1-element array (stands in for a tiny kernel)",
                 _timer(add, nothing)),
        Workload("matmul", f"np.matmul float32 {matmul_size}x{matmul_size} on the CPU",
                 _timer(lambda: np.matmul(a, b, out=out), nothing)),
    ]


def choose_workloads(backend: str, gpu_matmul: int, cpu_matmul: int
                     ) -> tuple[str, bool, list[Workload]]:
    """(label, on a GPU, workloads) for ``backend``: auto, torch, cupy or cpu."""
    makers = {"torch": torch_workloads, "cupy": cupy_workloads}
    for name in (("torch", "cupy") if backend == "auto" else (backend,)):
        if name == "cpu":
            break
        made = makers[name](gpu_matmul)
        if made is not None:
            return made[0], True, made[1]
        if backend != "auto":
            raise CannotRun(f"{name} cannot reach a CUDA GPU here")
    label, workloads = cpu_workloads(cpu_matmul)
    return label, False, workloads


# ----- figures ----------------------------------------------------------------------------
def latency_us(durations_s: Sequence[float]) -> dict[str, float]:
    values = [d * 1e6 for d in durations_s]
    return {"n": len(values), "median_us": statistics.median(values),
            "p99_us": percentile(values, 0.99), "max_us": max(values)}


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def merge_calls(runs: Sequence[dict[str, list[float]]]) -> dict[str, list[float]]:
    merged: dict[str, list[float]] = {}
    for calls in runs:
        for function, durations in calls.items():
            merged.setdefault(function, []).extend(durations)
    return merged


def function_table(idle: dict[str, Any], under_load: dict[str, list[float]],
                   startup: dict[str, list[float]], seconds: float,
                   per_interval: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per NVML function the reader called: when, how often, and how long each call took."""
    functions: dict[str, Any] = {}
    for function in sorted(set(idle) | set(under_load) | set(startup)):
        recurring = function in idle or function in under_load
        functions[function] = {
            "when": "recurring" if recurring else "start-up only",
            "idle": latency_us(idle[function]) if function in idle else None,
            "under_load": latency_us(under_load[function]) if function in under_load else None,
            "startup": latency_us(startup[function]) if function in startup else None,
            "calls_per_s_idle": len(idle.get(function, ())) / seconds,
            "calls_per_s": {key: figures["calls_per_s_by_function"].get(function, 0.0)
                            for key, figures in per_interval.items()},
        }
    return functions


def interval_key(interval_s: float) -> str:
    return f"{interval_s:g}"


def monitor_figures(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Calls per second (each function's and all), and the share of wall time inside NVML
    calls, over one interval's monitor runs."""
    seconds = sum(run["seconds"] for run in runs)
    calls = merge_calls([run["calls"] for run in runs])
    by_function = {f: len(d) / seconds for f, d in sorted(calls.items(),
                                                           key=lambda kv: -len(kv[1]))}
    time_by_function = {f: sum(d) / seconds for f, d in sorted(calls.items(),
                                                               key=lambda kv: -sum(kv[1]))}
    return {"seconds": seconds, "calls_per_s": sum(by_function.values()),
            "calls_per_s_by_function": by_function,
            "nvml_time_fraction": sum(time_by_function.values()),
            "nvml_time_fraction_by_function": time_by_function,
            "late_ticks": sum(run["late_ticks"] for run in runs),
            "ticks": sum(run["ticks"] for run in runs)}


def slowdowns(times: dict[str, dict[str, list[float]]], intervals: Sequence[float]
              ) -> dict[str, Any]:
    """Per workload: each interval's per-round ratio to the same round's "off" time
    (median, range), and the noise floor: half the range of the "off" times as a fraction
    of their median (a zero slowdown looks like 1 +/- that)."""
    out: dict[str, Any] = {}
    for workload, by_condition in times.items():
        off = by_condition[OFF]
        noise = (max(off) - min(off)) / 2 / statistics.median(off)
        ratios = {}
        for interval_s in intervals:
            key = interval_key(interval_s)
            ratios[key] = spread([t / o for t, o in zip(by_condition[key], off, strict=True)])
        out[workload] = {"off_seconds": spread(off), "off_noise_fraction": noise,
                         "ratios": ratios}
    return out


def schedule_decision(slowdown: dict[str, Any], intervals: Sequence[float], budget: float,
                      default_interval_s: float, monitor: dict[str, Any],
                      rounds: int) -> dict[str, Any]:
    """The shortest interval whose median slowdown (ratio - 1) is within ``budget`` for every
    workload, every longer interval being within it too. The verdict says when the run
    cannot tell (fewer than ``MIN_ROUNDS`` rounds, or a noise floor above the budget), and
    names the function that holds the driver longest when no interval fits."""
    noise = max(figures["off_noise_fraction"] for figures in slowdown.values())
    within: dict[str, bool] = {}
    for interval_s in intervals:
        key = interval_key(interval_s)
        within[key] = all(figures["ratios"][key]["median"] - 1.0 <= budget
                          for figures in slowdown.values())
    supported = None
    for interval_s in sorted(intervals, reverse=True):  # longest first: stop at a miss
        if not within[interval_key(interval_s)]:
            break
        supported = interval_s
    costliest = {key: next(iter(figures["nvml_time_fraction_by_function"]), None)
                 for key, figures in monitor.items()}
    resolvable = rounds >= MIN_ROUNDS and noise <= budget
    decision = {"budget_fraction": budget, "noise_fraction": noise, "rounds": rounds,
                "resolvable": resolvable, "within_budget": within,
                "default_interval_s": default_interval_s,
                "shortest_interval_within_budget_s": supported,
                "most_nvml_time": costliest}
    if supported is None:
        longest = interval_key(max(intervals))
        verdict = (f"no interval measured keeps the slowdown within {budget:.1%}; at "
                   f"{longest} s the driver spends the most time in {costliest[longest]}")
    elif supported <= default_interval_s:
        verdict = (f"the default {default_interval_s:g} s is within {budget:.1%} "
                   f"(every interval measured from {supported:g} s up is)")
    else:
        verdict = (f"the default {default_interval_s:g} s costs more than {budget:.1%}; "
                   f"{supported:g} s is the shortest interval measured within it")
    if not resolvable:
        why = (f"{rounds} round(s), fewer than {MIN_ROUNDS}" if rounds < MIN_ROUNDS else
               f"the 'off' runs vary by +/-{noise:.2%}, more than the budget")
        verdict = (f"unresolved ({why}; run more --rounds or longer --seconds); "
                   f"tentatively: {verdict}")
    decision["verdict"] = verdict
    return decision


# ----- the run ---------------------------------------------------------------------------
def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    intervals = sorted(set(args.intervals), reverse=True)
    # One process per interval for the whole run, NVML started in each before anything is
    # timed: every condition, "off" included, has the same processes alive, and only
    # whether one of them samples differs.
    monitors = {interval_key(i): Monitor(i, args.simulate, args.simulate_profile)
                for i in intervals}
    try:
        for monitor in monitors.values():
            monitor.launch()  # side by side: NVML's start can take a while
        ready = {key: monitor.opened() for key, monitor in monitors.items()}
        return measure_with(args, intervals, monitors, next(iter(ready.values())))
    finally:
        for monitor in monitors.values():
            monitor.close()


def measure_with(args: argparse.Namespace, intervals: list[float],
                 monitors: dict[str, Monitor], ready: dict[str, Any]) -> dict[str, Any]:
    # Part 1: the reader's calls on an idle device, at the shortest interval.
    shortest = interval_key(min(intervals))
    progress(f"NVML latency: the monitor at {shortest} s for {args.latency_seconds:g} s")
    monitors[shortest].start()
    time.sleep(args.latency_seconds)
    idle_run = monitors[shortest].stop()
    simulated = bool(ready["simulated"])
    label, on_gpu, workloads = choose_workloads(
        "cpu" if simulated and args.workload == "auto" else args.workload,
        args.matmul_size, args.cpu_matmul_size)
    progress(f"workload: {label}")
    for workload in workloads:
        workload.calibrate(args.seconds)
        progress(f"  {workload.name}: {workload.iterations} iterations per run")

    # Part 2: interleaved rounds: off, then each interval, and again.
    conditions = [OFF, *(interval_key(i) for i in intervals)]
    times: dict[str, dict[str, list[float]]] = {
        w.name: {condition: [] for condition in conditions} for w in workloads}
    runs: dict[str, list[dict[str, Any]]] = {interval_key(i): [] for i in intervals}
    for round_number in range(1, args.rounds + 1):
        for condition in conditions:
            monitor = monitors.get(condition)
            if monitor is not None:
                monitor.start()
            for workload in workloads:
                times[workload.name][condition].append(workload.timed())
            if monitor is not None:
                runs[condition].append(monitor.stop())
        progress(f"round {round_number}/{args.rounds} done")

    per_interval = {key: monitor_figures(interval_runs) for key, interval_runs in runs.items()}
    slowdown = slowdowns(times, intervals)
    default_interval_s = Config().interval_s
    report: dict[str, Any] = {
        "machine": {"host": platform.node(), "cores": os.cpu_count(), "arch": platform.machine(),
                    "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")},
        "driver": "simulated" if simulated else "real",
        "versions": ready["versions"],
        "devices": ready["devices"],
        "workload_backend": label,
        "workload_on_gpu": on_gpu,
        "workloads": {w.name: {"what": w.what, "iterations": w.iterations} for w in workloads},
        "settings": {"intervals_s": intervals, "rounds": args.rounds, "seconds": args.seconds,
                     "latency_seconds": args.latency_seconds},
        "nvml_functions": function_table(idle_run["calls"],
                                         merge_calls([r["calls"] for rs in runs.values()
                                                      for r in rs]),
                                         idle_run["startup"], idle_run["seconds"], per_interval),
        "monitor": per_interval,
        "slowdown": slowdown,
    }
    report["schedule"] = schedule_decision(slowdown, intervals, args.budget, default_interval_s,
                                           per_interval, args.rounds)
    return report


def tables(report: dict[str, Any]) -> str:
    keys = [interval_key(i) for i in report["settings"]["intervals_s"]]
    head = (f"# {report['driver']} NVML driver {report['versions'].get('driver', '')}, "
            f"{len(report['devices'])} device(s): "
            f"{', '.join(sorted({d['name'] for d in report['devices']}))}\n"
            f"# workload: {report['workload_backend']}\n")
    idle_interval = interval_key(min(report["settings"]["intervals_s"]))
    lines = [head, "## NVML calls the reader made: latency as the reader sees it (us), idle "
             f"(monitor at {idle_interval} s, {report['settings']['latency_seconds']:g} s) and "
             "under load (the workload rounds); calls per second\n",
             f"| function | when | idle calls/s at {idle_interval} s | idle median | idle p99 "
             "| under load median | under load p99 | "
             + " | ".join(f"calls/s at {k} s" for k in keys) + " |",
             "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(keys)]

    def cell(figures: dict[str, float] | None, name: str) -> str:
        return "-" if figures is None else f"{figures[name]:.1f}"

    functions = report["nvml_functions"]
    order = sorted(functions, key=lambda f: (functions[f]["when"] != "recurring",
                                             -functions[f]["calls_per_s_idle"], f))
    for function in order:
        figures = functions[function]
        startup_only = figures["when"] != "recurring"
        idle = figures["startup"] if startup_only else figures["idle"]
        lines.append(
            f"| {function} | {figures['when']} | {figures['calls_per_s_idle']:.1f} "
            f"| {cell(idle, 'median_us')} "
            f"| {cell(idle, 'p99_us')} | {cell(figures['under_load'], 'median_us')} "
            f"| {cell(figures['under_load'], 'p99_us')} | "
            + " | ".join(f"{figures['calls_per_s'][k]:.1f}" for k in keys) + " |")
    lines += ["", "## The monitor at each interval (during the workload rounds)\n",
              "| interval s | NVML calls/s | share of wall time inside NVML calls | "
              "most called | most time inside |", "|---:|---:|---:|---|---|"]
    for key in keys:
        figures = report["monitor"][key]
        called = next(iter(figures["calls_per_s_by_function"]), "-")
        timed = figures["nvml_time_fraction_by_function"]
        top = next(iter(timed), None)
        lines.append(f"| {key} | {figures['calls_per_s']:.0f} | "
                     f"{figures['nvml_time_fraction']:.3%} | {called} | "
                     + (f"{top} ({timed[top]:.3%})" if top else "-") + " |")
    lines += ["", "## Workload slowdown with the monitor on (time / same round's 'off' time)\n",
              "| workload | 'off' s median (noise +/-) | "
              + " | ".join(f"{k} s: median (range)" for k in keys) + " |",
              "|---|---:|" + "---:|" * len(keys)]
    for workload, figures in report["slowdown"].items():
        off = figures["off_seconds"]
        lines.append(
            f"| {workload} | {off['median']:.3f} ({figures['off_noise_fraction']:.2%}) | "
            + " | ".join(f"{r['median']:.4f} ({r['min']:.4f}-{r['max']:.4f})"
                         for r in (figures["ratios"][k] for k in keys)) + " |")
    lines += ["", f"schedule: {report['schedule']['verdict']}"]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here "
                        "(default: $OUT/gpu_cost.json when $OUT is set)")
    parser.add_argument("--simulate", type=int, default=0, metavar="N",
                        help="N simulated GPUs instead of the real driver (as the server's "
                        "--simulate; NVDASHBOARD_SIMULATE works too)")
    parser.add_argument("--simulate-profile", metavar="NAME",
                        help="the simulated machine (the server's --simulate-profile)")
    parser.add_argument("--intervals", type=float, nargs="+", default=list(INTERVALS_S),
                        metavar="S", help="sampler intervals to compare with 'off'")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="length of one workload run with the monitor off")
    parser.add_argument("--latency-seconds", type=float, default=20.0,
                        help="how long part 1 reads an idle device")
    parser.add_argument("--workload", choices=("auto", "torch", "cupy", "cpu"), default="auto",
                        help="auto: torch with CUDA, else CuPy, else the CPU stand-in "
                        "(always the stand-in over the simulated driver)")
    parser.add_argument("--matmul-size", type=int, default=8192, help="n of the GPU matmul")
    parser.add_argument("--cpu-matmul-size", type=int, default=256,
                        help="n of the CPU stand-in's matmul")
    parser.add_argument("--budget", type=float, default=BUDGET,
                        help="the slowdown the monitor may cost, as a fraction")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0 or args.latency_seconds <= 0 or not args.intervals:
        parser.error("--rounds, --seconds, --latency-seconds and --intervals must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        # Settings are checked here, once, so a bad one is one line and not a child's error.
        monitor_config(min(args.intervals), args.simulate, args.simulate_profile)
        report = measure(args)
    except (CannotRun, ConfigError) as error:
        print(f"monitor_gpu_cost: cannot run: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the monitors were closed on the way out
        print("monitor_gpu_cost: interrupted", file=sys.stderr)
        return 130
    print(tables(report), flush=True)
    write_json(report, args.json, "gpu_cost.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
