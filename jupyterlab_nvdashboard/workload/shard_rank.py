"""The sharded path across N processes: ``torch.distributed`` with gloo (CPU) or NCCL (GPUs).

The process that builds :class:`DistributedTrainer` is rank 0: it writes the run's events,
opens a ``TCPStore`` on a free loopback port (the kernel picks it, so two runs never race
for one), and starts ranks 1..N-1 as children running this module::

    python -m jupyterlab_nvdashboard.workload.shard_rank '<json spec>'

Before each step rank 0 broadcasts the pool batch to train on, or -1 to stop; the children
follow it, so an interrupted run stops every rank. A child also stops when rank 0 is gone
(a parent-death signal, as for runs started by the server), and every collective has a
timeout: a rank that waits past it says which collective it waited on
(``sharded.CollectiveError``). This control message is not part of the step's exchange and
is not counted.

Rank 0 waits for the children to start (to reach its store) for as long as they run, since
a busy machine can make their imports take minutes; from there on, each wait is a collective
with its timeout. At the end every rank saves what it records, then all of them count the
ranks that have (an all-reduce): once that count is whole, the run's work is done, and a
child that is slow to exit after it (a busy machine) is ended without failing the run.

With ``record_dir`` every rank writes ``rank<r>.npz`` on close: the first step's lookup
output, row gradients and all-reduced MLP gradients, the losses, each step's bytes, and its
final rows (what ``tests/workload/test_sharded.py`` compares with the single device).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from ._lazy import import_torch
from .config import WorkloadConfig
from .data import BatchPool, make_pool
from .lifetime import ctrl_c_held
from .sharded import BYTE_KINDS, CollectiveError, ShardWorker, check_shards, placement_for

MODULE = "jupyterlab_nvdashboard.workload.shard_rank"
HOST = "127.0.0.1"
COLLECTIVE_TIMEOUT_S = 120
# After every rank has said it finished: only the processes' own exit is left.
CHILD_EXIT_WAIT_S = 10.0
STOP = -1
# The store's count of the children that have started (reached the store).
STARTED_KEY = "nvdashboard-ranks-started"
START_POLL_S = 0.1


def collective_timeout_s(spec: dict[str, Any]) -> float:
    """How long a rank waits in one collective (joining the group among them)."""
    return float(spec.get("collective_timeout_s", COLLECTIVE_TIMEOUT_S))


def load_pool(cfg: WorkloadConfig, pool_file: str | None) -> BatchPool:
    """The seeded pool, or the batches saved in ``pool_file`` (``keys_<i>``, ``labels_<i>``)."""
    if not pool_file:
        return make_pool(cfg)
    with np.load(pool_file) as saved:
        count = sum(1 for name in saved.files if name.startswith("keys_"))
        return BatchPool(keys=[saved[f"keys_{i}"] for i in range(count)],
                         labels=[saved[f"labels_{i}"] for i in range(count)])


def save_pool(pool: BatchPool, path: str | os.PathLike[str]) -> None:
    arrays = {f"keys_{i}": k for i, k in enumerate(pool.keys)}
    arrays.update({f"labels_{i}": y for i, y in enumerate(pool.labels)})
    np.savez(path, **arrays)


def _ops(backend: str, rank: int, dtype: str) -> Any:
    if backend != "nccl":
        return None  # NumPy
    from .cupy_ops import CupyOps

    torch = import_torch()
    torch.cuda.set_device(rank)
    import cupy

    cupy.cuda.Device(rank).use()
    return CupyOps(dtype)


def _child_environment() -> dict[str, str]:
    """This environment, with the folder that holds this package first on PYTHONPATH: a
    checkout's root, so a rank imports the checkout rank 0 runs from; for an installed
    package, the site-packages it is in, which is on the path already (then only the order
    against the rest of PYTHONPATH changes). ``python -m`` searches the working directory,
    which the ranks share with rank 0, before PYTHONPATH either way."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


