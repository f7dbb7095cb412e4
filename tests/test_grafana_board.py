"""The Grafana board shipped in the package (``export/grafana_board.json``, issues 46, 54).

Its JSON model: Grafana's variables (no name-set choice: every per-GPU query asks for DCGM
4.7's name or, per GPU, the classic one), clock-event reasons in words, a "no data" text on
every panel that needs the opt-in per-user series, and panels whose queries group by no
label the exporter does not already send. Then Debian's Prometheus scrapes dashboard servers
standing for users on three hosts (the simulated host names ``alpha``, ``beta`` and
``gamma``), while a script plays on each: on alpha a process holds 4 GiB of GPU 0 and does no
GPU work, on an idle GPU; on beta a process holds 2 GiB of GPU 1 and works, on a GPU that
computes; on gamma a process holds 3 GiB of GPU 0, idle. Alpha serves the classic names
with the per-user series, beta DCGM 4.7's with them, gamma both name sets without them.
Three Prometheus servers see three fleets: alpha alone (classic only), beta alone (DCGM 4.7
only), and all three (mixed). Every panel, its query run through Prometheus' HTTP API with
the board's own variables and nobody choosing a name set, must give each host's GPUs once
and the values the script implies, gamma's per-user panels falling back to its GPUs; and
NVIDIA's own board must still fill from alpha under the classic names.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.metrics.health import CLOCK_EVENT_REASONS
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
RATE_INTERVAL = "5s"  # Grafana's $__rate_interval for a 1 s scrape interval
PER_GPU = ("GPU activity", "GPU memory used", "Power", "Temperature", "Clock events")
PER_USER = ("GPU memory held (GiB·h)", "GPU memory held while idle (GiB·h)",
            "Share of held time the GPU worked", "GPUs held but unused",
            "Top idle holders (GPU-hours held without GPU work)")
# The per-user panels that fall back to the per-GPU series on a host without per-user ones.
FALLS_BACK = set(PER_USER) - {"GPU memory held while idle (GiB·h)"}
# nvml.h's reason bits, in the words the health page uses (before its ":"), and 0 for none.
REASON_WORDS = {0: "none: full speed"} | {bit: text.split(":")[0]
                                          for bit, text, _ in CLOCK_EVENT_REASONS}


def panels() -> dict[str, str]:
    """Each panel's title and query (rows hold none)."""
    out = {}
    for panel in BOARD["panels"]:
        if panel["type"] != "row":
            [target] = panel["targets"]
            out[panel["title"]] = target["expr"]
    return out


def panel(title: str) -> dict:
    return next(p for p in BOARD["panels"] if p["title"] == title)


def variable(name: str) -> dict:
    return next(v for v in BOARD["templating"]["list"] if v["name"] == name)


def test_the_board_is_grafanas_json_model_and_needs_no_name_set_choice() -> None:
    names = {v["name"] for v in BOARD["templating"]["list"]}
    assert names == {"datasource", "hostname", "gpu", "step", "idle_after"}
    assert variable("datasource")["query"] == "prometheus"
    for name in ("hostname", "gpu"):
        assert variable(name)["type"] == "query" and variable(name)["includeAll"]
    assert set(panels()) == {*PER_GPU, "Why each GPU is slow", *PER_USER}
    for title, expr in panels().items():
        assert "$names" not in expr, title  # nothing for an admin to choose
        grouped = re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr)
        labels = {label.strip() for group in grouped for label in group.split(",") if label}
        assert labels <= EXPORTED_LABELS, (title, labels - EXPORTED_LABELS)
    assert all(p["datasource"]["uid"] == "${datasource}" for p in BOARD["panels"]
               if p["type"] != "row")


def test_clock_event_reasons_are_words_and_opt_in_panels_say_what_they_need() -> None:
    clocks = panel("Clock events")
    [mapping] = clocks["fieldConfig"]["defaults"]["mappings"]
    assert mapping["type"] == "value"
    assert {int(value): option["text"] for value, option in mapping["options"].items()} == \
        REASON_WORDS
    assert "{{reason}}" in clocks["targets"][0]["legendFormat"]
    for title in PER_USER:
        text = panel(title)["fieldConfig"]["defaults"].get("noValue", "")
        assert "--metrics-per-user N" in text, title
        assert ("show each GPU" in text) == (title in FALLS_BACK), title
    for title in (*PER_GPU, "Why each GPU is slow"):
        assert "nvdashboard_user_" not in panels()[title], title


