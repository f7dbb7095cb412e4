"""The /Workload page for a first-time user (issue 20, item 7), built headlessly over the
simulated driver, with run files written by hand and a clock the test moves:

- the path offered first runs here; one that cannot says what it needs, and Start is off;
- the progress says warm-up k of W, then timed n of N with ms per iteration, ETA and elapsed
  time, and never goes stale (it moves on with no new event, and says finished, stopped,
  failed or silent after);
- the verdict of the newest (or the clicked) run sits above the table and the charts, whole;
- one meaning per word: examples/s for throughput, samples only for GPU readings;
- a preset column, one iteration chart (its own ms axis) per preset;
- the GPU charts show the judged GPU's own lines, never a mean over GPUs.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyterlab_nvdashboard.apps import workload as page
from jupyterlab_nvdashboard.apps.sources import DashboardSources
from jupyterlab_nvdashboard.apps.workload import (
    SUMMARY_COLUMNS,
    WorkloadDashboard,
    run_progress,
    workload_feed,
)
from jupyterlab_nvdashboard.composition import create_metrics
from jupyterlab_nvdashboard.config import Config, SimulationConfig
from jupyterlab_nvdashboard.runs import capabilities, watcher
from jupyterlab_nvdashboard.runs.capabilities import default_path, devices_for, path_label
from jupyterlab_nvdashboard.runs.service import WorkloadService
from jupyterlab_nvdashboard.runs.watcher import Run, RunsWatcher
from jupyterlab_nvdashboard.workload.config import PATHS
from jupyterlab_nvdashboard.workload.events import parse_event

T0 = 1_800_000_000.0  # the runs' epoch seconds


@pytest.fixture
def fresh_capabilities() -> Iterator[None]:
    """``devices_for`` is cached once per process: each test that fakes what is installed
    starts from an empty cache and leaves one behind."""
    devices_for.cache_clear()
    yield
    devices_for.cache_clear()


def fake_installed(monkeypatch: pytest.MonkeyPatch, *present: str) -> list[tuple[str, ...]]:
    asked: list[tuple[str, ...]] = []

    def installed(*names: str) -> bool:
        asked.append(names)
        return any(name in present for name in names)

    monkeypatch.setattr(capabilities, "installed", installed)
    return asked


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def metrics(gpus: int = 2) -> Any:
    made = create_metrics(Config(simulation=SimulationConfig(gpu_count=gpus, profile="h200")),
                          environ={})
    made.nvml.ensure_initialized()  # the facts, without the sampler's threads
    return made


def dashboard(tmp_path: Path, clock: Clock, gpus: int = 2) -> WorkloadDashboard:
    sources = DashboardSources(metrics(gpus), WorkloadService(tmp_path))
    made = WorkloadDashboard(sources, workload_feed(sources.metrics), clock=clock)
    made.refresh()  # as the page's document does once, before it is sent
    return made


def event(kind: str, time_s: float, run_id: str = "r1", **fields: Any) -> dict[str, Any]:
    return {"event": kind, "run_id": run_id, "time": time_s, **fields}


def start(run_id: str, time_s: float, preset: str = "ci", iterations: int = 100,
          gpu: int | None = 1, warmup: int = 3, facts: Any = None) -> dict[str, Any]:
    pinned = None
    if gpu is not None and facts is not None:
        pinned = {"uuid": facts[gpu].uuid, "index": gpu, "visible": ""}
    return event("start", time_s, run_id, path="numpy", device="cpu", preset=preset,
                 pid=4242, config={"batch": 256}, iterations=iterations, warmup=warmup,
                 gpu=pinned)


def write(path: Path, *events: dict[str, Any]) -> None:
    with open(path, "a") as handle:
        for item in events:
            handle.write(json.dumps(item) + "\n")


def timed(run_id: str, first: int, last: int, begin: float, step_s: float = 0.1
          ) -> list[dict[str, Any]]:
    return [event("iteration", begin + i * step_s, run_id, iteration=i, ms=step_s * 800,
                  samples_per_s=1000.0, loss=0.5) for i in range(first, last + 1)]


def text_of(div_html: str) -> str:
    """The words a user reads in a Div (tags dropped, entities decoded)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", div_html)).split())


# ---- 1. the default path runs here ------------------------------------------------------

