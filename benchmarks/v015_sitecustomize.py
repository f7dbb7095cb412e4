"""The simulated GPUs of rapidsai's jupyterlab-nvdashboard 0.15 in ``versus_v015.py``.

``benchmarks/v015_side.py`` copies this file as ``sitecustomize.py`` into a folder of its
own, beside a copy of this project's ``simnvml/`` package renamed ``v015_simnvml`` (both
packages are named ``jupyterlab_nvdashboard``, so this checkout is never on v0.15's path),
and puts that folder on the PYTHONPATH of v0.15's lab. Python imports ``sitecustomize`` at
start-up; where ``NVDASHBOARD_V015_SIMULATION`` is set it builds the simulated machine those
settings describe and hands its library to nvidia-ml-py as ``pynvml.nvmlLib``, before
v0.15's ``apps/gpu.py`` calls ``nvmlInit()`` at import. So v0.15 runs the real nvidia-ml-py
over this project's simulated driver, the same machine that ``NVDASHBOARD_SIMULATE=4`` gives
this project's lab.

Its NVML call count is answered on a Unix socket (``calls_socket(folder, pid)``): a thread
that waits in ``accept()`` costs the server nothing between the benchmark's two questions.

This file runs inside v0.15's virtual environment: the standard library, nvidia-ml-py and
the simnvml copy only.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from typing import Any

SETTINGS_VARIABLE = "NVDASHBOARD_V015_SIMULATION"  # JSON of config.SimulationConfig
SOCKET_FOLDER_VARIABLE = "NVDASHBOARD_V015_CALLS_FOLDER"
SIMNVML_COPY = "v015_simnvml"


def simulated_machine(simnvml: Any, settings: dict[str, Any]) -> Any:
    """The machine ``settings`` (``SimulationConfig``'s fields) describe, built from the
    ``simnvml`` package as ``composition.create_simulator`` builds it for this project."""
    machine = simnvml.SimulatedNvml(settings["gpu_count"], nvlink=settings["nvlink"],
                                    profile=settings["profile"], host=settings["host"])
    machine.apply_fault_spec(settings["faults"])
    machine.set_processes_file(settings["processes_file"])
    machine.set_scenario(settings["scenario"])
    return machine


def calls_socket(folder: str, pid: int) -> str:
    """Where the process ``pid`` answers its NVML call count."""
    return os.path.join(folder, f"calls-{pid}.sock")


def answer_calls(machine: Any, path: str) -> None:
    """Answer every connection to ``path`` with the machine's NVML calls so far, in a
    daemon thread."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()

    def serve() -> None:
        while True:
            connection, _ = listener.accept()
            with connection:
                connection.sendall(str(machine.total_calls).encode())

    threading.Thread(target=serve, name="v015-nvml-calls", daemon=True).start()


def install() -> None:
    settings = os.environ.get(SETTINGS_VARIABLE)
    if not settings:
        return
    import importlib

    import pynvml

    machine = simulated_machine(importlib.import_module(SIMNVML_COPY), json.loads(settings))
    pynvml.nvmlLib = machine.library
    folder = os.environ.get(SOCKET_FOLDER_VARIABLE)
    if folder:
        answer_calls(machine, calls_socket(folder, os.getpid()))


install()
