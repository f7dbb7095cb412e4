"""The GPU-aware cull's rule, its settings and what a client may post, as tables: each case
is a kernel's ``idle`` object shaped as ``/glance.json`` serves it, Jupyter's own execution
state and the time since the user was told. The cull in a real Jupyter with real kernels is
in test_lab_idle_cull.py."""

from __future__ import annotations

import pytest

from jupyterlab_nvdashboard.config import (
    ConfigError,
    CullSettings,
    cull_settings,
)
from jupyterlab_nvdashboard.idle_cull import (
    GIB,
    CullPolicy,
    Notice,
    notice_from_body,
    why_kept,
)

POLICY = CullPolicy(after_notice_s=600.0, idle_s=1800.0, min_held_bytes=GIB)
NOW = 10_000.0
EPISODE = "k1:5000"
TOLD = Notice("k1", EPISODE, NOW - 601.0)


def idle(state: str = "idle", episode: str = EPISODE, idle_s: float | None = 2400.0,
         held_bytes: float = 38 * GIB) -> dict:
    return {"state": state, "signal": "per-process SM samples", "held_bytes": held_bytes,
            "gpus": ["GPU 1"], "idle_s": idle_s, "episode": episode,
            "figures": {"max_sm_pct": 0, "samples": 120},
            "text": "Untitled3.ipynb holds 38 GiB on GPU 1 and has done no GPU work for "
                    "40 min."}


def test_an_idle_holder_told_long_enough_ago_is_culled() -> None:
    assert why_kept(POLICY, TOLD, idle(), "idle", NOW) is None


@pytest.mark.parametrize(("policy", "notice", "judgment", "execution_state", "why"), [
    (CullPolicy(None, 1800.0, GIB), TOLD, idle(), "idle", "the cull is off"),
    (POLICY, None, idle(), "idle", "not told"),
    (POLICY, Notice("k1", EPISODE, NOW - 599.0), idle(), "idle", "told 599 s ago"),
    (POLICY, TOLD, idle(state="busy", idle_s=None), "idle", "'busy'"),
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
    kept = why_kept(policy, notice, judgment, execution_state, NOW)
    assert kept is not None and why in kept, kept


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
