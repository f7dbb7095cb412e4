"""Every simulated machine profile, end to end: the reader, the server and its routes.

Each profile is a kind of machine users have (see simnvml/profiles.py). For each, and under
every real nvidia-ml-py release the suite fetched (tests/support/bindings.py), the reader
must find what that driver offers, the server must start without a traceback, list the
routes that machine can fill, report the right metrics as not available with the right
reasons, and stream live rows.
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from bokeh.core.validation.check import check_integrity

from jupyterlab_nvdashboard.apps.registry import ROUTES
from jupyterlab_nvdashboard.metrics.binding import binding_loader, load_binding
from jupyterlab_nvdashboard.metrics.gpm import GpmReader
from jupyterlab_nvdashboard.metrics.nvml import MIG_PARENT_UTILIZATION, MIG_PHYSICAL, NvmlReader
from jupyterlab_nvdashboard.metrics.processes import ProcessReader
from jupyterlab_nvdashboard.simnvml import SimulatedNvml, nvml_h
from jupyterlab_nvdashboard.simnvml.profiles import PROFILES
from tests.support.bindings import OLDEST, reader_over, release_params, wheel
from tests.support.servers import RunningServer, get, in_process_server
from tests.support.stream_client import count_live_frames

NVLINK_ROUTES = {"/NVLink-Throughput", "/NVLink-Timeline"}
WITH_NVLINK = {"mixed", "h200", "a100-mig", "wrap32", "link-gap", "h100-mig"}
NOT_SUPPORTED = "not supported by this GPU or driver"

# profile -> row -> {metric: the start of the reason}; rows not named have no reason.
EXPECTED_UNAVAILABLE: dict[str, dict[int, dict[str, str]]] = {
    "mixed": {},
    "h200": {},
    "a100-535": {0: {"nvlink": NOT_SUPPORTED}, 1: {"nvlink": NOT_SUPPORTED}},
    "a100-mig": {
        0: {"utilization": MIG_PARENT_UTILIZATION},
        1: {"utilization": NOT_SUPPORTED, "temperature": MIG_PHYSICAL, "power": MIG_PHYSICAL,
            "pcie": MIG_PHYSICAL, "nvlink": MIG_PHYSICAL,
            "process_utilization": NOT_SUPPORTED},  # no per-process samples under MIG
        2: {"utilization": NOT_SUPPORTED, "temperature": MIG_PHYSICAL, "power": MIG_PHYSICAL,
            "pcie": MIG_PHYSICAL, "nvlink": MIG_PHYSICAL,
            "process_utilization": NOT_SUPPORTED},
    },
    "consumer": {row: {"utilization": NOT_SUPPORTED, "power": NOT_SUPPORTED,
                       "pcie": NOT_SUPPORTED, "nvlink": NOT_SUPPORTED,
                       "process_utilization": NOT_SUPPORTED,
                       "gpm": "the driver is too old for this reading"}
                 for row in (0, 1)},
    "vgpu": {row: {"temperature": NOT_SUPPORTED, "power": NOT_SUPPORTED,
                   "pcie": NOT_SUPPORTED, "nvlink": NOT_SUPPORTED} for row in (0, 1)},
    "wrap32": {},
    "link-gap": {},
    "h100-mig": {
        0: {"utilization": MIG_PARENT_UTILIZATION},
        1: {"utilization": NOT_SUPPORTED, "temperature": MIG_PHYSICAL, "power": MIG_PHYSICAL,
            "pcie": MIG_PHYSICAL, "nvlink": MIG_PHYSICAL,
            "process_utilization": NOT_SUPPORTED},
        2: {"utilization": NOT_SUPPORTED, "temperature": MIG_PHYSICAL, "power": MIG_PHYSICAL,
            "pcie": MIG_PHYSICAL, "nvlink": MIG_PHYSICAL,
            "process_utilization": NOT_SUPPORTED},
    },
}
# profile -> the GpuReading fields that must be None on every physical GPU.
EXPECTED_NONE = {
    "a100-535": {"nvlink_tx_bytes_per_s"},
    "consumer": {"utilization_pct", "power_w", "pcie_tx_bytes_per_s", "nvlink_tx_bytes_per_s",
                 "memory_reserved_bytes"},
    "vgpu": {"temperature_c", "power_w", "pcie_tx_bytes_per_s", "nvlink_tx_bytes_per_s"},
}


def test_every_profile_is_covered_here() -> None:
    assert set(EXPECTED_UNAVAILABLE) == set(PROFILES)


def read_twice(profile: str, gpus: int = 2, release: str | None = None
               ) -> tuple[NvmlReader, SimulatedNvml, tuple]:
    simulator = SimulatedNvml(gpus, profile=profile)
    reader = reader_over(simulator, release) if release else \
        NvmlReader(binding_loader(simulator.library))
    reader.ensure_initialized()
    reader.read()
    reader.read_slow()
    ProcessReader(reader).read_all()  # the process family marks what it cannot read, too
    time.sleep(0.05)
    return reader, simulator, reader.read()


# (driver branch, the plain or versioned process-list function that answers) per release:
# _v3 from R510; the binding's _v2 wrapper from 12.555 (12.535.161 has none), and its
# unversioned name calls _v3 and refuses an older driver.
def expected_process_function(release: str, driver_major: int) -> str | None:
    if driver_major >= 510:
        return "nvmlDeviceGetComputeRunningProcesses_v3"
    if release >= "12.555":
        return "nvmlDeviceGetComputeRunningProcesses_v2"
    return None


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("release", release_params())
def test_reader_on_each_profile_under_each_binding(release: str, profile: str) -> None:
    reader, simulator, readings = read_twice(profile, release=release)
    # NVLink found wherever the profile has active links, whatever the release names.
    for facts in reader.facts:
        if facts.kind == "gpu":
            assert bool(facts.nvlink_link_ids) == (profile in WITH_NVLINK), facts.label
            if profile in WITH_NVLINK:
                assert readings[facts.index].nvlink_tx_bytes_per_s is not None
    # The process list comes from the newest function this release and driver both have.
    answered = {name for name, count in simulator.calls.items()
                if "ComputeRunningProcesses" in name and count}
    expected = expected_process_function(release, PROFILES[profile].driver_major)
    unlisted: set[str] = set()
    if expected is None:  # this release and this driver share no process-list function
        assert "processes" in reader.unavailable()[0]
        unlisted = {"processes"}
    elif not PROFILES[profile].models[0].mig:
        assert expected in answered, answered
        assert "processes" not in reader.unavailable()[0]
    _check_profile(profile, reader, readings, unlisted)


def _check_profile(profile: str, reader: NvmlReader, readings: tuple,
                   unlisted: set[str] | None = None) -> None:
    assert reader.state.value == "ok", reader.message
    assert reader.versions["driver"] == PROFILES[profile].driver_version
    unavailable = reader.unavailable()
    for row, facts in enumerate(reader.facts):
        expected = EXPECTED_UNAVAILABLE[profile].get(row, {})
        assert set(unavailable[row]) - (unlisted or set()) == set(expected), \
            (row, unavailable[row])
        for metric, reason in expected.items():
            assert unavailable[row][metric].startswith(reason), (row, metric)
        reading = readings[row]
        assert not reading.lost and reading.memory_used_bytes is not None
        if facts.kind == "gpu":
            for name in EXPECTED_NONE.get(profile, set()):
                assert getattr(reading, name) is None, (row, name)
            assert (reading.temperature_c is None) == ("temperature" in expected)


def test_a100_on_535_reads_pcie_from_a_snapshot_and_never_in_the_tick() -> None:
    reader, simulator, readings = read_twice("a100-535")
    assert all(r.pcie_is_snapshot and r.pcie_tx_bytes_per_s for r in readings)
    before = simulator.calls["nvmlDeviceGetPcieThroughput"]
    for _ in range(20):
        reader.read()
    assert simulator.calls["nvmlDeviceGetPcieThroughput"] == before  # read() never blocks
    assert simulator.calls["nvmlDeviceGetPcieThroughput"] > 0


def test_mig_devices_are_children_with_their_own_memory_and_slices() -> None:
    reader, _, readings = read_twice("a100-mig")
    parent, first, second, other = reader.facts
    assert (parent.kind, parent.mig_enabled, parent.cuda_index) == ("gpu", True, None)
    assert (first.kind, first.parent, first.label) == ("mig", 0, "GPU 0 · MIG 1")
    assert first.mig == {"gpu_instance_id": 1, "compute_instance_id": 0, "gpu_slices": 3,
                         "compute_slices": 3, "multiprocessors": 42,
                         "memory_bytes": 40_192 * 2**20, "memory_slices": 4}
    assert second.mig is not None and second.mig["gpu_slices"] == 4
    assert first.memory_total_bytes == 40_192 * 2**20 != parent.memory_total_bytes
    assert readings[1].memory_used_bytes != readings[2].memory_used_bytes
    assert readings[0].utilization_pct is None and readings[3].utilization_pct is not None
    assert readings[0].temperature_c is not None and readings[1].temperature_c is None
    assert other.kind == "gpu" and not other.mig_enabled


def test_link_gap_keeps_the_active_link_ids_and_reads_the_newer_byte_counts() -> None:
    reader, simulator, _ = read_twice("link-gap")
    assert reader.facts[0].nvlink_link_ids == (0, 1, 2, 3, *range(6, 18))
    reader.read()
    time.sleep(0.2)
    reading = reader.read()[0]
    assert reading.nvlink_tx_bytes_per_s and reading.nvlink_rx_bytes_per_s
    assert simulator.calls["nvmlDeviceGetNvLinkState"] == 2 * 18  # every link asked, once


def test_32_bit_pcie_counters_give_no_rate_and_gpm_gives_it() -> None:
    """wrap32's PCIe counters answer 32 bits wide, as an H200's did on driver 580, where
    they wrapped about every 72 ms at the link's full rate (benchmarks/README.md,
    ``gpu_truth.py``). Read a second apart, as the idle sampler reads, they wrap more than
    once between two reads here, so no rate can come from them: it comes from GPM."""
    now = [1000.0]
    simulator = SimulatedNvml(1, profile="wrap32")
    simulator.set_clock(lambda: now[0])
    reader = NvmlReader(binding_loader(simulator.library), clock=lambda: now[0])
    reader.ensure_initialized()
    gpm = GpmReader(reader)
    binding = load_binding(simulator.library)
    handle = binding.nvmlDeviceGetHandleByIndex(0)
    field = nvml_h.FIELD_IDS["NVML_FI_DEV_PCIE_COUNT_RX_BYTES"]
    gpu = simulator._gpus[0]  # noqa: SLF001
    moved, most = [], 0
    for step in range(8):
        now[0] = 1000.0 + step
        counter = binding.nvmlDeviceGetFieldValues(handle, [field])[0]
        assert counter.valueType == nvml_h.CONSTANTS["NVML_VALUE_TYPE_UNSIGNED_INT"]
        moved.append(simulator._pcie_bytes(gpu, 1, wide=True))  # noqa: SLF001
        reading = reader.read()[0]
        gpm.read((reading,))
        if step >= 2:  # GPM's rate over the second before its last pass
            truth = moved[-2] - moved[-3]
            most = max(most, truth)
            assert reading.pcie_rx_bytes_per_s == pytest.approx(truth, rel=1e-6)
            assert not reading.pcie_is_snapshot
    assert most > 2**32  # more than the counter's whole range went by between two reads


def test_the_oldest_binding_reads_counters_it_has_no_names_for() -> None:
    """12.535.161 has no PCIe or NVLink byte-count names; the driver (R570) has the fields,
    so the reader asks for them by their nvml.h values and gets counter rates."""
    module = load_binding(SimulatedNvml(1).library, wheel(OLDEST))
    assert not hasattr(module, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES")
    assert not hasattr(module, "NVML_NVLINK_STATE_ACTIVE")
    simulator = SimulatedNvml(2, profile="h200")
    reader = reader_over(simulator, OLDEST)
    reader.ensure_initialized()
    reader.read()
    time.sleep(0.05)
    reading = reader.read()[0]
    assert not reading.pcie_is_snapshot and reading.pcie_tx_bytes_per_s is not None
    assert reader.facts[0].nvlink_link_ids == tuple(range(18))
    assert reading.utilization_pct is not None and reading.nvlink_tx_bytes_per_s is not None


def test_binding_12_535_serves_nvlink_rates_on_an_nvlink_profile() -> None:
    with in_process_server(gpus=2, profile="h200", binding=str(wheel(OLDEST))) as server:
        index = json.loads(get(server.url + "/index.json")[1])
        assert NVLINK_ROUTES <= set(index)
        info = json.loads(get(server.url + "/info.json")[1])
        assert info["nvml_versions"]["binding"] == OLDEST
        assert info["devices"][0]["nvlink_link_ids"] == list(range(18))
        time.sleep(0.5)
        header, *rows = get(server.url + "/history.csv?seconds=5")[1].decode().splitlines()
        column = header.split(",").index("gpu0_nvlink_tx_bytes_per_s")
        assert any(row.split(",")[column] not in ("", "0", "0.0") for row in rows)


def documents_with_issues(server: RunningServer) -> dict[str, object]:
    """Bokeh's errors and warnings for each open page's document, by its title."""
    found = {}
    for session in server.server.get_sessions():  # type: ignore[attr-defined]
        issues = check_integrity(list(session.document.models))
        if issues.error or issues.warning:
            found[session.document.title] = issues
    return found


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("release", release_params())
def test_server_on_each_profile_under_each_binding(
    release: str, profile: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with in_process_server(gpus=2, profile=profile, binding=str(wheel(release))) as server:
        index = json.loads(get(server.url + "/index.json")[1])
        expected = {route.path for route in ROUTES}
        if profile not in WITH_NVLINK:
            expected -= NVLINK_ROUTES
        assert set(index) == expected
        for route in ["/", *index]:
            assert get(server.url + route)[0] == 200, route
        # The server leaves Bokeh's check of each document to this test.
        assert server.on_loop(lambda: documents_with_issues(server)) == {}
        unlisted = {"processes"} if expected_process_function(
            release, PROFILES[profile].driver_major) is None else set()

        def unexpected_reasons(info: dict) -> list[tuple[int, list[str]]]:
            return [(row, device["unavailable"]) for row, device in enumerate(info["devices"])
                    if set(device["unavailable"]) - unlisted !=
                    set(EXPECTED_UNAVAILABLE[profile].get(row, {}))]

        # Some reasons are learned by the slow pass (its own thread, about once a second):
        # wait until they are all in, up to a deadline; then the answer is checked whole.
        deadline = time.monotonic() + 30
        info = json.loads(get(server.url + "/info.json")[1])
        while unexpected_reasons(info) and time.monotonic() < deadline:
            time.sleep(0.1)
            info = json.loads(get(server.url + "/info.json")[1])
        assert info["nvml_state"] == "ok" and info["simulated_profile"] == profile
        assert info["nvml_versions"]["driver"] == PROFILES[profile].driver_version
        assert info["nvml_versions"]["binding"] == release
        assert not unexpected_reasons(info), unexpected_reasons(info)

        assert count_live_frames(server.url, "/GPU-Resources") >= 3
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


# The NVLink generation of each GPU architecture, by compute capability major, in the real
# binding's nvmlNvlinkVersion_t names (NVIDIA's NVLink pages: Ampere 3.0, Hopper 4.0,
# Blackwell 5.0).
NVLINK_GENERATION = {8: "NVML_NVLINK_VERSION_3_0", 9: "NVML_NVLINK_VERSION_4_0",
                     10: "NVML_NVLINK_VERSION_5_0"}


@pytest.mark.parametrize("profile", PROFILES)
def test_nvlink_version_answers_as_the_driver_does(profile: str) -> None:
    """A driver exports nvmlDeviceGetNvLinkVersion. rapidsai's jupyterlab-nvdashboard 0.15
    calls it at import and treats any error but NOT_SUPPORTED as fatal, so without it that
    extension does not load over the simulated driver (benchmarks/versus_v015.py)."""
    models = PROFILES[profile].models
    pynvml = load_binding(SimulatedNvml(len(models), profile=profile).library)
    pynvml.nvmlInit()
    try:
        for index, model in enumerate(models):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            if not model.nvlink_link_count:
                with pytest.raises(pynvml.NVMLError_NotSupported):
                    pynvml.nvmlDeviceGetNvLinkVersion(handle, 0)
                continue
            expected = getattr(pynvml, NVLINK_GENERATION[model.compute_capability[0]])
            assert pynvml.nvmlDeviceGetNvLinkVersion(handle, 0) == expected
            assert pynvml.nvmlDeviceGetNvLinkVersion(
                handle, model.nvlink_link_count - 1) == expected
            with pytest.raises(pynvml.NVMLError_InvalidArgument):
                pynvml.nvmlDeviceGetNvLinkVersion(handle, model.nvlink_link_count)
    finally:
        pynvml.nvmlShutdown()
