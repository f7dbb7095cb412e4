"""Health: clocks and why they are held down, temperature and power against their limits,
fan, ECC counters, remapped rows and XID events, per physical GPU.

``HealthReader.read`` runs on the sampler's GPU reader thread after each pass
(``sampler.py``) and fills ``Sample.extra[HEALTH_FAMILY]`` (``families.py``). Every NVML call
goes through the choke point in ``nvml.py``, so a reading a GPU or driver lacks is ``None``
(and asked no more). Costs are kept apart by rate:

- read once per device: the clock maxima and the temperature thresholds;
- every pass, or every ``every_s`` (the pace its consumers need, ``demand.py``; between
  two readings every pass carries the newest): current SM and memory clocks, P-state,
  clocks-event (throttle) reasons and
  fan (five cheap calls); temperature and power come from the pass's own ``GpuReading``;
- every ``slow_every_s``: the four ECC counters, remapped rows and the power limit;
- XID events: one NVML event set, registered for ``nvmlEventTypeXidCriticalError`` on every
  GPU, polled with ``nvmlEventSetWait_v2(set, 0)``, a timeout of 0 ms, so the poll never
  waits for an event. Each event is kept (the newest ``MAX_XID_EVENTS`` per GPU, by UUID)
  and every later reading lists it.

``clock_event_words`` and ``assess`` turn a reading into words: why the clocks are held down
and which readings are past their thresholds.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .families import HEALTH_FAMILY, HealthReading, XidEvent
from .nvml import GpuReading, NvmlReader
from .session import Device

HEALTH_SLOW_EVERY_S = 5.0
MAX_XID_EVENTS = 50
XID_EVENTS_PER_PASS = 32  # a storm of events must not hold up the reader thread
NO_INSTANCE = 0xFFFFFFFF
PSTATE_UNKNOWN = 32
POWER_AT_LIMIT = 0.98  # drawing this share of the limit counts as "at the cap"

# nvml.h clocks-event reason bits (an ABI: the same values in every release) and what each
# means, in words; ``True`` marks the reasons that hold a busy GPU's clocks down.
CLOCK_EVENT_REASONS: tuple[tuple[int, str, bool], ...] = (
    (0x1, "idle: nothing to run, clocks lowered", False),
    (0x2, "applications clocks set (nvidia-smi -ac)", False),
    (0x4, "software power cap: at its power limit", True),
    (0x8, "hardware slowdown: too hot or the power brake is on", True),
    (0x10, "sync boost: held to the slowest GPU of its group", False),
    (0x20, "software thermal slowdown: too hot for these clocks", True),
    (0x40, "hardware thermal slowdown: too hot", True),
    (0x80, "hardware power brake: the power supply asked for less", True),
    (0x100, "display clock setting", False),
)
# The clocks-event reasons grouped the way a reader asks "held down by what?" (the rows of
# /GPU-Health's reasons timeline), bottom to top: (name, the bits it covers). "none" is a
# mask of 0: nothing held the clocks. Hardware and software are apart, as the diagnosis names
# them: nvml.h documents HW thermal slowdown (0x40) and the power brake (0x80) as kinds of
# HW slowdown (0x8), so a GPU too hot for the hardware fills the "HW slowdown" row, never
# only a "thermal" row that reads as the driver's own (software) slowdown.
CLOCK_EVENT_GROUPS: tuple[tuple[str, int], ...] = (
    ("none: full speed", 0x0),
    ("idle", 0x1),
    ("clocks set (apps, display)", 0x2 | 0x100),
    ("sync boost", 0x10),
    ("HW slowdown: thermal, power brake", 0x8 | 0x40 | 0x80),
    ("thermal slowdown (SW)", 0x20),
    ("power cap (SW)", 0x4),
)
# What well-known XIDs mean (NVIDIA's "XID Errors" guide), for the health page.
XID_MEANINGS = {
    13: "graphics engine exception (often an application fault)",
    31: "GPU memory page fault (often an application fault)",
    43: "GPU stopped processing (an application was stopped)",
    45: "preemptive cleanup after a fault",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error: reset the GPU",
    109: "context switch timeout",
    119: "GSP firmware timeout",
    120: "GSP firmware error",
}


def clock_event_words(mask: int | None, throttling_only: bool = False) -> list[str]:
    """The reasons set in a clocks-event mask, in words (all, or only those that throttle)."""
    if not mask:
        return []
    return [words for bit, words, throttles in CLOCK_EVENT_REASONS
            if mask & bit and (throttles or not throttling_only)]


def clock_event_groups(mask: int | None) -> list[str]:
    """The ``CLOCK_EVENT_GROUPS`` a clocks-event mask is in (none when not available)."""
    if mask is None:
        return []
    return [name for name, bits in CLOCK_EVENT_GROUPS if (mask & bits if bits else not mask)]


def xid_words(event: XidEvent) -> str:
    meaning = XID_MEANINGS.get(event.xid, "see NVIDIA's XID guide")
    where = "" if event.gpu_instance_id is None else f" (MIG GPU instance {event.gpu_instance_id})"
    return f"XID {event.xid}{where}: {meaning}"


def _errors(count: int) -> str:
    return f"{count} uncorrected ECC error{'' if count == 1 else 's'}"


def ecc_words(since_load: int | None, lifetime: int | None) -> str:
    """What is wrong with a GPU's memory, in words, from its uncorrected ECC counts (since the
    driver loaded, and over the GPU's lifetime); "" when nothing is. A count of 0 is never
    the subject of a warning: it is what is right."""
    if since_load:
        older = f" ({lifetime} in its lifetime)" if lifetime and lifetime > since_load else ""
        return (f"{_errors(since_load)} since the driver loaded{older}: GPU memory lost data, "
                "so the work on this GPU since then may be wrong; see nvidia-smi -q -d ECC, "
                "and reset the GPU if it persists")
    if lifetime:
        return (f"{_errors(lifetime)} in this GPU's lifetime, none since the driver loaded: "
                "its memory failed before; watch for new ones")
    return ""


def assess(reading: HealthReading) -> dict[str, str]:
    """Readings past their thresholds: {reading group: the reason, in words}."""
    marks: dict[str, str] = {}
    throttling = clock_event_words(reading.clock_event_reasons, throttling_only=True)
    if throttling:
        marks["clocks"] = "clocks held down: " + "; ".join(throttling)
    temperature, slowdown, shutdown = (reading.temperature_c, reading.temperature_slowdown_c,
                                       reading.temperature_shutdown_c)
    if temperature is not None and shutdown is not None and temperature >= shutdown:
        marks["temperature"] = f"at its shutdown temperature ({shutdown:.0f} °C)"
    elif temperature is not None and slowdown is not None and temperature >= slowdown:
        marks["temperature"] = f"past its slowdown temperature ({slowdown:.0f} °C): clocks drop"
    if reading.power_w is not None and reading.power_limit_w and \
            reading.power_w >= POWER_AT_LIMIT * reading.power_limit_w:
        marks["power"] = f"at its power limit ({reading.power_limit_w:.0f} W)"
    ecc = ecc_words(reading.ecc_volatile_uncorrected, reading.ecc_aggregate_uncorrected)
    if ecc:
        marks["ecc"] = ecc
    if reading.remapped_rows_failed:
        marks["rows"] = "row remapping failed: the GPU needs service"
    elif reading.remapped_rows_pending:
        marks["rows"] = "a row remapping is pending: reset the GPU to apply it"
    if reading.xid_events:
        marks["xid"] = f"{len(reading.xid_events)} XID event(s); the newest: " \
            f"{xid_words(reading.xid_events[-1])}"
    return marks


@dataclass
class _Static:
    sm_clock_max_mhz: float | None
    memory_clock_max_mhz: float | None
    temperature_slowdown_c: float | None
    temperature_shutdown_c: float | None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class _Slow:
    read_at: float
    ecc: tuple[int | None, int | None, int | None, int | None]
    rows_pending: bool | None
    rows_failed: bool | None
    power_limit_w: float | None
    pcie_link: tuple[int | None, int | None] = (None, None)  # current generation, width


@dataclass
class _Events:
    event_set: Any = None
    registered: dict[Any, Device] = field(default_factory=dict)  # handle key -> GPU
    failed: bool = False


def _handle_key(handle: Any) -> Any:
    """A device handle as a dictionary key: the pointer's address, or the handle itself."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


