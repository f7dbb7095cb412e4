"""The admin's GPU idle cull with short timeouts, under a real ``jupyter lab`` (token,
base_url /user/alice/, the simulated ``a100-mig`` machine: GPUs 0 and 2 in MIG mode, GPUs 1
and 3 whole A100s) with real kernels the simulated driver lists, and in Chromium at
1280x800 for what the user sees:

- x.ipynb (GPU 1) and y.ipynb (GPU 3) hold GPU memory and do no GPU work; z.ipynb holds a
  MIG instance of GPU 0, where the driver gives neither per-process samples nor activity:
  the judgment cannot tell.
- While no JupyterLab is open nobody is told, and the cull shuts nothing down.
- The page warns of x and y (the user turned the notice off: the cull's warning comes
  anyway), never of z, each deadline first and readable whole, the server's own; y then
  runs a cell (busy in the grace time).
- x goes missing from the readings (the driver lists it no more) until the page has read
  one without it: its warning stays on screen (it used to go for good while the cull
  stayed armed).
- x is shut down through Jupyter's kernel manager only once its warning has been on screen
  for the whole grace (the page samples its toasts from the start), logged at WARNING with
  its evidence, and the page says what was done and why.
- y, busy since its notice, is kept; z is kept even with a notice posted for it, and "Keep
  this kernel" (its route) holds it off for the stated time.

Settings: ``NVDASHBOARD_CULL_AFTER_MINUTES=2``, ``NVDASHBOARD_CULL_IDLE_MINUTES=0``. The
acceptance's grace was 1 minute; in full runs on the 2-core machine, the steps between the
warnings and the cull (the warnings agreeing, x missing and back, y busy) took longer than
that, and x was shut down while they ran. Two minutes hold the same rule, with room.
It runs this checkout's build and, with ``PYTHONPATH`` naming this checkout, its server
extension. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.browser import chromium, screenshot, watch
from tests.support.idle_lab import (
    GIB,
    TOAST,
    judged,
    kernel_entry,
    place,
    run_cell,
    start_notebook,
    toasts_in_place,
    wait_glance,
    write_settings,
)
from tests.support.jupyter import lab_with_processes
from tests.support.waiting import until, until_ended
from tests.test_browser_lab import open_lab, show_sidebar
from tests.test_lab_processes import call

pytestmark = [pytest.mark.browser, pytest.mark.lab]
GRACE_S = 120.0
WARNING = re.compile(r"^Shut down at (\d\d:\d\d:\d\d(?: [AP]M)?) if it stays idle: "
                     r"(\w)\.ipynb holds 4\.0 GiB on GPU \d[^,]*, no GPU work for \d+ (s|min)\.$")
# Samples, from the page's first script on, whether x's warning is on screen.
SAMPLE_X_WARNING = """
window.__xWarning = [];
setInterval(() => window.__xWarning.push([Date.now(), [...document.querySelectorAll(
  '.Toastify__toast')].some(t => t.textContent.includes('x.ipynb holds'))]), 200);
