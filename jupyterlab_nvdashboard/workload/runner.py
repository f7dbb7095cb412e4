"""Run a workload path for N iterations, timing each step and emitting events.

``run(...)`` is what ``python -m jupyterlab_nvdashboard.workload`` calls.
``make_trainer(...)`` builds any path (including the benchmark-only ``native-dense``)
with the shared ``step(i) -> loss`` interface.
"""

from __future__ import annotations

import resource
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from .config import BENCHMARK_PATHS, PATHS, SHARDED_PATHS, WorkloadConfig
from .data import make_pool
from .events import EventWriter, new_run_id
from .extras import GPU_EXTRA, tensorflow_cpu_only
from .gpu_identity import run_gpu
from .lifetime import ctrl_c_held, process_start_ticks


class Terminated(Exception):
    """SIGTERM arrived: stop like Ctrl-C, but say so in the end event."""


def resolve_device(path: str, device: str | None) -> str:
    """The device a path runs on: numpy is CPU-only, cupy-plugin GPU-only."""
    if path == "numpy":
        if device == "gpu":
            raise ValueError("the numpy path runs on the CPU only; use --device cpu")
        return "cpu"
    if path == "cupy-plugin":
        if device == "cpu":
            raise ValueError("the cupy-plugin path runs on the GPU only; use --device gpu")
        return "gpu"
    if device == "gpu" and tensorflow_cpu_only():
        raise ValueError(f"--device gpu: the TensorFlow installed here is CPU-only; {GPU_EXTRA}")
    if device is not None:
        return device
    from ._lazy import import_tensorflow

    return "gpu" if import_tensorflow().config.list_physical_devices("GPU") else "cpu"


