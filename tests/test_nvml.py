"""The NVML reader against the simulated NVML: states, unsupported fields, lost GPUs."""

from __future__ import annotations

import os
from collections import Counter

import pynvml
import pytest

from jupyterlab_nvdashboard.metrics import NvmlState
from jupyterlab_nvdashboard.metrics import nvml as nvml_module
from jupyterlab_nvdashboard.metrics.binding import binding_loader
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader
from jupyterlab_nvdashboard.simnvml import SimulatedNvml


def reader_for(simulator: SimulatedNvml, visible: str | None = None) -> NvmlReader:
    reader = NvmlReader(binding_loader(simulator.library), cuda_visible_devices=visible)
    reader.ensure_initialized()
    return reader


def test_static_facts_are_read_once_and_per_gpu() -> None:
    simulator = SimulatedNvml(gpu_count=2)
    reader = reader_for(simulator)
    assert reader.state is NvmlState.OK
    first, second = reader.facts
    assert first.memory_total_bytes != second.memory_total_bytes  # scales are per GPU
    assert first.pcie_max_bytes_per_s == pytest.approx(3938e6 * 16)
    assert second.pcie_max_bytes_per_s == pytest.approx(1969e6 * 16)
    assert len(first.nvlink_link_ids) == 18
    assert first.nvlink_max_bytes_per_s == pytest.approx(18 * 26562e6)
    calls = simulator.calls["nvmlDeviceGetName"]
    for _ in range(5):
        reader.read()
    assert simulator.calls["nvmlDeviceGetName"] == calls


@pytest.mark.parametrize(
    ("code", "state"),
    [(pynvml.NVML_ERROR_DRIVER_NOT_LOADED, NvmlState.DRIVER_NOT_LOADED),
     (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, NvmlState.LIBRARY_NOT_FOUND),
     (pynvml.NVML_ERROR_NO_PERMISSION, NvmlState.NO_PERMISSION)],
)
def test_init_errors_name_the_state(code: int, state: NvmlState) -> None:
    simulator = SimulatedNvml(gpu_count=2)
    simulator.set_init_error(code)
    reader = reader_for(simulator)
    assert reader.state is state
    assert reader.facts == [] and reader.read() == ()
    assert str(pynvml.NVMLError(code)) in reader.message


def test_missing_pynvml_is_library_not_found() -> None:
    def missing() -> None:
        raise ImportError("No module named 'pynvml'")

    reader = NvmlReader(missing)
    assert reader.ensure_initialized() is NvmlState.LIBRARY_NOT_FOUND


def test_driver_loaded_after_start_is_picked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    simulator = SimulatedNvml(gpu_count=2)
    simulator.set_init_error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED, times=1)
    reader = NvmlReader(binding_loader(simulator.library), clock=lambda: now[0])
    assert reader.ensure_initialized() is NvmlState.DRIVER_NOT_LOADED
    now[0] = nvml_module.REINIT_INTERVAL_S + 1
    reader.retry_if_due()
    assert reader.state is NvmlState.OK and len(reader.facts) == 2


def test_unsupported_nvlink_means_no_links_and_no_rates() -> None:
    simulator = SimulatedNvml(gpu_count=2, nvlink=False)
    reader = reader_for(simulator)
    assert all(facts.nvlink_link_ids == () for facts in reader.facts)
    reading = reader.read()[0]
    assert reading.nvlink_tx_bytes_per_s is None and reading.utilization_pct is not None


def test_unsupported_field_is_not_available_only_for_that_metric() -> None:
    simulator = SimulatedNvml(gpu_count=1)
    simulator.set_unsupported(["power", "nvmlDeviceGetTemperature"])
    reader = reader_for(simulator)
    reading = reader.read()[0]
    assert reading.power_w is None and reading.temperature_c is None
    assert reading.utilization_pct is not None and reading.memory_used_bytes is not None
    assert reader.facts[0].power_limit_w is None


def test_pcie_falls_back_to_a_snapshot_when_counters_are_unsupported() -> None:
    simulator = SimulatedNvml(gpu_count=1)
    simulator.set_unsupported(["pcie_counters"])
    reader = reader_for(simulator)
    assert reader.read()[0].pcie_tx_bytes_per_s is None  # read() never makes the 20 ms call
    assert simulator.calls["nvmlDeviceGetPcieThroughput"] == 0
    reader.read_slow()
    reading = reader.read()[0]
    assert reading.pcie_tx_bytes_per_s is not None and reading.pcie_is_snapshot
    assert simulator.calls["nvmlDeviceGetPcieThroughput"] == 2
    reader.read_slow()  # at most once a second per GPU
    assert simulator.calls["nvmlDeviceGetPcieThroughput"] == 2