"""
CULLED = re.compile(r"^GPU idle cull shut down the kernel of x\.ipynb: 4\.0 GiB on GPU 1\b.*, "
                    r"no GPU work for \d+ (s|min), told \d+ (s|min) before\.$")


@pytest.fixture(scope="module")
def lab(processes_file) -> Iterator[object]:  # noqa: ANN001
    with lab_with_processes(processes_file, simulate=4, extra_env={
            "NVDASHBOARD_SIMULATE_PROFILE": "a100-mig",
            "NVDASHBOARD_CULL_AFTER_MINUTES": str(GRACE_S / 60),
            "NVDASHBOARD_CULL_IDLE_MINUTES": "0"}) as running:
        yield running


def cull_state(lab) -> dict:  # noqa: ANN001
    status, body = lab.get("nvdashboard-idle/culls")
    assert status == 200, body[:300]
    return json.loads(body)


def wait_checks(lab, n: int) -> None:  # noqa: ANN001
    """Wait until the cull has made ``n`` more passes."""
    target = cull_state(lab)["checks"] + n
    deadline = time.monotonic() + 120
    while cull_state(lab)["checks"] < target:
        assert time.monotonic() < deadline, "the cull stopped checking"
        time.sleep(0.5)


def jupyter_log(lab) -> str:  # noqa: ANN001
    """The lab's own log (tests/support/jupyter.py writes it in the lab's home)."""
    home = Path(psutil.Process(lab.process.pid).cwd())
    return (home / "jupyter.log").read_text(errors="replace")


def running_kernels(lab) -> set[str]:  # noqa: ANN001
    return {k["id"] for k in call(lab, "GET", "api/kernels")}  # type: ignore[union-attr]


@pytest.mark.timeout(600)  # a 2-minute grace, on a loaded machine: over the suite's 300 s
def test_the_gpu_idle_cull(lab, processes_file: Path) -> None:  # noqa: ANN001
    write_settings(lab, {"idleNotice": False})
    kernels = {name: start_notebook(lab, f"{name}.ipynb") for name in "xyz"}
    ids = {name: kernel_id for name, (kernel_id, _) in kernels.items()}
    place(processes_file, [
        {"gpu": 1, "pid": kernels["x"][1], "used_memory_bytes": 4 * GIB, "sm_pct": 0},
        {"gpu": 3, "pid": kernels["y"][1], "used_memory_bytes": 4 * GIB, "sm_pct": 0},
        {"gpu": 0, "mig": 0, "pid": kernels["z"][1], "used_memory_bytes": 4 * GIB},
    ])
    data = wait_glance(lab, lambda d: judged(d, ids["x"], "idle") and judged(d, ids["y"], "idle")
                       and judged(d, ids["z"], "cannot_tell"), "the judgments")
    policy = cull_state(lab)["policy"]
    assert policy["on"] and policy["after_notice_minutes"] == pytest.approx(GRACE_S / 60)

    # Nobody has been told: idle past every threshold, nothing is shut down.
    wait_checks(lab, 2)
    assert running_kernels(lab) >= set(ids.values())
    assert cull_state(lab)["culls"] == []

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.add_init_script(SAMPLE_X_WARNING)
        watched = watch(page)
        open_lab(page, lab)
        show_sidebar(page)
        page.wait_for_function(f"() => document.querySelectorAll('{TOAST}').length >= 2",
                               timeout=60_000)
        # Each deadline is on screen whole, and is the one the server holds.
        def warnings_said() -> list[tuple[str, str, str]]:
            """(notebook, deadline said, the server's deadline) for each warning."""
            armed = {w["kernel_id"]: w["cull_at"] for w in cull_state(lab)["warnings"]}
            said = sorted(page.eval_on_selector_all(f"{TOAST} .jp-toast-message",
                                                    "els => els.map(e => e.innerText)"))
            out = []
            for text in said:
                match = WARNING.match(text)
                assert match, said
                server = page.evaluate(
                    "at => at === null ? null : new Date(at * 1000).toLocaleTimeString([], "
                    "{hour: '2-digit', minute: '2-digit', second: '2-digit'})",
                    armed.get(ids[match.group(2)]))
                out.append((match.group(2), match.group(1), server))
            return out

        last_said: list[list[tuple[str, str, str]]] = [[]]

        def agreed() -> list[tuple[str, str, str]] | None:
            said = last_said[0] = warnings_said()
            return said if len(said) == 2 and all(d == server for _, d, server in said) \
                else None

        # Two minutes: beside the suite's soak test (a Chromium of a dozen live pages) this
        # Lab's poll and toasts ran late, and 60 s was missed in full runs.
        try:
            said = until(agreed, "each warning says the server's deadline", seconds=120)
        except AssertionError as missed:
            raise AssertionError(f"{missed}: said {last_said[0]}, the server holds "
                                 f"{json.dumps(cull_state(lab)['warnings'])}") from None
        assert [name for name, _, _ in said] == ["x", "y"], said
        toasts_in_place(page)
        screenshot(page, "idle-cull-warnings")

        # x goes missing from the readings until the page has read one without it.
        place(processes_file, [
            {"gpu": 3, "pid": kernels["y"][1], "used_memory_bytes": 4 * GIB, "sm_pct": 0},
            {"gpu": 0, "mig": 0, "pid": kernels["z"][1], "used_memory_bytes": 4 * GIB},
        ])
        page.wait_for_selector(f'#nvdashboard-sidebar [data-kernel-id="{ids["x"]}"]',
                               state="detached", timeout=60_000)
        place(processes_file, [
            {"gpu": 1, "pid": kernels["x"][1], "used_memory_bytes": 4 * GIB, "sm_pct": 0},
            {"gpu": 3, "pid": kernels["y"][1], "used_memory_bytes": 4 * GIB, "sm_pct": 0},
            {"gpu": 0, "mig": 0, "pid": kernels["z"][1], "used_memory_bytes": 4 * GIB},
        ])
        # Its warning stayed (or came back): the cull is still armed for it.
        page.locator(TOAST, has_text="x.ipynb holds").wait_for(timeout=60_000)
        assert ids["x"] in [w["kernel_id"] for w in cull_state(lab)["warnings"]]
        page.wait_for_selector(f'#nvdashboard-sidebar [data-kernel-id="{ids["x"]}"]',
                               timeout=60_000)
        screenshot(page, "idle-cull-warning-kept")
        # y turns busy within the grace time, and stays so.
        run_cell(kernels["y"][1], ids["y"], "import time; time.sleep(600)", wait=False)
        # Busy now: its warning is over, and goes from the screen.
        page.locator(TOAST, has_text="y.ipynb holds").wait_for(state="detached",
                                                               timeout=60_000)

        # z cannot be told apart: posting a notice for it changes nothing.
        z_episode = kernel_entry(data, ids["z"])["idle"]["episode"]
        assert call(lab, "POST", "nvdashboard-idle/notices",
                    {"kernel_id": ids["z"], "episode": z_episode})["cull_at"]

        # x goes: through Jupyter's kernel manager, after the grace.
        deadline = time.monotonic() + GRACE_S + 120
        while ids["x"] in running_kernels(lab):
            # What the cull still waited for, whole (a dict would be cut short).
            assert time.monotonic() < deadline, json.dumps(cull_state(lab)["warnings"])
            time.sleep(0.5)
        until_ended(kernels["x"][1])
        [cull] = cull_state(lab)["culls"]
        assert cull["kernel_id"] == ids["x"] and cull["path"] == "x.ipynb", cull
        assert cull["told_s_ago"] >= GRACE_S, cull
        # On screen for the whole grace before it: not one sample without it.
        samples = page.evaluate("window.__xWarning")
        grace = [on for at_ms, on in samples
                 if cull["at"] - GRACE_S <= at_ms / 1000 < cull["at"]]
        assert grace and all(grace), (len(grace), grace.count(False))
        evidence = cull["evidence"]
        assert evidence["idle"]["state"] == "idle" and evidence["execution_state"] == "idle"
        assert evidence["idle"]["signal"] == "per-process SM samples", evidence
        log = jupyter_log(lab)
        line = next((line for line in log.splitlines()
                     if "GPU idle cull shut down kernel " + ids["x"] in line), None)
        assert line is not None, log[-3000:]
        assert "WARNING" in line or "[W " in line, line
        logged = json.loads(line.split("Evidence: ", 1)[1])
        assert logged["idle"]["episode"] == evidence["idle"]["episode"], line

        # The user is told what was done and why.
        page.locator(TOAST, has_text="GPU idle cull shut down").wait_for(timeout=60_000)
        told = page.locator(TOAST, has_text="GPU idle cull shut down").locator(
            ".jp-toast-message").inner_text()
        assert CULLED.match(told), told
        page.wait_for_selector(f'#nvdashboard-sidebar [data-kernel-id="{ids["x"]}"]',
                               state="detached", timeout=30_000)
        toasts_in_place(page)
        screenshot(page, "idle-cull-done")

        # y (busy since its notice) and z (cannot tell) are kept, passes later.
        wait_checks(lab, 3)
        assert {ids["y"], ids["z"]} <= running_kernels(lab)
        assert [c["kernel_id"] for c in cull_state(lab)["culls"]] == [ids["x"]]
        assert judged(wait_glance(lab, lambda d: judged(d, ids["y"], "busy"), "y busy"),
                      ids["y"], "busy")
        watched.assert_clean()

    # "Keep this kernel" through Jupyter's route: z is held off for the stated time and no
    # longer armed; bad requests are one answer each, and Jupyter logs no traceback.
    z_kept = call(lab, "POST", "nvdashboard-idle/keeps", {"kernel_id": ids["z"]})
    assert z_kept["kept_until"] == pytest.approx(  # type: ignore[index]
        time.time() + cull_state(lab)["policy"]["keep_minutes"] * 60, abs=30)
    assert ids["z"] not in [w["kernel_id"] for w in cull_state(lab)["warnings"]]
    for body, status in (({"kernel_id": 7}, 400), ({"kernel_id": "no-such-kernel"}, 404)):
        with pytest.raises(urllib.error.HTTPError) as refused:
            call(lab, "POST", "nvdashboard-idle/keeps", body)
        assert refused.value.code == status
    log = jupyter_log(lab)
    assert "Traceback" not in log and "cannot watch kernel" not in log, log[-3000:]