def hosts_and_gpus(base: str) -> dict[str, str]:
    hosts = api(base, "label/hostname/values", **{"match[]": "nvdashboard_gpu_unused_seconds"})
    gpus = api(base, "label/gpu/values", **{"match[]": "nvdashboard_gpu_unused_seconds"})
    return {"hostname": grafana_regex(hosts), "gpu": grafana_regex(gpus)}


def run_board(base: str, at: str) -> dict[str, list[dict]]:
    """Every panel's answer at ``at`` with the board's variables as they come: every host
    and GPU, a 1 s scrape interval, IDLE_AFTER_S."""
    variables = {**hosts_and_gpus(base), "step": "1", "idle_after": str(IDLE_AFTER_S),
                 "__range": RANGE, "__rate_interval": RATE_INTERVAL}
    assert "1" in {o["value"] for o in variable("step")["options"]}
    return {title: api(base, "query", query=substitute(expr, variables), time=at)["result"]
            for title, expr in panels().items()}


def values(answer: list[dict], *labels: str) -> dict[tuple[str, ...], float]:
    out = {}
    for s in answer:
        key = tuple(s["metric"].get(label, "") for label in labels)
        assert key not in out, (labels, key, answer)  # each key once
        out[key] = float(s["value"][1])
    return out


def raw(base: str, query: str, at: str) -> dict[tuple[str, str], float]:
    return values(api(base, "query", query=query, time=at)["result"], "hostname", "gpu")


# host -> (name set, per-user series, GPU held, bytes held, the holder's SM %, scenario,
# profile). Alpha and gamma: GPM on both GPUs (NVIDIA's board has a tensor panel); beta: the
# mixed machine, whose GPU 1 has none (the activity panel falls back to utilization there).
HOSTS = {"alpha": ("classic", True, 0, 4 * GIB, 0, "idle", "h200"),
         "beta": ("dcgm47", True, 1, 2 * GIB, 80, "compute-bound", "mixed"),
         "gamma": ("both", False, 0, 3 * GIB, 0, "idle", "h200")}
FLEETS = {"classic only": ("alpha",), "dcgm47 only": ("beta",),
          "mixed": ("alpha", "beta", "gamma")}


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus package")
def test_every_panel_fills_from_classic_dcgm47_and_mixed_fleets(tmp_path: Path) -> None:
    common = ["--simulate", "2", "--metrics", "--interval", "0.5", "--idle-interval", "0.5"]
    with ExitStack() as stack:
        targets = {}
        for host, (name_set, per_user, gpu, held, sm_pct, scenario, profile) in HOSTS.items():
            holder = subprocess.Popen(["sleep", "600"])
            stack.callback(holder.wait)
            stack.callback(holder.kill)
            listing = tmp_path / f"processes-{host}.json"
            listing.write_text(json.dumps([{"gpu": gpu, "pid": holder.pid,
                                            "used_memory_bytes": held, "sm_pct": sm_pct,
                                            "until_exit": True}]))
            env = {"NVDASHBOARD_SIMULATE_HOST": host,
                   "NVDASHBOARD_SIMULATE_PROCESSES": str(listing),
                   "NVDASHBOARD_SIMULATE_SCENARIO": scenario,
                   "NVDASHBOARD_SIMULATE_PROFILE": profile}
            args = [*common, "--metrics-names", name_set,
                    *(["--metrics-per-user", "20"] if per_user else [])]
            url, _ = stack.enter_context(cli_server(args, env=env))
            targets[host] = urllib.parse.urlsplit(url).netloc
        bases = {}
        for fleet, hosts in FLEETS.items():
            folder = tmp_path / fleet.replace(" ", "-")
            folder.mkdir()
            bases[fleet] = stack.enter_context(
                prometheus(folder, *(targets[host] for host in hosts)))
        for fleet, base in bases.items():
            check_fleet(fleet, base, FLEETS[fleet])
        check_nvidia_board(bases["mixed"], targets["alpha"], 2)