class _Rank:
    """One process's rank: the process group, its worker, and what it records."""

    def __init__(self, spec: dict[str, Any], rank: int, store: Any) -> None:
        torch = self.torch = import_torch()
        from .sharded import TorchExchange

        self.spec, self.rank = spec, rank
        world, backend = spec["shards"], spec["backend"]
        try:
            torch.distributed.init_process_group(
                backend, store=store, rank=rank, world_size=world,
                timeout=timedelta(seconds=collective_timeout_s(spec)))
        except RuntimeError as error:  # the store's timeout: a rank never joined
            raise CollectiveError(f"rank {rank} of {world} gave up waiting on the other ranks "
                                  f"in joining the process group: {error}") from error
        cfg = self.cfg = WorkloadConfig(**spec["config"])
        self.exchange = TorchExchange(torch, backend)
        self.worker = ShardWorker(
            cfg, load_pool(cfg, spec.get("pool_file")),
            placement_for(cfg, world, spec["placement"]), self.exchange,
            _ops(backend, rank, cfg.dtype), spec["mode"], record=bool(spec.get("record_dir")))
        self.losses: list[float] = []
        self.sent: list[list[int]] = []
        self.job: list[list[int]] = []

    def control(self, value: int) -> int:
        """Rank 0's ``value`` on every rank."""
        return self.exchange.broadcast(value, "the next step")

    def finish(self) -> bool:
        """Save what this rank records, then count the ranks that have: True when all did."""
        self.save()
        return self.exchange.count_ranks("ranks that finished") == self.exchange.size

    def step(self, i: int) -> float:
        loss = self.worker.step(i)
        self.losses.append(loss)
        self.sent.append([self.worker.last_bytes.sent[k] for k in BYTE_KINDS])
        self.job.append([self.worker.last_bytes.job[k] for k in BYTE_KINDS])
        return loss

    def save(self) -> None:
        out = self.spec.get("record_dir")
        if not out:
            return
        first = self.worker.records[0] if self.worker.records else None
        rows, table = self.worker.table_rows()
        arrays: dict[str, Any] = {
            "losses": np.array(self.losses), "sent": np.array(self.sent, dtype=np.int64),
            "job": np.array(self.job, dtype=np.int64), "rows": rows, "table": table}
        if first is not None:
            arrays["lookups"], arrays["row_grads"] = first.lookups, first.row_grads
            if first.mlp_grads is not None:
                arrays["mlp_grads"] = first.mlp_grads
        np.savez(Path(out) / f"rank{self.rank}.npz", **arrays)

    def close(self) -> None:
        if self.torch.distributed.is_initialized():
            self.torch.distributed.destroy_process_group()


class DistributedTrainer:
    """Rank 0 of ``shards`` processes; ``step(i) -> loss`` like every other trainer."""

    def __init__(self, cfg: WorkloadConfig, shards: int, placement: str = "key",
                 backend: str = "gloo", mode: str = "full", record_dir: str | None = None,
                 pool_file: str | None = None,
                 collective_timeout_s: float = COLLECTIVE_TIMEOUT_S) -> None:
        check_shards(cfg, shards)
        placement_for(cfg, shards, placement)  # a bad placement: one line, before any child
        torch = import_torch()
        if backend == "nccl" and torch.cuda.device_count() < shards:
            raise ValueError(f"--backend nccl needs {shards} GPUs; torch sees "
                             f"{torch.cuda.device_count()}")
        self.cfg, self.shards, self.backend = cfg, shards, backend
        store = torch.distributed.TCPStore(HOST, 0, shards, True,
                                           timedelta(seconds=collective_timeout_s),
                                           wait_for_workers=False)
        spec = {"config": cfg.to_dict(), "shards": shards, "placement": placement,
                "backend": backend, "mode": mode, "record_dir": record_dir,
                "pool_file": pool_file, "port": store.port, "parent": os.getpid(),
                "collective_timeout_s": collective_timeout_s}
        self.children: list[subprocess.Popen[bytes]] = []
        self._rank: _Rank | None = None
        try:
            for rank in range(1, shards):
                self.children.append(subprocess.Popen(
                    [sys.executable, "-m", MODULE, json.dumps({**spec, "rank": rank})],
                    stdin=subprocess.DEVNULL, env=_child_environment()))
            self._wait_until_started(store)
            self._rank = _Rank(spec, 0, store)
        except BaseException:
            for child in self.children:
                child.kill()
            self._stop_children()
            raise
        self.tf32 = self._rank.worker.tf32
        self._ops = self._rank.worker.base_ops
        self.store = store
        self._broken = False

    def _wait_until_started(self, store: Any) -> None:
        """Until every child has reached the store, however long a busy machine makes its
        start (Python, NumPy and torch imports): as long as each is still running. Only
        then does the collective timeout apply, to joining the group."""
        while int(store.add(STARTED_KEY, 0)) < len(self.children):
            ended = [c.returncode for c in self.children if c.poll() is not None]
            if ended:
                raise RuntimeError(f"a shard process ended with status {ended[0]} as it "
                                   "started")
            time.sleep(START_POLL_S)

    @property
    def worker(self) -> ShardWorker:
        assert self._rank is not None
        return self._rank.worker

    def step(self, i: int) -> float:
        """One step on every rank. A Ctrl-C that lands inside it is held until all ranks
        have finished the step, so they stop between steps, never halfway through one."""
        assert self._rank is not None
        with ctrl_c_held():
            try:
                self._rank.control(i)
                return self._rank.step(i)
            except BaseException:
                self._broken = True  # the other ranks may wait inside this step's exchange
                raise

    def step_bytes(self) -> dict[str, int]:
        return dict(self.worker.last_bytes.job)

    def step_exchange_ms(self) -> float:
        """Rank 0's time in collectives in the last step (the others' waits end with it)."""
        return self.worker.last_exchange_ms

    def ranks(self) -> list[dict[str, Any]]:
        pids = [os.getpid()] + [child.pid for child in self.children]
        cuda = self.backend == "nccl"
        return [{"rank": r, "pid": pid, "device": f"cuda:{r}" if cuda else "cpu"}
                for r, pid in enumerate(pids)]

    def peak_device_memory_bytes(self) -> int | None:
        return self._ops.peak_device_memory_bytes()  # also after close()

    def close(self) -> None:
        """Stop every rank (a broadcast of -1), then reap the children."""
        rank, self._rank = self._rank, None
        if rank is not None and self._broken:
            for child in self.children:  # they wait in a collective rank 0 left: end them
                child.kill()
        finished = False
        if rank is not None:
            try:
                if not self._broken:
                    rank.control(STOP)
                    finished = rank.finish()
            finally:
                rank.close()
        self._stop_children(quiet=self._broken, finished=finished)

    def _stop_children(self, quiet: bool = True, finished: bool = False) -> None:
        failed = reap(self.children, CHILD_EXIT_WAIT_S, finished)
        self.children = []
        if failed and not quiet:
            raise RuntimeError(f"a shard process ended with status {failed[0]}")


