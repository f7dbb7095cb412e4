"""The diagnosis where a user sees it, on a real server over the simulated driver:
``/diagnosis.json``, the lines on ``/GPU-Activity`` and the ``/metrics`` gauge."""

from __future__ import annotations

import asyncio
import json
import time

from jupyterlab_nvdashboard.diagnosis import CAUSES
from tests.support.bokeh_client import open_session
from tests.support.servers import get, in_process_server


def wait_for_gpm(url: str, seconds: float = 20.0) -> dict:
    """/diagnosis.json once every device rests on enough GPM readings to be judged."""
    deadline = time.monotonic() + seconds
    while True:
        status, body = get(url + "/diagnosis.json?seconds=120")
        assert status == 200
        data = json.loads(body)
        if all(d["cause"] not in ("unknown", "not-enough-samples") for d in data["devices"]) \
                or time.monotonic() > deadline:
            return data
        time.sleep(0.5)


def test_diagnosis_json_names_each_device_its_cause_and_evidence() -> None:
    with in_process_server(gpus=2, profile="h100-mig") as server:
        data = wait_for_gpm(server.url)
        assert data["window_s"] == 120 and data["simulated"] is True
        labels = [d["label"] for d in data["devices"]]
        assert labels == ["SIMULATED GPU 0", "SIMULATED GPU 0 · MIG 1",
                          "SIMULATED GPU 0 · MIG 5", "SIMULATED GPU 1"]
        for device in data["devices"]:
            assert device["cause"] in CAUSES and device["line"].startswith(device["label"])
            assert device["samples"] > 0 and device["findings"]
            for finding in device["findings"]:
                assert finding["confidence"] and finding["signal"]
                for figure in finding["figures"]:
                    assert figure["unit"] is not None and figure["count"] >= 0
        # A MIG instance has GPM of its own: judged on it, not "no signal".
        assert data["devices"][1]["findings"][0]["signal"] in ("gpm", "clock-events")


def test_diagnosis_json_refuses_a_bad_window_in_one_line() -> None:
    with in_process_server(gpus=1, profile="h200") as server:
        for bad in ("abc", "0", "-5", "nan", "1e12"):
            status, body = get(server.url + f"/diagnosis.json?seconds={bad}")
            assert status == 400, bad
            assert b"Traceback" not in body and b"seconds must be a number" in body
        assert get(server.url + "/diagnosis.json", token=None)[0] == 403


def test_gpu_activity_page_shows_a_diagnosis_line_per_device_and_window() -> None:
    with in_process_server(gpus=2, profile="h200") as server:
        wait_for_gpm(server.url)

        async def document() -> str:
            session = await open_session(server.url, "/GPU-Activity")
            await session.aclose()
            return json.dumps(session.document)

        doc = asyncio.run(document())
        for window in ("120", "600", "1800"):
            assert f"diagnosis-{window}" in doc
        assert doc.count("nvdashboard-diagnosis") >= 3  # one block per window
        assert "SIMULATED GPU 0</b>" in doc and "SIMULATED GPU 1</b>" in doc


def test_metrics_exports_the_diagnosis_as_an_info_gauge() -> None:
    with in_process_server(gpus=2, profile="h200", metrics_enabled=True) as server:
        data = wait_for_gpm(server.url)
        status, body = get(server.url + "/metrics")
        assert status == 200
        lines = [line for line in body.decode().splitlines()
                 if line.startswith("nvdashboard_gpu_diagnosis{")]
        assert len(lines) == 2
        uuids = {d["uuid"] for d in data["devices"]}
        for line in lines:
            assert line.endswith(" 1.0") and 'gpu="' in line
            assert line.split('UUID="')[1].split('"')[0] in uuids
            assert line.split('cause="')[1].split('"')[0] in CAUSES


