"""A real ``jupyter lab`` and a real kernel (issue 45): the server extension's executions
route serves each cell the kernel ran as the kernel's own IOPub stamped it (start: its
``execute_input``, with the execution count; end: the ``idle`` that follows it), as any
client subscribed to the kernel sees those messages; it needs Jupyter's login."""

from __future__ import annotations

import json
import urllib.request

import pytest

from jupyterlab_nvdashboard.idle_cull import EXECUTIONS_PATH
from tests.support.idle_lab import connection_file, run_cell, start_notebook
from tests.support.jupyter import JupyterLab, jupyter_lab
from tests.support.waiting import until

pytestmark = pytest.mark.lab


def served_cells(lab: JupyterLab, kernel_id: str) -> list[dict]:
    status, body = lab.get(EXECUTIONS_PATH)
    assert status == 200, body[:300]
    return json.loads(body)["cells"].get(kernel_id, [])


def run_and_watch(pid: int, kernel_id: str, code: str) -> tuple[dict, dict]:
    """Runs ``code`` in the kernel as a client subscribed to its IOPub: the header of its
    ``execute_input`` with that message's content, and the header of the ``idle`` that
    ends it."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection_file(pid, kernel_id)))
    client.load_connection_file()
    client.start_channels(hb=False)
    try:
        client.wait_for_ready(timeout=60)
        msg_id = client.execute(code)
        started = None
        while True:
            message = client.get_iopub_msg(timeout=60)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "execute_input":
                started = message
            if message["msg_type"] == "status" \
                    and message["content"]["execution_state"] == "idle":
                assert started is not None
                return started, message
    finally:
        client.stop_channels()


def test_the_executions_route_serves_a_real_kernels_cells_as_its_iopub_stamped_them(
) -> None:
    with jupyter_lab(simulate=1) as lab:
        kernel_id, pid = start_notebook(lab, "cells.ipynb")
        # The watcher subscribes to a new kernel within a second of its start; a cell run
        # before then is not seen (as by any late subscriber), so run until one is.
        until(lambda: run_cell(pid, kernel_id, "pass") or served_cells(lab, kernel_id),
              "a cell of the new kernel is served", seconds=120, every_s=0.5)
        started, ended = run_and_watch(pid, kernel_id, "import time; time.sleep(1.2)")
        newest = until(lambda: [cell for cell in served_cells(lab, kernel_id)
                                if cell["count"] == started["content"]["execution_count"]
                                and cell["end_s"] is not None],
                       "the watched cell is served with its end", seconds=60)
        assert len(newest) == 1, newest
        cell = newest[0]
        assert cell["start_s"] == pytest.approx(started["header"]["date"].timestamp(),
                                                abs=1e-6)
        assert cell["end_s"] == pytest.approx(ended["header"]["date"].timestamp(), abs=1e-6)
        assert cell["end_s"] - cell["start_s"] >= 1.2
        # Oldest first, each one's start before its end, its count the kernel's.
        cells = served_cells(lab, kernel_id)
        assert [c["count"] for c in cells] == sorted(c["count"] for c in cells)
        assert all(c["end_s"] is None or c["start_s"] <= c["end_s"] for c in cells), cells
        # Jupyter's login guards it, as Jupyter's own API.
        request = urllib.request.Request(lab.url + EXECUTIONS_PATH)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403
