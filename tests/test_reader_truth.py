"""The reader's rules where a binding, a driver or the clock does something awkward.

Each case runs the real nvidia-ml-py over the simulated driver. Every test here failed on
the reader before it trusted nvml.h over the binding's names: NOT_SUPPORTED remembered per
function, state keyed by row, windows cut by wall time, family readings overwritten
between ticks, partial NVLink sums.
"""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

import jupyterlab_nvdashboard
from jupyterlab_nvdashboard.metrics import nvml as nvml_module
from jupyterlab_nvdashboard.metrics import sampler as sampler_module
from jupyterlab_nvdashboard.metrics.binding import binding_loader, load_binding
from jupyterlab_nvdashboard.metrics.health import HealthReader
from jupyterlab_nvdashboard.metrics.host import HostReader
from jupyterlab_nvdashboard.metrics.nvml import NvmlReader
from jupyterlab_nvdashboard.metrics.sampler import History, Sampler
from jupyterlab_nvdashboard.simnvml import SimulatedNvml, nvml_h
from tests.support.bindings import OLDEST, reader_over

PACKAGE = Path(jupyterlab_nvdashboard.__file__).parent
SLOWDOWN = nvml_h.CONSTANTS["NVML_TEMPERATURE_THRESHOLD_SLOWDOWN"]
CLOCK_SM = nvml_h.CONSTANTS["NVML_CLOCK_SM"]
NAMED_TUPLE_API = {"_fields", "_asdict", "_replace", "_make"}


def started(simulator: SimulatedNvml, **kwargs: object) -> NvmlReader:
    reader = NvmlReader(binding_loader(simulator.library), **kwargs)  # type: ignore[arg-type]
    reader.ensure_initialized()
    return reader


# ----- NOT_SUPPORTED is per (function, arguments) ---------------------------------------
def test_one_unsupported_threshold_does_not_hide_the_other() -> None:
    simulator = SimulatedNvml(1, profile="h200")
    simulator.set_unsupported_argument("nvmlDeviceGetTemperatureThreshold", SLOWDOWN)
    reader = started(simulator)
    reading = HealthReader(reader).read(reader.read())[0]  # type: ignore[index]
    assert reading.temperature_slowdown_c is None
    assert reading.temperature_shutdown_c == 95


def test_one_unsupported_clock_domain_does_not_hide_the_memory_clock() -> None:
    simulator = SimulatedNvml(1, profile="h200")
    simulator.set_unsupported_argument("nvmlDeviceGetClockInfo", CLOCK_SM)
    simulator.set_unsupported_argument("nvmlDeviceGetMaxClockInfo", CLOCK_SM)
    reader = started(simulator)
    health = HealthReader(reader)
    for _ in range(2):  # the second pass reads with what the first learned
        reading = health.read(reader.read())[0]  # type: ignore[index]
    assert reading.sm_clock_mhz is None and reading.sm_clock_max_mhz is None
    assert reading.memory_clock_mhz == 3201 and reading.memory_clock_max_mhz == 3201


# ----- state keyed by UUID, reset when enumeration changes --------------------------------
def test_a_rescan_that_drops_a_gpu_keeps_each_rate_on_its_own_counter() -> None:
    now = [100.0]
    simulator = SimulatedNvml(3, profile="h200")
    simulator.set_clock(lambda: now[0])
    reader = started(simulator, clock=lambda: now[0])
    lib = load_binding(simulator.library)
    lib.nvmlInit()
    third = reader.facts[2].uuid

    def tx_counter(uuid: str) -> int:
        for index in range(lib.nvmlDeviceGetCount()):
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            if lib.nvmlDeviceGetUUID(handle) == uuid:
                field = nvml_h.FIELD_IDS["NVML_FI_DEV_PCIE_COUNT_TX_BYTES"]
                return int(lib.nvmlDeviceGetFieldValues(handle, [field])[0].value.ullVal)
        raise AssertionError(uuid)

    reader.read()
    before = tx_counter(third)
    simulator.remove_gpu(1)  # GPU 2 becomes GPU 1 (and row 1) at the rescan
    now[0] += nvml_module.RESCAN_INTERVAL_S + 1
    reader.retry_if_due()
    assert [facts.uuid for facts in reader.facts][1] == third
    after = tx_counter(third)
    reading = reader.read()[1]
    true_rate = (after - before) / (nvml_module.RESCAN_INTERVAL_S + 1)
    assert reading.pcie_tx_bytes_per_s == pytest.approx(true_rate, rel=1e-6)


def test_process_timestamps_follow_the_gpu_not_the_row() -> None:
    simulator = SimulatedNvml(2, profile="h200")
    reader = started(simulator)
    states = reader.session.per_device()
    states[reader.facts[0].uuid] = "gpu0"
    states[(reader.facts[1].uuid, 42)] = "gpu1"
    first = reader.facts[0].uuid
    epoch = reader.session.epoch
    simulator.remove_gpu(0)
    reader.rescan_interval_s = 0.0
    reader.retry_if_due()
    assert reader.session.epoch != epoch
    assert first not in states and (reader.facts[0].uuid, 42) in states


# ----- windows by the monotonic clock -------------------------------------------------------
def test_a_forward_ntp_step_keeps_the_window_full(monkeypatch: pytest.MonkeyPatch) -> None:
    simulator = SimulatedNvml(1)
    history = History(1000)
    sampler = Sampler(started(simulator), HostReader(), history, 0.2)
    wall = [1_000_000.0]
    monkeypatch.setattr(sampler_module.time, "time", lambda: wall[0])
    for tick in range(20):
        if tick == 10:
            wall[0] += 3600.0  # NTP steps the wall clock forward by an hour
        sampler.tick()
        wall[0] += 0.2
    assert len(history.window(120)) == 20


