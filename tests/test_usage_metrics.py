"""GPU usage on ``/metrics`` (issue 28, items 4 and 5).

The new series pass ``promtool check metrics`` (Debian's prometheus package) and keep
their labels to the issue's list; the per-user series are off by default and bounded; and
a real Prometheus scrapes a simulated server while a scripted history plays (the simulated
driver lists two real processes of this user: a stand-in Jupyter kernel on GPU 0 that is
ended after a measured time, and a plain process on GPU 1 that stays), then answers the
docs/prometheus.md's GPU-hours and idle GPU-hours queries per user with what the script did.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, ConfigError, SimulationConfig, load_config
from jupyterlab_nvdashboard.diagnosis.idle import advance_device
from jupyterlab_nvdashboard.export.collector import DcgmCollector, Scrape
from jupyterlab_nvdashboard.export.usage import HolderUsage, usage_series
from tests.support.bokeh_client import TEST_TOKEN
from tests.support.prometheus import PROMETHEUS, api, prometheus
from tests.support.servers import cli_server

pytest.importorskip("prometheus_client")
PROMTOOL = shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None,
                                      reason="needs Debian's prometheus package")
GIB = 2**30
PROMETHEUS_DOC = Path(__file__).resolve().parents[1] / "docs" / "prometheus.md"
USER_LABELS = {"user", "kernel", "hostname", "gpu", "UUID"}


def classic_text(values: list) -> bytes:  # noqa: ANN001
    """The series as Prometheus' classic text format, which promtool reads (the server
    serves OpenMetrics: the same families, written with "# EOF")."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DcgmCollector(lambda: Scrape([], [], values)))
    return generate_latest(registry)


def promtool(body: bytes) -> None:
    assert PROMTOOL is not None
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True,
                             timeout=60)
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()[-3000:]


@needs_prometheus
def test_usage_series_pass_promtool_with_bounded_labels() -> None:
    metrics = create_metrics(Config(simulation=SimulationConfig(gpu_count=1,
                                                                profile="a100-mig")), environ={})
    metrics.nvml.ensure_initialized()
    facts = metrics.facts
    migs = [f.index for f in facts if f.kind == "mig"]
    assert len(migs) == 2
    devices = {}
    for row in migs:
        track = advance_device(None, 0.0, None, 1, 4 * GIB)
        devices[row] = advance_device(track, 10.0, None, 1, 4 * GIB)
    holders = [HolderUsage("alice", "k1", migs[0], 4 * GIB, 60.0, 40.0 * GIB, 10.0, 10.0),
               HolderUsage("alice", "k1", migs[1], 2 * GIB, 30.0, 20.0 * GIB, 10.0, 5.0),
               HolderUsage("bob", "", migs[1], 1 * GIB, None, 10.0 * GIB, 10.0, 0.0)]
    series = usage_series(devices, holders, facts, "node-7", 100.0, per_user=10)
    promtool(classic_text(series))
    by_name: dict[str, list] = {}
    for value in series:
        by_name.setdefault(value.name, []).append(value)
    # Per GPU: each MIG device under its GPU's gpu and UUID, told apart by GPU_I_ID; an
    # A100's MIG device has no activity readings: unused since a process last held it.
    unused = by_name["nvdashboard_gpu_unused_seconds"]
    assert {v.labels["GPU_I_ID"] for v in unused} == {"1", "2"} and \
        {v.value for v in unused} == {90.0}
    assert [v.value for v in by_name["nvdashboard_gpu_held_seconds"]] == [10.0, 10.0]
    # Per user: user, kernel, hostname, gpu, UUID and no more; alice's two MIG devices are
    # one series of her kernel on GPU 0 (idle as long as the shorter of the two).
    held = {(v.labels["user"], v.labels["kernel"]): v
            for v in by_name["nvdashboard_user_gpu_memory_held_bytes"]}
    assert all(set(v.labels) == USER_LABELS for v in held.values())
    assert held[("alice", "k1")].value == 6 * GIB and held[("bob", "")].value == 1 * GIB
    idle = {v.labels["user"]: v.value for v in by_name["nvdashboard_user_gpu_idle_seconds"]}
    assert idle == {"alice": 30.0}  # bob's cannot be told: no series, not 0
    assert [v.value for v in by_name["nvdashboard_user_gpu_idle_held_seconds"]
            if v.labels["user"] == "alice"] == [15.0]
    # Bounded: the largest holder only, and how many were left out.
    bounded = usage_series(devices, holders, facts, "node-7", 100.0, per_user=1)
    users = {v.labels["user"] for v in bounded if v.name.startswith("nvdashboard_user_gpu_m")}
    assert users == {"alice"}
    assert [v.value for v in bounded if v.name == "nvdashboard_user_gpu_series_dropped"] == [1]
    # Off by default: no per-user series at all.
    assert not [v for v in usage_series(devices, holders, facts, "node-7", 100.0)
                if "user" in v.labels]


