"""The Grafana board shipped in the package (``export/grafana_board.json``, issue 46).

Its JSON model: Grafana's variables (the name set among them), and panels whose queries
group by no label the exporter does not already send. Then Debian's Prometheus scrapes two
dashboard servers standing for two users on two hosts (the simulated host names ``alpha``
and ``beta``; the per-user series name this test's OS account on both), while a script
plays on each: on alpha a process holds 4 GiB of GPU 0 and does no GPU work, on an idle
GPU; on beta a process holds 2 GiB of GPU 1 and works, on a GPU that computes. Alpha
serves the classic names and beta DCGM 4.7's, as in a fleet halfway through an upgrade:
every panel, its query run through Prometheus' HTTP API with the board's own variables,
must give each host's GPUs under that host's name set and the values the script implies;
NVIDIA's own board must still fill from alpha under the classic names.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
from importlib import resources
from pathlib import Path

import pytest

from tests.support.grafana import check_nvidia_board, grafana_regex, substitute
from tests.support.prometheus import PROMETHEUS, api, prometheus
from tests.support.servers import cli_server
from tests.support.waiting import until

pytest.importorskip("prometheus_client")
BOARD = json.loads(resources.files("jupyterlab_nvdashboard.export")
                   .joinpath("grafana_board.json").read_text(encoding="utf-8"))
GIB = 2**30
# The labels /metrics sends on the series the board reads (DCGM's, the diagnosis' cause and
# the per-user series'): the board groups and matches by these and no other.
EXPORTED_LABELS = {"hostname", "gpu", "UUID", "GPU_I_ID", "user", "kernel", "cause"}
IDLE_AFTER_S = 3  # the board's idle_after variable, set as an admin would, for a short run
RANGE = "600s"  # Grafana's $__range: the dashboard's time range, in seconds


def panels() -> dict[str, str]:
    """Each panel's title and query (rows hold none)."""
    out = {}
    for panel in BOARD["panels"]:
        if panel["type"] != "row":
            [target] = panel["targets"]
            out[panel["title"]] = target["expr"]
    return out


def variable(name: str) -> dict:
    return next(v for v in BOARD["templating"]["list"] if v["name"] == name)


def test_the_board_is_grafanas_json_model_with_a_name_set_variable() -> None:
    names = variable("names")
    assert names["type"] == "custom"
    assert {(o["text"], o["value"]) for o in names["options"]} == {("classic", "0"),
                                                                    ("dcgm47", "1")}
    assert variable("datasource")["query"] == "prometheus"
    for name in ("hostname", "gpu"):
        assert variable(name)["type"] == "query" and variable(name)["includeAll"]
    titles = set(panels())
    assert {"GPU activity", "GPU memory used", "Power", "Temperature", "Clock events",
            "Why each GPU is slow", "GPU memory held (GiB·h)",
            "GPU memory held while idle (GiB·h)", "Share of held time the GPU worked",
            "GPUs held but unused",
            "Top idle holders (GPU-hours held without GPU work)"} == titles
    for title, expr in panels().items():
        grouped = re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr)
        labels = {label.strip() for group in grouped for label in group.split(",") if label}
        assert labels <= EXPORTED_LABELS, (title, labels - EXPORTED_LABELS)
    assert all(p["datasource"]["uid"] == "${datasource}" for p in BOARD["panels"]
               if p["type"] != "row")


def hosts_and_gpus(base: str) -> dict[str, str]:
    hosts = api(base, "label/hostname/values", **{"match[]": "nvdashboard_gpu_unused_seconds"})
    gpus = api(base, "label/gpu/values", **{"match[]": "nvdashboard_gpu_unused_seconds"})
    return {"hostname": grafana_regex(hosts), "gpu": grafana_regex(gpus)}


def run_board(base: str, names: str, at: str) -> dict[str, list[dict]]:
    """Every panel's answer at ``at`` with the board's variables: every host and GPU, the
    name set ``names`` (its option's value), a 1 s scrape interval, IDLE_AFTER_S."""
    choice = {o["text"]: o["value"] for o in variable("names")["options"]}[names]
    variables = {**hosts_and_gpus(base), "names": choice, "step": "1",
                 "idle_after": str(IDLE_AFTER_S), "__range": RANGE}
    assert "1" in {o["value"] for o in variable("step")["options"]}
    return {title: api(base, "query", query=substitute(expr, variables), time=at)["result"]
            for title, expr in panels().items()}


