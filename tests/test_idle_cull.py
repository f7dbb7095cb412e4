"""The GPU-aware cull's rule, its settings and what a client may post, as tables: each case
is a kernel's ``idle`` object shaped as ``/glance.json`` serves it, Jupyter's own execution
state and last activity, and the time since the user was told. The sequences of readings in
tests/support/idle_warning_sequences.json drive the ``IdleCuller`` here and JupyterLab's
``IdleNotifier`` in src/__tests__/idleNotice.spec.ts: the warning is armed exactly while it
is on screen. The cull in a real Jupyter with real kernels is in
test_browser_lab_idle_cull.py."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyterlab_nvdashboard.config import (
    ConfigError,
    CullSettings,
    cull_settings,
)
from jupyterlab_nvdashboard.idle_cull import (
    GIB,
    CullPolicy,
    IdleCuller,
    Notice,
    kernel_from_body,
    notice_from_body,
    why_kept,
)

POLICY = CullPolicy(after_notice_s=600.0, idle_s=1800.0, min_held_bytes=GIB)
NOW = 10_000.0
EPISODE = "k1:5000"
TOLD = Notice("k1", EPISODE, NOW - 601.0, NOW - 5.0)
ACTIVE = NOW - 3000.0  # Jupyter's last activity of the kernel: before the notice
SEQUENCES = json.loads((Path(__file__).parent / "support" /
                        "idle_warning_sequences.json").read_text())


def idle(state: str = "idle", episode: str = EPISODE, idle_s: float | None = 2400.0,
         held_bytes: float = 38 * GIB) -> dict:
    return {"state": state, "signal": "per-process SM samples", "held_bytes": held_bytes,
            "gpus": ["GPU 1"], "idle_s": idle_s, "episode": episode,
            "figures": {"max_sm_pct": 0, "samples": 120},
            "text": "Untitled3.ipynb holds 38 GiB on GPU 1 and has done no GPU work for "
                    "40 min."}


def test_an_idle_holder_told_long_enough_ago_is_culled() -> None:
    assert why_kept(POLICY, TOLD, idle(), "idle", ACTIVE, NOW) is None


@pytest.mark.parametrize(("policy", "notice", "judgment", "execution_state", "why"), [
    (CullPolicy(None, 1800.0, GIB), TOLD, idle(), "idle", "the cull is off"),
    (POLICY, None, idle(), "idle", "not told"),
    (POLICY, Notice("k1", EPISODE, NOW - 599.0, NOW), idle(), "idle", "told 599 s ago"),
    (POLICY, Notice("k1", EPISODE, NOW - 900.0, NOW - 600.0), idle(), "idle",
     "not reported on screen for 600 s"),
    (POLICY, TOLD, idle(state="busy", idle_s=None), "idle", "works again"),
    (POLICY, TOLD, idle(state="cannot_tell", idle_s=None), "idle", "'cannot_tell'"),
    (POLICY, TOLD, idle(episode="k1:9000"), "idle", "another idle episode"),
    (POLICY, TOLD, idle(idle_s=1700.0), "idle", "needs 1800 s"),
    (POLICY, TOLD, idle(held_bytes=0.5 * GIB), "idle", "the cull needs"),
    (POLICY, TOLD, idle(), "busy", "'busy'"),
    (POLICY, TOLD, idle(), "starting", "'starting'"),
    (POLICY, TOLD, None, "idle", "no GPU memory"),
    (POLICY, TOLD, idle(), None, "not a kernel of this Jupyter server"),
    (POLICY, TOLD, {"state": "idle", "episode": EPISODE, "idle_s": "long"}, "idle",
     "no GPU work for 0 s"),
])
def test_the_cull_keeps_a_kernel_unless_every_condition_holds(
        policy: CullPolicy, notice: Notice | None, judgment: dict | None,
        execution_state: str | None, why: str) -> None:
    kept = why_kept(policy, notice, judgment, execution_state, ACTIVE, NOW)
    assert kept is not None and why in kept, kept


@pytest.mark.parametrize(("last_activity", "why"), [
    (None, "when the kernel last ran a cell"),
    (NOW - 60.0, "ran a cell since the user was told"),
])
def test_the_cull_reads_jupyters_own_activity_not_the_served_copy(
        last_activity: float | None, why: str) -> None:
    # The served judgment says idle for 40 min; Jupyter's kernel manager knows better.
    kept = why_kept(POLICY, TOLD, idle(), "idle", last_activity, NOW)
    assert kept is not None and why in kept, kept


class FakeKernel:
    def __init__(self) -> None:
        self.execution_state = "idle"
        self.last_activity: datetime | None = datetime.fromtimestamp(0, timezone.utc)


class FakeKernelManager:
    """The parts of Jupyter's ``MappingKernelManager`` the cull uses."""

    def __init__(self, *ids: str) -> None:
        self.kernels = {kernel_id: FakeKernel() for kernel_id in ids}

    def __contains__(self, kernel_id: object) -> bool:
        return kernel_id in self.kernels

    def get_kernel(self, kernel_id: str) -> FakeKernel:
        return self.kernels[kernel_id]

    async def shutdown_kernel(self, kernel_id: str) -> None:
        del self.kernels[kernel_id]


