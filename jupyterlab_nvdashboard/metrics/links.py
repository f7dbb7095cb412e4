"""PCIe and NVLink byte rates, and the PCIe fallback on drivers without counters.

Rates come from cumulative counters (``rates.py``: the counters' own timestamps checked
against the monotonic clock, wrap by the field's width), keyed by the GPU's UUID. Where a
GPU has no PCIe counter fields (drivers before R555), ``read_snapshots`` takes a 20 ms
``nvmlDeviceGetPcieThroughput`` snapshot at most once a second per GPU, on the sampler's
slow thread, and ``read`` reports it marked as a snapshot; the counters are tried again
every ``PCIE_REPROBE_S``. An NVLink total with a link whose rate is unknown is unknown
(``rates.total``, the one rule for a sum with unknown parts).

PCIe counters that answer 32 bits wide give no rate: on an H200 (driver 580) they wrap
about every 72 ms at the link's full rate, several times between two reads, so the rates
taken from them were 8.0 and 0.25 GB/s for 55 GB/s copies (``gpu_truth.py``,
``benchmarks/pcie_counters_probe.py``). A GPU with GPM then reports GPM's PCIe rates
(``gpm.py`` leaves the newest on the device, once a second), with no NVML call of its own;
one without GPM takes the snapshot.
"""

from __future__ import annotations

from typing import Any

from . import rates as counter_rates
from .session import (
    MISSING,
    REASONS,
    Device,
    NvlinkFields,
    NvmlSession,
    field_reading,
)

# Bytes per second per lane, per direction, after line encoding.
PCIE_LANE_BYTES_PER_S = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969e6, 5: 3938e6, 6: 7877e6}
PCIE_SNAPSHOT_EVERY_S = 1.0  # the fallback blocks 20 ms per direction: at most once a second
PCIE_SNAPSHOT_STALE_S = 3.0
PCIE_REPROBE_S = 60.0
# A rate above this many times the link's maximum is a counter reset, not traffic.
_PLAUSIBLE_OVER_MAX = 1.5
_DEFAULT_MAX_LINKS = 18


# (tx, rx bytes/s, 20 ms snapshot?, tx, rx bytes total) and (tx, rx bytes/s, bytes total).
PcieReading = tuple[float | None, float | None, bool, float | None, float | None]
NvlinkReading = tuple[float | None, float | None, float | None]


def pcie_max_bytes_per_s(generation: Any, width: Any) -> float | None:
    """One direction's maximum for a link of this generation and width."""
    if generation in PCIE_LANE_BYTES_PER_S and width:
        return PCIE_LANE_BYTES_PER_S[generation] * width
    return None