def test_transient_error_is_one_missing_metric() -> None:
    simulator = SimulatedNvml(gpu_count=2)
    reader = reader_for(simulator)
    simulator.inject_error("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_UNKNOWN, gpu=0,
                           times=1)
    first = reader.read()
    assert first[0].utilization_pct is None and first[1].utilization_pct is not None
    assert reader.read()[0].utilization_pct is not None


def test_lost_gpu_is_marked_and_others_carry_on() -> None:
    now = [1000.0]
    simulator = SimulatedNvml(gpu_count=4)
    reader = NvmlReader(binding_loader(simulator.library), clock=lambda: now[0])
    reader.ensure_initialized()
    simulator.lose_gpu(1)
    readings = reader.read()
    assert readings[1].lost and readings[1].utilization_pct is None
    assert [r.lost for r in readings] == [False, True, False, False]
    assert all(readings[i].utilization_pct is not None for i in (0, 2, 3))
    calls = simulator.total_calls
    reader.read()
    # A lost GPU is not queried again every tick (3 GPUs' worth of calls, not 4).
    per_gpu = (simulator.total_calls - calls) / 3
    assert per_gpu == int(per_gpu)
    # After a reset the GPU comes back on its own.
    simulator.restore_gpu(1)
    now[0] += nvml_module.REINIT_INTERVAL_S + 1
    assert not reader.read()[1].lost


def shown(visible: str | None, order: str | None = None, profile: str = "mixed",
          gpus: int = 4) -> list[tuple[str, int | None]]:
    """(nvidia-smi label, CUDA position) of every row the reader shows."""
    reader = NvmlReader(binding_loader(SimulatedNvml(gpus, profile=profile).library),
                        cuda_visible_devices=visible,
                        cuda_device_order=order)
    reader.ensure_initialized()
    return [(facts.label, facts.cuda_index) for facts in reader.facts]


def test_cuda_visible_devices_integers_follow_cuda_order() -> None:
    # mixed: GPUs 0 and 2 are H200 (compute 9.0), 1 and 3 A100 (8.0). CUDA's default
    # FASTEST_FIRST order is therefore 0, 2, 1, 3; PCI_BUS_ID order is nvidia-smi's.
    assert shown(None) == [("GPU 0", 0), ("GPU 1", 2), ("GPU 2", 1), ("GPU 3", 3)]
    assert shown(None, "PCI_BUS_ID") == [("GPU 0", 0), ("GPU 1", 1), ("GPU 2", 2), ("GPU 3", 3)]
    # "1" is CUDA's second device: GPU 2 fastest-first, GPU 1 in PCI order.
    assert shown("1") == [("GPU 2", 0)]
    assert shown("1", "PCI_BUS_ID") == [("GPU 1", 0)]
    # Rows stay in nvidia-smi order; the CUDA position follows the list's order.
    assert shown("3,0", "PCI_BUS_ID") == [("GPU 0", 1), ("GPU 3", 0)]
    # CUDA stops at the first entry that names no device.
    assert shown("1,9,2", "PCI_BUS_ID") == [("GPU 1", 0)]


def test_cuda_visible_devices_uuids_and_mig_uuids() -> None:
    every = NvmlReader(binding_loader(SimulatedNvml(2, profile="a100-mig").library))
    every.ensure_initialized()
    gpu1 = next(f for f in every.facts if f.label == "GPU 1")
    mig2 = next(f for f in every.facts if f.label == "GPU 0 · MIG 2")
    assert mig2.uuid.startswith("MIG-") and gpu1.uuid.startswith("GPU-")
    # Without CUDA_VISIBLE_DEVICES CUDA enumerates the MIG devices in place of their GPU.
    assert shown(None, profile="a100-mig", gpus=2) == [
        ("GPU 0", None), ("GPU 0 · MIG 1", 0), ("GPU 0 · MIG 2", 1), ("GPU 1", 2)]
    # A MIG UUID shows that MIG device under its GPU (the GPU itself is not a CUDA device).
    assert shown(mig2.uuid, profile="a100-mig", gpus=2) == [("GPU 0", None), ("GPU 0 · MIG 2", 0)]
    # A GPU UUID prefix, then a MIG one: both, in that CUDA order.
    assert shown(f"{gpu1.uuid[:12]},{mig2.uuid}", profile="a100-mig", gpus=2) == [
        ("GPU 0", None), ("GPU 0 · MIG 2", 1), ("GPU 1", 0)]
    # The older MIG-GPU-<uuid>/<gpu instance>/<compute instance> form.
    gpu0 = every.facts[0]
    assert shown(f"MIG-{gpu0.uuid}/1/0", profile="a100-mig", gpus=2) == [
        ("GPU 0", None), ("GPU 0 · MIG 1", 0)]


