"""Load scenarios for simulated GPUs: what each kind of workload makes a GPU's counters do.

Each scenario is a load model stated from NVIDIA's documentation of the counters, not from
the diagnosis rules that read them, so a test that a scenario reads as its cause checks the
rules against the documentation. ``load(name, elapsed_s, gpu)`` is a pure function: the same
arguments give the same figures, every GPU plays the scenario with its own phase, and nothing
here imports the rest of the project.

What the counters mean (the sources every model below leans on):

- **Utilization** (``nvmlDeviceGetUtilizationRates``, nvml.h ``nvmlUtilization_t.gpu``):
  "percent of time over the past sample period during which one or more kernels was
  executing on the GPU". Copies alone do not count; one tiny kernel on one SM reads 100%.
- **SM activity** (DCGM ``SM_ACTIVE`` 1002, GPM ``SM_UTIL``): the fraction of time at least
  one warp was resident on an SM, averaged over all SMs. "N/5 blocks for the whole interval
  = N blocks for 1/5 of it": k blocks on an N-SM GPU for the whole time read k/N. Warps
  waiting on memory are resident: a streaming kernel reads near 100%.
- **SM occupancy** (1003): resident warps over the most an SM can hold.
- **Tensor activity** (1004): 1.0 is one tensor instruction every 2 cycles.
- **DRAM activity** (1005): "~0.8 is the practical peak" of DRAM bandwidth.
- **PCIe / NVLink** bytes (DCGM 1009-1012): PCIe counts protocol headers too, so payload
  tops out under the link's rate (PCIe Gen4/Gen5 TLP overhead leaves about 85% for data).
  NCCL collectives run as persistent kernels on a few SMs (NCCL docs: ``NCCL_MAX_NCHANNELS``,
  one block per channel), so utilization reads 100% while SM activity stays low.
- **Clocks-event reasons** (nvml.h ``nvmlClocksEventReason*``): 0x1 GpuIdle "nothing is
  running on the GPU and the clocks are dropping to Idle state"; 0x4 SwPowerCap "the clocks
  have been optimized to ensure not to exceed currently set power limits"; 0x20 SwThermal
  and 0x40 HwThermal slowdowns near the slowdown temperature (``NVML_TEMPERATURE_THRESHOLD
  _SLOWDOWN``); 0x8 HwSlowdown "by a factor of two or more".
- **Launch cost**: a kernel launch costs 5-20 µs on the host (Meta HTA docs, "kernel launch
  statistics"); kernels shorter than that leave the SMs mostly empty between them.

The figures are shares (0-1) of each GPU's own maxima, so one model fits any simulated GPU;
the simulator multiplies them by that GPU's limits (``readings`` does it, in NVML's units).
Wiring: see ``load``'s docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

GPU_IDLE = 0x1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40


class Load(NamedTuple):
    """What one simulated GPU does at one instant. Shares are 0-1 of that GPU's own maxima;
    ``None`` means the scenario does not set it (the simulator keeps its own value)."""

    utilization: float  # share of the sample period with a kernel running (NVML utilization)
    sm_activity: float  # GPM SM_UTIL / DCGM SM_ACTIVE
    sm_occupancy: float  # GPM SM_OCCUPANCY
    tensor_activity: float  # GPM ANY_TENSOR_UTIL
    dram_bandwidth: float  # GPM DRAM_BW_UTIL
    fp32_activity: float  # GPM FP32_UTIL
    fp16_activity: float  # GPM FP16_UTIL
    pcie_tx: float  # of the link's one-direction maximum (GPU to host)
    pcie_rx: float  # of the link's one-direction maximum (host to GPU)
    nvlink_tx: float  # of all active links' one-direction maximum
    nvlink_rx: float
    memory_used: float  # share of the GPU's memory
    power: float  # share of the enforced power limit
    temperature_c: float
    sm_clock: float  # share of the maximum SM clock
    clock_event_reasons: int  # nvml.h clocks-event reason bits
    pcie_link_generation: int | None = None  # current generation; None: at its maximum
    pcie_link_width: int | None = None  # current width in lanes; None: at its maximum


@dataclass(frozen=True)
class Scenario:
    name: str
    cause: str  # the diagnosis cause this load should read as (for tests)
    description: str  # what the workload is, in words


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("idle", "idle", "nothing runs: clocks drop to idle (GpuIdle)"),
    Scenario("starved", "starved",
             "bursts of full-GPU steps with 1.5 s waits for input between them"),
    Scenario("launch-bound", "launch-bound",
             "a stream of tiny kernels (8 blocks each), launched back to back: a kernel is "
             "always resident, few SMs ever work"),
    Scenario("memory-bound", "memory-bound",
             "a streaming elementwise kernel: every SM resident, DRAM at its practical peak"),
    Scenario("pcie-bound", "pcie-bound",
             "host-to-device copies of every batch at the link's payload rate; short kernels "
             "between them"),
    Scenario("nvlink-bound", "nvlink-bound",
             "all-reduce over NVLink: NCCL's persistent kernels on a few SMs, links near "
             "their maximum"),
    Scenario("pcie-downtrained", "pcie-downtrained",
             "a compute-bound job on a link trained at Gen3 x8 instead of its maximum"),
    Scenario("throttled-thermal", "throttled",
             "a compute-bound job at its slowdown temperature: thermal slowdown, clocks cut"),
    Scenario("throttled-power", "throttled",
             "a compute-bound job at its power limit: software power cap, clocks lowered"),
    Scenario("compute-bound", "compute-bound",
             "a large matrix multiply: every SM busy, tensor cores busy, DRAM moderate"),
)}
IDLE_TEMPERATURE_C = 32.0
BUSY_TEMPERATURE_C = 68.0
SLOWDOWN_TEMPERATURE_C = 87.0  # the simulated GPUs' slowdown threshold (H200-class)


def scenario_names() -> tuple[str, ...]:
    return tuple(SCENARIOS)


def check_scenario(name: str) -> str:
    """``name`` if it is a scenario; else a one-line ``ValueError`` naming the choices."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    return name