def test_without_tensorflow_or_cupy_the_panel_offers_numpy_and_says_what_others_need(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_capabilities: None) -> None:
    fake_installed(monkeypatch)  # nothing optional installed
    assert default_path(PATHS, real_gpus=False) == "numpy"
    assert default_path(PATHS, real_gpus=True) == "numpy"
    assert path_label("native", False) == "native (needs TensorFlow)"
    assert path_label("cupy-plugin", False) == "cupy-plugin (needs a real GPU)"
    assert path_label("cupy-plugin", True) == "cupy-plugin (needs CuPy)"
    assert path_label("numpy", False) == "numpy"

    dash = dashboard(tmp_path, Clock(T0))
    assert dash.path.value == "numpy" and not dash.start_button.disabled
    labels = dict(dash.path.options)
    assert labels["plugin"] == "plugin (needs TensorFlow)" and labels["numpy"] == "numpy"
    dash.path.value = "native"  # a path that cannot run here: Start is off, and says why
    assert dash.start_button.disabled and dash.device.options == ["none"]
    assert "Start is off: native needs TensorFlow: pip install" in dash.hint.text
    dash._start()  # a click sent anyway (a crafted message) is refused with the reason
    assert "not started: native needs TensorFlow" in dash.status.text
    dash.path.value = "numpy"
    assert not dash.start_button.disabled


def test_the_optimized_path_is_offered_first_where_it_can_run(
        monkeypatch: pytest.MonkeyPatch, fresh_capabilities: None) -> None:
    asked = fake_installed(monkeypatch, "tensorflow-cpu")
    assert default_path(PATHS, real_gpus=False) == "plugin"
    # TensorFlow without CUDA on a GPU machine with CuPy: the path that uses the GPU first.
    devices_for.cache_clear()
    fake_installed(monkeypatch, "tensorflow-cpu", "cupy-cuda12x")
    assert default_path(PATHS, real_gpus=True) == "cupy-plugin"
    devices_for.cache_clear()
    asked = fake_installed(monkeypatch, "tensorflow")
    assert default_path(PATHS, real_gpus=True) == "plugin"
    # Once per process: asking again reads no package metadata.
    before = len(asked)
    for _ in range(3):
        default_path(PATHS, real_gpus=True)
        devices_for("native", True)
    assert len(asked) == before


# ---- 2. progress: warm-up k of W, timed n of N, ETA; never stale ------------------------

def test_progress_goes_from_starting_through_warm_up_to_n_of_n_with_an_eta(
        tmp_path: Path) -> None:
    runs = RunsWatcher(tmp_path)
    path = tmp_path / "r1.jsonl"
    write(path, start("r1", T0))
    runs.poll()
    [run] = runs.runs()
    begun = run_progress(run, T0 + 2)
    assert begun.state == "starting" and "then 3 untimed warm-up iterations" in begun.line
    assert "0 of 100 timed iterations" in begun.line and "elapsed 2 s" in begun.line

    write(path, event("warmup_step", T0 + 3, step=1, ms=900.0))
    runs.poll()
    warm = run_progress(runs.newest(), T0 + 3)
    assert warm.state == "warm-up" and warm.line.startswith("warm-up: 1 of 3 untimed "
                                                            "iterations done")

    write(path, event("warmup_step", T0 + 3.5, step=2, ms=5.0),
          event("warmup_step", T0 + 3.6, step=3, ms=5.0), event("warmup_end", T0 + 4.0),
          *timed("r1", 1, 40, T0 + 4.0))  # 0.1 s an iteration
    runs.poll()
    running = run_progress(runs.newest(), T0 + 8.0)
    assert running.state == "running" and running.fraction == 0.4
    assert running.line.startswith("timed iteration 40 of 100 · 80.00 ms/iteration")
    assert "ETA 6 s" in running.line and "elapsed 8 s" in running.line  # 60 left at 0.1 s
    # No new event for 2 s: the ETA counts down all the same.
    assert "ETA 4 s" in run_progress(runs.newest(), T0 + 10.0).line

    write(path, *timed("r1", 41, 100, T0 + 4.0),
          event("end", T0 + 15.0, iterations=100, median_ms=80.0, interrupted=False))
    runs.poll()
    done = run_progress(runs.newest(), T0 + 100.0)
    assert done.state == "finished" and done.fraction == 1.0
    assert done.line == ("finished 100 of 100 timed iterations in 11 s (15 s with start-up "
                         "and warm-up) · median 80.00 ms/iteration")


