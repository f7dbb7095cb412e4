"""The idle clock belongs to the GPU, not to the page (issue 51 item 3): a real ``jupyter
lab``, a notebook whose real kernel the simulated driver lists on GPU 0 holding 3 GiB and
doing no GPU work, open in Chromium. Reloading JupyterLab (which reconnects to the kernel
and asks it for its info) twice does not restart the kernel's idle episode, nor does the
silent ``execute_request`` that an extension sends on connecting (a variable inspector's, a
language server's), which the kernel runs without echoing it as a cell: ``idle_s`` in
``/glance.json`` keeps growing and the episode keeps its id. Only GPU work by the kernel, or
a cell it runs, starts another; the last step runs a cell and sees a new episode.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.browser import PAGE_WAIT_MS, chromium, watch
from tests.support.idle_lab import connection_file, run_cell, start_notebook
from tests.support.jupyter import JupyterLab, jupyter_lab, shell_client
from tests.test_lab_idle import idle_of, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.lab]

GIB = 2**30
NOTEBOOK_OPEN = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"
# JupyterLab's toolbar says the kernel is idle once it has connected to it again.
KERNEL_IDLE = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator" \
    "[data-status='idle']"


def open_notebook(page, lab: JupyterLab, name: str) -> None:  # noqa: ANN001
    page.goto(f"{lab.url}lab/tree/{name}?token={lab.token}")
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=PAGE_WAIT_MS)
    page.wait_for_selector(NOTEBOOK_OPEN, timeout=PAGE_WAIT_MS)
    page.wait_for_selector(KERNEL_IDLE, state="attached", timeout=PAGE_WAIT_MS)


def test_reloading_the_lab_keeps_the_kernels_idle_episode(processes_file: Path) -> None:
    with jupyter_lab(simulate=2, extra_env={
            "NVDASHBOARD_SIMULATE_PROCESSES": str(processes_file)}) as lab, \
            chromium() as browser:
        kernel_id, pid = start_notebook(lab, "held.ipynb")
        processes_file.write_text(json.dumps([
            {"gpu": 0, "pid": pid, "sm_pct": 0, "used_memory_bytes": 3 * GIB,
             "until_exit": True}]))
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watched = watch(page)
        open_notebook(page, lab, "held.ipynb")
        before = wait_for(lab, kernel_id, lambda i: i["state"] == "idle" and i["idle_s"] >= 5,
                          "idle a while, with the notebook open")
        for reload in range(2):
            read_at = time.monotonic()
            page.reload()
            page.wait_for_selector("#jupyterlab-splash", state="detached",
                                   timeout=PAGE_WAIT_MS)
            page.wait_for_selector(KERNEL_IDLE, state="attached", timeout=PAGE_WAIT_MS)
            with shell_client(connection_file(pid, kernel_id)) as client:
                client.execute("len(dir())", silent=True, reply=True, timeout=60)
            # A few of the idle judgment's refreshes after JupyterLab reconnected.
            time.sleep(4)
            after = idle_of(lab, kernel_id)
            assert after is not None and after["state"] == "idle", (reload, after)
            assert after["episode"] == before["episode"], (reload, before, after)
            waited = time.monotonic() - read_at
            assert after["idle_s"] >= before["idle_s"] + waited - 3, (reload, before, after)
            before = after
        run_cell(pid, kernel_id, "x = 1")  # a cell: the episode is over, another begins
        again = wait_for(lab, kernel_id, lambda i: i["state"] == "idle"
                         and i["episode"] != before["episode"], "a new episode after a cell")
        assert again["idle_s"] < before["idle_s"], (before, again)
        watched.assert_clean()
