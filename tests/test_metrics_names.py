"""/metrics name contracts (issue 46): ``--metrics-names classic|dcgm47|both``.

One scrape of a GPU with every reading present is rendered under each name set. Each
DCGM 4.7 metric must carry its classic value, converted by the unit change that NVIDIA's
field-identifier reference and the dcgm-exporter 4.9.0 / 4.10.0 release notes give (the
table below is written from them, not from the code); ``both`` must send each series once
under each name; ``promtool check metrics`` must find nothing but what dcgm-exporter does by
design; and a bad value must stop the CLI in one line before anything listens.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from jupyterlab_nvdashboard.config import ConfigError, load_config  # noqa: E402
from jupyterlab_nvdashboard.export.collector import (  # noqa: E402
    DcgmCollector,
    HealthValue,
    Scrape,
    render,
)
from jupyterlab_nvdashboard.export.dcgm import FIELDS, exported_gpus  # noqa: E402
from jupyterlab_nvdashboard.metrics import Sample  # noqa: E402
from jupyterlab_nvdashboard.metrics.binding import binding_loader, load_binding  # noqa: E402
from jupyterlab_nvdashboard.metrics.families import (  # noqa: E402
    GPM_FAMILY,
    HEALTH_FAMILY,
    GpmReading,
)
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader  # noqa: E402
from jupyterlab_nvdashboard.simnvml import SimulatedNvml  # noqa: E402
from tests.support.bokeh_client import TEST_TOKEN  # noqa: E402
from tests.support.servers import cli_server, free_port, get  # noqa: E402
from tests.test_cli import assert_one_line_error, run_cli  # noqa: E402
from tests.test_metrics_export import HEALTH, HOST, facts, reading  # noqa: E402

PROMTOOL = shutil.which("promtool")
GIB = 2**30

# DCGM 4.7 name -> (the classic names it is made of, the conversion of their value), from
# NVIDIA's DCGM field-identifier reference (DCGM 4.7) and the dcgm-exporter 4.9.0 and
# 4.10.0 release notes.
DCGM47 = {
    "DCGM_FI_DEV_GPU_UTIL_RATIO": (("DCGM_FI_DEV_GPU_UTIL",), lambda v: v / 100),
    "DCGM_FI_DEV_MEMORY_UTIL_RATIO": (("DCGM_FI_DEV_MEM_COPY_UTIL",), lambda v: v / 100),
    "DCGM_FI_DEV_FB_USED_BYTES": (("DCGM_FI_DEV_FB_USED",), lambda v: v * 2**20),
    "DCGM_FI_DEV_FB_FREE_BYTES": (("DCGM_FI_DEV_FB_FREE",), lambda v: v * 2**20),
    "DCGM_FI_DEV_FB_RESERVED_BYTES": (("DCGM_FI_DEV_FB_RESERVED",), lambda v: v * 2**20),
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS": (("DCGM_FI_DEV_GPU_TEMP",), lambda v: v),
    "DCGM_FI_DEV_BOARD_POWER_WATTS": (("DCGM_FI_DEV_POWER_USAGE",), lambda v: v),
    "DCGM_FI_DEV_SM_CLOCK_HERTZ": (("DCGM_FI_DEV_SM_CLOCK",), lambda v: v * 10**6),
    "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ": (("DCGM_FI_DEV_MEM_CLOCK",), lambda v: v * 10**6),
    "DCGM_FI_DEV_ROW_REMAP_FAILED": (("DCGM_FI_DEV_ROW_REMAP_FAILURE",), lambda v: v),
    "DCGM_FI_PROF_SM_UTIL_RATIO": (("DCGM_FI_PROF_SM_ACTIVE",), lambda v: v),
    "DCGM_FI_PROF_SM_OCCUPANCY_RATIO": (("DCGM_FI_PROF_SM_OCCUPANCY",), lambda v: v),
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": (("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",), lambda v: v),
    "DCGM_FI_PROF_DRAM_UTIL_RATIO": (("DCGM_FI_PROF_DRAM_ACTIVE",), lambda v: v),
    "DCGM_FI_PROF_FP64_UTIL_RATIO": (("DCGM_FI_PROF_PIPE_FP64_ACTIVE",), lambda v: v),
    "DCGM_FI_PROF_FP32_UTIL_RATIO": (("DCGM_FI_PROF_PIPE_FP32_ACTIVE",), lambda v: v),
    "DCGM_FI_PROF_FP16_UTIL_RATIO": (("DCGM_FI_PROF_PIPE_FP16_ACTIVE",), lambda v: v),
    "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND": (("DCGM_FI_PROF_PCIE_TX_BYTES",), lambda v: v),
    "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND": (("DCGM_FI_PROF_PCIE_RX_BYTES",), lambda v: v),
    "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND": (("DCGM_FI_PROF_NVLINK_TX_BYTES",), lambda v: v),
    "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND": (("DCGM_FI_PROF_NVLINK_RX_BYTES",), lambda v: v),
    "DCGM_FI_DEV_XID_ERROR": (("DCGM_FI_DEV_XID_ERRORS",), lambda v: v),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": (("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",), lambda v: v),
}
# The NVLink throughput under each set: made of NVML's data-only counters, never converted
# from one another (DCGM's MB/s is cut to a whole number); tested against the driver below.
NVLINK_CLASSIC, NVLINK_DCGM47 = ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
                                 "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND")
CLASSIC = {field.name for field in FIELDS if field.name.startswith("DCGM_")} | {NVLINK_CLASSIC}
ALL_DCGM47 = set(DCGM47) | {NVLINK_DCGM47}
# NVML's own byte counters: our names, in every set.
OWN_COUNTERS = {"nvdashboard_gpu_pcie_transmit_bytes_total",
                "nvdashboard_gpu_pcie_receive_bytes_total", "nvdashboard_gpu_nvlink_bytes_total"}
# Every reading present, with values whose conversions are not trivially exact (37 % is
# not 0.37 * 100 in binary floating point), on GPU 0; GPU 1 has no GPM or health readings.
GPM_FULL = GpmReading(50.0, 25.0, 10.0, 40.0, 3.0, 60.0, 5.0, 3e9, 2e9, 7.5e9, 1.25e9)
SAMPLE = Sample(1, 100.0, (
    reading(0, utilization_pct=37.0, memory_utilization_pct=29.0,
            memory_used_bytes=10 * GIB + 12345 * 2**20, pcie_tx_bytes_total=5e12,
            pcie_rx_bytes_total=6e12, nvlink_bytes_total=7e12, nvlink_tx_bytes_per_s=4e9,
            nvlink_rx_bytes_per_s=1.5e9),
    reading(1)), HOST,
    extra={GPM_FAMILY: {0: GPM_FULL},
           HEALTH_FAMILY: {0: HEALTH._replace(sm_clock_mhz=1755.0, memory_clock_mhz=2619.0,
                                              clock_event_reasons=4)}})
OWN = [HealthValue("nvdashboard_gpu_held_seconds", "counter", "Seconds held.", 12.5,
                   {"gpu": "0", "UUID": "GPU-00000000", "hostname": "node-a"}),
       HealthValue("nvdashboard_samples", "counter", "Samples taken.", 4.0)]


def scrape(name_set: str) -> str:
    gpus = exported_gpus("node-a", [facts(0, nvlink_payload_counters=True), facts(1)], SAMPLE)
    body, _ = render(DcgmCollector(lambda: Scrape(gpus, [("node-a", HOST)], OWN),
                                   "hostname", name_set))
    return body.decode()


def series(text: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Each sample as the text names it. The classic parser reads OpenMetrics text too,
    apart from its '# EOF' line, but adds _total to a counter's samples that lack it."""
    written = set(re.findall(r"^([A-Za-z_:][\w:]*)[{ ]", text, re.MULTILINE))
    return [(s.name if s.name in written else s.name.removesuffix("_total"),
             tuple(sorted(s.labels.items())), s.value)
            for family in text_string_to_metric_families(text.replace("# EOF\n", ""))
            for s in family.samples]


