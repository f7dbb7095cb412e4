"""What a /Cluster-GPUs catch-up costs per window, at 64 nodes x 8 GPUs with a full history.

Fills a cluster reader's history (``ClusterView``) with ``--seconds`` polls of ``--hosts``
made-up hosts of ``--gpus`` GPUs each, through the workers' wire format and the reader's
own ``ClusterState`` (``tests/support/cluster_page.py``), then, for each window the page
offers, times the catch-up frame a new page gets (``Broadcaster.subscribe``: the feed's
rows, their reduction to columns, the encode) and prints its size, rows and time as the
median and range of ``--repeats``. Side by side: as shipped (over 10 and 30 minutes a column
is a GPU's mean over 2.5 and 7.5 s) and one column per tick (the feed's buckets off). Run
from the project root::

    python benchmarks/cluster_windows.py [--hosts 64] [--gpus 8] [--seconds 1800] [--repeats 5]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jupyterlab_nvdashboard.apps.cluster import (  # noqa: E402
    CLUSTER_PATH,
    ClusterFeeds,
    cluster_windows,
)
from jupyterlab_nvdashboard.cluster.view import ClusterView  # noqa: E402
from jupyterlab_nvdashboard.stream.broadcaster import Broadcaster  # noqa: E402
from jupyterlab_nvdashboard.stream.frames import decode  # noqa: E402
from tests.support.cluster_page import fill_cluster_history  # noqa: E402


class _Page:
    def send(self, frame: bytes) -> None:
        pass

    def close(self, code: int | None = None, reason: str | None = None) -> None:
        pass


class _EveryTick(ClusterFeeds):
    """The same feeds with one column per tick over every window (the buckets off)."""

    def __call__(self, path: str):  # noqa: ANN204 - a ClusterFeed or None
        feed = super().__call__(path)
        if feed is not None:
            object.__setattr__(feed, "bucket_seconds", lambda window_s, interval_s: 0.0)
        return feed


def figure(values: list[float], unit: str, scale: float = 1.0) -> str:
    values = [v * scale for v in values]
    return f"{statistics.median(values):.1f}{unit} ({min(values):.1f}-{max(values):.1f})"


def catch_ups(view: ClusterView, feeds: ClusterFeeds, repeats: int) -> dict[float, tuple]:
    windows = cluster_windows(view)
    out = {}
    for window_s in windows:
        times, frame = [], b""
        for _ in range(repeats):
            # A family with no page yet: its first page's catch-up is built from scratch.
            broadcaster = Broadcaster(view.history, view.interval_s, feeds, windows)
            started = time.perf_counter()
            frame = broadcaster.subscribe(CLUSTER_PATH, window_s, -1, _Page())
            times.append(time.perf_counter() - started)
        out[window_s] = (len(frame), decode(frame)[0]["rows"], times)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=1800)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    view = ClusterView("tcp://127.0.0.1:9")
    hosts = {f"node-{i:03d}": (args.gpus, True) for i in range(args.hosts)}
    started = time.perf_counter()
    fill_cluster_history(view, hosts, args.seconds, lambda host, gpu, age: (age * 7 + gpu) % 100)
    print(f"{platform.machine()}, Python {platform.python_version()}: {args.hosts} hosts x "
          f"{args.gpus} GPUs, {len(view.history.window(view.history_s))} polls in the history "
          f"(filled in {time.perf_counter() - started:.0f} s); {args.repeats} catch-ups each")
    shipped = catch_ups(view, ClusterFeeds(view), args.repeats)
    every_tick = catch_ups(view, _EveryTick(view), args.repeats)
    print("| window | as shipped: MB, rows, build + encode | one column per tick: MB, rows, "
          "build + encode |")
    print("|---|---|---|")
    for window_s, (size, rows, times) in shipped.items():
        size_all, rows_all, times_all = every_tick[window_s]
        print(f"| {window_s / 60:g} min | {size / 1e6:.1f} MB, {rows} rows, "
              f"{figure(times, ' ms', 1e3)} | {size_all / 1e6:.1f} MB, {rows_all} rows, "
              f"{figure(times_all, ' ms', 1e3)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
