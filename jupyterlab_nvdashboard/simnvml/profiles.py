"""The machines the simulated NVML can pretend to be, one profile each.

Each profile states the driver release it models and what NVIDIA's documentation says
such a machine answers. Which nvidia-ml-py runs over it is not the machine's business: the
tests run every profile under every binding release they fetched. Choose one with
``--simulate-profile`` or
``NVDASHBOARD_SIMULATE_PROFILE``; ``--simulate N`` says how many GPUs it has (GPU *i* is
``models[i % len(models)]``).

Where each behaviour comes from:
- ``nvml.h``: ``nvmlDeviceGetPcieThroughput`` "is querying a byte counter over a 20ms
  interval", so it blocks about 20 ms; functions documented for "fully supported devices"
  only answer ``NVML_ERROR_NOT_SUPPORTED`` on GeForce cards; ``nvmlDeviceGetUtilizationRates``
  is not supported on MIG-enabled GPUs; ``nvmlDeviceGetMemoryInfo_v2`` reports reserved
  memory apart from used memory; field values carry their own return code and a CPU
  timestamp in microseconds; an unknown field ID is an invalid argument.
- Driver release notes: the PCIe byte-counter fields arrive with R555 and the NVLink
  byte-count fields with R560; the memory v2 call with R510;
  GPM with R520, on Hopper and later, and not inside vGPU guests.
- The MIG user guide: an A100 splits into 7 compute and 8 memory slices; each MIG device has
  its own UUID (``MIG-…``), memory and slice counts (``nvmlDeviceGetAttributes``).
- vGPU guests: nvidia-smi shows N/A for power, temperature and PCIe there; utilization and
  memory are reported.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .nvml_h import CONSTANTS


@dataclass(frozen=True)
class MigSlot:
    """One MIG device: a GPU instance with one of its compute instances (a GPU instance
    split into several compute instances is several slots with its ``gpu_instance_id``)."""

    profile: str  # e.g. "3g.40gb"
    gpu_instance_id: int
    compute_instance_id: int
    gpu_slices: int
    compute_slices: int
    multiprocessors: int
    memory_mib: int


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_mib: int
    reserved_mib: int  # what memory v2 reports as reserved by the driver
    pcie_generation: int
    pcie_width: int
    power_limit_mw: int
    compute_capability: tuple[int, int]
    cores: int
    max_sm_clock_mhz: int
    nvlink_link_count: int = 0  # links the GPU has; 0 answers NOT_SUPPORTED
    nvlink_down: tuple[int, ...] = ()  # link IDs that are present but not active
    nvlink_link_mbps: int = 0  # per link, per direction
    # nvmlDeviceGetNvLinkVersion's answer, an nvmlNvlinkVersion_t (NVML_NVLINK_VERSION_*):
    # NVLink 3.0 on Ampere, 4.0 on Hopper, 5.0 on Blackwell.
    nvlink_version: int = 0
    gpm: bool = False  # Hopper and later
    fully_supported: bool = True  # False for GeForce (see nvml.h "fully supported devices")
    virtualization_mode: int = 0  # NVML_GPU_VIRTUALIZATION_MODE_*
    mig: tuple[MigSlot, ...] = ()  # MIG enabled with these devices when not empty
    # Health (health.py): nvidia-smi -q's "Max Clocks" and "Temperature" sections.
    max_memory_clock_mhz: int = 1593
    temperature_slowdown_c: int = 89
    temperature_shutdown_c: int = 92
    fan: bool = False  # SXM and passively cooled boards have no fan: NOT_SUPPORTED


@dataclass(frozen=True)
class Profile:
    name: str
    summary: str
    driver_version: str
    models: tuple[GpuModel, ...]
    pcie_counter_bits: int = 64  # PCIe byte counter width (32: NVML_VALUE_TYPE_UNSIGNED_INT)
    pcie_counter_start: int = 0  # counters start here, so a 32-bit one wraps early
    nvlink_throughput_fields: bool = True  # the older NVLINK_THROUGHPUT_DATA_* fields answer

    @functools.cached_property
    def driver_major(self) -> int:
        return int(self.driver_version.split(".")[0])


NVLINK_3_0 = CONSTANTS["NVML_NVLINK_VERSION_3_0"]
NVLINK_4_0 = CONSTANTS["NVML_NVLINK_VERSION_4_0"]
NVLINK_5_0 = CONSTANTS["NVML_NVLINK_VERSION_5_0"]

H200 = GpuModel("NVIDIA H200", 143_771, 552, 5, 16, 700_000, (9, 0), 16_896, 1980,
                nvlink_link_count=18, nvlink_link_mbps=26_562, gpm=True,
                nvlink_version=NVLINK_4_0, max_memory_clock_mhz=3201, temperature_slowdown_c=90,
                temperature_shutdown_c=95)
H100_MIG = GpuModel(
    "NVIDIA H100 80GB HBM3", 81_559, 528, 5, 16, 700_000, (9, 0), 16_896, 1980,
    nvlink_link_count=18, nvlink_link_mbps=26_562, gpm=True, max_memory_clock_mhz=2619,
    nvlink_version=NVLINK_4_0,
    mig=(MigSlot("3g.40gb", 1, 0, 3, 3, 60, 40_448), MigSlot("2g.20gb", 5, 0, 2, 2, 32, 20_096)),
)
A100 = GpuModel("NVIDIA A100-SXM4-80GB", 81_920, 488, 4, 16, 400_000, (8, 0), 6_912, 1410,
                nvlink_link_count=12, nvlink_link_mbps=25_000, nvlink_version=NVLINK_3_0)
A100_PCIE = GpuModel("NVIDIA A100-PCIE-40GB", 40_960, 480, 4, 16, 250_000, (8, 0), 6_912, 1410)
A100_MIG = GpuModel(
    "NVIDIA A100-SXM4-80GB", 81_920, 488, 4, 16, 400_000, (8, 0), 6_912, 1410,
    nvlink_link_count=12, nvlink_link_mbps=25_000, nvlink_version=NVLINK_3_0,
    mig=(MigSlot("3g.40gb", 1, 0, 3, 3, 42, 40_192), MigSlot("4g.40gb", 2, 0, 4, 4, 56, 40_192)),
)
GEFORCE = GpuModel("NVIDIA GeForce RTX 3080", 10_240, 0, 4, 16, 320_000, (8, 6), 8_704, 2100,
                   fully_supported=False, max_memory_clock_mhz=9501,
                   temperature_slowdown_c=95, temperature_shutdown_c=98, fan=True)
VGPU = GpuModel("NVIDIA A100-40C", 40_960, 420, 4, 16, 0, (8, 0), 6_912, 1410,
                virtualization_mode=2)
B200 = GpuModel("NVIDIA B200", 183_359, 640, 6, 16, 1_000_000, (10, 0), 18_944, 1965,
                nvlink_link_count=18, nvlink_down=(4, 5), nvlink_link_mbps=53_125, gpm=True,
                nvlink_version=NVLINK_5_0,
                max_memory_clock_mhz=3996)

PROFILES: dict[str, Profile] = {profile.name: profile for profile in (
    Profile("mixed", "H200 and A100 taking turns, current driver",
            "570.133.20", (H200, A100)),
    Profile("h200", "H100/H200 class with GPM and 18 NVLink links",
            "570.133.20", (H200,)),
    Profile("a100-535", "A100 on the 535 LTS driver: no PCIe counter fields, "
            "PCIe throughput only from the 20 ms blocking call", "535.183.01",
            (A100_PCIE,)),
    Profile("a100-mig", "A100 with MIG enabled and two MIG devices (3g.40gb, 4g.40gb)",
            "550.127.05", (A100_MIG, A100)),
    Profile("consumer", "GeForce card on a 470 driver: most readings not supported",
            "470.256.02", (GEFORCE,)),
    Profile("vgpu", "vGPU guest: utilization and memory only", "550.127.05",
            (VGPU,)),
    Profile("wrap32", "PCIe byte counters 32 bits wide, as an H200 answered them on driver "
            "580: they wrap more than once between two reads at a busy link's rate",
            "570.133.20", (H200,), pcie_counter_bits=32,
            pcie_counter_start=2**32 - 200_000_000),
    Profile("h100-mig", "H100 with MIG enabled (3g.40gb, 2g.20gb): GPM per GPU instance",
            "570.133.20", (H100_MIG, H200)),
    Profile("link-gap", "B200 with NVLink links 4 and 5 down and only the newer NVLink "
            "byte-count fields", "575.51.03", (B200,),
            nvlink_throughput_fields=False),
)}
DEFAULT_PROFILE = "mixed"
