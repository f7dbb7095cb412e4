"""/metrics: DCGM names, types, units and labels; families exported only when present;
access rules. The real-Prometheus scrape is in test_prometheus_scrape.py."""

from __future__ import annotations

import math
import re

import pytest

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from jupyterlab_nvdashboard.export.collector import (  # noqa: E402
    DcgmCollector,
    Scrape,
    allowed_without_token,
    render,
)
from jupyterlab_nvdashboard.export.dcgm import (  # noqa: E402
    MIB,
    exported_gpus,
    mig_profile,
)
from jupyterlab_nvdashboard.export.names import exported_fields  # noqa: E402
from jupyterlab_nvdashboard.metrics import GpuFacts, GpuReading, HostReading, Sample  # noqa: E402
from jupyterlab_nvdashboard.metrics.families import (  # noqa: E402
    GPM_FAMILY,
    HEALTH_FAMILY,
    GpmReading,
    HealthReading,
)
from tests.support.dcgm_reference import DCGM_LABELS, DCGM_REFERENCE  # noqa: E402
from tests.support.servers import get, in_process_server  # noqa: E402

GIB = 2**30
HOST = HostReading(10.0, 1e9, 4e9, None, None, 5.0, 6.0)


def facts(index: int, **fields: object) -> GpuFacts:
    base = GpuFacts(index, f"GPU {index}", "gpu", None, index, index, "NVIDIA H200",
                    f"GPU-{index:08d}", 141 * GIB, "v2", 5, 16, 63e9, (), None, 700.0, False,
                    None, "none", True, f"00000000:{0x18 + index:02X}:00.0")
    return base._replace(**fields)


def reading(index: int, **fields: object) -> GpuReading:
    base = GpuReading(index, False, 37.0, 12.0, 10 * GIB, 141 * GIB, 0.5 * GIB, 2e9, 1e9, False,
                      None, None, 55.0, 300.0)
    return base._replace(**fields)


GPM = GpmReading(50.0, 25.0, 10.0, 40.0, None, 60.0, 5.0, 3e9, 2e9, None, None)
HEALTH = HealthReading(1980.0, 1980.0, 2619.0, 2619.0, 0, 0, 55.0, 90.0, 95.0, 300.0, 700.0,
                       None, 0, 0, 0, 0, False, False)


def scrape_text(samples: list[Sample], gpu_facts: list[GpuFacts],
                hostname_label: str = "hostname") -> str:
    gpus = exported_gpus("node-a", gpu_facts, samples[-1])
    body, content_type = render(DcgmCollector(lambda: Scrape(gpus, [("node-a", HOST)]),
                                              hostname_label))
    assert content_type.startswith("application/openmetrics-text")
    return body.decode()


def families_of(text: str) -> dict[str, object]:
    # The classic parser reads OpenMetrics text too, apart from its '# EOF' line.
    return {f.name: f for f in text_string_to_metric_families(text.replace("# EOF\n", ""))}


def test_every_exported_name_is_a_dcgm_field_of_the_same_type() -> None:
    for field in exported_fields("classic"):
        if not field.own:
            assert DCGM_REFERENCE.get(field.name) == field.kind, field.name