def test_per_user_series_are_opt_in_and_need_metrics() -> None:
    assert load_config([], environ={}).metrics_per_user == 0
    assert load_config(["--metrics", "--metrics-per-user", "50"], environ={}) \
        .metrics_per_user == 50
    assert load_config([], environ={"NVDASHBOARD_METRICS": "1",
                                    "NVDASHBOARD_METRICS_PER_USER": "7"}).metrics_per_user == 7
    with pytest.raises(ConfigError, match="needs --metrics"):
        load_config(["--metrics-per-user", "5"], environ={})
    with pytest.raises(ConfigError, match="between 0 and 10000"):
        load_config(["--metrics", "--metrics-per-user", "-1"], environ={})


# ----- a real Prometheus over a scripted history ------------------------------------------

def scalar_by(base: str, query: str, label: str) -> dict[str, float]:
    return {s["metric"].get(label, ""): float(s["value"][1])
            for s in api(base, "query", query=query)["result"]}


def readme_query(start: str) -> str:
    """docs/prometheus.md's PromQL that starts with ``start``, with its window made 10 minutes."""
    for line in PROMETHEUS_DOC.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith(start):
            query = line.strip()
            window = query[query.index("[") + 1:query.index("]")]
            return query.replace(f"[{window}]", "[10m]")
    raise AssertionError(f"docs/prometheus.md has no PromQL starting {start!r}")


