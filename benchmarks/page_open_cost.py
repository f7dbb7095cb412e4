"""What opening a dashboard costs the server: its CPU time per page request, per route.

Each page request makes the server build that route's Bokeh document, which is most of what
a new viewer costs it (and most of what the suite's page tests cost). Starts
``python -m jupyterlab_nvdashboard.server PORT --simulate 4`` from each tree, waits for its
first GPU read, measures its idle CPU rate, then requests every route ``--opens`` times,
one after another, and takes the server's CPU time around them, less its idle rate over
that time, per request::

    python benchmarks/page_open_cost.py [--opens 10] [--rounds 3] [--baseline REF]
        [--routes /GPU-Health,/GPU-Activity] [--json FILE]

With ``--baseline``, each round measures the baseline and this tree one after the other,
alternating which goes first, so both see the same machine; the table gives each route's
median and range over the rounds, and the ratio of medians. A route one tree does not
serve is left out for that tree.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.dashboard_overhead import ServerUnderTest, served_routes  # noqa: E402
from benchmarks.figures import spread, write_json  # noqa: E402
from benchmarks.revision import revision_worktree  # noqa: E402
from tests.support.servers import get  # noqa: E402

IDLE_S = 3.0


def request(url: str) -> None:
    status, _ = get(url)
    if status != 200:
        raise RuntimeError(f"{url} answered {status}")


def measure_tree(source: Path, routes: list[str] | None, opens: int) -> dict[str, float]:
    """Route -> the server's CPU ms per page request, on a server from ``source``."""
    server = ServerUnderTest(source, interval_s=0.2)
    try:
        served = list(served_routes(server.url))  # once the GPUs have been read
        for route in served:  # the first build of each route pays for lazy imports
            request(server.url + route)
        cpu, start = server.cpu_s(), time.monotonic()
        time.sleep(IDLE_S)
        idle_rate = (server.cpu_s() - cpu) / (time.monotonic() - start)
        figures = {}
        for route in [r for r in (routes or served) if r in served]:
            # Timed over all the requests together: the kernel counts CPU time in 10 ms ticks.
            cpu, start = server.cpu_s(), time.monotonic()
            for _ in range(opens):
                request(server.url + route)
            spent = server.cpu_s() - cpu - idle_rate * (time.monotonic() - start)
            figures[route] = 1000 * spent / opens
        return figures
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--opens", type=int, default=10, help="requests per route and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--routes", default="", help="comma-separated; default: every route")
    parser.add_argument("--baseline", metavar="REF", help="also measure git REF, side by side")
    parser.add_argument("--json", type=Path, help="write the figures here (default $OUT)")
    args = parser.parse_args()
    routes = [r for r in args.routes.split(",") if r] or None
    with tempfile.TemporaryDirectory(prefix="nvdashboard-baseline-") as folder, \
            (revision_worktree(args.baseline, Path(folder)) if args.baseline
             else nullcontext()) as baseline:
        trees = {"this tree": ROOT, **({args.baseline: baseline} if baseline else {})}
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for index in range(args.rounds):
            order = list(trees) if index % 2 else list(reversed(trees))
            for name in order:
                rounds[name].append(measure_tree(trees[name], routes, args.opens))
                print(f"round {index + 1}: {name} done", file=sys.stderr, flush=True)
    report = {name: {route: [r[route] for r in results if route in r]
                     for route in results[0]} for name, results in rounds.items()}
    names = list(report)
    print(f"server CPU per page request, ms: median (range) over {args.rounds} rounds "
          f"of {args.opens} requests of each route")
    print("| route | " + " | ".join(names) + (" | ratio |" if len(names) > 1 else " |"))
    print("|---" * (len(names) + 1 + (len(names) > 1)) + "|")
    all_routes = list(dict.fromkeys(r for figures in report.values() for r in figures))
    for route in all_routes:
        cells, medians = [], []
        for name in names:
            values = report[name].get(route)
            medians.append(statistics.median(values) if values else None)
            cells.append(spread(values) if values else "-")
        ratio = ""
        if len(names) > 1:
            ratio = (f" | {medians[0] / medians[1]:.2f}" if None not in medians[:2]
                     else " | -")
        print(f"| `{route}` | " + " | ".join(cells) + ratio + " |")
    write_json(report, args.json, "page_open_cost.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