def test_families_are_exported_when_present_with_dcgm_units_and_labels() -> None:
    sample = Sample(1, 100.0, (reading(0), reading(1)), HOST,
                    extra={GPM_FAMILY: {0: GPM}, HEALTH_FAMILY: {0: HEALTH}})
    text = scrape_text([sample], [facts(0), facts(1)])
    families = families_of(text)
    by_gpu = {name: {s.labels["gpu"]: s.value for s in family.samples}
              for name, family in families.items() if name.startswith("DCGM_")}
    assert by_gpu["DCGM_FI_DEV_FB_USED"] == {"0": 10 * GIB / MIB, "1": 10 * GIB / MIB}
    assert by_gpu["DCGM_FI_DEV_FB_FREE"]["0"] == pytest.approx((141 - 10 - 0.5) * 1024)
    assert by_gpu["DCGM_FI_DEV_POWER_USAGE"]["0"] == 300.0  # watts
    # GPU 0 has GPM and health readings, GPU 1 has none: its series are absent, not 0.
    assert by_gpu["DCGM_FI_DEV_SM_CLOCK"] == {"0": 1980.0}
    assert by_gpu["DCGM_FI_DEV_MEM_CLOCK"] == {"0": 2619.0}
    assert by_gpu["DCGM_FI_PROF_SM_ACTIVE"] == {"0": 0.5}  # a ratio, from 50 %
    assert by_gpu["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == {"0": 0.1}
    assert by_gpu["DCGM_FI_PROF_DRAM_ACTIVE"] == {"0": 0.4}
    assert by_gpu["DCGM_FI_PROF_PCIE_TX_BYTES"] == {"0": 3e9, "1": 2e9}  # GPM first
    assert "DCGM_FI_PROF_PIPE_FP64_ACTIVE" not in families  # None in GPM: left out
    assert "DCGM_FI_PROF_NVLINK_TX_BYTES" not in families  # no NVLink anywhere
    assert by_gpu["DCGM_FI_DEV_XID_ERRORS"] == {"0": 0.0}  # health, and no XID seen
    labels = families["DCGM_FI_DEV_GPU_UTIL"].samples[0].labels
    assert set(labels) == DCGM_LABELS
    assert labels == {"gpu": "0", "UUID": "GPU-00000000", "pci_bus_id": "00000000:18:00.0",
                      "device": "nvidia0", "modelName": "NVIDIA H200", "hostname": "node-a"}
    assert families["nvdashboard_host_cpu_percent"].samples[0].value == 10.0
    assert "nvdashboard_host_disk_read_bytes_per_second" not in families


def test_without_families_only_the_core_readings_are_exported() -> None:
    text = scrape_text([Sample(1, 100.0, (reading(0),), HOST)], [facts(0)])
    names = set(families_of(text))
    assert "DCGM_FI_DEV_GPU_UTIL" in names
    assert not {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
                "DCGM_FI_DEV_XID_ERRORS"} & names


def test_counters_are_nvmls_own_totals_never_an_integral_of_the_rates() -> None:
    samples = [Sample(i, 100.0 + i, (reading(0, pcie_tx_bytes_total=5e12 + i * 2e9,
                                             pcie_rx_bytes_total=7e12,
                                             nvlink_bytes_total=9e12),), HOST)
               for i in range(4)]
    text = scrape_text(samples, [facts(0)])
    assert "# TYPE nvdashboard_gpu_pcie_transmit_bytes counter\n" in text
    values = {name: family.samples[0].value for name, family in families_of(text).items()
              if family.samples}
    # The driver's count (in bytes), whatever this reader saw before: the same for any reader.
    assert values["nvdashboard_gpu_pcie_transmit_bytes_total"] == pytest.approx(5e12 + 3 * 2e9)
    assert values["nvdashboard_gpu_pcie_receive_bytes_total"] == pytest.approx(7e12)
    assert values["nvdashboard_gpu_nvlink_bytes_total"] == pytest.approx(9e12)
    # DCGM never sends its PCIe throughput fields (200, 201): neither do we.
    assert "DCGM_FI_DEV_PCIE_TX_THROUGHPUT" not in text
    # Without the driver's counters (the 20 ms snapshot): the rates as gauges, no counter.
    snapshot = Sample(1, 100.0, (reading(0, pcie_is_snapshot=True),), HOST)
    families = families_of(scrape_text([snapshot], [facts(0)]))
    assert "nvdashboard_gpu_pcie_transmit_bytes_total" not in families
    assert families["DCGM_FI_PROF_PCIE_TX_BYTES"].samples[0].value == 2e9


def test_the_old_hostname_spelling_is_an_option() -> None:
    text = scrape_text([Sample(1, 100.0, (reading(0),), HOST)], [facts(0)], "Hostname")
    families = families_of(text)
    assert families["DCGM_FI_DEV_GPU_UTIL"].samples[0].labels["Hostname"] == "node-a"
    assert "hostname" not in families["DCGM_FI_DEV_GPU_UTIL"].samples[0].labels
    assert families["nvdashboard_host_cpu_percent"].samples[0].labels == {"Hostname": "node-a"}


def test_unsupported_and_lost_are_left_out_never_zero() -> None:
    unsupported = reading(0, power_w=None, temperature_c=None)
    lost = GpuReading.unavailable(1, lost=True)
    text = scrape_text([Sample(1, 100.0, (unsupported, lost), HOST)], [facts(0), facts(1)])
    families = families_of(text)
    assert "DCGM_FI_DEV_POWER_USAGE" not in families
    assert "DCGM_FI_DEV_GPU_TEMP" not in families
    assert {s.labels["gpu"] for s in families["DCGM_FI_DEV_GPU_UTIL"].samples} == {"0"}
    assert all(not math.isnan(s.value) for f in families.values() for s in f.samples)


def test_mig_devices_carry_their_gpu_labels_and_instance_labels() -> None:
    parent = facts(0, mig_enabled=True)
    mig = facts(1, kind="mig", parent=0, nvml_index=0, name="NVIDIA H200 MIG 3g.71gb",
                uuid="MIG-1234", mig={"gpu_instance_id": 2, "compute_instance_id": 0},
                pci_bus_id=None)
    sample = Sample(1, 100.0, (reading(0, utilization_pct=None), reading(1)), HOST)
    families = families_of(scrape_text([sample], [parent, mig]))
    (series,) = families["DCGM_FI_DEV_GPU_UTIL"].samples
    assert series.labels["GPU_I_ID"] == "2" and series.labels["GPU_I_PROFILE"] == "3g.71gb"
    assert series.labels["UUID"] == "GPU-00000000"  # the GPU's, as dcgm-exporter labels it
    assert series.labels["pci_bus_id"] == "00000000:18:00.0"


@pytest.mark.parametrize(("name", "slices", "memory_slices", "gpu_mib", "profile"), [
    # Names as NVIDIA's MIG user guide lists them, from the slices and the GPU's memory.
    ("NVIDIA H200 MIG 3g.71gb", 3, 4, 143_771, "3g.71gb"),
    ("NVIDIA H200", 1, 1, 143_771, "1g.18gb"),  # a name without " MIG "
    ("NVIDIA H200", 2, 2, 143_771, "2g.35gb"),
    ("NVIDIA H100 80GB HBM3", 3, 4, 81_559, "3g.40gb"),
    ("NVIDIA A100-SXM4-40GB", 7, 8, 40_960, "7g.40gb"),
    ("NVIDIA A100-SXM4-40GB", 1, 1, 40_960, "1g.5gb"),
    ("NVIDIA A30", 2, 4, 24_576, "2g.12gb"),
])
def test_the_mig_profile_comes_from_the_mig_attributes(
        name: str, slices: int, memory_slices: int, gpu_mib: int, profile: str) -> None:
    parent = facts(0, mig_enabled=True, memory_total_bytes=gpu_mib * MIB)
    mig = facts(1, kind="mig", parent=0, nvml_index=0, name=name, uuid="MIG-1",
                mig={"gpu_instance_id": 2, "gpu_slices": slices, "memory_slices": memory_slices})
    assert mig_profile(mig, parent) == profile
    sample = Sample(1, 100.0, (reading(0, utilization_pct=None), reading(1)), HOST)
    (series,) = families_of(scrape_text([sample], [parent, mig]))["DCGM_FI_DEV_GPU_UTIL"].samples
    assert series.labels["GPU_I_PROFILE"] == profile


def test_without_mig_attributes_a_name_lacking_mig_gives_no_profile_not_the_model() -> None:
    parent = facts(0, mig_enabled=True)
    mig = facts(1, kind="mig", parent=0, nvml_index=0, name="NVIDIA H200", uuid="MIG-1",
                mig={"gpu_instance_id": 2})
    assert mig_profile(mig, parent) is None
    assert mig_profile(mig._replace(name="NVIDIA H200 MIG 1g.18gb"), parent) == "1g.18gb"
    from jupyterlab_nvdashboard.apps.components import gpu_label

    assert gpu_label(mig, gpu=parent).endswith(": NVIDIA H200")  # never a wrong profile
    attributes = mig._replace(mig={"gpu_instance_id": 2, "gpu_slices": 1, "memory_slices": 1})
    assert gpu_label(attributes, gpu=parent).endswith(": 1g.18gb")


def test_allowed_addresses() -> None:
    import ipaddress

    networks = [ipaddress.ip_network("10.0.0.0/24"), ipaddress.ip_network("::1/128")]
    assert allowed_without_token("10.0.0.7", networks)
    assert allowed_without_token("::ffff:10.0.0.7", networks)
    assert allowed_without_token("::1", networks)
    assert not allowed_without_token("10.0.1.7", networks)
    assert not allowed_without_token("10.0.0.7", [])
    assert not allowed_without_token("not-an-ip", networks)


def test_route_is_off_by_default_and_asks_for_the_token() -> None:
    with in_process_server(gpus=2) as server:
        assert get(server.url + "/metrics")[0] == 404
    with in_process_server(gpus=2, metrics_enabled=True) as server:
        assert get(server.url + "/metrics", token=None)[0] == 403
        server.wait_until_gpus_read()
        status, body = get(server.url + "/metrics")
        assert status == 200
        text = body.decode()
        assert re.search(r'^DCGM_FI_DEV_GPU_UTIL\{.*hostname="', text, re.M)
        assert 'Hostname="' not in text  # dcgm-exporter's name since its change #655
        assert 'pci_bus_id="00000000:18:00.0"' in text
        assert "nvdashboard_samples_total" in text and "nvdashboard_viewers" in text


def test_named_address_scrapes_without_the_token() -> None:
    import ipaddress

    allow = (ipaddress.ip_network("127.0.0.1/32"),)
    with in_process_server(gpus=1, metrics_enabled=True, metrics_allow=allow) as server:
        assert get(server.url + "/metrics", token=None)[0] == 200
        assert get(server.url + "/index.json", token=None)[0] == 403  # only /metrics