def resolve_backend(path: str, shards: int, backend: str = "auto") -> str:
    """The exchange a sharded run uses: what the machine has, unless one is asked for.

    numpy: gloo across N processes where torch is installed, else the in-process loopback.
    cupy-plugin: NCCL across N GPUs where torch sees N of them, else N shards emulated on
    one GPU (loopback: the exchange is a permutation in that GPU's memory).
    """
    from .sharded import BACKENDS

    if path not in SHARDED_PATHS:
        raise ValueError(f"--shards runs on the {' and '.join(SHARDED_PATHS)} paths, "
                         f"not {path}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "gloo" and path != "numpy":
        raise ValueError("--backend gloo exchanges host memory: use it with --path numpy")
    if backend == "nccl" and path != "cupy-plugin":
        raise ValueError("--backend nccl exchanges GPU memory: use it with --path cupy-plugin")
    if backend != "auto":
        return backend
    if shards == 1:
        return "loopback"
    try:
        from ._lazy import import_torch

        torch = import_torch()
    except ImportError:
        return "loopback"
    if path == "numpy":
        return "gloo"
    return "nccl" if torch.cuda.device_count() >= shards else "loopback"


def make_trainer(
    path: str, cfg: WorkloadConfig, device: str = "cpu", mode: str = "full",
    shards: int | None = None, placement: str = "key", backend: str = "auto", **kwargs: Any
) -> Any:
    """Build the trainer of ``path``; it has ``step(i) -> float`` and memory accessors.

    With ``shards`` the table is spread over that many shards (``sharded.py``); the trainer
    then also has ``step_bytes()`` and ``ranks()``, and ``close()`` ends its processes.
    """
    if path not in PATHS + BENCHMARK_PATHS:
        raise ValueError(f"unknown path {path!r}; choose one of {', '.join(PATHS)}")
    if shards is not None:
        return make_sharded_trainer(path, cfg, shards, placement, backend, mode)
    pool = make_pool(cfg)
    if path == "numpy":
        from .xp_path import ArrayTrainer

        return ArrayTrainer(cfg, pool, mode=mode)
    if path == "cupy-plugin":
        from .cupy_ops import CupyOps
        from .xp_path import ArrayTrainer

        return ArrayTrainer(cfg, pool, ops=CupyOps(cfg.dtype), mode=mode)
    from .tf_paths import TFTrainer

    return TFTrainer(path, cfg, pool, device=device, mode=mode, **kwargs)


def make_sharded_trainer(path: str, cfg: WorkloadConfig, shards: int, placement: str = "key",
                         backend: str = "auto", mode: str = "full") -> Any:
    from .sharded import LoopbackTrainer, check_shards, placement_for

    check_shards(cfg, shards)
    placement_for(cfg, shards, placement)
    chosen = resolve_backend(path, shards, backend)
    if chosen in ("gloo", "nccl"):
        from .shard_rank import DistributedTrainer

        return DistributedTrainer(cfg, shards, placement, chosen, mode)
    factory = None
    if path == "cupy-plugin":
        from .cupy_ops import CupyOps

        def factory() -> Any:
            return CupyOps(cfg.dtype)

    return LoopbackTrainer(cfg, make_pool(cfg), shards, placement, factory, mode)


def sharding_of(trainer: Any, path: str) -> dict[str, Any] | None:
    """What a run's events say of its shards: count, placement, backend, whether the shards
    are emulated on one device, and each rank's process and device."""
    placement = getattr(trainer, "placement", None)
    worker = getattr(trainer, "worker", None)
    if placement is None and worker is not None:
        placement = worker.placement
    if placement is None:
        return None
    backend = getattr(trainer, "backend", "loopback")
    ranks = trainer.ranks()
    if path == "cupy-plugin":
        from .gpu_identity import cuda_device_uuid

        for rank in ranks:  # NCCL: rank r on CUDA device r; emulated: all on device 0
            rank["gpu_uuid"] = cuda_device_uuid(rank["rank"] if backend == "nccl" else 0)
    return {"count": placement.shards, "placement": placement.kind, "backend": backend,
            "emulated": backend == "loopback" and placement.shards > 1, "ranks": ranks}


def exchange_summary(per_step: list[dict[str, int]]) -> dict[str, float] | None:
    """The median bytes per step of each kind, and their total, over the timed steps."""
    if not per_step:
        return None
    from .sharded import BYTE_KINDS

    out = {kind: float(statistics.median(step[kind] for step in per_step))
           for kind in BYTE_KINDS}
    out["total"] = float(statistics.median(sum(step.values()) for step in per_step))
    return out


def wait_for_input(delay_ms: int) -> None:
    """The input stage of a step: the batch pool is in memory, so this waits only when the
    run asks for a slow input (``input_delay_ms``), as a reader stalled on disk or network
    would. The GPU has nothing to do meanwhile."""
    if delay_ms > 0:
        time.sleep(delay_ms / 1000.0)


def peak_host_memory_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def summarize(times_ms: list[float], batch: int) -> dict[str, Any]:
    """Median and 10th/90th percentile step time and the median throughput."""
    if not times_ms:
        return {"median_ms": None, "p10_ms": None, "p90_ms": None, "samples_per_s": None}
    ordered = sorted(times_ms)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]

    median = statistics.median(ordered)
    return {
        "median_ms": median,
        "p10_ms": pct(0.1),
        "p90_ms": pct(0.9),
        "samples_per_s": batch / (median / 1000.0) if median > 0 else None,
    }


