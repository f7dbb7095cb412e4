"""What NVML's PCIe readings say during a host-to-device and a device-to-host copy loop.

``gpu_truth.py`` found the reader's PCIe rates far below the copy loop's own bytes/s on an
H200. This reads, every ``--every`` seconds while each loop runs on GPU 0, two of NVML's
PCIe sources straight from nvidia-ml-py (not through the reader):

* the byte counters ``NVML_FI_DEV_PCIE_COUNT_TX_BYTES`` / ``_RX_BYTES`` (field values), raw;
* ``nvmlDeviceGetPcieThroughput`` (KB/s over a 20 ms sample).

The third, GPM's ``NVML_GPM_METRIC_PCIE_TX_PER_SEC`` / ``_RX_PER_SEC``, is what the reader
reports where the counters are 32 bits wide; ``gpu_truth.py`` checks it through the reader.

It also times a read of the two counters on the idle GPU (the reader makes one per GPU per
tick). It prints each source's median rate per loop beside the loop's own bytes/s, and the raw
counter values of the first reads (to see their width and whether they wrap), and writes
them to ``$OUT/pcie_counters_probe.json``. Needs CuPy, nvidia-ml-py and a GPU; exits 2
with one line otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per copy direction")
    parser.add_argument("--every", type=float, default=0.05, help="seconds between reads")
    parser.add_argument("--mib", type=int, default=256, help="the pinned buffer's size")
    args = parser.parse_args()
    try:
        import cupy
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as error:  # noqa: BLE001 - any missing part: say which, in one line
        print(f"pcie_counters_probe: cannot run: {type(error).__name__}: {error}")
        return 2
    fields = [pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES]
    size = args.mib << 20
    host = cupy.cuda.alloc_pinned_memory(size)
    device = cupy.cuda.alloc(size)
    stream = cupy.cuda.Stream(non_blocking=True)
    results: dict[str, Any] = {"device": pynvml.nvmlDeviceGetName(handle),
                               "driver": pynvml.nvmlSystemGetDriverVersion()}

    def copy_loop(direction: str, stop: threading.Event, moved: list[float]) -> None:
        with stream:
            start = time.perf_counter()
            count = 0
            while not stop.is_set():
                if direction == "h2d":
                    device.copy_from_host_async(host.ptr, size, stream)
                else:
                    device.copy_to_host_async(host.ptr, size, stream)
                count += 1
                if count % 8 == 0:
                    stream.synchronize()
            stream.synchronize()
            moved.append(count * size / (time.perf_counter() - start))

    latencies = []
    for _ in range(100):  # what one read of the two counters costs, the GPU idle
        start = time.perf_counter()
        pynvml.nvmlDeviceGetFieldValues(handle, fields)
        latencies.append((time.perf_counter() - start) * 1e6)
        time.sleep(0.01)
    latencies.sort()
    results["field_values_us"] = {"median": statistics.median(latencies),
                                  "p99": latencies[98], "max": latencies[-1]}
    print(f"nvmlDeviceGetFieldValues(PCIe TX, RX), idle: median "
          f"{results['field_values_us']['median']:.1f} us, p99 {latencies[98]:.1f} us")
    for direction in ("h2d", "d2h"):
        stop, moved = threading.Event(), []
        worker = threading.Thread(target=copy_loop, args=(direction, stop, moved))
        worker.start()
        time.sleep(0.5)
        reads = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            now = time.monotonic()
            values = pynvml.nvmlDeviceGetFieldValues(handle, fields)
            counters = [(v.nvmlReturn, v.value.ullVal, v.timestamp) for v in values]
            tx_kb = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)
            rx_kb = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES)
            reads.append({"t": now, "counters": counters, "tx_kb_s": tx_kb, "rx_kb_s": rx_kb})
            time.sleep(args.every)
        stop.set()
        worker.join()
        rates: dict[str, list[float]] = {"counter_tx": [], "counter_rx": [],
                                         "counter_tx_by_timestamp": [],
                                         "counter_rx_by_timestamp": []}
        for before, after in zip(reads, reads[1:], strict=False):
            wall = after["t"] - before["t"]
            for position, name in enumerate(("tx", "rx")):
                (rc0, v0, ts0), (rc1, v1, ts1) = before["counters"][position], \
                    after["counters"][position]
                if rc0 == rc1 == 0 and v1 >= v0:
                    rates[f"counter_{name}"].append((v1 - v0) / wall)
                    if ts1 > ts0:  # NVML's own timestamps, in microseconds
                        rates[f"counter_{name}_by_timestamp"].append(
                            (v1 - v0) / ((ts1 - ts0) / 1e6))
        summary = {key: statistics.median(values) if values else None
                   for key, values in rates.items()}
        summary["throughput_tx"] = statistics.median(r["tx_kb_s"] for r in reads) * 1000
        summary["throughput_rx"] = statistics.median(r["rx_kb_s"] for r in reads) * 1000
        summary["throughput_tx_x1024"] = summary["throughput_tx"] * 1.024
        summary["copy_loop"] = moved[0] if moved else None
        summary["reads"] = len(reads)
        summary["first_counters"] = [r["counters"] for r in reads[:8]]
        summary["counter_decreases"] = sum(
            1 for before, after in zip(reads, reads[1:], strict=False)
            for position in (0, 1)
            if after["counters"][position][1] < before["counters"][position][1])
        results[direction] = summary
        print(f"{direction}: copy loop {summary['copy_loop'] / 1e9:.2f} GB/s; "
              + ", ".join(f"{key} {value / 1e9:.3f} GB/s" for key, value in summary.items()
                          if key.startswith(("counter_t", "counter_r", "throughput"))
                          and isinstance(value, float))
              + f"; counter decreases {summary['counter_decreases']} in {len(reads)} reads")
        print("  first raw counters (return, value, timestamp us):",
              summary["first_counters"][:4])
    out = Path(os.environ.get("OUT") or ".") / "pcie_counters_probe.json"
    out.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