def test_progress_says_stopped_failed_or_silent_and_counts_past_the_kept_iterations(
        monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"start": start("r", T0, iterations=1000), "warmup_end_s": T0 + 1}
    stopped = Run("r", **base, end={"time": T0 + 9, "iterations": 250, "median_ms": 2.0,
                                    "interrupted": True})
    assert run_progress(stopped, T0 + 50).line == ("stopped after 250 of 1,000 timed "
                                                   "iterations · median 2.00 ms/iteration · "
                                                   "ran 9 s")
    quick = Run("r", start=start("r", T0, iterations=1000), warmup_end_s=T0 + 0.2,
                end={"time": T0 + 9, "iterations": 1000, "median_ms": 2.0,
                     "interrupted": False})
    assert run_progress(quick, T0 + 50).line == ("finished 1,000 of 1,000 timed iterations "
                                                 "in 9 s · median 2.00 ms/iteration")
    failed = Run("r", **base, end={"time": T0 + 3, "iterations": 0, "interrupted": True,
                                   "error": "killed by SIGKILL"})
    assert run_progress(failed, T0 + 50).line.startswith("failed: killed by SIGKILL · after "
                                                        "0 of 1,000")
    silent = Run("r", **base, last_iteration={"time": T0 + 2, "iteration": 5, "ms": 1.0},
                 iterations=[{"time": T0 + 2, "iteration": 5, "ms": 1.0}])
    assert run_progress(silent, T0 + 30).state == "running"
    quiet = run_progress(silent, T0 + 100)
    assert quiet.state == "stalled" and quiet.line.startswith("no event for 1 min 38 s")
    # A process the launcher knows is alive is never called silent (a long first step).
    assert run_progress(silent, T0 + 100, alive=True).state == "running"

    monkeypatch.setattr(watcher, "MAX_ITERATIONS_KEPT", 5)
    runs = Run("r", start=start("r", T0, iterations=10))
    for item in timed("r", 1, 8, T0 + 1):
        watcher._apply(runs, item)
    assert len(runs.iterations) == 5 and runs.timed_done == 8


def test_the_page_progress_moves_on_between_events_and_after_a_failed_launch(
        tmp_path: Path) -> None:
    clock = Clock(T0 + 8.0)
    dash = dashboard(tmp_path, clock)
    assert "No run yet" in dash.progress.text
    write(tmp_path / "r1.jsonl", start("r1", T0), event("warmup_end", T0 + 4.0),
          *timed("r1", 1, 40, T0 + 4.0))
    dash.service.watcher.poll()
    dash.refresh()
    first = text_of(dash.progress.text)
    assert "Running · numpy on preset ci (cpu) · run r1" in first
    assert "timed iteration 40 of 100" in first and "ETA 6 s" in first
    clock.now += 3  # no new event, the table's version unchanged: the progress still moves
    dash.refresh()
    assert "ETA 3 s" in text_of(dash.progress.text) and "elapsed 11 s" in text_of(
        dash.progress.text)

    # A launched process that exited before writing any event: its error, not the old run.
    dash.service.launcher = SimpleNamespace(running=False, pid=999,
                                            last_error="error: No module named numpy",
                                            stop=lambda: "no run in progress")
    dash.refresh()
    assert text_of(dash.progress.text) == (
        "Failed · the run's process (pid 999) exited before its first event failed: error: "
        "No module named numpy")


# ---- 3. the verdict above the fold, whole -----------------------------------------------

def test_the_newest_runs_verdict_is_whole_above_the_table_and_a_click_shows_another(
        tmp_path: Path) -> None:
    clock = Clock(T0 + 100)
    dash = dashboard(tmp_path, clock)
    facts = dash.metrics.facts
    write(tmp_path / "old.jsonl", start("old", T0, preset="densedemo", gpu=0, facts=facts),
          event("warmup_end", T0 + 1, "old"), *timed("old", 1, 6, T0 + 1),
          event("end", T0 + 2, "old", iterations=6, median_ms=80.0, interrupted=False))
    write(tmp_path / "new.jsonl", start("new", T0 + 10, gpu=1, facts=facts),
          event("warmup_end", T0 + 11, "new"), *timed("new", 1, 6, T0 + 11),
          event("end", T0 + 12, "new", iterations=6, median_ms=80.0, interrupted=False))
    dash.service.watcher.poll()
    dash.refresh()
    children = list(dash.root.children)
    assert children.index(dash.progress) < children.index(dash.verdict) \
        < children.index(dash.table) < children.index(dash.steps)
    rows = dash._rows
    assert [row["run"] for row in rows] == ["new", "old"]  # newest first
    verdict = text_of(dash.verdict.text)
    assert verdict.startswith("Verdict on run new (numpy, preset ci; the newest): ")
    assert rows[0]["verdict"] in verdict  # the whole first finding, never cut
    assert "nvd-run-verdict" in dash.verdict.text and "white-space:normal" in dash.verdict.text
    assert "SIMULATED GPU 1" in text_of(dash.gpu_heading.text)

    dash.summary.selected.indices = [1]  # the user clicks the older run's row
    assert text_of(dash.verdict.text).startswith("Verdict on run old (numpy, preset "
                                                 "densedemo; selected in the table): ")
    assert "SIMULATED GPU 0: NVIDIA H200" in text_of(dash.gpu_heading.text)
    assert dash.timeline is not None and dash.timeline.gpu_filter is not None
    assert dash.timeline.gpu_filter.active == [0]