class Progress:
    """A plain one-line progress bar on a TTY; silent otherwise."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.total, self.width = total, width
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, done: int, label: str) -> None:
        if not self.enabled:
            return
        filled = int(self.width * done / max(self.total, 1))
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r[{bar}] {done}/{self.total} {label}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def run(
    path: str,
    cfg: WorkloadConfig,
    iterations: int,
    *,
    device: str | None = None,
    warmup: int = 3,
    events_path: str | Path | None = None,
    runs_dir: str | Path | None = None,
    preset: str | None = None,
    on_iteration: Callable[[dict[str, Any]], None] | None = None,
    shards: int | None = None,
    placement: str = "key",
    backend: str = "auto",
) -> dict[str, Any]:
    """Train ``iterations`` timed steps after ``warmup`` untimed ones; return the end event.

    Ctrl-C (``KeyboardInterrupt``) or SIGTERM stops the loop; the ``end`` event then
    summarises the completed iterations with ``"interrupted": true``. Any other failure
    also writes the ``end`` event, with the error's one-line message, and is raised again.
    """
    import os

    run_id = new_run_id()
    setup_error: Exception | None = None
    try:
        device = resolve_device(path, device)
    except Exception as failure:  # reported in the end event, like any other failure
        setup_error, device = failure, device or "?"
    if events_path is None:
        from .config import default_runs_dir

        events_path = Path(runs_dir or default_runs_dir()) / f"{run_id}.jsonl"
    times: list[float] = []
    exchanged: list[dict[str, int]] = []  # a sharded run's bytes, per timed step
    interrupted = False
    with EventWriter(events_path, run_id) as events:
        events.emit(
            "start",
            config=cfg.to_dict(),
            preset=preset,
            path=path,
            device=device,
            pid=os.getpid(),
            pid_start_ticks=process_start_ticks(os.getpid()),
            iterations=iterations,
            warmup=warmup,
            events_file=str(events_path),
            gpu=run_gpu(device),
            # What the machine's BLAS was allowed (unset: its own default, one per core).
            blas_threads=os.environ.get("OPENBLAS_NUM_THREADS"),
            **({} if shards is None else {"shards": {"count": shards, "placement": placement,
                                                     "backend": backend}}),
        )
        progress = Progress(warmup + iterations)
        trainer = None
        error: BaseException | None = None
        try:
            if setup_error is not None:
                raise setup_error
            trainer = make_trainer(path, cfg, device=device, shards=shards,
                                   placement=placement, backend=backend)
            for i in range(warmup):
                start = time.perf_counter()
                trainer.step(i)  # compiles and fills caches; not timed
                with ctrl_c_held():
                    events.emit("warmup_step", step=i + 1,
                                ms=(time.perf_counter() - start) * 1000.0)
                progress.update(i + 1, "warm-up")
            # The dashboard judges the GPU from here on: start-up and warm-up are over.
            sharding = sharding_of(trainer, path) if shards is not None else None
            events.emit("warmup_end", **({} if sharding is None else {"shards": sharding}))
            for i in range(iterations):
                start, cpu_start = time.perf_counter(), time.process_time()
                wait_for_input(cfg.input_delay_ms)
                input_ms = (time.perf_counter() - start) * 1000.0
                loss = trainer.step(warmup + i)  # returns after a device sync
                ms = (time.perf_counter() - start) * 1000.0
                cpu_ms = (time.process_time() - cpu_start) * 1000.0
                moved = trainer.step_bytes() if sharding is not None else None
                host_ms = getattr(trainer, "step_host_ms", None)
                with ctrl_c_held():
                    record = events.emit(
                        "iteration",
                        iteration=i + 1,
                        ms=ms,
                        samples_per_s=cfg.batch / (ms / 1000.0) if ms > 0 else None,
                        loss=loss,
                        input_ms=input_ms,
                        **({} if host_ms is None else {"host_ms": host_ms()}),
                        cpu_ms=cpu_ms,
                        **({} if moved is None else {
                            "exchange_bytes": sum(moved.values()),
                            "exchange_ms": trainer.step_exchange_ms()}),
                    )
                    times.append(ms)
                    if moved is not None:
                        exchanged.append(moved)
                if on_iteration:
                    on_iteration(record)
                progress.update(warmup + i + 1, f"{ms:7.1f} ms/step loss {loss:.4f}")
        except (KeyboardInterrupt, Terminated):
            interrupted = True
        except Exception as failure:  # any failure still ends the run's event stream
            error = failure
        finally:
            progress.close()
        device_peak = None
        if trainer is not None:
            try:
                device_peak = trainer.peak_device_memory_bytes()
            except Exception:  # a broken device must not hide the run's own error
                device_peak = None
            try:
                close = getattr(trainer, "close", None)
                if close is not None:
                    close()  # a sharded run's other processes end here
            except Exception as failure:
                error = error or failure
        summary = exchange_summary(exchanged)
        end = events.emit(
            "end",
            iterations=len(times),
            **summarize(times, cfg.batch),
            peak_host_memory_bytes=peak_host_memory_bytes(),
            peak_device_memory_bytes=device_peak,
            interrupted=interrupted,
            error=None if error is None else one_line(error),
            **({} if summary is None else {"exchange": summary}),
        )
    if error is not None:
        raise error
    return end


def one_line(error: BaseException) -> str:
    """``Type: first line of the message``, for an event or a status line."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


@contextmanager
def sigterm_stops() -> Iterator[None]:
    """While inside, the first SIGTERM raises ``Terminated`` (so the run writes its end
    event); later ones are ignored, since raising again would cut that event short. A run
    that does not exit still gets the launcher's SIGKILL."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    terminated = False

    def terminate(_number: int, _frame: object) -> None:
        nonlocal terminated
        if not terminated:
            terminated = True
            raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
