"""``/cell.json`` under a real ``jupyter lab`` (issue 45, item 2), through jupyter-server-proxy
at ``<base_url>nvdashboard/cell.json``, as the notebook's footer asks it: a notebook's real
kernel runs cells, each span taken from the kernel's own messages (the execute_reply's
``started`` and its header's date, the kernel's clock), while the simulated driver lists
the kernel on GPU 1 (busy), then nothing (a CPU-only cell). A kernel that is not one of
this Jupyter's is refused.
"""

from __future__ import annotations

import html
import json
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.support.idle_lab import connection_file, glance, kernel_entry, place, start_notebook
from tests.support.jupyter import JupyterLab, lab_with_processes, shell_client
from tests.support.waiting import until

pytestmark = pytest.mark.lab

GIB = 2**30


@pytest.fixture
def processes_file(tmp_path: Path) -> Path:
    path = tmp_path / "processes.json"
    path.write_text("[]")
    return path


@pytest.fixture
def lab(processes_file: Path) -> Iterator[JupyterLab]:
    with lab_with_processes(processes_file, simulate=2) as running:
        yield running


def iso(value: object) -> str:
    """A message's time as its JSON carries it (jupyter_client hands some back parsed)."""
    return value.isoformat() if isinstance(value, datetime) else str(value)


def run(pid: int, kernel_id: str, code: str) -> tuple[str, str]:
    """Run a cell; its span on the kernel's clock: (started, the reply's date)."""
    with shell_client(connection_file(pid, kernel_id)) as client:
        reply = client.execute(code, reply=True, timeout=120)
    assert reply["content"]["status"] == "ok", reply["content"]
    return iso(reply["metadata"]["started"]), iso(reply["header"]["date"])


def cell(lab: JupyterLab, kernel_id: str, span: tuple[str, str]) -> tuple[int, dict | str]:
    query = urlencode({"kernel": kernel_id, "start": span[0], "end": span[1]})
    status, body = lab.get(f"nvdashboard/cell.json?{query}")
    # A refusal is the server's one-line error page, as for every route.
    return status, json.loads(body) if status == 200 else html.unescape(body.decode())


def test_cells_of_a_real_kernel_through_the_proxy(lab: JupyterLab, processes_file: Path
                                                  ) -> None:
    kernel_id, pid = start_notebook(lab, "cells.ipynb")
    place(processes_file, [{"gpu": 1, "pid": pid, "used_memory_bytes": 12 * GIB,
                            "sm_pct": 87}])
    until(lambda: kernel_entry(glance(lab), kernel_id), "the kernel listed on its GPU", 120)
    span = run(pid, kernel_id, "import time; time.sleep(4)")
    status, busy = cell(lab, kernel_id, span)
    assert status == 200 and isinstance(busy, dict), busy
    assert busy["state"] == "busy" and busy["notebook"] == "cells.ipynb", busy
    [gpu] = busy["gpus"]
    assert gpu["index"] == 1 and gpu["signal"] == "per-process"
    assert gpu["sm_pct"] == pytest.approx(87) and gpu["memory"]["peak_bytes"] == 12 * GIB
    assert busy["verdict"].startswith("GPU 1: busy ") and "peak 12.0 GiB (+0.0)" in \
        busy["verdict"]
    assert busy["duration_s"] == pytest.approx(4, abs=1)

    # A CPU-only cell: the kernel holds no GPU.
    place(processes_file, [])
    until(lambda: kernel_entry(glance(lab), kernel_id) is None, "the kernel off its GPU", 120)
    status, cpu = cell(lab, kernel_id, run(pid, kernel_id, "sum(range(10**6))"))
    assert status == 200 and isinstance(cpu, dict), cpu
    assert cpu["verdict"] == "no GPU work" and cpu["touched_gpu"] is False, cpu

    # Not one of this Jupyter's kernels: refused in one line.
    status, refused = cell(lab, str(uuid.uuid4()), span)
    assert status == 404 and "not one of this Jupyter's kernels" in str(refused), refused
