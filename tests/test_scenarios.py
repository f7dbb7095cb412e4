"""Simulator scenarios (``simnvml/scenarios.py``): load models from NVIDIA's documentation,
read by the diagnosis as the cause each one stands for.

The simulator is not wired to the scenarios yet (the simulated driver is moving into
``simnvml/``): ``history`` below turns a scenario's figures into samples the way
``scenarios.load`` documents the wiring, against a simulated machine's facts.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from jupyterlab_nvdashboard.config import ConfigError, load_config
from jupyterlab_nvdashboard.diagnosis import PcieLink, diagnose
from jupyterlab_nvdashboard.metrics import GpuReading, HostReading, Sample
from jupyterlab_nvdashboard.metrics.families import (
    GPM_FAMILY,
    HEALTH_FAMILY,
    GpmReading,
    HealthReading,
)
from jupyterlab_nvdashboard.simnvml import scenarios
from jupyterlab_nvdashboard.simnvml.scenarios import SCENARIOS, Load, check_scenario, load
from tests.test_diagnosis import facts

TICK_S = 0.2
GPM_EVERY = 5  # ticks: GPM is derived once a second


def history(name: str, seconds: float = 60.0, gpu: int = 0,
            profile: str = "h200") -> tuple[list[Sample], Load]:
    fact = facts(profile)[gpu]
    samples, gpm = [], None
    last: Load | None = None
    for i in range(int(seconds / TICK_S)):
        t = i * TICK_S
        figures = last = load(name, t, gpu)
        reading = GpuReading.unavailable(fact.index, lost=False)._replace(
            utilization_pct=100 * figures.utilization,
            memory_used_bytes=figures.memory_used * (fact.memory_total_bytes or 0),
            pcie_tx_bytes_per_s=figures.pcie_tx * (fact.pcie_max_bytes_per_s or 0),
            pcie_rx_bytes_per_s=figures.pcie_rx * (fact.pcie_max_bytes_per_s or 0),
            nvlink_tx_bytes_per_s=figures.nvlink_tx * (fact.nvlink_max_bytes_per_s or 0),
            nvlink_rx_bytes_per_s=figures.nvlink_rx * (fact.nvlink_max_bytes_per_s or 0),
            temperature_c=figures.temperature_c,
            power_w=figures.power * (fact.power_limit_w or 0))
        if i % GPM_EVERY == 0:
            gpm = {fact.index: GpmReading(
                100 * figures.sm_activity, 100 * figures.sm_occupancy,
                100 * figures.tensor_activity, 100 * figures.dram_bandwidth, 0.0,
                100 * figures.fp32_activity, 100 * figures.fp16_activity, None, None, None,
                None)}
        values: list[Any] = [None] * len(HealthReading._fields)
        values[HealthReading._fields.index("clock_event_reasons")] = figures.clock_event_reasons
        values[HealthReading._fields.index("xid_events")] = ()
        samples.append(Sample(i, 1000.0 + t, (reading,), HostReading(*([None] * 7)),
                              extra={GPM_FAMILY: gpm, HEALTH_FAMILY: {
                                  fact.index: HealthReading(*values)}}))
    assert last is not None
    return samples, last


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_scenario_reads_as_its_cause(name: str) -> None:
    samples, last = history(name)
    link = None
    if last.pcie_link_generation is not None:
        link = PcieLink(last.pcie_link_generation, last.pcie_link_width)
    result = diagnose(samples, facts("h200"), 0, pcie_link=link)
    causes = [finding.cause for finding in result.findings]
    assert result.cause == SCENARIOS[name].cause, (causes, result.line())


def test_utilization_only_reading_of_the_launch_bound_scenario_cannot_tell() -> None:
    # The same load on a GPU without GPM: utilization says busy, and the finding says what it
    # would need to tell launch-bound from compute-bound.
    samples, _ = history("launch-bound", profile="a100-535")
    without_gpm = [Sample(s.seq, s.time_s, s.gpus, s.host, extra={}) for s in samples]
    result = diagnose(without_gpm, facts("a100-535"), 0)
    assert result.cause == "busy" and result.first.needs is not None
    assert "SM activity needs GPM" in result.first.needs


def test_every_gpu_plays_the_scenario_with_its_own_phase() -> None:
    assert load("starved", 0.5, 0) != load("starved", 0.5, 1)
    assert load("launch-bound", 12.3, 2) == load("launch-bound", 12.3, 2)  # pure
    for name in SCENARIOS:
        for t in (0.0, 1.7, 33.3):
            figures = load(name, t, 3)
            shares = [v for k, v in figures._asdict().items() if k not in (
                "temperature_c", "clock_event_reasons", "pcie_link_generation",
                "pcie_link_width")]
            assert all(0.0 <= share <= 1.0 for share in shares), (name, figures)


def test_an_unknown_scenario_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^unknown scenario 'nope'; choose one of idle, "):
        load("nope", 0.0, 0)
    assert check_scenario("idle") == "idle"


def test_the_setting_is_validated_in_one_line() -> None:
    config = load_config(["--simulate-scenario", "memory-bound"], {})
    assert config.simulation.scenario == "memory-bound" and config.simulation.gpu_count == 2
    env = load_config([], {"NVDASHBOARD_SIMULATE_SCENARIO": "idle", "NVDASHBOARD_SIMULATE": "3"})
    assert env.simulation.scenario == "idle" and env.simulation.gpu_count == 3
    with pytest.raises(ConfigError, match="^NVDASHBOARD_SIMULATE_SCENARIO: unknown scenario"):
        load_config([], {"NVDASHBOARD_SIMULATE_SCENARIO": "fast"})
    assert load_config([], {}).simulation.scenario == ""


def test_the_scenarios_import_nothing_from_the_project() -> None:
    # The rest of simnvml/ is checked the same way in tests/test_reader_truth.py.
    for module in [Path(scenarios.__file__), Path(scenarios.__file__).parent / "playing.py"]:
        tree = ast.parse(module.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.module in ("scenarios", "__future__") or node.level == 0 and not \
                    (node.module or "").startswith(
                    "jupyterlab_nvdashboard"), (module.name, node.module)
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("jupyterlab_nvdashboard") for a in node.names)


def test_metrics_pulls_in_neither_the_simulated_driver_nor_the_diagnosis() -> None:
    import subprocess
    import sys

    code = ("import sys, jupyterlab_nvdashboard.metrics, jupyterlab_nvdashboard.config; "
            "print(sorted(m for m in sys.modules if m.startswith(("
            "'jupyterlab_nvdashboard.simnvml', 'jupyterlab_nvdashboard.diagnosis'))))")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, check=True).stdout.strip()
    assert out == "[]"


def test_readings_put_a_scenario_in_nvmls_units() -> None:
    from jupyterlab_nvdashboard.simnvml.scenarios import Limits, readings

    limits = Limits(memory_total_bytes=141e9, power_limit_w=700.0, sm_clock_max_mhz=1980.0,
                    pcie_max_bytes_per_s=63e9, nvlink_max_bytes_per_s=None)
    values = readings(load("pcie-bound", 3.0, 0), limits)
    assert 80 <= values["pcie_rx_bytes_per_s"] / 63e9 * 100 <= 90  # type: ignore[operator]
    assert values["nvlink_tx_bytes_per_s"] is None  # no NVLink: not available, never 0
    assert values["utilization_pct"] == pytest.approx(100 * load("pcie-bound", 3.0, 0)
                                                      .utilization)
    capped = readings(load("throttled-power", 1.0, 0), limits)
    assert capped["power_w"] == 700.0 and capped["clock_event_reasons"] == 0x4
    assert readings(load("pcie-downtrained", 0.0, 0), limits)["pcie_link_generation"] == 3
