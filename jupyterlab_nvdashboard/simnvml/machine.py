"""A simulated NVML driver's machine: its GPUs, their loads and its faults.

``SimulatedNvml`` plays a machine from ``profiles.py``; ``library`` is its
``libnvidia-ml.so.1`` (``library.py``), which the composition root hands to the real
nvidia-ml-py, so the binding and the reader run their real code over it. Its behaviour comes
from NVIDIA's documentation, not from what the reader expects: see the profiles module for
the sources.

Test hooks: ``set_unsupported``, ``inject_error``, ``lose_gpu``, ``restore_gpu``,
``set_init_error``, ``set_call_delay``, ``hang_calls``, ``set_clock``, ``step_wall_clock``,
``set_processes`` (``processes.py``) and the ``calls`` counter. The same faults can be
given as a spec string (``NVDASHBOARD_SIMULATE_FAULTS``)::

    lose=1@5              GPU 1 is lost 5 seconds after start
    init=DriverNotLoaded  nvmlInit answers NVML_ERROR_DRIVER_NOT_LOADED
    unsupported=nvlink    NVLink readings answer NVML_ERROR_NOT_SUPPORTED ('|' separates)
    slow=0.3              every call takes 0.3 s
    xid=0:79@5            GPU 0 reports XID 79 5 seconds after start ('|' separates)

GPM, health and XID events are simulated in ``health.py``.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from . import nvml_h
from .handles import SimulatedHandle
from .health import HealthSimulation
from .library import SimulatedLibrary
from .nvml_h import NVML_SUCCESS, NVMLError
from .playing import ScenarioPlayer
from .processes import PROCESS_FUNCTIONS, SimulatedProcesses
from .profiles import DEFAULT_PROFILE, PROFILES, GpuModel, MigSlot, Profile
from .waves import wave as _wave
from .waves import wave_integral as _wave_integral

E = nvml_h.ERROR_CODES
F = nvml_h.FIELD_IDS
_UINT_MAX = 0xFFFFFFFF
_KNOWN_FIELDS = frozenset(F.values())
# A scenario's byte rates by direction (0: TX, GPU to host; 1: RX), as playing.py names them.
_PCIE_FIGURES = ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s")
_NVLINK_FIGURES = ("nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s")
# Field IDs and the driver branch that first answers them (the release notes): older
# drivers do not know the ID (an invalid argument).
_FIELD_SINCE = {F["NVML_FI_DEV_PCIE_COUNT_TX_BYTES"]: 555,
                F["NVML_FI_DEV_PCIE_COUNT_RX_BYTES"]: 555,
                F["NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES"]: 560,
                F["NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES"]: 560}
PCIE_THROUGHPUT_SAMPLE_S = 0.02  # nvml.h: a byte counter read over a 20 ms interval

# The keys of a fault spec, each with an example value for error messages.
_FAULT_KEYS = {"lose": "lose=1@5", "init": "init=DriverNotLoaded",
               "unsupported": "unsupported=nvlink", "slow": "slow=0.3",
               "xid": "xid=0:79@5"}
# A fault delay longer than this is a typo, not a test (and sleep() would overflow).
MAX_FAULT_SECONDS = 24 * 3600.0


def _check_seconds(key: str, seconds: float, text: str) -> None:
    if not 0 <= seconds <= MAX_FAULT_SECONDS:  # also rejects NaN
        raise ValueError(f"{key} needs 0 to {MAX_FAULT_SECONDS:.0f} seconds, got {text!r}")


# Named groups a fault spec can mark unsupported.
FEATURE_GROUPS: dict[str, tuple[str, ...]] = {
    "nvlink": ("nvlink",),
    "pcie_counters": ("pcie_counters",),
    "pcie": ("pcie_counters", "nvmlDeviceGetPcieThroughput"),
    "power": ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit"),
    "temperature": ("nvmlDeviceGetTemperature",),
    "gpm": ("nvmlGpmSampleGet", "nvmlGpmMigSampleGet"),
    "ecc": ("nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows"),
}
# nvml.h documents these for "fully supported devices" only: GeForce answers NOT_SUPPORTED.
_FULLY_SUPPORTED_ONLY = {
    "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPcieThroughput", "pcie_counters",
    "nvmlDeviceGetMigMode", "nvmlDeviceGetProcessUtilization",
}
# What a vGPU guest reports as N/A.
_VGPU_GUEST_UNSUPPORTED = {
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPcieThroughput", "pcie_counters", "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetMigMode", "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
}
# Functions that answer on a MIG device handle; the rest are per physical GPU.
_MIG_HANDLE_FUNCTIONS = {
    "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceIsMigDeviceHandle", "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId", "nvmlDeviceGetAttributes",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", "nvmlDeviceGetCudaComputeCapability",
    *PROCESS_FUNCTIONS,
}


@dataclass
class _Gpu:
    index: int
    model: GpuModel
    uuid: str
    lost_at: float | None = None  # simulated-clock time the GPU disappears


class SimulatedNvml(HealthSimulation, SimulatedProcesses):
    """A machine with ``gpu_count`` GPUs as ``profile`` describes, and its NVML driver."""

    def __init__(self, gpu_count: int = 4, nvlink: bool = True, profile: str = DEFAULT_PROFILE,
                 host: str = "") -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown simulated profile {profile!r} "
                             f"(choose from {', '.join(PROFILES)})")
        self.profile: Profile = PROFILES[profile]
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        # Which threads call NVML: tests check that pages never do.
        self.calls_by_thread: Counter[str] = Counter()
        self._clock: Callable[[], float] = time.monotonic
        self._wall_offset = time.time() - time.monotonic()
        self._initialized = 0
        self._init_errors: list[int] = []
        self._injected: list[tuple[str, int | None, int, int | None]] = []
        self._unsupported: set[str] = set() if nvlink else {"nvlink"}
        self._delay_s = 0.0
        # Set while calls run; cleared by ``hang_calls``: every call waits until released.
        self._not_hung = threading.Event()
        self._not_hung.set()
        self.hung_calls = 0  # calls waiting in a hang now
        self._start = self._clock()
        models = self.profile.models
        # A named simulated host has UUIDs of its own, so simulated machines of a cluster
        # differ as real ones do (and two readers of one host agree).
        self.host = host
        self._uuid_prefix = hashlib.sha1(host.encode()).hexdigest()[:4] if host else "5151"
        self._gpus = [
            _Gpu(i, models[i % len(models)], self._uuid(i)) for i in range(gpu_count)
        ]
        self._library: Any = None
        self._nvlink_offsets: dict[tuple[str, int, int], int] = {}
        # The load every GPU plays instead of the profile's waves (playing.py), if any.
        self.scenario: ScenarioPlayer | None = None
        self._unsupported_arguments: set[tuple[str, int]] = set()
        self._init_health()

    @property
    def library(self) -> Any:
        """This machine's ``libnvidia-ml.so.1``: the object to hand nvidia-ml-py as its
        loaded library (``library.py``)."""
        if self._library is None:
            self._library = SimulatedLibrary(self).exports()
        return self._library

    # ----- test hooks -----------------------------------------------------------------
    def set_clock(self, clock: Callable[[], float]) -> None:
        """Use ``clock`` (seconds) for the load and for field timestamps."""
        self._clock = clock
        self._wall_offset = 0.0
        self._start = clock()

    def step_wall_clock(self, seconds: float) -> None:
        """Step the CPU wall clock (as NTP does): field timestamps jump, the load does not."""
        self._wall_offset += seconds

    def set_unsupported(self, features: Iterable[str]) -> None:
        """Mark feature groups (see FEATURE_GROUPS) or function names unsupported."""
        expanded: set[str] = set()
        for feature in features:
            expanded.update(FEATURE_GROUPS.get(feature, (feature,)))
        self._unsupported = expanded

    def inject_error(
        self, function: str, error_code: int, gpu: int | None = None, times: int | None = None
    ) -> None:
        """Make ``function`` raise NVMLError(error_code), for one GPU or all, N times or forever."""
        with self._lock:
            self._injected.append((function, gpu, error_code, times))

    def clear_errors(self) -> None:
        with self._lock:
            self._injected.clear()
            self._init_errors.clear()

    def set_init_error(self, error_code: int | None, times: int | None = None) -> None:
        """nvmlInit raises ``error_code`` (the next ``times`` calls, or until cleared)."""
        with self._lock:
            self._init_errors = [] if error_code is None else [error_code] * (times or 1_000_000)

    def lose_gpu(self, index: int, after_s: float = 0.0) -> None:
        """GPU ``index`` falls off the bus ``after_s`` seconds from now."""
        self._gpus[index].lost_at = self._clock() + after_s

    def set_scenario(self, name: str) -> None:
        """Every GPU plays scenario ``name`` (scenarios.py; '' for the profile's own load).

        Raises ValueError (one line) for an unknown scenario."""
        self.scenario = ScenarioPlayer(name) if name else None

    def _playing(self, gpu: _Gpu) -> dict[str, Any] | None:
        """The scenario's figures for ``gpu`` now, in NVML's units; None without one."""
        if self.scenario is None:
            return None
        return self.scenario.now(gpu.index, gpu.model, self._elapsed())

    def _played_total(self, gpu: _Gpu, figure: str) -> float:
        assert self.scenario is not None
        return self.scenario.integral(gpu.index, gpu.model, figure, self._elapsed())

    def remove_gpu(self, index: int) -> None:
        """GPU ``index`` is gone at the next enumeration (unbound, or hidden by the driver):
        the count drops and the GPUs after it move up one index, as nvidia-smi shows them."""
        with self._lock:
            self._gpus.pop(index)

    def reset_nvlink_counter(self, index: int, link: int) -> None:
        """One link's byte counters start again from 0 (a link retrain or a counter reset)."""
        gpu = self._gpus[index]
        for direction in (0, 1):
            self._nvlink_offsets[gpu.uuid, direction, link] = \
                self._nvlink_bytes(gpu, direction, link)

    def set_unsupported_argument(self, function: str, argument: int) -> None:
        """``function`` answers NOT_SUPPORTED for this one argument (a clock domain, a
        temperature threshold, an ECC counter type), as nvml.h allows per argument."""
        self._unsupported_arguments.add((function, argument))

    def _supports_argument(self, function: str, argument: int) -> bool:
        return (function, argument) not in self._unsupported_arguments

    def restore_gpu(self, index: int) -> None:
        """The GPU comes back, as after a reset: new handles work again."""
        self._gpus[index].lost_at = None

    def add_gpu(self) -> None:
        """A GPU is hot-plugged (or a driver starts seeing one more)."""
        models = self.profile.models
        index = len(self._gpus)
        self._gpus.append(_Gpu(index, models[index % len(models)], self._uuid(index)))

    def _uuid(self, index: int) -> str:
        return f"GPU-{self._uuid_prefix}{index:04d}-0000-4000-8000-{index:012d}"

    def set_call_delay(self, seconds: float) -> None:
        """Every device call takes this long, like a driver that is busy."""
        self._delay_s = seconds

    def hang_calls(self, hung: bool = True) -> None:
        """Every call from now on waits until ``hang_calls(False)``, like a driver stuck
        behind a GPU that stopped answering; ``hung_calls`` counts the calls waiting."""
        if hung:
            self._not_hung.clear()
        else:
            self._not_hung.set()

    @property
    def total_calls(self) -> int:
        with self._lock:
            return sum(self.calls.values())

    def apply_fault_spec(self, spec: str) -> None:
        """Apply faults written as ``lose=1@5,init=DriverNotLoaded,unsupported=nvlink``.

        Raises ValueError with a one-line message for anything malformed, before applying
        any of it.
        """
        for apply in [self._parse_fault(item) for item in spec.split(",") if item.strip()]:
            apply()

    def _parse_fault(self, item: str) -> Callable[[], None]:
        """One ``key=value`` fault, checked now and applied by the returned function."""
        key, equals, value = (part.strip() for part in item.partition("="))
        if key not in _FAULT_KEYS:
            raise ValueError(f"unknown fault {key!r} (use {', '.join(_FAULT_KEYS)})")
        if not equals or not value:
            raise ValueError(f"fault {key!r} needs a value, e.g. {_FAULT_KEYS[key]}")
        if key == "lose":
            gpu, at, after = value.partition("@")
            try:
                index, delay = int(gpu), float(after)
            except ValueError:
                raise ValueError(f"lose needs GPU@SECONDS, got {value!r}") from None
            if not at or not 0 <= index < len(self._gpus):
                raise ValueError(f"lose needs GPU@SECONDS naming a simulated GPU, got {value!r}")
            _check_seconds("lose", delay, value)
            return lambda: self.lose_gpu(index, delay)
        if key == "init":
            if value not in nvml_h.ERROR_SUFFIXES:
                raise ValueError(f"unknown NVML error {value!r} in fault spec")
            return lambda: self.set_init_error(nvml_h.ERROR_SUFFIXES[value])
        if key == "unsupported":
            features = value.split("|")
            functions = (name for name in dir(self) if name.startswith("nvml"))
            known = set(FEATURE_GROUPS).union(*FEATURE_GROUPS.values(), functions)
            unknown = [feature for feature in features if feature not in known]
            if unknown:
                raise ValueError(f"unsupported names no feature group or NVML function: "
                                 f"{unknown[0]!r} (groups: {', '.join(FEATURE_GROUPS)})")
            return lambda: self.set_unsupported(set(features) | self._unsupported)
        if key == "xid":
            return self._parse_xids(value)
        # slow: seconds per call.
        try:
            delay = float(value)
        except ValueError:
            raise ValueError(f"slow needs seconds, got {value!r}") from None
        _check_seconds("slow", delay, value)
        return lambda: self.set_call_delay(delay)

    def _parse_xids(self, value: str) -> Callable[[], None]:
        events = []
        for item in value.split("|"):
            match = re.fullmatch(r"(\d+):(\d+)(?:@([0-9.]+))?", item.strip())
            if match is None or not int(match.group(1)) < len(self._gpus):
                raise ValueError(f"xid needs GPU:XID@SECONDS naming a simulated GPU, "
                                 f"got {item!r}")
            delay = float(match.group(3) or 0)
            _check_seconds("xid", delay, item)
            events.append((int(match.group(1)), int(match.group(2)), delay))

        def inject() -> None:
            for gpu, xid, delay in events:
                self.inject_xid(gpu, xid, delay)

        return inject

    # ----- internals ------------------------------------------------------------------
    def _enter(self, function: str, handle: SimulatedHandle | None = None) -> _Gpu | None:
        with self._lock:
            self.calls[function] += 1
            self.calls_by_thread[threading.current_thread().name] += 1
            for position, (name, gpu, code, times) in enumerate(self._injected):
                if name == function and (gpu is None or handle is None or gpu == handle.index):
                    if times is not None:
                        if times <= 1:
                            self._injected.pop(position)
                        else:
                            self._injected[position] = (name, gpu, code, times - 1)
                    raise NVMLError(code)
        if self._delay_s:
            time.sleep(self._delay_s)
        if not self._not_hung.is_set():
            with self._lock:
                self.hung_calls += 1
            self._not_hung.wait()
            with self._lock:
                self.hung_calls -= 1
        if function != "nvmlInit" and not self._initialized:
            raise NVMLError(E["NVML_ERROR_UNINITIALIZED"])
        if handle is None:
            return None
        if not isinstance(handle, SimulatedHandle) or not 0 <= handle.index < len(self._gpus):
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        gpu = self._gpus[handle.index]
        if self._is_lost(gpu):
            raise NVMLError(E["NVML_ERROR_GPU_IS_LOST"])
        if handle.mig is not None and function not in _MIG_HANDLE_FUNCTIONS:
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        if not self._supports(gpu, function):
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        return gpu

    def _supports(self, gpu: _Gpu, feature: str) -> bool:
        model = gpu.model
        if feature in self._unsupported:
            return False
        if not model.fully_supported and feature in _FULLY_SUPPORTED_ONLY:
            return False
        if model.virtualization_mode == 2 and feature in _VGPU_GUEST_UNSUPPORTED:
            return False
        return True

    def _is_lost(self, gpu: _Gpu) -> bool:
        return gpu.lost_at is not None and self._clock() >= gpu.lost_at

    def _elapsed(self) -> float:
        return self._clock() - self._start

    def _wall_us(self) -> int:
        return int((self._clock() + self._wall_offset) * 1e6)

    def _load(self, gpu: _Gpu) -> float:
        return _wave(self._elapsed(), 17.0, gpu.index)

    @staticmethod
    def _mig_slot(gpu: _Gpu, handle: SimulatedHandle) -> MigSlot | None:
        return None if handle.mig is None else gpu.model.mig[handle.mig]

    def _driver_has_field(self, field_id: int) -> bool:
        """Field IDs newer than the driver are unknown to it (an invalid argument)."""
        return self.profile.driver_major >= _FIELD_SINCE.get(field_id, 0)

    # ----- system -----------------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802 - the binding's names
        self._enter("nvmlInit")
        with self._lock:
            if self._init_errors:
                raise NVMLError(self._init_errors.pop())
            self._initialized += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._enter("nvmlShutdown")
        with self._lock:
            self._initialized = max(0, self._initialized - 1)

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        self._enter("nvmlSystemGetDriverVersion")
        return self.profile.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:  # noqa: N802
        self._enter("nvmlSystemGetNVMLVersion")
        major = 12 if self.profile.driver_major >= 525 else 11
        return f"{major}.{self.profile.driver_version}"

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetCount")
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimulatedHandle:  # noqa: N802
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self._gpus):
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        if self._is_lost(self._gpus[index]):
            raise NVMLError(E["NVML_ERROR_GPU_IS_LOST"])
        return SimulatedHandle(index)

    # ----- identity -----------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: SimulatedHandle) -> str:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetName", handle)
        assert gpu is not None
        slot = self._mig_slot(gpu, handle)
        return gpu.model.name if slot is None else f"{gpu.model.name} MIG {slot.profile}"

    def nvmlDeviceGetUUID(self, handle: SimulatedHandle) -> str:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetUUID", handle)
        assert gpu is not None
        slot = self._mig_slot(gpu, handle)
        if slot is None:
            return gpu.uuid
        # Each MIG device (a GPU instance and one of its compute instances) has its own UUID.
        return (f"MIG-{gpu.index:04d}{slot.gpu_instance_id:04d}-6d69-47"
                f"{slot.compute_instance_id:02d}-8000-{gpu.index:012d}")

    def nvmlDeviceGetPciInfo(self, handle: SimulatedHandle) -> nvml_h.PciInfo:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetPciInfo", handle)
        assert gpu is not None
        bus = (0x18 + 0x12 * gpu.index) % 0x100  # spread over the buses, as on a DGX board
        return nvml_h.PciInfo(busIdLegacy=f"0000:{bus:02X}:00.0".encode(), domain=0, bus=bus,
                               device=0, pciDeviceId=0x233010DE, pciSubSystemId=0x16C110DE,
                               busId=f"00000000:{bus:02X}:00.0".encode())

    def nvmlDeviceGetCudaComputeCapability(self, handle: SimulatedHandle) -> tuple[int, int]:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetCudaComputeCapability", handle)
        assert gpu is not None
        return gpu.model.compute_capability

    def nvmlDeviceGetNumGpuCores(self, handle: SimulatedHandle) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetNumGpuCores", handle)
        assert gpu is not None
        return gpu.model.cores

    def nvmlDeviceGetMinorNumber(self, handle: SimulatedHandle) -> int:  # noqa: N802
        """nvml.h: "the minor number for the device is such that the Nvidia device node file
        for each GPU will have the form /dev/nvidia[minor number]". A MIG device has no node
        of its own (NotSupported); the simulated GPUs take minors in index order, as the
        driver numbers them at probe time."""
        gpu = self._enter("nvmlDeviceGetMinorNumber", handle)
        assert gpu is not None
        if handle.mig is not None:
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        return gpu.index

    def nvmlDeviceGetMaxClockInfo(self, handle: SimulatedHandle, clock: int) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetMaxClockInfo", handle)
        assert gpu is not None
        if not self._supports_argument("nvmlDeviceGetMaxClockInfo", clock):
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        if clock == nvml_h.CONSTANTS["NVML_CLOCK_MEM"]:
            return gpu.model.max_memory_clock_mhz
        return gpu.model.max_sm_clock_mhz

    def nvmlDeviceGetVirtualizationMode(self, handle: SimulatedHandle) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetVirtualizationMode", handle)
        assert gpu is not None
        return gpu.model.virtualization_mode

    def nvmlGpmQueryDeviceSupport(self, handle: SimulatedHandle) -> Any:  # noqa: N802
        gpu = self._enter("nvmlGpmQueryDeviceSupport", handle)
        assert gpu is not None
        supported = (gpu.model.gpm and self.profile.driver_major >= 520
                     and gpu.model.virtualization_mode != 2)
        return nvml_h.GpmSupport(version=1, isSupportedDevice=int(supported))

    # ----- MIG ----------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: SimulatedHandle) -> tuple[int, int]:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetMigMode", handle)
        assert gpu is not None
        if gpu.model.compute_capability < (8, 0):
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        mode = int(bool(gpu.model.mig))
        return mode, mode

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: SimulatedHandle) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        assert gpu is not None
        return 7 if gpu.model.mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(  # noqa: N802
        self, handle: SimulatedHandle, index: int
    ) -> SimulatedHandle:
        gpu = self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        assert gpu is not None
        if not gpu.model.mig or not 0 <= index < 7:
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        if index >= len(gpu.model.mig):
            raise NVMLError(E["NVML_ERROR_NOT_FOUND"])
        return SimulatedHandle(handle.index, index)

    def nvmlDeviceIsMigDeviceHandle(self, handle: SimulatedHandle) -> bool:  # noqa: N802
        self._enter("nvmlDeviceIsMigDeviceHandle", handle)
        return handle.mig is not None

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(  # noqa: N802
        self, handle: SimulatedHandle
    ) -> SimulatedHandle:
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
        if handle.mig is None:
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        return SimulatedHandle(handle.index)

    def _mig_only(self, function: str, handle: SimulatedHandle) -> MigSlot:
        gpu = self._enter(function, handle)
        assert gpu is not None
        slot = self._mig_slot(gpu, handle)
        if slot is None:
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        return slot

    def nvmlDeviceGetGpuInstanceId(self, handle: SimulatedHandle) -> int:  # noqa: N802
        return self._mig_only("nvmlDeviceGetGpuInstanceId", handle).gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: SimulatedHandle) -> int:  # noqa: N802
        return self._mig_only("nvmlDeviceGetComputeInstanceId", handle).compute_instance_id

    def nvmlDeviceGetAttributes(self, handle: SimulatedHandle) -> Any:  # noqa: N802
        slot = self._mig_only("nvmlDeviceGetAttributes", handle)
        return nvml_h.DeviceAttributes(
            multiprocessorCount=slot.multiprocessors, gpuInstanceSliceCount=slot.gpu_slices,
            computeInstanceSliceCount=slot.compute_slices, memorySizeMB=slot.memory_mib)

    # ----- readings -----------------------------------------------------------------------
    def nvmlDeviceGetMemoryInfo(self, handle: SimulatedHandle, version: int | None = None) -> Any:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetMemoryInfo", handle)
        assert gpu is not None
        if version and self.profile.driver_major < 510:
            raise NVMLError(E["NVML_ERROR_FUNCTION_NOT_FOUND"])  # no _v2 symbol yet
        slot = self._mig_slot(gpu, handle)
        mib = 1024 * 1024
        if slot is not None:
            total, reserved = slot.memory_mib * mib, 0
            used = self._mig_used(gpu, handle.mig or 0)
        elif gpu.model.mig:  # a MIG-enabled GPU's memory in use is its instances' together
            total, reserved = gpu.model.memory_mib * mib, gpu.model.reserved_mib * mib
            used = min(total - reserved,
                       sum(self._mig_used(gpu, position) for position in range(len(gpu.model.mig))))
        else:
            total, reserved = gpu.model.memory_mib * mib, gpu.model.reserved_mib * mib
            playing = self._playing(gpu)
            used = int((total - reserved) * (0.1 + 0.8 * _wave(self._elapsed(), 23.0, gpu.index))
                       if playing is None else playing["memory_used_bytes"])
            used = min(total - reserved, max(used, self._held_by_processes(gpu.index, None)))
        free = total - reserved - used
        if version:
            return nvml_h.MemoryV2(version=version, total=total, reserved=reserved, free=free,
                                    used=used)
        return nvml_h.Memory(total=total, free=free, used=used + reserved)

    def _held_by_processes(self, gpu: int, mig: int | None) -> int:
        """What the listed processes hold on this GPU (or MIG device): used is never less."""
        return sum(p.used_memory_bytes or 0 for p in self._current_processes()
                   if p.gpu == gpu and p.mig == mig)

    def _mig_used(self, gpu: _Gpu, position: int) -> int:
        total = gpu.model.mig[position].memory_mib * 1024 * 1024
        used = int(total * (0.1 + 0.6 * _wave(self._elapsed(), 19.0, position)))
        return min(total, max(used, self._held_by_processes(gpu.index, position)))

    def nvmlDeviceGetUtilizationRates(self, handle: SimulatedHandle) -> Any:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetUtilizationRates", handle)
        assert gpu is not None
        if gpu.model.mig:
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        playing = self._playing(gpu)
        busy = int(round(100 * self._load(gpu) if playing is None else playing["utilization_pct"]))
        return nvml_h.Utilization(gpu=busy, memory=busy // 2)

    def nvmlDeviceGetTemperature(self, handle: SimulatedHandle, sensor: int) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetTemperature", handle)
        assert gpu is not None
        return self._temperature(gpu)

    def nvmlDeviceGetPowerUsage(self, handle: SimulatedHandle) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetPowerUsage", handle)
        assert gpu is not None
        return self._power_mw(gpu)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimulatedHandle) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)
        assert gpu is not None
        return gpu.model.power_limit_mw

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: SimulatedHandle) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        assert gpu is not None
        return gpu.model.pcie_generation

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: SimulatedHandle) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetMaxPcieLinkWidth", handle)
        assert gpu is not None
        return gpu.model.pcie_width

    def _pcie_rate(self, gpu: _Gpu, direction: int) -> float:
        playing = self._playing(gpu)
        if playing is not None:
            return float(playing[_PCIE_FIGURES[direction]] or 0.0)
        peak = 8e9 if direction == 0 else 12e9
        return peak * _wave(self._elapsed(), 11.0 + direction, gpu.index)

    def _pcie_bytes(self, gpu: _Gpu, direction: int, wide: bool = False) -> int:
        """The PCIe byte counter, as wide as the profile's field (``wide``: never wrapped,
        as GPM counts)."""
        if self.scenario is not None:
            moved = int(self._played_total(gpu, _PCIE_FIGURES[direction]))
        else:
            peak = 8e9 if direction == 0 else 12e9
            moved = int(peak * _wave_integral(self._elapsed(), 11.0 + direction, gpu.index))
        counted = self.profile.pcie_counter_start + moved
        return counted if wide else counted % (1 << self.profile.pcie_counter_bits)

    def _pcie_link_now(self, gpu: _Gpu) -> tuple[int, int]:
        """The link as trained now: the model's maximum unless the scenario trains it down."""
        playing = self._playing(gpu)
        generation = playing and playing["pcie_link_generation"]
        width = playing and playing["pcie_link_width"]
        return (generation or gpu.model.pcie_generation, width or gpu.model.pcie_width)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: SimulatedHandle) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetCurrPcieLinkGeneration", handle)
        assert gpu is not None
        return self._pcie_link_now(gpu)[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: SimulatedHandle) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetCurrPcieLinkWidth", handle)
        assert gpu is not None
        return self._pcie_link_now(gpu)[1]

    def nvmlDeviceGetPcieThroughput(self, handle: SimulatedHandle, counter: int) -> int:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetPcieThroughput", handle)
        assert gpu is not None
        time.sleep(PCIE_THROUGHPUT_SAMPLE_S)  # the driver counts bytes for 20 ms
        return int(self._pcie_rate(gpu, counter) / 1024)  # KB/s

    def nvmlDeviceGetNvLinkState(self, handle: SimulatedHandle, link: int) -> int:  # noqa: N802
        model = self._nvlink_model("nvmlDeviceGetNvLinkState", handle, link)
        return 0 if link in model.nvlink_down else 1

    def _nvlink_model(self, function: str, handle: SimulatedHandle, link: int) -> GpuModel:
        """The model of ``handle``'s GPU for a per-link call: NOT_SUPPORTED without
        NVLink, INVALID_ARGUMENT past its last link."""
        gpu = self._enter(function, handle)
        assert gpu is not None
        if not gpu.model.nvlink_link_count or not self._supports(gpu, "nvlink"):
            raise NVMLError(E["NVML_ERROR_NOT_SUPPORTED"])
        if not 0 <= link < gpu.model.nvlink_link_count:
            raise NVMLError(E["NVML_ERROR_INVALID_ARGUMENT"])
        return gpu.model

    def nvmlDeviceGetNvLinkVersion(self, handle: SimulatedHandle, link: int) -> int:  # noqa: N802
        """The NVLink version of ``link``, an nvmlNvlinkVersion_t."""
        return self._nvlink_model("nvmlDeviceGetNvLinkVersion", handle, link).nvlink_version

    def _nvlink_bytes(self, gpu: _Gpu, direction: int, link: int) -> int:
        if link in gpu.model.nvlink_down:
            return 0
        if self.scenario is not None:  # the scenario's total, spread evenly over active links
            active = gpu.model.nvlink_link_count - len(gpu.model.nvlink_down)
            counted = int(self._played_total(gpu, _NVLINK_FIGURES[direction]) / max(1, active))
            return counted - self._nvlink_offsets.get((gpu.uuid, direction, link), 0)
        peak = 20e9 / gpu.model.nvlink_link_count
        counted = int(peak * _wave_integral(self._elapsed(), 9.0 + direction, gpu.index + link / 7))
        return counted - self._nvlink_offsets.get((gpu.uuid, direction, link), 0)

    def nvmlDeviceGetFieldValues(self, handle: SimulatedHandle, values: Any, count: int  # noqa: N802
                                 ) -> None:
        """Fill the caller's ``nvmlFieldValue_t`` array: each entry's fieldId and scopeId
        in, its own return code, value type, value and CPU timestamp (µs) out."""
        gpu = self._enter("nvmlDeviceGetFieldValues", handle)
        assert gpu is not None
        timestamp_us = self._wall_us()
        wide = nvml_h.CONSTANTS["NVML_VALUE_TYPE_UNSIGNED_LONG_LONG"]
        narrow_pcie = self.profile.pcie_counter_bits == 32
        pcie_fields = (F["NVML_FI_DEV_PCIE_COUNT_TX_BYTES"], F["NVML_FI_DEV_PCIE_COUNT_RX_BYTES"])
        # The driver writes the structs in C; the binding's Python attribute hooks on its
        # structs are skipped here so the simulator's cost does not stand in for the driver's.
        get, put = ctypes.Structure.__getattribute__, ctypes.Structure.__setattr__
        for position in range(count):
            slot = values[position]
            field_id = get(slot, "fieldId")
            put(slot, "timestamp", timestamp_us)
            put(slot, "latencyUsec", 0)
            code, value = self._field_value(gpu, field_id, get(slot, "scopeId"))
            put(slot, "nvmlReturn", code)
            if code == NVML_SUCCESS:
                if narrow_pcie and field_id in pcie_fields:
                    put(slot, "valueType", nvml_h.CONSTANTS["NVML_VALUE_TYPE_UNSIGNED_INT"])
                    get(slot, "value").uiVal = value
                else:
                    put(slot, "valueType", wide)
                    get(slot, "value").ullVal = value
            else:
                put(slot, "valueType", wide)

    def _field_value(self, gpu: _Gpu, field_id: int, scope: int) -> tuple[int, int]:
        unsupported = (E["NVML_ERROR_NOT_SUPPORTED"], 0)
        if field_id not in _KNOWN_FIELDS or not self._driver_has_field(field_id):
            return E["NVML_ERROR_INVALID_ARGUMENT"], 0
        model = gpu.model
        if field_id in (F["NVML_FI_DEV_PCIE_COUNT_TX_BYTES"], F["NVML_FI_DEV_PCIE_COUNT_RX_BYTES"]):
            if not self._supports(gpu, "pcie_counters"):
                return unsupported
            return NVML_SUCCESS, self._pcie_bytes(
                gpu, int(field_id == F["NVML_FI_DEV_PCIE_COUNT_RX_BYTES"]))
        # Everything else is NVLink.
        if not model.nvlink_link_count or not self._supports(gpu, "nvlink"):
            return unsupported
        if field_id == F["NVML_FI_DEV_NVLINK_LINK_COUNT"]:
            return NVML_SUCCESS, model.nvlink_link_count
        links = range(model.nvlink_link_count)
        if scope != _UINT_MAX and scope not in links:
            return E["NVML_ERROR_INVALID_ARGUMENT"], 0
        if field_id == F["NVML_FI_DEV_NVLINK_GET_SPEED"]:
            return NVML_SUCCESS, 0 if scope in model.nvlink_down else model.nvlink_link_mbps
        throughput = (F["NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"],
                      F["NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"])
        if field_id in throughput:
            if not self.profile.nvlink_throughput_fields:
                return unsupported
            direction, unit = throughput.index(field_id), 1024  # KiB
        else:
            direction = int(field_id == F["NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES"])
            unit = 1
        chosen = links if scope == _UINT_MAX else (scope,)
        return NVML_SUCCESS, sum(self._nvlink_bytes(gpu, direction, link)
                                 for link in chosen) // unit

