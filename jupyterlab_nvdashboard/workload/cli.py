"""Command line of the embedding workload, and the only way the dashboard builds one.

Run::

    python -m jupyterlab_nvdashboard.workload --path plugin --preset densedemo \
        --iterations 200 [--device cpu|gpu] [--events FILE] [--runs-dir DIR] \
        [--input-delay-ms MS] [--shards N [--placement key|field] [--backend B]]

``--shards N`` spreads the embedding table over N shards (numpy and cupy-plugin paths):
``--backend auto`` picks gloo across N processes (numpy, with torch installed), NCCL across
N GPUs (cupy-plugin, with N GPUs), else N shards in this process over a loopback exchange.

Without ``--events`` the events go to ``<runs-dir>/<run_id>.jsonl``; ``--runs-dir``
defaults to ``$NVDASHBOARD_RUNS_DIR`` or ``~/.cache/nvdashboard/runs``. Exit status:
0 done, 2 bad arguments (one line on stderr), 1 a missing framework or device,
130 interrupted by Ctrl-C (after writing the ``end`` event).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn

from .config import (
    BACKENDS,
    DEVICES,
    DISTRIBUTIONS,
    MAX_SHARDS,
    PATHS,
    PLACEMENTS,
    PRESETS,
    default_runs_dir,
    expand_path,
    make_config,
)

MODULE = "jupyterlab_nvdashboard.workload"
MAX_ITERATIONS = 100_000
MAX_INPUT_DELAY_MS = 10_000

#: The schema ``build_command`` enforces: name -> (required, allowed values or int range).
COMMAND_SCHEMA: dict[str, tuple[bool, Any]] = {
    "path": (True, PATHS),
    "preset": (True, tuple(PRESETS)),
    "iterations": (True, (1, MAX_ITERATIONS)),
    "device": (False, DEVICES),
    "input_delay_ms": (False, (0, MAX_INPUT_DELAY_MS)),
    "shards": (False, (1, MAX_SHARDS)),
    "placement": (False, PLACEMENTS),
}
_INTEGERS = ("iterations", "input_delay_ms", "shards")


def build_command(params: dict[str, Any]) -> list[str]:
    """Validate ``{path, preset, iterations[, device]}`` and return the argv to launch.

    Strict: unknown keys, missing required keys, values outside the allowed sets and
    integers out of range (``bool`` is not an integer here) raise ``ValueError``.
    """
    if not isinstance(params, dict):
        raise ValueError("workload parameters must be a JSON object")
    unknown = sorted(set(params) - set(COMMAND_SCHEMA))
    if unknown:
        raise ValueError(f"unknown workload parameter(s): {', '.join(map(str, unknown))}")
    argv = [sys.executable, "-m", MODULE]
    for name, (required, allowed) in COMMAND_SCHEMA.items():
        if name not in params:
            if required:
                raise ValueError(f"missing workload parameter: {name}")
            continue
        value = params[name]
        if name in _INTEGERS:
            low, high = allowed
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
            if not low <= value <= high:
                raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
        elif not isinstance(value, str) or value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int_range(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range [{low}, {high}]")
        return value

    return parse


def make_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"python -m {MODULE}", description="Train the bundled embedding workload.")
    p.add_argument("--path", choices=PATHS, default="plugin")
    p.add_argument("--preset", choices=tuple(PRESETS), default="densedemo")
    p.add_argument("--iterations", type=_int_range(1, MAX_ITERATIONS), default=200)
    p.add_argument("--device", choices=DEVICES, default=None, help="default: GPU if present")
    p.add_argument("--events", metavar="FILE", default=None, help="JSON lines event file")
    p.add_argument("--runs-dir", metavar="DIR", default=None, help="default: %(default)s")
    p.add_argument("--batch", type=_int_range(1, 1 << 20), default=None)
    p.add_argument("--vocab", type=_int_range(1, 2**40), default=None)
    p.add_argument("--embedding-size", type=_int_range(1, 4096), default=None)
    p.add_argument("--distribution", choices=DISTRIBUTIONS, default=None)
    p.add_argument("--warmup", type=_int_range(0, 10_000), default=3)
    p.add_argument("--seed", type=_int_range(0, 2**32 - 1), default=None)
    p.add_argument("--input-delay-ms", type=_int_range(0, MAX_INPUT_DELAY_MS), default=None,
                   help="each timed step first waits this long on a slow input stage, "
                        "to make the run input-bound on purpose (default: 0)")
    p.add_argument("--shards", type=_int_range(1, MAX_SHARDS), default=None,
                   help="spread the embedding table over N shards (numpy, cupy-plugin)")
    p.add_argument("--placement", choices=PLACEMENTS, default="key",
                   help="row k on shard k %% N (key), or whole fields per shard (field)")
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="the shards' exchange (default: what this machine has)")
    return p


# The ci preset's matrices (batch 256 by 32 units) are too small for BLAS threads to pay,
# and beside other work OpenBLAS's waiting threads spin against the run: 4,000 steps of the
# numpy path took 3.4 s of wall time (3.3-6.4) with one thread against 6.8 s (3.6-18.8) with
# two, and 3.4 s of CPU against 9.6 s (benchmarks/README.md). A user's own setting wins.
ONE_BLAS_THREAD_PRESETS = ("ci",)
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def use_one_blas_thread(preset: str) -> None:
    """Before numpy is imported: one BLAS thread for the presets too small for more."""
    if preset in ONE_BLAS_THREAD_PRESETS:
        for variable in BLAS_THREAD_VARIABLES:
            os.environ.setdefault(variable, "1")


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    use_one_blas_thread(args.preset)
    try:
        cfg = make_config(
            args.preset,
            batch=args.batch,
            vocabulary=args.vocab,
            embedding_size=args.embedding_size,
            distribution=args.distribution,
            seed=args.seed,
            input_delay_ms=args.input_delay_ms,
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.shards is None and (args.placement != "key" or args.backend != "auto"):
        parser.error("--placement and --backend need --shards")
    if args.shards is not None:
        from .runner import resolve_backend
        from .sharded import check_shards

        try:
            check_shards(cfg, args.shards)
            if args.backend != "auto" or args.path not in ("numpy", "cupy-plugin"):
                resolve_backend(args.path, args.shards, args.backend)
        except ValueError as exc:
            parser.error(str(exc))
    from ._lazy import MissingDependencyError
    from .lifetime import end_with_parent, own_signal_dispositions
    from .runner import one_line, run, sigterm_stops

    own_signal_dispositions()
    try:
        with sigterm_stops():
            end_with_parent()  # inside: its SIGTERM must reach the run as Terminated
            end = run(
                args.path,
                cfg,
                args.iterations,
                device=args.device,
                warmup=args.warmup,
                events_path=args.events,
                runs_dir=expand_path(args.runs_dir) if args.runs_dir else default_runs_dir(),
                preset=args.preset,
                shards=args.shards,
                placement=args.placement,
                backend=args.backend,
            )
    except (MissingDependencyError, RuntimeError, ValueError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the end event has it too; one line here, not a traceback
        print(f"{parser.prog}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    median = end["median_ms"]
    timing = f"median {median:.2f} ms/step" if median is not None else "no timed steps"
    state = "interrupted" if end["interrupted"] else "done"
    print(f"{state}: {end['iterations']} iterations, {timing}", file=sys.stderr)
    return 130 if end["interrupted"] else 0