def settled(base: str, hosts: tuple[str, ...], seen: list) -> bool:
    """Every host scraped with its holder judged: alpha's and gamma's idle longer than
    IDLE_AFTER_S (their idle-held time counted over two scrapes), beta's working, every
    holder's memory counted, and each GPU's diagnosis past a young server's first seconds
    (alpha's and gamma's GPU 1, which nobody holds, idle; beta's GPU 1 not). ``seen`` keeps
    the last look, for the message if it never holds."""
    try:
        unused = values(api(base, "query", query="nvdashboard_gpu_unused_seconds")["result"],
                        "hostname", "gpu")
        causes = values(api(base, "query", query="nvdashboard_gpu_diagnosis == 1")["result"],
                        "hostname", "gpu", "cause")
        counted = values(api(base, "query", query="sum by (hostname) (increase("
                             "nvdashboard_gpu_idle_held_seconds_total[1m]))")["result"],
                         "hostname")
        held = values(api(base, "query", query="sum by (hostname) (increase("
                          "nvdashboard_gpu_memory_held_byte_seconds_total[1m]))")["result"],
                      "hostname")
        user_idle = values(api(base, "query", query="nvdashboard_user_gpu_idle_seconds")
                           ["result"], "hostname", "gpu")
    except OSError:
        return False  # Prometheus not listening yet
    seen[:] = [unused, causes, counted, held, user_idle]
    idle_hosts = [host for host in hosts if HOSTS[host][5] == "idle"]
    return (all(unused.get((host, str(HOSTS[host][2])), 0.0) > IDLE_AFTER_S + 1
                and counted.get((host,), 0.0) > 0 and (host, "1", "idle") in causes
                for host in idle_hosts)
            and all(user_idle.get((host, str(HOSTS[host][2])), 0.0) > IDLE_AFTER_S + 1
                    for host in idle_hosts if HOSTS[host][1])
            and ("beta" not in hosts or (user_idle.get(("beta", "1")) == 0.0
                                         and ("beta", "1", "idle") not in causes))
            and len({key[:2] for key in causes}) == 2 * len(hosts)
            and all(held.get((host,), 0.0) > 0 for host in hosts))


