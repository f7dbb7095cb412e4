"""A real Dask cluster for tests and benchmarks: a scheduler and worker processes, each
worker simulating the GPUs of a host of its own (``NVDASHBOARD_SIMULATE_HOST``) and
loading the nvdashboard plugin with ``--preload``, exactly as a user starts them."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRELOAD = "jupyterlab_nvdashboard.cluster.preload"


def _wait_for_port(port: int, process: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port} after {timeout_s} s")


@dataclass
class DaskCluster:
    port: int
    scheduler: subprocess.Popen
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="nvd-dask-")))

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def start_worker(self, name: str, gpus: int, host: str,
                     cuda_visible_devices: str | None = None,
                     extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        """A worker process; ``cuda_visible_devices`` as dask-cuda sets it (a rotation)."""
        env = {**os.environ, "NVDASHBOARD_SIMULATE": str(gpus),
               "NVDASHBOARD_SIMULATE_HOST": host,
               # The workers' GPU claims live with the logs, removed with them.
               "NVDASHBOARD_GPU_CLAIMS_DIR": str(self.logs / "claims"),
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **(extra_env or {})}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if cuda_visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
        log = (self.logs / f"{name}.log").open("a")
        process = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", self.address, "--no-nanny",
             "--nthreads", "1", "--no-dashboard", "--name", name, "--preload", PRELOAD],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.workers[name] = process
        return process

    def worker_names(self) -> dict[str, str]:
        """Worker address -> the name it was started with, as the scheduler knows them."""
        from distributed import Client

        with Client(self.address, timeout="10s", set_as_default=False) as client:
            return {address: str(worker["name"]) for address, worker in
                    client.scheduler_info(n_workers=-1)["workers"].items()}

    def kill_worker(self, name: str) -> None:
        process = self.workers.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def stop(self) -> None:
        for process in [*self.workers.values(), self.scheduler]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [*self.workers.values(), self.scheduler]:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.logs, ignore_errors=True)  # nothing left in the temp folder


def start_scheduler(port: int) -> DaskCluster:
    logs = Path(tempfile.mkdtemp(prefix="nvd-dask-"))
    log = (logs / "scheduler.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", str(port), "--no-dashboard"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    _wait_for_port(port, process)
    return DaskCluster(port, process, logs=logs)