class HealthReader:
    """``HealthReading`` per physical GPU row; call ``read`` from the GPU reader thread."""

    name = HEALTH_FAMILY

    def __init__(self, nvml: NvmlReader, slow_every_s: float = HEALTH_SLOW_EVERY_S,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.session = nvml.session  # the choke point (session.py)
        self.slow_every_s = slow_every_s
        self.every_s = 0.0  # every pass until the sampler says otherwise
        self._wall_clock = wall_clock
        self._latest: dict[int, HealthReading] | None = None
        self._last_pass = -math.inf
        self._devices: list[Device] | None = None
        self._lib: Any = None
        self._static: dict[int, _Static] = {}
        self._slow: dict[int, _Slow] = {}
        self._events = _Events()
        # XID events by GPU UUID, so they stay listed when the GPUs are enumerated again.
        self._xids: dict[str, deque[XidEvent]] = {}
        self.xid_supported: dict[int, bool] = {}  # row -> whether its events can be read

    def read(self, gpus: tuple[GpuReading, ...] = ()) -> dict[int, HealthReading] | None:
        nvml = self.session
        devices = nvml.devices()
        if not devices:
            return None
        if devices is not self._devices or nvml.library is not self._lib:
            self._reset(devices)
        now = nvml.clock()
        if self._latest is not None and now - self._last_pass < self.every_s:
            return self._latest  # events wait in the event set until the next reading
        physical = [device for device in devices if device.parent is None]
        self._poll_events()
        readings = {reading.index: reading for reading in gpus}
        self._last_pass = now
        self._latest = {device.facts.index: self._read_device(
            device, readings.get(device.facts.index), now) for device in physical}
        return self._latest

    # ----- devices ------------------------------------------------------------------------
    def _reset(self, devices: list[Device]) -> None:
        nvml = self.session
        if self._events.event_set is not None and self._lib is nvml.library:
            nvml.invoke("nvmlEventSetFree", self._events.event_set)
        self._devices, self._lib = devices, nvml.library
        self._static, self._slow, self._events = {}, {}, _Events()
        self._latest = None
        self.xid_supported = {}
        self._open_event_set([device for device in devices if device.parent is None])

    def _static_facts(self, device: Device) -> _Static:
        static = self._static.get(device.facts.index)
        if static is None:
            nvml, const = self.session, self.session.constant
            sm, memory = const("NVML_CLOCK_SM"), const("NVML_CLOCK_MEM")
            slowdown = const("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN")
            shutdown = const("NVML_TEMPERATURE_THRESHOLD_SHUTDOWN")
            static = self._static[device.facts.index] = _Static(
                _number(nvml.query(device, "nvmlDeviceGetMaxClockInfo", sm)
                        if sm is not None else None),
                _number(nvml.query(device, "nvmlDeviceGetMaxClockInfo", memory)
                        if memory is not None else None),
                _number(nvml.query(device, "nvmlDeviceGetTemperatureThreshold", slowdown)
                        if slowdown is not None else None),
                _number(nvml.query(device, "nvmlDeviceGetTemperatureThreshold", shutdown)
                        if shutdown is not None else None),
            )
        return static

    def _slow_readings(self, device: Device, now: float) -> _Slow:
        slow = self._slow.get(device.facts.index)
        if slow is not None and now - slow.read_at < self.slow_every_s:
            return slow
        nvml, const = self.session, self.session.constant
        corrected, uncorrected = (const("NVML_MEMORY_ERROR_TYPE_CORRECTED"),
                                  const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED"))
        volatile, aggregate = const("NVML_VOLATILE_ECC"), const("NVML_AGGREGATE_ECC")
        counts: list[int | None] = []
        for counter in (volatile, aggregate):
            for kind in (corrected, uncorrected):
                value = None
                if counter is not None and kind is not None:
                    value = nvml.query(device, "nvmlDeviceGetTotalEccErrors", kind, counter)
                counts.append(None if value is None else int(value))
        rows = nvml.query(device, "nvmlDeviceGetRemappedRows")
        limit = nvml.query(device, "nvmlDeviceGetEnforcedPowerLimit")
        generation = nvml.query(device, "nvmlDeviceGetCurrPcieLinkGeneration")
        width = nvml.query(device, "nvmlDeviceGetCurrPcieLinkWidth")
        slow = self._slow[device.facts.index] = _Slow(
            now, (counts[0], counts[1], counts[2], counts[3]),
            None if rows is None else bool(rows[2]), None if rows is None else bool(rows[3]),
            None if limit is None else limit / 1000, (_integer(generation), _integer(width)))
        return slow

    def _clock_event_reasons(self, device: Device) -> int | None:
        """The R535 name where the binding and driver have it, else the older one."""
        nvml = self.session
        mask = nvml.query(device, "nvmlDeviceGetCurrentClocksEventReasons")
        if mask is None and device.skips("nvmlDeviceGetCurrentClocksEventReasons"):
            mask = nvml.query(device, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return None if mask is None else int(mask)

    def _read_device(self, device: Device, gpu: GpuReading | None, now: float
                     ) -> HealthReading:
        static = self._static_facts(device)
        nvml = self.session
        sm_clock = memory_clock = pstate = reasons = fan = None
        if not device.lost:
            sm, memory = nvml.constant("NVML_CLOCK_SM"), nvml.constant("NVML_CLOCK_MEM")
            sm_clock = nvml.query(device, "nvmlDeviceGetClockInfo", sm) \
                if sm is not None else None
            memory_clock = nvml.query(device, "nvmlDeviceGetClockInfo", memory) \
                if memory is not None else None
            pstate = nvml.query(device, "nvmlDeviceGetPerformanceState")
            reasons = self._clock_event_reasons(device)
            fan = nvml.query(device, "nvmlDeviceGetFanSpeed")
        slow = self._slow_readings(device, now) if not device.lost else None
        ecc = slow.ecc if slow else (None, None, None, None)
        return HealthReading(
            sm_clock_mhz=_number(sm_clock), sm_clock_max_mhz=static.sm_clock_max_mhz,
            memory_clock_mhz=_number(memory_clock),
            memory_clock_max_mhz=static.memory_clock_max_mhz,
            pstate=None if pstate is None or pstate == PSTATE_UNKNOWN else int(pstate),
            clock_event_reasons=reasons,
            temperature_c=gpu.temperature_c if gpu else None,
            temperature_slowdown_c=static.temperature_slowdown_c,
            temperature_shutdown_c=static.temperature_shutdown_c,
            power_w=gpu.power_w if gpu else None,
            power_limit_w=slow.power_limit_w if slow else None,
            fan_pct=_number(fan),
            ecc_volatile_corrected=ecc[0], ecc_volatile_uncorrected=ecc[1],
            ecc_aggregate_corrected=ecc[2], ecc_aggregate_uncorrected=ecc[3],
            remapped_rows_pending=slow.rows_pending if slow else None,
            remapped_rows_failed=slow.rows_failed if slow else None,
            xid_events=tuple(self._xids.get(device.facts.uuid, ())),
            pcie_link_generation=slow.pcie_link[0] if slow else None,
            pcie_link_width=slow.pcie_link[1] if slow else None,
        )

    # ----- XID events -----------------------------------------------------------------------
    def _open_event_set(self, devices: list[Device]) -> None:
        nvml = self.session
        xid = nvml.constant("nvmlEventTypeXidCriticalError")
        event_set, error = (None, None) if xid is None else nvml.invoke("nvmlEventSetCreate")
        if event_set is None:
            self._events.failed = True
            if error is not None:
                nvml.log_once("nvmlEventSetCreate", getattr(error, "value", None), error)
            return
        self._events.event_set = event_set
        for device in devices:
            _, error = nvml.invoke("nvmlDeviceRegisterEvents", device.handle, xid, event_set)
            self.xid_supported[device.facts.index] = error is None
            if error is None:
                self._events.registered[_handle_key(device.handle)] = device

    def _poll_events(self) -> None:
        """Take every pending event off the set without waiting (timeout 0 ms)."""
        events, nvml = self._events, self.session
        if events.event_set is None or not events.registered:
            return
        xid = nvml.constant("nvmlEventTypeXidCriticalError") or 0
        for _ in range(XID_EVENTS_PER_PASS):
            data, error = nvml.invoke("nvmlEventSetWait_v2", events.event_set, 0)
            if error is not None:  # NVML_ERROR_TIMEOUT: nothing (more) is pending
                if not isinstance(error, getattr(nvml.library, "NVMLError_Timeout", ())):
                    nvml.log_once("nvmlEventSetWait_v2", getattr(error, "value", None), error)
                return
            device = events.registered.get(_handle_key(getattr(data, "device", None)))
            if device is None or not int(data.eventType) & xid:
                continue
            instance = int(data.gpuInstanceId)
            event = XidEvent(self._wall_clock(), int(data.eventData),
                             None if instance == NO_INSTANCE else instance)
            self._xids.setdefault(device.facts.uuid, deque(maxlen=MAX_XID_EVENTS)).append(event)