# ----- family readings between ticks ----------------------------------------------------------
class OnRequest:
    """A family that has a reading only on the passes a test asks for (as GPM's own rate)."""

    name = "on-request"

    def __init__(self) -> None:
        self.emit: object | None = None

    def read(self, gpus: tuple) -> object | None:
        reading, self.emit = self.emit, None
        return reading


def test_two_gpu_passes_between_ticks_lose_no_family_reading() -> None:
    family = OnRequest()
    history = History(1000)
    sampler = Sampler(started(SimulatedNvml(1)), HostReader(), history, 60.0,
                      families=[family])
    sampler.start()  # the threads take their first step, then wait a minute
    try:
        time.sleep(0.3)
        family.emit = "GPM pass"
        sampler.read_gpus()  # a pass with the family's reading
        sampler.read_gpus()  # and one without, before any tick
        sample = sampler.tick()
        assert sample.extra.get("on-request") == "GPM pass"
        assert "on-request" not in sampler.tick().extra  # taken once, not repeated
    finally:
        sampler.stop()


# ----- a total with a missing part is not available -----------------------------------------
def test_a_link_counter_reset_makes_the_nvlink_total_unavailable_not_a_dip() -> None:
    now = [50.0]
    simulator = SimulatedNvml(1, profile="h200")
    simulator.set_clock(lambda: now[0])
    reader = started(simulator, clock=lambda: now[0])
    now[0] += 30.0  # the counters have counted for a while
    reader.read()
    now[0] += 0.2
    assert reader.read()[0].nvlink_tx_bytes_per_s is not None
    simulator.reset_nvlink_counter(0, 3)
    now[0] += 0.2
    assert reader.read()[0].nvlink_tx_bytes_per_s is None  # one link's rate is unknown
    now[0] += 0.2
    assert reader.read()[0].nvlink_tx_bytes_per_s is not None  # and back the tick after


# ----- the oldest binding: names it lacks, log lines it must not write -----------------------
def test_the_oldest_binding_logs_its_real_version_and_no_missing_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    reader = reader_over(SimulatedNvml(4), OLDEST)
    reader.ensure_initialized()
    reader.read()
    assert reader.versions["binding"] == OLDEST
    text = caplog.text
    assert "Invalid Argument" not in text  # links past the last one are not errors
    assert "has no NVML_" not in text and "nvidia-ml-py  has" not in text


# ----- structure ----------------------------------------------------------------------------
def _imports(path: Path) -> list[str]:
    """The modules ``path`` imports, resolved to dotted names inside the package."""
    tree = ast.parse(path.read_text())
    package = ["jupyterlab_nvdashboard", *path.relative_to(PACKAGE).parent.parts]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.append(module)
            found += [f"{module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


def _module_name(path: Path) -> str:
    parts = ["jupyterlab_nvdashboard", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_metrics_imports_neither_the_simulator_nor_higher_layers() -> None:
    for path in (PACKAGE / "metrics").glob("*.py"):
        for name in _imports(path):
            assert not name.startswith("jupyterlab_nvdashboard.simnvml"), (path.name, name)
            for higher in ("apps", "runs", "server", "stream", "export", "cluster",
                           "composition", "workload"):
                assert not name.startswith(f"jupyterlab_nvdashboard.{higher}"), (path, name)


def test_the_simulator_imports_nothing_from_the_project() -> None:
    for path in (PACKAGE / "simnvml").glob("*.py"):
        for name in _imports(path):
            if name.startswith("jupyterlab_nvdashboard"):
                assert name.startswith("jupyterlab_nvdashboard.simnvml"), (path.name, name)


def test_no_module_uses_another_modules_underscore_names() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "labextension" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            ours = isinstance(node, ast.ImportFrom) and (
                node.level > 0 or (node.module or "").startswith("jupyterlab_nvdashboard"))
            if ours:  # (a third-party library's privates are that library's business)
                private = [alias.name for alias in node.names  # type: ignore[union-attr]
                           if alias.name.startswith("_") and not alias.name.startswith("__")]
                assert not private, (path, private)
            # obj._name where obj is not self/cls: reaching into another object's privates
            # (a named tuple's _fields, _asdict, _replace and _make are its public API)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                    not node.attr.startswith("__") and node.attr not in NAMED_TUPLE_API and \
                    isinstance(node.value, ast.Name) and node.value.id not in ("self", "cls"):
                pytest.fail(f"{path.relative_to(PACKAGE)}:{node.lineno} uses "
                            f"{node.value.id}.{node.attr}")


def test_there_is_no_import_circle() -> None:
    graph: dict[str, set[str]] = {}
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")
               if "labextension" not in path.parts}
    for name, path in modules.items():
        graph[name] = {imported for imported in _imports(path)
                       if imported in modules and imported != name
                       and not name.startswith(imported + ".")}

    def visit(node: str, trail: list[str]) -> None:
        if node in trail:
            pytest.fail("import circle: " + " -> ".join([*trail[trail.index(node):], node]))
        for target in graph.get(node, ()):
            if target not in done:
                visit(target, [*trail, node])
        done.add(node)

    done: set[str] = set()
    for module in graph:
        visit(module, [])