@pytest.mark.parametrize("sequence", SEQUENCES["sequences"], ids=lambda s: s["name"])
def test_the_warning_is_armed_while_on_screen_and_the_cull_waits_a_whole_grace(
        sequence: dict[str, Any]) -> None:
    """The server's side of the shared sequences: a JupyterLab reports each warning it has
    on screen at every reading (and shows one for an idle reading); the server holds the
    warning armed exactly while the table says it is on screen, and culls where it says."""
    policy = CullPolicy(**SEQUENCES["policy"])
    start = 1_000_000.0
    clock = [start]
    reading: dict[str, Any] = {}
    kernels = FakeKernelManager("k1")

    async def read_glance() -> dict[str, Any]:
        return reading

    culler = IdleCuller(policy, kernels, read_glance, logging.getLogger("test"),
                        clock=lambda: clock[0])
    for step in sequence["steps"]:
        clock[0] = start + step["t"]
        judgment = None if step["idle"] is None else {
            **idle(), **step["idle"], "held_bytes": 4 * GIB}
        reading.clear()
        reading["kernels"] = [] if judgment is None else [
            {"kernel_id": "k1", "path": "x.ipynb", "idle": judgment}]
        if step.get("action") == "keep":
            assert culler.keep("k1") == pytest.approx(clock[0] + policy.keep_s)
        elif step.get("page") != "closed" and "k1" in kernels and (
                "k1" in culler.notices or (judgment or {}).get("state") == "idle"):
            episode = culler.notices["k1"].episode if "k1" in culler.notices \
                else judgment["episode"]  # type: ignore[index]
            culler.record_notice("k1", episode)
        asyncio.run(culler.check())
        armed = [w["kernel_id"] for w in culler.state()["warnings"]]
        culled = [c["kernel_id"] for c in culler.culls]
        assert (armed == ["k1"], culled == ["k1"]) == (step["warning"], step["culled"]), \
            (step, culler.state())
        if culled:
            assert culler.culls[0]["told_s_ago"] >= policy.after_notice_s


def test_the_cull_is_off_unless_an_admin_sets_it() -> None:
    assert cull_settings({}) == CullSettings(None, 30.0, 1.0)
    assert not CullPolicy.from_settings(cull_settings({})).on
    assert not CullPolicy.from_settings(
        cull_settings({"NVDASHBOARD_CULL_AFTER_MINUTES": "0"})).on
    policy = CullPolicy.from_settings(cull_settings({
        "NVDASHBOARD_CULL_AFTER_MINUTES": "15", "NVDASHBOARD_CULL_IDLE_MINUTES": "60",
        "NVDASHBOARD_CULL_MIN_GIB": "4"}))
    assert policy == CullPolicy(900.0, 3600.0, 4 * GIB)
    assert policy.check_interval_s == 60.0
    # Seconds, for tests: checked every second.
    short = CullPolicy.from_settings(cull_settings({"NVDASHBOARD_CULL_AFTER_MINUTES": "0.05"}))
    assert short.after_notice_s == pytest.approx(3.0) and short.check_interval_s == 1.0