def _wobble(elapsed_s: float, gpu: int, period_s: float = 7.0, depth: float = 0.02) -> float:
    """A small, smooth, deterministic variation, so lines are not flat (±depth)."""
    return depth * math.sin(2 * math.pi * (elapsed_s / period_s) + 1.3 * gpu)


def _clamp(value: float) -> float:
    return max(0.0, min(1.0, value))


def _busy(elapsed_s: float, gpu: int, tensor: float = 0.7) -> Load:
    """A compute-bound step (a large GEMM): the model the busy parts of other scenarios use."""
    w = _wobble(elapsed_s, gpu)
    return Load(utilization=1.0, sm_activity=_clamp(0.95 + w), sm_occupancy=_clamp(0.45 + w),
                tensor_activity=_clamp(tensor + w), dram_bandwidth=_clamp(0.35 + w),
                fp32_activity=_clamp(0.15 + w), fp16_activity=_clamp(0.05 + w),
                pcie_tx=0.01, pcie_rx=0.02, nvlink_tx=0.0, nvlink_rx=0.0,
                memory_used=0.6, power=_clamp(0.85 + w), temperature_c=BUSY_TEMPERATURE_C,
                sm_clock=1.0, clock_event_reasons=0)


def _idle(elapsed_s: float, gpu: int, memory_used: float = 0.01) -> Load:
    return Load(utilization=0.0, sm_activity=0.0, sm_occupancy=0.0, tensor_activity=0.0,
                dram_bandwidth=0.0, fp32_activity=0.0, fp16_activity=0.0, pcie_tx=0.0,
                pcie_rx=0.0, nvlink_tx=0.0, nvlink_rx=0.0, memory_used=memory_used,
                power=0.1, temperature_c=IDLE_TEMPERATURE_C, sm_clock=0.15,
                clock_event_reasons=GPU_IDLE)