def values(answer: list[dict], *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(s["metric"].get(label, "") for label in labels): float(s["value"][1])
            for s in answer}


def raw(base: str, query: str, at: str) -> dict[tuple[str, str], float]:
    return values(api(base, "query", query=query, time=at)["result"], "hostname", "gpu")


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus package")
def test_every_panel_fills_from_two_hosts_under_classic_and_dcgm47(tmp_path: Path) -> None:
    alpha_holder = subprocess.Popen(["sleep", "600"])
    beta_holder = subprocess.Popen(["sleep", "600"])
    scripts = {"alpha": (alpha_holder, 0, 4 * GIB, 0), "beta": (beta_holder, 1, 2 * GIB, 80)}
    common = ["--simulate", "2", "--metrics", "--metrics-per-user", "20", "--interval", "0.5",
              "--idle-interval", "0.5"]
    try:
        servers = {}
        for host, (holder, gpu, held, sm_pct) in scripts.items():
            listing = tmp_path / f"processes-{host}.json"
            listing.write_text(json.dumps([{"gpu": gpu, "pid": holder.pid,
                                            "used_memory_bytes": held, "sm_pct": sm_pct,
                                            "until_exit": True}]))
            servers[host] = {"NVDASHBOARD_SIMULATE_HOST": host,
                             "NVDASHBOARD_SIMULATE_PROCESSES": str(listing),
                             "NVDASHBOARD_SIMULATE_SCENARIO":
                                 "idle" if host == "alpha" else "compute-bound",
                             # Alpha: GPM on both GPUs (NVIDIA's board has a tensor panel);
                             # beta: the mixed machine, whose GPU 1 has none (the activity
                             # panel falls back to utilization there).
                             "NVDASHBOARD_SIMULATE_PROFILE":
                                 "h200" if host == "alpha" else "mixed"}
        with cli_server([*common, "--metrics-names", "classic"], env=servers["alpha"]) \
                as (alpha, _), \
                cli_server([*common, "--metrics-names", "dcgm47"], env=servers["beta"]) \
                as (beta, _), \
                prometheus(tmp_path, *(urllib.parse.urlsplit(url).netloc
                                       for url in (alpha, beta))) as base:
            check_run(base, urllib.parse.urlsplit(alpha).netloc)
    finally:
        for holder in (alpha_holder, beta_holder):
            holder.kill()
            holder.wait()


def settled(base: str, seen: list) -> bool:
    """Both hosts scraped with their holders judged: alpha's idle longer than IDLE_AFTER_S
    (its idle-held time counted over two scrapes), beta's working, both holders' memory
    counted, and each GPU's diagnosis past a young server's first seconds (alpha's GPU 1,
    which nobody holds, idle; beta's GPU 1 not). ``seen`` keeps the last look, for the
    message if it never holds."""
    try:
        idle = values(api(base, "query", query="nvdashboard_user_gpu_idle_seconds")["result"],
                      "hostname", "gpu")
        causes = values(api(base, "query", query="nvdashboard_gpu_diagnosis == 1")["result"],
                        "hostname", "gpu", "cause")
        counted = values(api(base, "query", query="increase(nvdashboard_user_gpu_idle_held_"
                                                  "seconds_total[1m])")["result"], "hostname")
        held = values(api(base, "query", query="increase(nvdashboard_user_gpu_memory_held_"
                                               "byte_seconds_total[1m])")["result"], "hostname")
    except OSError:
        return False  # Prometheus not listening yet
    seen[:] = [idle, causes, counted, held]
    return (idle.get(("alpha", "0"), 0.0) > IDLE_AFTER_S + 1 and idle.get(("beta", "1")) == 0.0
            and ("alpha", "1", "idle") in causes and ("beta", "1", "idle") not in causes
            and len({key[:2] for key in causes}) == 4 and counted.get(("alpha",), 0.0) > 0
            and all(held.get((host,), 0.0) > 0 for host in ("alpha", "beta")))