@pytest.mark.parametrize("environ", [
    {"NVDASHBOARD_CULL_AFTER_MINUTES": "soon"},
    {"NVDASHBOARD_CULL_AFTER_MINUTES": "-1"},
    {"NVDASHBOARD_CULL_AFTER_MINUTES": "nan"},
    {"NVDASHBOARD_CULL_IDLE_MINUTES": "1e12"},
    {"NVDASHBOARD_CULL_MIN_GIB": "lots"},
])
def test_a_bad_cull_setting_is_one_line(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as raised:
        cull_settings(environ)
    assert "\n" not in str(raised.value) and "NVDASHBOARD_CULL_" in str(raised.value)


def test_a_kept_kernel_is_told_the_time_and_not_armed_meanwhile() -> None:
    kernels = FakeKernelManager("k1")
    clock = [100.0]

    async def read_glance() -> dict[str, Any]:
        return {}

    culler = IdleCuller(POLICY, kernels, read_glance, logging.getLogger("test"),
                        clock=lambda: clock[0])
    assert culler.record_notice("k1", EPISODE) == 100.0 + POLICY.after_notice_s
    assert culler.keep("k1") == 100.0 + POLICY.keep_s == 100.0 + POLICY.idle_s
    assert culler.record_notice("k1", EPISODE) is None and culler.state()["warnings"] == []
    clock[0] += POLICY.keep_s
    assert culler.record_notice("k1", EPISODE) == clock[0] + POLICY.after_notice_s
    assert kernel_from_body({"kernel_id": "k1"}) == "k1"
    assert kernel_from_body({"kernel_id": 3}) is None and kernel_from_body("k1") is None


@pytest.mark.parametrize(("body", "expected"), [
    ({"kernel_id": "k1", "episode": "k1:5000"}, ("k1", "k1:5000")),
    ({"kernel_id": "k1"}, None),
    ({"kernel_id": 1, "episode": "e"}, None),
    ({"kernel_id": "", "episode": "e"}, None),
    ({"kernel_id": "k" * 201, "episode": "e"}, None),
    (["k1", "e"], None),
    (None, None),
])
def test_a_posted_notice_is_two_short_strings(body: object, expected: object) -> None:
    assert notice_from_body(body) == expected


def test_an_armed_warning_says_what_the_cull_waits_for() -> None:
    """``GET nvdashboard-idle/culls`` names, for each warning it holds armed, the rule its
    last check stopped at: an admin whose kernel is not shut down can see why."""
    clock = [NOW]
    kernels = FakeKernelManager("k1")
    reading = {"kernels": [{"kernel_id": "k1", "path": "x.ipynb", "idle": idle()}]}
    proxy_down = [False]

    async def read_glance() -> dict[str, Any]:
        if proxy_down[0]:
            raise OSError("proxy down")
        return reading

    culler = IdleCuller(POLICY, kernels, read_glance, logging.getLogger("test"),
                        clock=lambda: clock[0], last_execution=lambda kernel_id: ACTIVE)
    culler.record_notice("k1", EPISODE)
    [armed] = culler.state()["warnings"]
    assert armed["waiting_for"] is None  # no check yet
    clock[0] += 30.0
    culler.record_notice("k1", EPISODE)
    asyncio.run(culler.check())
    [armed] = culler.state()["warnings"]
    assert armed["waiting_for"] == "told 30 s ago, the cull waits 600 s"
    proxy_down[0] = True
    asyncio.run(culler.check())
    assert culler.state()["warnings"][0]["waiting_for"] == "the GPU judgment cannot be read"