def load(name: str, elapsed_s: float, gpu: int) -> Load:
    """What GPU ``gpu`` does ``elapsed_s`` seconds into scenario ``name``.

    Wiring into the simulator (a few lines where it computes a device's readings each
    call): ``values = readings(load(scenario, now - started, index), limits)`` gives every
    figure in NVML's units; by hand, with ``figures = load(...)``: utilization
    = ``100 * figures.utilization``, each GPM metric = ``100 * figures.<field>`` (PCIe and
    NVLink GPM rates: share x the link's maximum), the PCIe and NVLink byte counters advance
    by share x maximum x elapsed time, used memory = share x total, power = share x limit,
    SM clock = share x maximum, ``clock_event_reasons`` as the clocks-event mask, the
    temperature as read, and ``pcie_link_generation``/``width`` (when not None) as the
    current link. Raises ``ValueError`` (one line) for an unknown scenario.
    """
    check_scenario(name)
    w = _wobble(elapsed_s, gpu)
    if name == "idle":
        return _idle(elapsed_s, gpu)
    if name == "starved":
        # Steps of 1 s on the GPU, then 1.5 s waiting for the next batch (Nsight calls a gap
        # over 500 ms starvation): the GPU idles, its clocks do not drop in so short a wait.
        phase = (elapsed_s + 0.37 * gpu) % 2.5
        if phase < 1.0:
            return _busy(elapsed_s, gpu)
        return _idle(elapsed_s, gpu, memory_used=0.6)._replace(
            sm_clock=1.0, power=0.3, temperature_c=BUSY_TEMPERATURE_C - 10,
            clock_event_reasons=0)
    if name == "launch-bound":
        # 8 blocks of a 132-SM GPU per kernel, kernels back to back: one is always resident
        # (utilization 100%), SM activity = 8/132 x the share of time a kernel runs between
        # launches (~6%); little DRAM traffic; low power for a "100% busy" GPU (nvitop #189).
        return _busy(elapsed_s, gpu)._replace(
            sm_activity=_clamp(0.06 + w / 4), sm_occupancy=_clamp(0.03 + w / 4),
            tensor_activity=0.0, dram_bandwidth=_clamp(0.04 + w / 4),
            fp32_activity=_clamp(0.02 + w / 4), fp16_activity=0.0, power=0.3,
            temperature_c=48.0)
    if name == "memory-bound":
        # A streaming kernel: every SM has resident warps waiting on memory (SM activity
        # ~95%), little math, DRAM at the practical peak DCGM gives (~0.8) and a bit above.
        return _busy(elapsed_s, gpu)._replace(
            sm_activity=_clamp(0.95 + w), sm_occupancy=_clamp(0.8 + w),
            tensor_activity=0.0, dram_bandwidth=_clamp(0.88 + w), fp32_activity=_clamp(
                0.08 + w / 2), fp16_activity=0.0, power=_clamp(0.7 + w))
    if name == "pcie-bound":
        # Each batch is copied host to device at the payload rate (~85% of the link: PCIe
        # counts headers); the kernels between copies are short, so utilization is low and
        # the SMs mostly wait.
        return _busy(elapsed_s, gpu)._replace(
            utilization=_clamp(0.3 + w), sm_activity=_clamp(0.12 + w / 2),
            sm_occupancy=_clamp(0.1 + w / 2), tensor_activity=_clamp(0.05 + w / 2),
            dram_bandwidth=_clamp(0.1 + w / 2), pcie_rx=_clamp(0.85 + w / 2),
            pcie_tx=0.05, power=0.4, temperature_c=55.0)
    if name == "nvlink-bound":
        # NCCL all-reduce: persistent kernels on a few SMs (one block per channel) keep a
        # kernel resident all the time; the links run near their maximum in both directions.
        return _busy(elapsed_s, gpu)._replace(
            sm_activity=_clamp(0.15 + w / 2), sm_occupancy=_clamp(0.05 + w / 2),
            tensor_activity=0.0, dram_bandwidth=_clamp(0.3 + w / 2),
            nvlink_tx=_clamp(0.88 + w / 2), nvlink_rx=_clamp(0.88 + w / 2), power=0.5)
    if name == "pcie-downtrained":
        return _busy(elapsed_s, gpu)._replace(pcie_link_generation=3, pcie_link_width=8)
    if name == "throttled-thermal":
        # At the slowdown temperature the driver holds clocks down (SwThermal), and past it
        # the hardware slows too (HwThermal); the work is compute-bound.
        hot = (elapsed_s + gpu) % 10.0 < 6.0
        reasons = SW_THERMAL | (HW_THERMAL if hot else 0)
        return _busy(elapsed_s, gpu)._replace(
            temperature_c=SLOWDOWN_TEMPERATURE_C + (1.0 if hot else -0.5),
            sm_clock=0.7 if hot else 0.85, power=0.75, clock_event_reasons=reasons)
    if name == "throttled-power":
        # At the power limit: software power cap, clocks lowered to stay under it.
        return _busy(elapsed_s, gpu)._replace(power=1.0, sm_clock=_clamp(0.8 + w),
                                              clock_event_reasons=SW_POWER_CAP)
    return _busy(elapsed_s, gpu)  # compute-bound