class LinkReader:
    """Probes each GPU's PCIe and NVLink counters once, then reads their rates per tick."""

    def __init__(self, session: NvmlSession) -> None:
        self.session = session

    def probe_pcie(self, device: Device, now: float | None = None) -> None:
        """Use the PCIe byte counters if they answer; otherwise the 20 ms snapshot."""
        s = self.session
        tx, rx = (s.constant("NVML_FI_DEV_PCIE_COUNT_TX_BYTES"),
                  s.constant("NVML_FI_DEV_PCIE_COUNT_RX_BYTES"))
        device.pcie_reprobe_at = (s.clock() if now is None else now) + PCIE_REPROBE_S
        narrow = False
        if tx is not None and rx is not None:
            values = s.fields(device, [tx, rx])
            if values and all(s.succeeded(value) for value in values):
                narrow = any(field_reading(value)[3] <= 32 for value in values)
                if not narrow:
                    device.pcie_counters = (tx, rx)
                    device.unavailable.pop("pcie", None)
                    return
        device.pcie_counters = None
        device.pcie_from_gpm = narrow and bool(device.facts.gpm_supported)
        if device.pcie_from_gpm:
            device.unavailable.pop("pcie", None)
            return
        tx_kind = s.constant("NVML_PCIE_UTIL_TX_BYTES")
        device.pcie_snapshot_supported = not device.skips("nvmlDeviceGetPcieThroughput", tx_kind)
        if not device.pcie_snapshot_supported:
            device.unavailable.setdefault("pcie", REASONS["NVML_ERROR_NOT_SUPPORTED"])

    def probe_nvlink(self, device: Device) -> tuple[tuple[int, ...], float | None]:
        """Active link IDs (gaps kept), their summed speed, and which byte fields answer."""
        s = self.session
        # nvmlDeviceGetNvLinkState answers an nvmlEnableState_t (nvml.h), not a link state.
        enabled = s.constant("NVML_FEATURE_ENABLED")
        not_supported = s.constant("NVML_ERROR_NOT_SUPPORTED")
        invalid = s.constant("NVML_ERROR_INVALID_ARGUMENT")
        count_field = s.constant("NVML_FI_DEV_NVLINK_LINK_COUNT")
        counted = s.fields(device, [count_field])
        links = int(field_reading(counted[0])[2]) if counted and \
            s.succeeded(counted[0]) else None
        active = []
        for link in range(links if links is not None else
                          s.constant("NVML_NVLINK_MAX_LINKS") or _DEFAULT_MAX_LINKS):
            state, error = s.invoke("nvmlDeviceGetNvLinkState", device.handle, link)
            code = getattr(error, "value", None)
            if error is None:
                if state == enabled:
                    active.append(link)
                continue
            if code == invalid:  # past this GPU's last link (nvml.h: link >= the link count)
                break
            if isinstance(error, getattr(s.library, "NVMLError_GpuIsLost", ())):
                s.mark_lost(device)
                break
            if error is MISSING or code == not_supported:  # no NVLink on this GPU
                device.unavailable.setdefault("nvlink", REASONS["NVML_ERROR_NOT_SUPPORTED"])
                break
            s.log_once("nvmlDeviceGetNvLinkState", code, error)
        if not active:
            device.unavailable.setdefault("nvlink", "this GPU has no active NVLink")
            return (), None
        device.unavailable.pop("nvlink", None)
        # NVML_FI_DEV_NVLINK_GET_SPEED works on Hopper, where the old SPEED_MBPS_L* fields don't.
        speed_field = s.constant("NVML_FI_DEV_NVLINK_GET_SPEED")
        speeds = s.fields(device, [(speed_field, link) for link in active]) \
            if speed_field is not None else None
        good = [field_reading(v)[2] for v in speeds or [] if s.succeeded(v)]
        total = sum(good) * 1e6 if good else None  # NVML reports MB/s per link
        # The throughput fields (KiB) where they answer, else the newer byte counts.
        for tx_name, rx_name, scale, payload_only in (
            ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
             1024.0, True),
            ("NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES", "NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES", 1.0,
             False),
        ):
            tx, rx = s.constant(tx_name), s.constant(rx_name)
            if tx is None or rx is None:
                continue
            probe = s.fields(device, [(tx, active[0]), (rx, active[0])])
            if probe and all(s.succeeded(value) for value in probe):
                device.nvlink_fields = NvlinkFields(tx, rx, scale, payload_only)
                break
        if device.nvlink_fields is None:
            device.unavailable["nvlink"] = "no NVLink byte counter answers on this driver"
        return tuple(active), total

    def read_snapshots(self, devices: list[Device]) -> None:
        """Refresh the 20 ms PCIe snapshots that are due; call from a thread of its own."""
        s = self.session
        tx_kind, rx_kind = s.constant("NVML_PCIE_UTIL_TX_BYTES"), \
            s.constant("NVML_PCIE_UTIL_RX_BYTES")
        for device in devices:
            if device.lost or device.pcie_counters is not None or device.pcie_from_gpm or \
                    not device.pcie_snapshot_supported or tx_kind is None or rx_kind is None:
                continue
            last, started = device.pcie_snapshot, s.clock()
            # The slow thread runs once a second; the slack keeps its jitter from skipping
            # every other pass, while extra calls (a hand-driven tick) still wait their turn.
            if last is not None and started - last[0] < PCIE_SNAPSHOT_EVERY_S - 0.25:
                continue
            tx = s.query(device, "nvmlDeviceGetPcieThroughput", tx_kind, metric="pcie")
            rx = s.query(device, "nvmlDeviceGetPcieThroughput", rx_kind, metric="pcie")
            if tx is None and rx is None and device.skips("nvmlDeviceGetPcieThroughput", tx_kind):
                device.pcie_snapshot_supported = False
                continue
            device.pcie_snapshot = (started, None if tx is None else tx * 1024.0,
                                    None if rx is None else rx * 1024.0)  # NVML gives KB/s

    def read(self, device: Device, now: float) -> tuple[PcieReading, NvlinkReading]:
        """PCIe and NVLink rates, and NVML's own totals, from one field-values call (plus
        the PCIe snapshot)."""
        s = self.session
        requested: list[Any] = []
        counters = device.pcie_counters
        if counters is None and now >= device.pcie_reprobe_at:
            self.probe_pcie(device, now)  # a driver update or a transient failure
            counters = device.pcie_counters
        if counters is not None:
            requested += list(counters)
        links = device.facts.nvlink_link_ids
        fields = device.nvlink_fields
        if fields is not None:
            requested += [(fields.tx, link) for link in links] + \
                [(fields.rx, link) for link in links]
        answered = s.fields(device, requested) if requested else None
        values = None if answered is None else [field_reading(value) for value in answered]
        success = s.success_code
        pcie: PcieReading = (None, None, False, None, None)
        if counters is not None:
            if values is None:
                pass
            elif not (values[0][0] == success and values[1][0] == success):
                self.probe_pcie(device, now)  # the counters stopped answering: fall back
            else:
                limit = device.facts.pcie_max_bytes_per_s
                pcie = (self._rate(device, "pcie_tx", values[0], now, 1.0, limit),
                        self._rate(device, "pcie_rx", values[1], now, 1.0, limit), False,
                        values[0][2], values[1][2])
            values = None if values is None else values[2:]
        else:
            latest = device.gpm_pcie if device.pcie_from_gpm else device.pcie_snapshot
            fresh = latest is not None and now - latest[0] <= PCIE_SNAPSHOT_STALE_S
            if fresh and latest:
                pcie = (latest[1], latest[2], not device.pcie_from_gpm, None, None)
        nvlink: NvlinkReading = (None, None, None)
        if fields is not None and values is not None:
            per_link = (device.facts.nvlink_max_bytes_per_s or 0) / max(1, len(links)) or None
            totals: list[float | None] = []
            for position, name in enumerate(("nvlink_tx", "nvlink_rx")):
                rates = [self._rate(device, name, value, now, fields.scale, per_link)
                         for value in values[position * len(links):(position + 1) * len(links)]]
                # A link without a rate (its counter reset, or it failed): unknown total.
                totals.append(counter_rates.total(rates))
            counted = counter_rates.total(value[2] if value[0] == success else None
                                          for value in values[:2 * len(links)])
            nvlink = (totals[0], totals[1],
                      None if counted is None else counted * fields.scale)
        return pcie, nvlink

    def _rate(self, device: Device, name: str, value: tuple[int, int, float, int, float],
              now: float, scale: float, limit: float | None) -> float | None:
        """The rate of one field reading (``field_reading``'s tuple) since the last."""
        s = self.session
        code, scope, number, bits, timestamp_s = value
        key = (device.facts.uuid, name, scope)
        if code != s.success_code:
            return s.rates.update(key, None, now)
        ceiling = None if not limit else limit * _PLAUSIBLE_OVER_MAX / scale
        rate = s.rates.update(key, number, now, source_time_s=timestamp_s, width_bits=bits,
                              max_rate=ceiling)
        return None if rate is None else rate * scale