def check_fleet(fleet: str, base: str, hosts: tuple[str, ...]) -> None:
    seen: list = []
    try:
        until(lambda: settled(base, hosts, seen), f"{fleet}: every host scraped and its "
              "holder judged", seconds=120, every_s=0.5)
    except AssertionError as error:
        raise AssertionError(f"{error}; last seen: {seen}") from None
    at = str(float(api(base, "query", query="time()")["result"][1]))
    board = run_board(base, at)
    every_gpu = {(h, g) for h in hosts for g in ("0", "1")}

    # Per GPU: every host's GPUs once, whichever names it serves (gamma serves both).
    for title in PER_GPU[:4]:
        assert set(values(board[title], "hostname", "gpu")) == every_gpu, (fleet, title)
    # ... in the board's units (bytes, ratios), converted from each set's own unit; a host
    # serving both names answers with DCGM 4.7's.
    memory = values(board["GPU memory used"], "hostname", "gpu")
    assert memory == {**{k: v * 2**20 for k, v in raw(base, "DCGM_FI_DEV_FB_USED", at).items()},
                      **raw(base, "DCGM_FI_DEV_FB_USED_BYTES", at)}, fleet
    for host in hosts:
        _, _, gpu, held, _, _, _ = HOSTS[host]
        assert memory[(host, str(gpu))] >= held, (fleet, host, memory)
    activity = values(board["GPU activity"], "hostname", "gpu")
    # GPM's SM activity where the GPU has GPM, else utilization (beta's GPU 1 has no GPM).
    sm = {**raw(base, "DCGM_FI_PROF_SM_ACTIVE", at),
          **raw(base, "DCGM_FI_PROF_SM_UTIL_RATIO", at)}
    util = {**{k: v / 100 for k, v in raw(base, "DCGM_FI_DEV_GPU_UTIL", at).items()},
            **raw(base, "DCGM_FI_DEV_GPU_UTIL_RATIO", at)}
    assert activity == {k: sm.get(k, util.get(k)) for k in every_gpu}, fleet
    assert set(util) - set(sm) == ({("beta", "1")} if "beta" in hosts else set())
    for (host, _), value in activity.items():
        scenario = HOSTS[host][5]
        assert value == 0.0 if scenario == "idle" else 0.5 < value <= 1.0, (fleet, activity)
    temperature = values(board["Temperature"], "hostname", "gpu")
    assert temperature == {**raw(base, "DCGM_FI_DEV_GPU_TEMP", at),
                           **raw(base, "DCGM_FI_DEV_GPU_TEMP_CELSIUS", at)}, fleet
    power = values(board["Power"], "hostname", "gpu")
    assert all(v > 0 for v in power.values()), power
    if "beta" in hosts and len(hosts) > 1:
        assert max(power[k] for k in every_gpu if k[0] != "beta") < \
            min(power[k] for k in every_gpu if k[0] == "beta"), power
    # Clock events: each GPU's reasons in words, one series per reason its bitmask holds.
    masks = {**raw(base, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", at),
             **raw(base, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", at)}
    assert set(masks) == every_gpu, (fleet, masks)
    reasons = values(board["Clock events"], "hostname", "gpu", "reason")
    wanted = {(*gpu, REASON_WORDS[bit]): float(bit) for gpu, mask in masks.items()
              for bit in REASON_WORDS if (bit and int(mask) & bit) or (not bit and not mask)}
    assert reasons == wanted, (fleet, reasons, masks)
    assert {key[:2] for key in reasons} == every_gpu  # every GPU says something, in words
    # The diagnosis gauge keeps its name in every set.
    causes = values(board["Why each GPU is slow"], "hostname", "gpu", "cause")
    assert {key[:2] for key in causes} == every_gpu, fleet

    # Per user where the host sends the per-user series; per GPU (gamma) where it does not.
    user_hosts = {host for host in hosts if HOSTS[host][1]}
    fallback_hosts = set(hosts) - user_hosts
    for title in FALLS_BACK:
        answer = board[title]
        by_user = {s["metric"]["hostname"] for s in answer if "user" in s["metric"]}
        by_gpu = {s["metric"]["hostname"] for s in answer if "gpu" in s["metric"]}
        assert by_user <= user_hosts and by_gpu <= fallback_hosts, (fleet, title, answer)
    held = values(board["GPU memory held (GiB·h)"], "hostname", "kernel", "gpu")
    assert {key[0] for key in held} == set(hosts), held
    assert all(held[(host, "", "")] > 0 for host in user_hosts), held
    for host in fallback_hosts:  # every GPU of the host, the held one above 0
        assert {key[2] for key in held if key[0] == host} == {"0", "1"}, held
        assert held[(host, "", str(HOSTS[host][2]))] > 0, held
    idle_held = values(board["GPU memory held while idle (GiB·h)"], "hostname", "kernel")
    # Only the per-user hosts whose holder idled (no per-GPU series measures it; beta's
    # worked throughout: nothing held while idle).
    assert set(idle_held) == {(host, "") for host in user_hosts if HOSTS[host][5] == "idle"}
    assert all(value > 0 for value in idle_held.values()), idle_held
    worked = values(board["Share of held time the GPU worked"], "hostname", "kernel", "gpu")
    for (host, _, _), share in worked.items():
        assert (share == 1.0) if HOSTS[host][5] != "idle" else share < 0.5, worked
    assert {key[0] for key in worked} == set(hosts), worked
    unused = values(board["GPUs held but unused"], "hostname", "user")
    idle_hosts = {host for host in hosts if HOSTS[host][5] == "idle"}
    assert {key[0] for key in unused} == idle_hosts and set(unused.values()) <= {1.0}, unused
    assert all((key[1] != "") == (key[0] in user_hosts) for key in unused), unused
    top = values(board["Top idle holders (GPU-hours held without GPU work)"], "hostname",
                 "user", "gpu")
    assert {key[0] for key in top} == idle_hosts and all(v > 0 for v in top.values()), top