class Limits(NamedTuple):
    """One simulated GPU's own maxima, which a scenario's shares are of (None: it has none)."""

    memory_total_bytes: float
    power_limit_w: float | None
    sm_clock_max_mhz: float | None
    pcie_max_bytes_per_s: float | None  # one direction
    nvlink_max_bytes_per_s: float | None  # one direction, all active links


def readings(figures: Load, limits: Limits) -> dict[str, float | int | None]:
    """A scenario's figures in the units NVML answers in, for one GPU: what the simulated
    driver returns from the matching calls (``None``: the GPU has no such reading).

    Keys: ``utilization_pct`` (nvmlDeviceGetUtilizationRates ``gpu``), the GPM metrics in
    percent (``sm_util_pct``, ``sm_occupancy_pct``, ``any_tensor_util_pct``,
    ``dram_bw_util_pct``, ``fp32_util_pct``, ``fp16_util_pct``), byte rates
    (``pcie_tx_bytes_per_s``, ... ``nvlink_rx_bytes_per_s``: advance the byte counters by rate
    x elapsed time), ``memory_used_bytes``, ``power_w``, ``temperature_c``, ``sm_clock_mhz``,
    ``clock_event_reasons`` and the current ``pcie_link_generation``/``pcie_link_width``.
    """
    def times(share: float, maximum: float | None) -> float | None:
        return None if maximum is None else share * maximum

    return {
        "utilization_pct": 100.0 * figures.utilization,
        "sm_util_pct": 100.0 * figures.sm_activity,
        "sm_occupancy_pct": 100.0 * figures.sm_occupancy,
        "any_tensor_util_pct": 100.0 * figures.tensor_activity,
        "dram_bw_util_pct": 100.0 * figures.dram_bandwidth,
        "fp32_util_pct": 100.0 * figures.fp32_activity,
        "fp16_util_pct": 100.0 * figures.fp16_activity,
        "pcie_tx_bytes_per_s": times(figures.pcie_tx, limits.pcie_max_bytes_per_s),
        "pcie_rx_bytes_per_s": times(figures.pcie_rx, limits.pcie_max_bytes_per_s),
        "nvlink_tx_bytes_per_s": times(figures.nvlink_tx, limits.nvlink_max_bytes_per_s),
        "nvlink_rx_bytes_per_s": times(figures.nvlink_rx, limits.nvlink_max_bytes_per_s),
        "memory_used_bytes": figures.memory_used * limits.memory_total_bytes,
        "power_w": times(figures.power, limits.power_limit_w),
        "temperature_c": figures.temperature_c,
        "sm_clock_mhz": times(figures.sm_clock, limits.sm_clock_max_mhz),
        "clock_event_reasons": figures.clock_event_reasons,
        "pcie_link_generation": figures.pcie_link_generation,
        "pcie_link_width": figures.pcie_link_width,
    }