def test_cuda_visible_devices_that_hide_everything_say_so() -> None:
    for visible in ("", "MIG-nonexistent", "GPU-ffff", "-1"):
        reader = reader_for(SimulatedNvml(4), visible)
        assert reader.state is NvmlState.NO_DEVICES, visible
        assert "CUDA_VISIBLE_DEVICES" in reader.message


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_child_process_initializes_again() -> None:
    simulator = SimulatedNvml(gpu_count=1)
    reader = reader_for(simulator)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the parent's state must be gone, and a fresh init must work
        ok = reader.state is NvmlState.UNINITIALIZED and reader.ensure_initialized() is NvmlState.OK
        os.write(write_end, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read_end, 1) == b"1"
    assert reader.state is NvmlState.OK


def test_pcie_snapshot_is_refreshed_on_every_once_a_second_pass() -> None:
    now = [100.0]
    simulator = SimulatedNvml(gpu_count=2, profile="a100-535")
    reader = NvmlReader(binding_loader(simulator.library), clock=lambda: now[0])
    reader.ensure_initialized()
    calls = []
    for tick in range(4):  # the slow thread's 1 s grid, arriving a little early each time
        now[0] = 100.0 + tick * 1.0 - 0.05 * (tick % 2)
        reader.read_slow()
        calls.append(simulator.calls["nvmlDeviceGetPcieThroughput"])
    assert calls == [4, 8, 12, 16]  # two directions x two GPUs, every pass
    reader.read_slow()  # an extra call in the same second waits its turn
    assert simulator.calls["nvmlDeviceGetPcieThroughput"] == 16


def test_a_hot_plugged_gpu_shows_up_at_the_next_rescan() -> None:
    now = [0.0]
    simulator = SimulatedNvml(gpu_count=0)
    reader = NvmlReader(binding_loader(simulator.library), clock=lambda: now[0])
    assert reader.ensure_initialized() is NvmlState.NO_DEVICES
    simulator.add_gpu()
    reader.retry_if_due()  # not due yet
    assert reader.state is NvmlState.NO_DEVICES
    now[0] = nvml_module.RESCAN_INTERVAL_S + 1
    reader.retry_if_due()
    assert reader.state is NvmlState.OK and [f.label for f in reader.facts] == ["GPU 0"]
    simulator.add_gpu()
    now[0] += nvml_module.RESCAN_INTERVAL_S + 1
    reader.retry_if_due()
    assert [f.label for f in reader.facts] == ["GPU 0", "GPU 1"]
    assert simulator.calls["nvmlInit"] == 1  # NVML was up all along: only the GPUs were read


def test_an_observer_hears_every_call_the_session_makes_failed_ones_too() -> None:
    simulator = SimulatedNvml(gpu_count=2)
    reader = reader_for(simulator)
    reader.read()
    heard: list[tuple[str, float]] = []
    reader.session.observe(lambda function, seconds: heard.append((function, seconds)))
    # A transient error (not "not supported"), so the reader asks again next pass.
    simulator.inject_error("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_UNKNOWN, gpu=1, times=1)
    before = Counter(simulator.calls)
    reader.read()
    # The driver's own count of what it was asked is what the observer heard.
    assert Counter(function for function, _ in heard) == Counter(simulator.calls) - before
    assert Counter(function for function, _ in heard)["nvmlDeviceGetPowerUsage"] == 2
    assert all(seconds >= 0 for _, seconds in heard)
    heard_before, calls_before = len(heard), simulator.total_calls
    reader.session.observe(None)
    reader.read()
    assert simulator.total_calls > calls_before and len(heard) == heard_before


def test_one_unsupported_field_list_leaves_every_other_field_read() -> None:
    """nvmlDeviceGetFieldValues answering NOT_SUPPORTED for one list of field IDs is
    remembered for that list only: the PCIe byte counters, read in another list, go on."""
    simulator = SimulatedNvml(gpu_count=1, profile="h200")
    reader = reader_for(simulator)
    reader.read()
    assert reader.read()[0].pcie_tx_bytes_per_s is not None
    device = reader.session.devices()[0]
    reader.session.fields(device, [pynvml.NVML_FI_DEV_POWER_INSTANT])  # answers
    simulator.inject_error("nvmlDeviceGetFieldValues", pynvml.NVML_ERROR_NOT_SUPPORTED,
                           gpu=0, times=1)
    assert reader.session.fields(device, [pynvml.NVML_FI_DEV_POWER_INSTANT]) is None
    assert reader.session.fields(device, [pynvml.NVML_FI_DEV_POWER_INSTANT]) is None  # kept
    reader.read()
    assert reader.read()[0].pcie_tx_bytes_per_s is not None