def reap(children: list[subprocess.Popen[bytes]], wait_s: float,
         finished: bool) -> list[int]:
    """Wait ``wait_s`` for each child to exit, end it if it has not; the statuses of the ones
    that failed. ``finished``: every rank has said it finished its work, so a child ended
    here because it was slow to exit has not failed."""
    ended = set()
    for child in children:
        try:
            child.wait(wait_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            ended.add(child.pid)
    return [child.returncode for child in children
            if child.returncode and not (finished and child.pid in ended)]


def child_main(spec: dict[str, Any]) -> int:
    """Ranks 1..N-1: follow rank 0's steps until it says stop.

    A Ctrl-C reaches the whole process group (a terminal, or the dashboard's Stop): only
    rank 0 acts on it, and tells the others to stop between two steps."""
    from .lifetime import PARENT_PID_ENV, end_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent({PARENT_PID_ENV: str(spec["parent"])})
    torch = import_torch()
    rank = spec["rank"]
    store = torch.distributed.TCPStore(HOST, spec["port"], spec["shards"], False,
                                       timedelta(seconds=collective_timeout_s(spec)))
    store.add(STARTED_KEY, 1)
    me = _Rank(spec, rank, store)
    try:
        while (i := me.control(0)) != STOP:
            me.step(i)
        me.finish()
    finally:
        me.close()
    return 0


def record_main(spec: dict[str, Any]) -> int:
    """Rank 0 of a recorded run: ``steps`` steps on pool batches 0, 1, ..., then close."""
    trainer = DistributedTrainer(WorkloadConfig(**spec["config"]), spec["shards"],
                                 spec.get("placement", "key"), spec.get("backend", "gloo"),
                                 spec.get("mode", "full"), spec["record_dir"],
                                 spec.get("pool_file"), collective_timeout_s(spec))
    try:
        for i in range(spec["steps"]):
            trainer.step(i)
    finally:
        trainer.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``'<spec>'``: a child rank; ``--record '<spec>'``: rank 0 of a recorded run."""
    args = sys.argv[1:] if argv is None else argv
    try:
        if args[:1] == ["--record"]:
            return record_main(json.loads(args[1]))
        return child_main(json.loads(args[0]))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one line: rank 0 reports the run's failure
        print(f"shard rank: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