def wait_until(predicate, what: str, seconds: float = 90):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            found = predicate()
        except OSError:
            found = None  # not listening yet
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@needs_prometheus
def test_prometheus_gpu_hours_per_user_for_a_scripted_history(tmp_path: Path) -> None:
    import getpass

    user = getpass.getuser()
    kernel_id = str(uuid.uuid4())
    # A stand-in kernel (its connection file on its command line) and a plain process.
    kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "-f",
                               str(tmp_path / f"kernel-{kernel_id}.json")])
    plain = subprocess.Popen(["sleep", "600"])
    listing = tmp_path / "processes.json"
    listing.write_text("[]")
    env = {"NVDASHBOARD_SIMULATE_PROCESSES": str(listing),
           "NVDASHBOARD_SIMULATE_SCENARIO": "idle"}
    try:
        with cli_server(["--simulate", "2", "--metrics", "--metrics-per-user", "20",
                         "--interval", "0.5", "--idle-interval", "0.5"], env=env) as (url, _), \
                prometheus(tmp_path, urllib.parse.urlsplit(url).netloc) as base:
            request = urllib.request.Request(url + "/metrics",
                                             headers={"Authorization": f"token {TEST_TOKEN}"})
            wait_until(lambda: api(base, "query", query="up == 1")["result"], "a first scrape")
            # The script: both processes hold memory and do no GPU work from now on; the
            # kernel is ended after about 20 s, the plain process goes on.
            started = time.monotonic()
            listing.write_text(json.dumps([
                {"gpu": 0, "pid": kernel.pid, "used_memory_bytes": 4 * GIB, "sm_pct": 0,
                 "until_exit": True},
                {"gpu": 1, "pid": plain.pid, "used_memory_bytes": 2 * GIB, "sm_pct": 0,
                 "until_exit": True}]))
            wait_until(lambda: scalar_by(base, 'nvdashboard_user_gpu_memory_held_bytes'
                                         f'{{kernel="{kernel_id}"}}', "user"), "the kernel")
            time.sleep(max(0.0, 20 - (time.monotonic() - started)))
            kernel.kill()
            kernel.wait()
            kernel_held_s = time.monotonic() - started
            # Until the server says the kernel is gone, and Prometheus scraped that.
            wait_until(lambda: not scalar_by(
                base, f'nvdashboard_user_gpu_memory_held_bytes{{kernel="{kernel_id}"}} > 0',
                "user"), "the kernel's memory to go")
            time.sleep(3)
            with urllib.request.urlopen(request, timeout=10) as response:
                body = response.read().decode()
            plain_held_s = time.monotonic() - started
            # Idle-held time is GPU time without GPU work, whatever Jupyter says (here no
            # Jupyter tells about the kernel: its idle gauge is absent, its counters are not).
            hours = scalar_by(base, readme_query("sum by (user) (increase("
                                                 "nvdashboard_user_gpu_held_seconds_total"),
                              "user")
            idle_hours = scalar_by(base, readme_query(
                "sum by (user) (increase(nvdashboard_user_gpu_idle_held_seconds_total"), "user")
            per_gpu = scalar_by(base, readme_query(
                "sum by (hostname, gpu) (increase(nvdashboard_gpu_held_seconds_total"), "gpu")
            per_gpu_idle = scalar_by(base, "sum by (gpu) (increase("
                                     "nvdashboard_gpu_idle_held_seconds_total[10m])) / 3600",
                                     "gpu")
            # What increase() cannot see: each per-user series' first scraped value (the
            # series appears with the holder, already counting; docs/prometheus.md says so).
            unseen = scalar_by(base, "sum by (user) (min_over_time("
                               "nvdashboard_user_gpu_held_seconds_total[10m]))", "user")
            memory = scalar_by(base, readme_query(
                "sum by (user) (increase(nvdashboard_user_gpu_memory_held_byte_seconds_total"),
                "user")
    finally:
        for process in (kernel, plain):
            process.kill()
            process.wait()
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    # Only the new families (the parser refuses the DCGM counters' names, which keep no
    # _total on purpose: docs/prometheus.md).
    usage = ("nvdashboard_gpu_unused_seconds", "nvdashboard_gpu_held_seconds",
             "nvdashboard_gpu_idle_held_seconds", "nvdashboard_gpu_memory_held_byte_seconds",
             "nvdashboard_user_gpu_")
    blocks = ["# HELP " + block for block in body.split("# HELP ")[1:]
              if block.split(" ", 1)[0].startswith(usage)]
    text = "".join(blocks).replace("# EOF\n", "") + "# EOF\n"
    new = list(text_string_to_metric_families(text))
    assert {f.name for f in new} >= {"nvdashboard_gpu_unused_seconds",
                                      "nvdashboard_gpu_held_seconds",
                                      "nvdashboard_user_gpu_memory_held_bytes",
                                      "nvdashboard_user_gpu_held_seconds"}
    promtool(classic_families(new))
    for family in new:
        for sample in family.samples:
            if family.name.startswith("nvdashboard_user_gpu_") and "dropped" not in family.name:
                assert set(sample.labels) == USER_LABELS, sample
    # GPU-hours: the kernel held GPU 0 for ~20 s, the plain process GPU 1 for the whole
    # script; a process pass a second and a scrape a second each blur an edge by about a
    # second.
    expected = (kernel_held_s + plain_held_s) / 3600
    assert hours[user] + unseen[user] / 3600 == pytest.approx(expected, abs=6 / 3600), \
        (hours, unseen, expected)
    assert unseen[user] < 10  # a slow pass or two, and a scrape, per series
    # Nothing worked: idle all the time held, less what was held before each holder's
    # first judged pass (its processes' owners are known a slow pass or two after they are
    # listed; whether it worked then was not seen).
    assert idle_hours[user] == pytest.approx(hours[user], abs=6 / 3600), (idle_hours, hours)
    assert idle_hours[user] <= hours[user] + 1 / 3600
    assert per_gpu["0"] == pytest.approx(kernel_held_s / 3600, abs=4 / 3600), per_gpu
    assert per_gpu["1"] == pytest.approx(plain_held_s / 3600, abs=4 / 3600), per_gpu
    assert per_gpu_idle == pytest.approx(per_gpu, abs=2 / 3600)  # the GPUs did no work
    assert memory[user] == pytest.approx(
        (4 * kernel_held_s + 2 * plain_held_s) / 3600, abs=4 * (4 + unseen[user]) / 3600), memory


def classic_families(families: list) -> bytes:  # noqa: ANN001
    """Parsed OpenMetrics families, written again in the classic text format for promtool."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    class Collected:
        def collect(self):  # noqa: ANN202
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collected())  # type: ignore[arg-type]
    return generate_latest(registry)