# ---- 4. one meaning per word --------------------------------------------------------------

def test_throughput_is_examples_and_samples_are_only_gpu_readings(tmp_path: Path) -> None:
    titles = list(SUMMARY_COLUMNS.values())
    assert "examples/s" in titles and not any("sample" in title for title in titles)
    dash = dashboard(tmp_path, Clock(T0 + 20))
    glossary = next(c for c in dash.root.children if c.name == "workload-glossary").text
    assert "<b>samples</b> (in a verdict): GPU readings" in glossary
    assert "<b>examples/s</b>: training examples" in glossary
    write(tmp_path / "r1.jsonl", start("r1", T0), event("warmup_end", T0 + 1),
          *timed("r1", 1, 5, T0 + 1),
          event("end", T0 + 2, iterations=5, median_ms=80.0, samples_per_s=3200.0,
                interrupted=False))
    dash.service.watcher.poll()
    dash.refresh()
    assert dash.summary.data["examples_per_s"] == [3200.0]
    assert "samples_per_s" not in dash.summary.data


# ---- 5. a preset column, one ms axis per preset ----------------------------------------

def test_each_preset_gets_its_own_chart_and_the_table_a_preset_column(tmp_path: Path) -> None:
    dash = dashboard(tmp_path, Clock(T0 + 50))
    assert [child.name for child in dash.steps.children] == ["workload-empty"]
    for name, preset, begin in (("a", "ci", T0), ("b", "densedemo", T0 + 10),
                                ("c", "ci", T0 + 20)):
        write(tmp_path / f"{name}.jsonl", start(name, begin, preset=preset, iterations=5),
              event("warmup_end", begin + 1, name), *timed(name, 1, 5, begin + 1))
    dash.service.watcher.poll()
    dash.refresh()
    assert SUMMARY_COLUMNS["preset"] == "preset"
    assert dash.summary.data["preset"] == ["ci", "densedemo", "ci"]  # newest first
    assert dash.summary.data["iterations"] == ["5 of 5"] * 3  # the limit, N, shown
    assert set(dash.step_charts) == {"ci", "densedemo"}
    ci, dense = dash.step_charts["ci"], dash.step_charts["densedemo"]
    assert list(dash.steps.children) == [ci, dense]
    assert ci.y_range is not dense.y_range  # milliseconds of different presets never mix
    assert "preset ci, batch 256" in ci.title.text
    assert len(dash.iterations["ci"].data["ms"]) == 10
    assert len(dash.iterations["densedemo"].data["ms"]) == 5
    assert dash.count.title == "timed iterations (max 100,000)"


# ---- 6. the judged GPU's timeline, never the mean of all GPUs -----------------------------

def test_the_gpu_charts_show_each_gpu_and_follow_the_judged_one(tmp_path: Path) -> None:
    feed = workload_feed(metrics(2))
    labels = {series.label for series in feed.series}
    assert labels == {"GPU 0", "GPU 1"} and {series.gpu for series in feed.series} == {0, 1}
    assert not any("mean" in panel.title or "all GPUs" in series.label
                   for panel in feed.panels for series in panel.series)
    assert not hasattr(page, "mean_utilization")

    dash = dashboard(tmp_path, Clock(T0 + 5))
    assert dash.timeline is not None and dash.timeline.gpu_filter is not None
    assert dash.timeline.gpu_filter.active == [0, 1]  # no run yet: every GPU, one colour each
    assert text_of(dash.gpu_heading.text).startswith("GPU charts: every GPU, one colour each")
    write(tmp_path / "r1.jsonl", start("r1", T0, facts=dash.metrics.facts))
    dash.service.watcher.poll()
    dash.refresh()
    assert dash.timeline.gpu_filter.active == [1]
    assert text_of(dash.gpu_heading.text) == (
        "GPU charts: SIMULATED GPU 1: NVIDIA H200, the GPU run r1 is judged on (the buttons "
        "show the others)")


def test_the_parser_takes_warm_up_steps() -> None:
    good = event("warmup_step", T0, step=2, ms=3.5)
    assert parse_event(json.dumps(good)) == {**good}
    for bad in ({**good, "step": 0}, {**good, "step": None}, {**good, "step": True},
                {**good, "ms": -1}):
        assert parse_event(json.dumps(bad)) is None, bad