def check_run(base: str, alpha_target: str) -> None:
    seen: list = []
    try:
        until(lambda: settled(base, seen), "both hosts scraped and their holders judged",
              seconds=120, every_s=0.5)
    except AssertionError as error:
        raise AssertionError(f"{error}; last seen: {seen}") from None
    at = str(float(api(base, "query", query="time()")["result"][1]))
    classic, dcgm47 = run_board(base, "classic", at), run_board(base, "dcgm47", at)
    every_gpu = {(h, g) for h in ("alpha", "beta") for g in ("0", "1")}
    alpha_gpus = {k for k in every_gpu if k[0] == "alpha"}
    beta_gpus = every_gpu - alpha_gpus

    # Per GPU: each host's GPUs under its own name set, nothing of the other's.
    for title in ("GPU activity", "GPU memory used", "Power", "Temperature", "Clock events"):
        assert set(values(classic[title], "hostname", "gpu")) == alpha_gpus, (title, classic)
        assert set(values(dcgm47[title], "hostname", "gpu")) == beta_gpus, (title, dcgm47)
    # ... in the board's units (bytes, ratios), converted from each set's own unit.
    memory = {**values(classic["GPU memory used"], "hostname", "gpu"),
              **values(dcgm47["GPU memory used"], "hostname", "gpu")}
    assert memory == {**{k: v * 2**20 for k, v in raw(base, "DCGM_FI_DEV_FB_USED", at).items()},
                      **raw(base, "DCGM_FI_DEV_FB_USED_BYTES", at)}
    assert memory[("alpha", "0")] >= 4 * GIB and memory[("beta", "1")] >= 2 * GIB
    activity = {**values(classic["GPU activity"], "hostname", "gpu"),
                **values(dcgm47["GPU activity"], "hostname", "gpu")}
    # GPM's SM activity where the GPU has GPM, else utilization (beta's GPU 1 has no GPM).
    sm = {**raw(base, "DCGM_FI_PROF_SM_ACTIVE", at), **raw(base, "DCGM_FI_PROF_SM_UTIL_RATIO", at)}
    util = {**{k: v / 100 for k, v in raw(base, "DCGM_FI_DEV_GPU_UTIL", at).items()},
            **raw(base, "DCGM_FI_DEV_GPU_UTIL_RATIO", at)}
    assert activity == {k: sm.get(k, util.get(k)) for k in every_gpu}
    assert set(util) - set(sm) == {("beta", "1")}
    assert all(activity[k] == 0.0 for k in alpha_gpus), activity  # the idle scenario
    assert all(0.5 < activity[k] <= 1.0 for k in beta_gpus), activity  # compute-bound
    temperature = {**values(classic["Temperature"], "hostname", "gpu"),
                   **values(dcgm47["Temperature"], "hostname", "gpu")}
    assert temperature == {**raw(base, "DCGM_FI_DEV_GPU_TEMP", at),
                           **raw(base, "DCGM_FI_DEV_GPU_TEMP_CELSIUS", at)}
    power = {**values(classic["Power"], "hostname", "gpu"),
             **values(dcgm47["Power"], "hostname", "gpu")}
    assert all(v > 0 for v in power.values()) and \
        max(power[k] for k in alpha_gpus) < min(power[k] for k in beta_gpus), power
    # The diagnosis gauge keeps its name in every set: the same answer under both.
    for answers in (classic, dcgm47):
        causes = values(answers["Why each GPU is slow"], "hostname", "gpu", "cause")
        assert {key[:2] for key in causes} == every_gpu
        assert ("alpha", "1", "idle") in causes and ("beta", "1", "idle") not in causes

    # Per user: the same in both sets (the project's own series), and what the script did.
    for title in ("GPU memory held (GiB·h)", "GPU memory held while idle (GiB·h)",
                  "Share of held time the GPU worked", "GPUs held but unused",
                  "Top idle holders (GPU-hours held without GPU work)"):
        assert classic[title] == dcgm47[title], title
    held = values(classic["GPU memory held (GiB·h)"], "hostname", "kernel")
    assert set(held) == {("alpha", ""), ("beta", "")} and all(v > 0 for v in held.values()), held
    idle_held = values(classic["GPU memory held while idle (GiB·h)"], "hostname", "kernel")
    assert idle_held.get(("alpha", ""), 0.0) > 0, idle_held
    assert idle_held.get(("beta", ""), 0.0) == 0.0, idle_held  # it worked throughout
    worked = values(classic["Share of held time the GPU worked"], "hostname", "kernel")
    assert worked[("beta", "")] == 1.0 and worked[("alpha", "")] < 0.5, worked
    unused = values(classic["GPUs held but unused"], "hostname", "user")
    assert [key[0] for key in unused] == ["alpha"] and list(unused.values()) == [1.0]
    top = values(classic["Top idle holders (GPU-hours held without GPU work)"], "hostname")
    assert list(top) == [("alpha",)] and top[("alpha",)] > 0

    # NVIDIA's board from dcgm-exporter still fills from the host that serves classic names.
    check_nvidia_board(base, alpha_target, 2)
