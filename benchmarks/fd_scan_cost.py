"""Cost of the device-node scan (``metrics/device_nodes.py``) on the sampler's slow thread:
2,000 processes, of which 8 hold a GPU's node open, in a PID namespace of their own.

    python benchmarks/fd_scan_cost.py [--processes 2000] [--holders 8] [--repeats 50]

Needs root: it runs itself inside a new PID and mount namespace (``tests/support/pidns.py``)
with stand-in devices at ``/dev/nvidia0`` and ``/dev/nvidia1``, so the 2,000 processes are
all ``/proc`` shows (the shared machine's own processes do not count). As root the scan looks
at every process, the worst case (a user's server looks only at that user's).

Prints, side by side from one run, the median and range (min-max) per pass of:
- the steady pass the slow thread makes every second: ``/proc`` listed, the holders'
  descriptors read again, nobody new;
- the full pass made when NVML's lists change: every process's descriptors read again;
- the first pass (one sample): every process new.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's package and its test support

from benchmarks.process_pass import line, timed  # noqa: E402 - one way to time and print

INSIDE = "NVDASHBOARD_FD_SCAN_BENCHMARK_INSIDE"


def _holds(pid: int) -> bool:
    folder = f"/proc/{pid}/fd"
    try:
        return any("nvidia" in os.readlink(f"{folder}/{fd}") for fd in os.listdir(folder))
    except OSError:
        return False


def inside(processes: int, holders: int, repeats: int) -> None:
    from jupyterlab_nvdashboard.composition import create_metrics
    from jupyterlab_nvdashboard.config import Config, SimulationConfig
    from jupyterlab_nvdashboard.metrics.device_nodes import DeviceNodeScanner

    children = [subprocess.Popen(["sleep", "600"]) for _ in range(processes - holders)]
    children += [subprocess.Popen([sys.executable, "-c",
                                   f"import os, time; os.open('/dev/nvidia{i % 2}', os.O_RDWR);"
                                   " time.sleep(600)"]) for i in range(holders)]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(_holds(c.pid) for c in children[-holders:]):
            time.sleep(0.1)  # wait until every holder has its node open
        metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=2,
                                                                    profile="h200")),
                                 environ={})
        scanner = metrics.nodes
        assert scanner is not None
        metrics.start()  # the GPUs are enumerated, then the benchmark drives the scanner
        while not metrics.facts:
            time.sleep(0.05)
        metrics.stop()
        assert scanner.nodes, "no stand-in node found at /dev/nvidia<minor>"
        # A scanner that has seen nothing yet, for the first pass, over the same nodes.
        scanner, nodes = DeviceNodeScanner(metrics.nvml.session, lambda: ()), scanner.nodes
        scanner.nodes = nodes
        shown = len([name for name in os.listdir("/proc") if name.isdigit()])
        started = time.perf_counter()
        found = scanner.scan()
        first = (time.perf_counter() - started) * 1e3
        assert len(found) == holders, f"{len(found)} holders found, {holders} expected"
        listing = timed(lambda: [n for n in os.listdir("/proc") if n.isdigit()], repeats)
        steady = timed(lambda: scanner.scan(), repeats)
        full = timed(lambda: scanner.scan(full=True), max(5, repeats // 5))
        print(f"{shown} processes in /proc, {len(found)} holding a GPU node; running as "
              f"uid {os.geteuid()} (every process looked at); {os.cpu_count()} CPUs")
        print(line("listing /proc alone (floor of any pass)", listing))
        print(line("steady pass (each second, slow thread)", steady))
        print(line("full pass (NVML's lists changed)", full))
        print(line("first pass (every process new)", [first]))
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2000)
    parser.add_argument("--holders", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    if os.environ.get(INSIDE):
        inside(args.processes, args.holders, args.repeats)
        return 0
    from tests.support.pidns import PidNamespace, unavailable

    reason = unavailable()
    if reason:
        print(f"fd_scan_cost: {reason}", file=sys.stderr)
        return 2
    with PidNamespace(gpus=2) as ns:
        done = subprocess.run(ns.command([sys.executable, __file__, *sys.argv[1:]], str(ROOT)),
                              env={**os.environ, INSIDE: "1"}, check=False)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