# ---- issue 44: the default run is judged, a CPU run says what it is compared with ---------

def test_before_start_the_panel_says_how_long_a_judged_run_takes(tmp_path: Path) -> None:
    """The default run (ci, 200 iterations) timed 0.2 s and ended "not enough samples: 3 of
    5" (issue 44). The panel offers enough iterations for the ci preset, says before Start
    how long a timed part must last at this server's interval, and once a run like the one
    asked for has finished, whether the iterations asked for last that long at its pace."""
    clock = Clock(T0 + 100)
    dash = dashboard(tmp_path, clock)
    interval = dash.metrics.interval_s
    assert dash.preset.value == "ci" and dash.count.value == page.PANEL_ITERATIONS["ci"]
    hint = text_of(dash.hint.text)
    # The device offered first here is the CPU: its run also needs 3 readings of the
    # driver's process lists, one a second, to tell whether it used a GPU.
    assert dash.device.value == "cpu"
    assert (f"A verdict needs a timed part of 3 s or more (5 GPU samples, one every "
            f"{interval:g} s, and 3 readings of the driver's process lists, one every 1 s; "
            "start-up and warm-up are not judged).") in hint, hint
    # A numpy ci run on the CPU that stepped 10 ms apart: 100 steps time about 1 s.
    write(tmp_path / "done.jsonl", start("done", T0, iterations=100, gpu=None),
          event("warmup_end", T0 + 1, "done"), *timed("done", 1, 100, T0 + 1, step_s=0.01),
          event("end", T0 + 3, "done", iterations=100, median_ms=10.0, interrupted=False))
    dash.service.watcher.poll()
    dash.path.value, dash.device.value = "numpy", "cpu"
    dash.count.value = 20
    hint = text_of(dash.hint.text)
    pace_ms = 1000 * 1.0 / 100  # warm-up end to the last step, over 100 steps
    assert (f"at the pace of the last numpy ci cpu run ({pace_ms:.2f} ms an iteration), 20 "
            f"iterations time about 0.2 s: too short: ask for "
            f"{page.iterations_judged(pace_ms / 1000, interval, 'cpu'):,} or more.") in hint, hint
    dash.count.value = page.PANEL_ITERATIONS["ci"]
    assert text_of(dash.hint.text).endswith(": enough.")
    dash.preset.value = "densedemo"  # its steps are long: the panel offers fewer
    assert dash.count.value == page.PANEL_ITERATIONS_OTHERWISE


def test_a_cpu_run_says_what_it_is_compared_with_instead_of_n_a(tmp_path: Path) -> None:
    """A CPU run was judged on GPU 0 and its GPU columns read n/a (issue 44): they say it
    is a CPU run, the verdict says what the run is checked against, and vs native says
    when there is no native run to compare it with."""
    clock = Clock(T0 + 100)
    dash = dashboard(tmp_path, clock)
    facts = dash.metrics.facts
    write(tmp_path / "cpu.jsonl", start("cpu", T0, gpu=0, facts=facts),
          event("warmup_end", T0 + 1, "cpu"), *timed("cpu", 1, 6, T0 + 1),
          event("end", T0 + 2, "cpu", iterations=6, median_ms=80.0, interrupted=False))
    dash.service.watcher.poll()
    dash.refresh()
    [row] = dash._rows
    for column in page.GPU_COLUMNS:
        assert row[column] == "CPU run", (column, row)
    assert row["speedup"] == "no native run"
    table = dash.summary.data
    assert not {"n/a", "not available"} & {table[key][0] for key in SUMMARY_COLUMNS}, table


def test_the_time_axis_follows_the_shown_run_and_the_table_fits_the_page(
        tmp_path: Path) -> None:
    """A 1-second run was a stripe of points on a 10-minute axis, and the verdict column was
    cut at the page's right edge (issue 44): the page points its time axis at the shown
    run's timed part, and the table's columns shrink to fit its width."""
    clock = Clock(T0 + 100)
    dash = dashboard(tmp_path, clock)
    write(tmp_path / "short.jsonl", start("short", T0, gpu=None),
          event("warmup_end", T0 + 1, "short"), *timed("short", 1, 10, T0 + 1.1),
          event("end", T0 + 2.1, "short", iterations=10, median_ms=80.0, interrupted=False))
    dash.service.watcher.poll()
    dash.refresh()
    assert dash.run_span.tags == [(T0 + 1) * 1000, (T0 + 2.1) * 1000]
    assert dash.table.autosize_mode == "force_fit"