def by_gpu(rows: list, name: str) -> dict[str, float]:
    return {dict(labels)["gpu"]: value for n, labels, value in rows if n == name}


def test_every_dcgm47_metric_is_its_classic_value_converted_exactly() -> None:
    rows = series(scrape("both"))
    names = {name for name, _, _ in rows if name.startswith("DCGM_")}
    # Every metric of each set is on this scrape.
    assert CLASSIC <= names
    assert ALL_DCGM47 <= names
    assert names == CLASSIC | ALL_DCGM47
    for name, (sources, convert) in DCGM47.items():
        got = by_gpu(rows, name)
        wanted = {}
        for gpu in ("0", "1"):
            parts = [by_gpu(rows, source).get(gpu) for source in sources]
            if None not in parts:
                wanted[gpu] = convert(sum(parts))
        assert wanted, name  # each conversion is checked on at least one GPU
        assert got == wanted, name  # exact: == on the floats, never approx
    # The figures behind it, by hand: 37 % is the ratio 37/100, 1755 MHz is 1.755 GHz.
    assert by_gpu(rows, "DCGM_FI_DEV_GPU_UTIL_RATIO")["0"] == 0.37
    assert by_gpu(rows, "DCGM_FI_DEV_SM_CLOCK_HERTZ") == {"0": 1.755e9}
    assert by_gpu(rows, "DCGM_FI_DEV_FB_USED_BYTES")["0"] == 10 * GIB + 12345 * 2**20
    # NVLink: the payload counters' 5.5 GB/s, not GPM's 8.75 GB/s (which counts headers).
    assert by_gpu(rows, NVLINK_DCGM47) == {"0": 5.5e9}
    assert by_gpu(rows, NVLINK_CLASSIC) == {"0": 5371.0}  # 5.5e9 / 1024 / 1000, cut
    assert by_gpu(rows, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS") == {"0": 4.0}


def test_each_set_has_its_own_names_and_both_sends_each_series_once_under_each() -> None:
    sets = {name_set: series(scrape(name_set)) for name_set in ("classic", "dcgm47", "both")}
    dcgm = {name_set: {n for n, _, _ in rows if n.startswith("DCGM_")}
            for name_set, rows in sets.items()}
    assert dcgm["classic"] == CLASSIC
    assert dcgm["dcgm47"] == ALL_DCGM47
    assert dcgm["both"] == CLASSIC | ALL_DCGM47
    for name_set, rows in sets.items():
        counts = Counter((name, labels) for name, labels, _ in rows)
        assert max(counts.values()) == 1, (name_set, counts.most_common(3))
    classic_series = {(n, labels) for n, labels, _ in sets["classic"]}
    dcgm47_series = {(n, labels) for n, labels, _ in sets["dcgm47"]}
    # Under both: exactly the union, so each series once under each of its names.
    assert {(n, labels) for n, labels, _ in sets["both"]} == classic_series | dcgm47_series
    # The project's own series keep their names and values in every set.
    own = {name_set: sorted(r for r in rows if r[0].startswith("nvdashboard_"))
           for name_set, rows in sets.items()}
    assert own["classic"] == own["dcgm47"] == own["both"] and own["classic"]
    assert OWN_COUNTERS <= {name for name, _, _ in own["classic"]}


def test_the_name_set_is_a_flag_and_an_environment_variable_with_classic_by_default() -> None:
    assert load_config(["--metrics"], environ={}).metrics_names == "classic"
    assert load_config(["--metrics", "--metrics-names", "dcgm47"], environ={}) \
        .metrics_names == "dcgm47"
    assert load_config([], environ={"NVDASHBOARD_METRICS": "1",
                                    "NVDASHBOARD_METRICS_NAMES": "both"}).metrics_names == "both"
    with pytest.raises(ConfigError, match="needs --metrics"):
        load_config(["--metrics-names", "both"], environ={})


@pytest.mark.parametrize("names", ["both", "DCGM 4.7"])
def test_a_metrics_only_variable_without_metrics_is_ignored_not_fatal(names: str) -> None:
    # A hub image that sets the name set for every user's server, /metrics on for some:
    # where it is off the variable (good or bad) is ignored, as the hostname label is.
    environ = {"NVDASHBOARD_METRICS_NAMES": names, "NVDASHBOARD_METRICS_HOSTNAME_LABEL": "x"}
    config = load_config([], environ=environ)
    assert not config.metrics_enabled and config.metrics_names == "classic"
    assert config.ignored_variables == ("NVDASHBOARD_METRICS_HOSTNAME_LABEL",
                                        "NVDASHBOARD_METRICS_NAMES")
    for off in ({"NVDASHBOARD_METRICS": "0"}, {}):
        assert load_config([], environ={**environ, **off}).ignored_variables
    # With /metrics on, the same variables are read, and a bad one stops the server.
    with pytest.raises(ConfigError, match="NVDASHBOARD_METRICS_HOSTNAME_LABEL"):
        load_config(["--metrics"], environ=environ)
    assert load_config([], environ={"NVDASHBOARD_METRICS": "1",
                                    "NVDASHBOARD_METRICS_NAMES": "both"}
                       ).ignored_variables == ()


def test_the_server_starts_and_warns_once_when_metrics_names_is_set_without_metrics() -> None:
    env = {"NVDASHBOARD_METRICS_NAMES": "dcgm48"}
    with cli_server(["--simulate", "1"], env=env) as (url, process):
        assert get(url + "/metrics", token=TEST_TOKEN)[0] == 404  # /metrics is off
        log = Path(process.log_path).read_text()  # type: ignore[attr-defined]
    warnings = [line for line in log.splitlines() if "warning" in line]
    assert warnings == ["nvdashboard: warning: NVDASHBOARD_METRICS_NAMES ignored: /metrics "
                        "is off (--metrics or NVDASHBOARD_METRICS=1 turns it on)"], log


@pytest.mark.parametrize(("args", "env"), [
    (["--metrics", "--metrics-names", "dcgm48"], {}),
    (["--metrics-names", "dcgm48"], {}),  # a bad flag is an error even with /metrics off
    (["--metrics"], {"NVDASHBOARD_METRICS_NAMES": "DCGM 4.7"}),
])
def test_a_bad_name_set_is_one_line_and_nothing_listens(args: list[str],
                                                        env: dict[str, str]) -> None:
    port = free_port()
    result = run_cli(str(port), "--simulate", "1", *args, env=env)
    assert_one_line_error(result, "metrics names", "classic", "dcgm47", "both")
    assert "serving" not in (result.stdout + result.stderr).lower()
    with socket.socket() as probe:  # the server never started: its port is free
        probe.bind(("127.0.0.1", port))


def text_format(openmetrics: str) -> str:
    """The body as Prometheus' text format, which promtool reads: the same families,
    with a counter whose samples end in _total typed under that name, and no '# EOF'."""
    body = openmetrics.replace("# EOF\n", "")
    for name in re.findall(r"^# TYPE (\w+) counter$", body, re.MULTILINE):
        if re.search(rf"^{name}_total[{{ ]", body, re.MULTILINE):
            body = body.replace(f"# HELP {name} ", f"# HELP {name}_total ") \
                .replace(f"# TYPE {name} counter", f"# TYPE {name}_total counter")
    return body


# promtool's complaints that are dcgm-exporter's own design, which its boards select on:
# the labels UUID and modelName, and counters named by their DCGM field, without _total.
BY_DESIGN = (re.compile(r"^(DCGM_FI_\w+) label names should be written in 'snake_case' not "
                        r"'camelCase'$"),
             re.compile(r"^(DCGM_FI_\w+) counter metrics should have \"_total\" suffix$"))


@pytest.mark.skipif(PROMTOOL is None, reason="needs Debian's prometheus package")
@pytest.mark.parametrize("name_set", ["classic", "dcgm47", "both"])
def test_promtool_finds_only_dcgm_exporters_own_choices(name_set: str) -> None:
    assert PROMTOOL is not None
    body = text_format(scrape(name_set))
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=body.encode(),
                             capture_output=True, timeout=60)
    problems = (checked.stdout + checked.stderr).decode().strip().splitlines()
    counters = {name for name, labels, _ in series(scrape(name_set))
                if name.startswith("DCGM_") and f"# TYPE {name} counter\n" in body}
    # The by-design counters are there (field 449, in the sets that carry it), and named as
    # dcgm-exporter does.
    assert bool(counters) == (name_set != "dcgm47")
    for line in problems:
        matched = [pattern.match(line) for pattern in BY_DESIGN]
        assert any(matched), line
        if matched[1]:
            assert matched[1].group(1) in counters, line
    # Nothing about the project's own series, nor any other kind of problem.
    assert not [line for line in problems if "nvdashboard_" in line]


