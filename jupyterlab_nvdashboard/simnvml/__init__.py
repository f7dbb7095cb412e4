"""A simulated NVML driver at the C ABI, for simulate mode and tests.

It stands where ``libnvidia-ml.so.1`` stands: ``SimulatedNvml(...).library`` is an object
with the C symbols of ``nvml.h`` (``library.py``) for the real nvidia-ml-py to call. Its
machines, loads and faults are written from NVIDIA's documentation (``profiles.py``,
``machine.py``, ``health.py``, ``processes.py``), and so are the load models a simulated GPU
can play (``scenarios.py``). This package imports nothing from the rest of the project, and
the metrics layer never imports it.
"""

from .machine import SimulatedNvml
from .processes import SimulatedProcess
from .profiles import DEFAULT_PROFILE, PROFILES

__all__ = ["DEFAULT_PROFILE", "PROFILES", "SimulatedNvml", "SimulatedProcess"]