def test_glance_gives_the_diagnosis_of_the_gpus_holding_your_kernels(tmp_path) -> None:  # noqa: ANN001
    import os

    from jupyterlab_nvdashboard.apps.processes import glance
    from jupyterlab_nvdashboard.apps.sources import DashboardSources
    from jupyterlab_nvdashboard.composition import create_metrics
    from jupyterlab_nvdashboard.config import Config, SimulationConfig
    from jupyterlab_nvdashboard.jupyter_sessions import JupyterSessions, Session
    from jupyterlab_nvdashboard.metrics import OWNER_FAMILY
    from jupyterlab_nvdashboard.simnvml.processes import SimulatedProcess

    config = Config(interval_s=0.1, token=None, runs_dir=tmp_path,
                    simulation=SimulationConfig(gpu_count=2, profile="h200"))
    metrics = create_metrics(config, environ={})
    metrics.nvml.ensure_initialized()
    assert metrics.simulator is not None and metrics.owners is not None
    metrics.simulator.set_processes([SimulatedProcess(1, os.getpid(), 1e9)])
    for _ in range(8):
        metrics.sampler.tick()
        time.sleep(0.05)
    metrics.sampler.read_slow()
    owners = dict(metrics.owners.latest)
    owners[os.getpid()] = owners[os.getpid()]._replace(kernel_id="k1", kernel_pid=os.getpid())
    metrics.history.append(time.time(), metrics.history.latest().gpus,
                           metrics.sampler.host.read(), extra={OWNER_FAMILY: owners})
    jupyter = JupyterSessions(None)
    jupyter.sessions = {"k1": Session("work/a.ipynb", "notebook", "x")}
    body = glance(DashboardSources(metrics, jupyter=jupyter))
    assert [k["kernel_id"] for k in body["kernels"]] == ["k1"]
    [why] = body["diagnoses"]  # GPU 1 holds the kernel; GPU 0 is not the user's business
    assert why["index"] == 1 and why["label"] == "SIMULATED GPU 1"
    assert why["line"].startswith("SIMULATED GPU 1 ") and why["cause"] in CAUSES
    # The sidebar's line: the device, the cause and at most one figure, short enough for
    # a narrow sidebar; the whole line goes with it for the tooltip.
    assert why["brief"].startswith("SIMULATED GPU 1: ") and len(why["brief"]) <= 60, why
    assert len(why["brief"]) < len(why["line"]) and why["brief"].count(",") <= 1
    assert body["reading_gpus"] is False  # no device would mean "no GPU", not "not yet"
    assert glance(DashboardSources(metrics))["diagnoses"] == []  # no kernels: none


def test_a_gpus_finding_is_the_users_only_where_their_working_kernels_are_alone() -> None:
    """Issue 44: "GPU 1: starved … Try: find what the GPU waits for" stood under a kernel
    that was idle on GPU 1 while GPU 1's work was another user's job."""
    from jupyterlab_nvdashboard.apps.kernel_findings import told_to_the_user
    from jupyterlab_nvdashboard.apps.processes import ProcessRow
    from jupyterlab_nvdashboard.diagnosis.findings import Diagnosis, Finding

    feed = "find what the GPU waits for between steps"
    diagnosis = Diagnosis(1, "GPU 1", "GPU-1", 60, 30.0, (
        Finding("starved", "starved", (), "utilization", feed),))

    def row(pid: int, user: str, mine: bool, kernel: str | None = None) -> ProcessRow:
        return ProcessRow(device=1, gpu="GPU 1", pid=pid, kind="compute", user=user, mine=mine,
                          what=f"{kernel}.ipynb" if kernel else "python train.py",
                          notebook=f"{kernel}.ipynb" if kernel else None, lab_url=None,
                          kernel_id=kernel, memory_bytes=1e9, memory_fraction=0.01,
                          sm_pct=None, memory_pct=None, held_s=None)

    mine, theirs = row(10, "alice", True, "a"), row(20, "bob", False)
    cases = [  # the rows on GPU 1, a.ipynb's judgment: whose, advice, idle kernels
        ([mine], "idle", "gpu", "", ["a.ipynb"]),
        ([mine, theirs], "idle", "gpu", "", ["a.ipynb"]),
        ([mine], "busy", "yours", feed, []),
        ([mine, theirs], "busy", "gpu", "", []),
        ([mine], "cannot_tell", "gpu", "", []),
    ]
    for rows, state, whose, advice, idle in cases:
        told = told_to_the_user(diagnosis, rows, {"a": state})
        assert (told["whose"], told["advice"], told["idle_kernels"]) == (whose, advice, idle), \
            (state, [r.user for r in rows], told)
        assert told["your_kernels"] == ["a.ipynb"]
        assert told["other_processes"] == len(rows) - 1
        assert told["other_users"] == (["bob"] if theirs in rows else [])
        assert told["brief"] == diagnosis.brief() and told["line"] == diagnosis.line()