def test_the_scrape_cost_benchmark_gives_figures_for_each_name_set(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[1] / "benchmarks" /
                             "metrics_names_cost.py"), "--runs", "2", "--scrapes", "3",
         "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures) == {"classic", "dcgm47", "both"}
    for name_set, each in figures.items():
        assert len(each["ms_per_scrape"]) == 2 and f"| {name_set} |" in done.stdout
    # All 8 GPUs' families: the sets' own, and both's union of them.
    assert figures["both"]["families"] == len(CLASSIC | ALL_DCGM47) == \
        figures["classic"]["families"] + figures["dcgm47"]["families"]


# ---- Each NVLink and PCIe name against a scripted (simulated) driver, read by the real
# binding, with NVIDIA's definition beside it.


class DriverCounters:
    """What the simulated driver's counters hold for one GPU, read through the binding as
    DCGM reads them (nvml.h: NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX} are "NVLink TX/RX
    Data throughput in KiB", per link; NVML_FI_DEV_PCIE_COUNT_TX_BYTES "PCIe transmit
    bytes")."""

    def __init__(self, simulator: SimulatedNvml, gpu: int, links: tuple[int, ...]) -> None:
        self.lib, self.gpu, self.links = load_binding(simulator.library), gpu, links

    def nvlink_payload_kib(self) -> int:
        lib = self.lib
        handle = lib.nvmlDeviceGetHandleByIndex(self.gpu)
        asked = [(field, link) for field in (lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                                             lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
                 for link in self.links]
        return sum(value.value.ullVal for value in lib.nvmlDeviceGetFieldValues(handle, asked))

    def pcie_bytes(self) -> tuple[int, int]:
        lib = self.lib
        handle = lib.nvmlDeviceGetHandleByIndex(self.gpu)
        tx, rx = lib.nvmlDeviceGetFieldValues(handle, [lib.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
                                                       lib.NVML_FI_DEV_PCIE_COUNT_RX_BYTES])
        return tx.value.ullVal, rx.value.ullVal


def driven_scrape(profile: str, name_set: str, seconds: float = 0.5
                  ) -> tuple[list, dict[str, dict], str]:
    """Two ticks ``seconds`` apart over the simulated driver, then one scrape: its rows,
    what the driver's counters held at each tick per GPU with NVLink ("t": the ticks), and
    the scrape's text."""
    simulator = SimulatedNvml(gpu_count=2, profile=profile)
    now = [5000.0]
    simulator.set_clock(lambda: now[0])
    reader = NvmlReader(binding_loader(simulator.library), clock=lambda: now[0])
    reader.ensure_initialized()
    drivers = {str(f.index): DriverCounters(simulator, f.index, f.nvlink_link_ids)
               for f in reader.facts if f.nvlink_link_ids}
    assert drivers
    held: dict[str, dict] = {"t": {}, **{gpu: {"nvlink_kib": [], "pcie": []} for gpu in drivers}}
    readings = ()
    for tick in range(2):
        now[0] = held["t"][tick] = 5000.0 + tick * seconds
        for gpu, driver in drivers.items():
            held[gpu]["nvlink_kib"].append(driver.nvlink_payload_kib()
                                           if simulator.profile.nvlink_throughput_fields else None)
            held[gpu]["pcie"].append(driver.pcie_bytes())
        readings = reader.read()
    # GPM's NVLink rates (NVML_GPM_METRIC_NVLINK_TOTAL_*) count protocol headers too: more
    # than the payload on the same traffic. The DCGM names must not take them.
    gpm = {r.index: GPM_FULL._replace(nvlink_tx_bytes_per_s=r.nvlink_tx_bytes_per_s * 1.06,
                                      nvlink_rx_bytes_per_s=r.nvlink_rx_bytes_per_s * 1.06)
           for r in readings if r.nvlink_tx_bytes_per_s and r.nvlink_rx_bytes_per_s}
    sample = Sample(2, now[0], tuple(readings), HOST, extra={GPM_FAMILY: gpm})
    gpus = exported_gpus("node-a", reader.facts, sample)
    body, _ = render(DcgmCollector(lambda: Scrape(gpus, [("node-a", HOST)]), "hostname",
                                   name_set))
    return series(body.decode()), held, body.decode()


def payload_kib_per_second(held: dict[str, dict], gpu: str) -> float:
    kib = held[gpu]["nvlink_kib"]
    return (kib[1] - kib[0]) / (held["t"][1] - held["t"][0])


def test_nvlink_bandwidth_total_is_dcgms_rate_in_mb_per_second() -> None:
    # DCGM 4.6.0, dcgm_fields.h: field 449 DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL (old name
    # DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL), "NV Link Throughput total for all Lanes", unit
    # DCGM_FIELD_UNIT_BW_MBPS (dcgm_fields.cpp). DcgmCacheManager.cpp, ReadAndCacheNvLinkBandwidth:
    # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX + _TX over all links, the change since the last
    # read divided by the seconds between the two reads' timestamps, then by 1000, stored as
    # an int64. dcgm-exporter's default-counters.csv types it "counter".
    rows, held, body = driven_scrape("mixed", "classic")
    gpus = [gpu for gpu in held if gpu != "t"]
    wanted = {gpu: float(math.trunc(payload_kib_per_second(held, gpu) / 1000)) for gpu in gpus}
    assert all(value > 1000 for value in wanted.values())  # MB/s of traffic, not a byte count
    assert by_gpu(rows, NVLINK_CLASSIC) == wanted
    assert f"# TYPE {NVLINK_CLASSIC} counter\n" in body
    assert NVLINK_DCGM47 not in {name for name, _, _ in rows}


def test_dcgm47_nvlink_throughput_is_the_payload_counters_in_bytes_per_second() -> None:
    # DCGM 4.7, field 1648 DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND (secondary source:
    # no NVIDIA header stored here reaches 4.7): NVML's payload-only counters,
    # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX} (KiB), both directions, all links, KiB/s x 1024.
    rows, held, body = driven_scrape("mixed", "dcgm47")
    got = by_gpu(rows, NVLINK_DCGM47)
    assert set(got) == set(held) - {"t"}
    for gpu, value in got.items():
        assert value == pytest.approx(payload_kib_per_second(held, gpu) * 1024, rel=1e-12)
    assert f"# TYPE {NVLINK_DCGM47} gauge\n" in body
    assert NVLINK_CLASSIC not in {name for name, _, _ in rows}


@pytest.mark.parametrize("name_set", ["classic", "dcgm47", "both"])
def test_without_the_payload_counters_no_nvlink_throughput_is_sent(name_set: str) -> None:
    # The link-gap profile's driver answers only NVML_FI_DEV_NVLINK_COUNT_{XMIT,RCV}_BYTES
    # ("Total Tx/Rx bytes on the link in NVLink5"), which DCGM's fields are not made of: the
    # dashboard still has NVLink rates, but the DCGM names are not available, never a stand-in.
    rows, held, _ = driven_scrape("link-gap", name_set)
    names = {name for name, _, _ in rows}
    assert not {NVLINK_CLASSIC, NVLINK_DCGM47} & names
    counted = by_gpu(rows, "nvdashboard_gpu_nvlink_bytes_total")
    assert counted and all(counted[gpu] > 0 for gpu in held if gpu != "t")


@pytest.mark.parametrize("name_set", ["classic", "dcgm47", "both"])
def test_pcie_throughput_names_are_not_sent_and_nvmls_counters_are_ours(name_set: str) -> None:
    # DCGM 4.6.0, DcgmCacheManager.cpp: DCGM_FI_DEV_PCIE_TX_THROUGHPUT (200) and _RX (201)
    # always answer NVML_ERROR_NOT_SUPPORTED, so dcgm-exporter never sends them. NVML's own
    # cumulative byte counters (NVML_FI_DEV_PCIE_COUNT_{TX,RX}_BYTES, bytes) are ours, in bytes.
    rows, held, body = driven_scrape("mixed", name_set)
    names = {name for name, _, _ in rows}
    assert not {"DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT"} & names
    for gpu in set(held) - {"t"}:
        tx, rx = held[gpu]["pcie"][1]
        assert by_gpu(rows, "nvdashboard_gpu_pcie_transmit_bytes_total")[gpu] == tx
        assert by_gpu(rows, "nvdashboard_gpu_pcie_receive_bytes_total")[gpu] == rx
        assert by_gpu(rows, "nvdashboard_gpu_nvlink_bytes_total")[gpu] == \
            held[gpu]["nvlink_kib"][1] * 1024
    for counter in ("pcie_transmit_bytes", "pcie_receive_bytes", "nvlink_bytes"):
        assert f"# TYPE nvdashboard_gpu_{counter} counter\n" in body
