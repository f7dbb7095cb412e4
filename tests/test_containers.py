"""NVDashboard inside a container: a real ``jupyter lab`` (and so the proxied dashboard
server) and real kernels run inside a new PID namespace (``unshare --pid --fork
--mount-proc``), and the simulated driver names their processes as each kind of driver
does (``simnvml/processes.py``): host PIDs everywhere, translated lists with host-PID
samples, and local PIDs.

There is no NVIDIA driver here, so no real ``/dev/nvidia<minor>`` can be opened. In
production the server recognises a GPU's node by its device number: the ``nvidia-frontend``
major in ``/proc/devices`` and the minor from ``nvmlDeviceGetMinorNumber``. The simulated
driver registers no major, so the server takes the character device standing at
``/dev/nvidia<minor>``; the test stands an openable device there (``/dev/full`` for GPU 0,
``/dev/fuse`` for GPU 1) in the namespace's private mount namespace
(``tests/support/pidns.py``), and the kernels hold it open as CUDA would.

The container holds: a notebook's kernel on GPU 0 (30 GB), two processes of its own on
GPU 1 (2 and 3 GB), a process of a container nested in it holding GPU 0's node without a
context; beside it, another container's process on GPU 0 (5 GB). In each behaviour the
kernel is the user's, with its notebook, on ``/processes.json`` (the rows
``/GPU-Processes`` draws) and ``/glance.json``; the other container's process reads as
another container's; the two on GPU 1 are reported together with their memory; nothing
reads "ended" or "hidepid". Needs root (CI runs as root); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from jupyterlab_nvdashboard.apps.components import format_memory
from tests.support.jupyter import JupyterLab, cell_reply, jupyter_lab
from tests.support.pidns import PidNamespace, namespace_pids, pid_inside, unavailable
from tests.test_lab_processes import NOTEBOOK, call, kernel_pid, table

pytestmark = [pytest.mark.lab,
              pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))]

GB = 10**9
ROOT = str(Path(__file__).resolve().parents[1])


def hold_in_kernel(lab_home: Path, kernel_id: str, node: int) -> None:
    """Make the kernel open /dev/nvidia<node> and keep it open (as cuInit does)."""
    reply = cell_reply(lab_home / f"kernel-{kernel_id}.json",
                       f"import os\n_nvd_node = os.open('/dev/nvidia{node}', os.O_RDWR)")
    assert reply["status"] == "ok", reply


@pytest.fixture(scope="module")
def container():  # noqa: ANN201
    with PidNamespace(gpus=2) as ns, \
            PidNamespace(gpus=1, parent=ns) as nested, \
            open(os.devnull, "wb") as quiet:
        processes_file = Path(ns.folder) / "processes.json"
        processes_file.write_text("[]")
        environment = {"NVDASHBOARD_SIMULATE_PROCESSES": str(processes_file),
                       "NVDASHBOARD_SIMULATE_PROFILE": "h200", "PYTHONPATH": ROOT}
        with jupyter_lab(simulate=2, extra_env=environment,
                         wrap=lambda command, cwd: ns.command(command, cwd)) as lab:
            call(lab, "PUT", "api/contents/alpha.ipynb", {"type": "notebook",
                                                          "content": NOTEBOOK})
            session = call(lab, "POST", "api/sessions", {
                "path": "alpha.ipynb", "name": "alpha.ipynb", "type": "notebook",
                "kernel": {"name": "python3"}})
            kernel_id = session["kernel"]["id"]  # type: ignore[index]
            kernel = kernel_pid(lab, kernel_id)
            runtime = next(Path(arg).parent for arg in psutil.Process(kernel).cmdline()
                           if arg.endswith(f"kernel-{kernel_id}.json"))
            hold_in_kernel(runtime, kernel_id, 0)
            pair = [ns.holder(1)[1] for _ in range(2)]
            nested_holder = nested.holder(0)[1]
            outside = subprocess.Popen(["sleep", "600"], stdout=quiet)  # another container's
            try:
                yield {"lab": lab, "ns": ns, "nested": nested, "file": processes_file,
                       "kernel": kernel, "kernel_id": kernel_id, "pair": pair,
                       "nested_holder": nested_holder, "outside": outside.pid}
            finally:
                outside.kill()
                outside.wait()


def _processes(c: dict, behaviour: str) -> dict:
    """What the driver knows: each process with its host PID and its PIDs in namespaces."""
    ns, nested = c["ns"], c["nested"]

    def entry(gpu: int, host_pid: int, where: PidNamespace | None, memory: float,
              sm: int = 0) -> dict:
        return {"gpu": gpu, "pid": host_pid, "used_memory_bytes": memory, "sm_pct": sm,
                "namespace_pids": namespace_pids(host_pid, where)}

    items = [entry(0, c["kernel"], ns, 30 * GB, 95),
             entry(1, c["pair"][0], ns, 2 * GB, 40), entry(1, c["pair"][1], ns, 3 * GB, 40)]
    if behaviour == "local":
        # The caller sees the host's PIDs (--pid=host): another container's process is one
        # of its namespaces' below it, visible here, holding GPU 0's node too.
        items.append(entry(0, c["nested_holder"], nested, 5 * GB, 30))
    else:
        items.append(entry(0, c["outside"], None, 5 * GB, 30))
    return {"pid_behaviour": behaviour, "processes": items}


def _check(c: dict, behaviour: str, data: dict, glance: dict) -> None:
    ns = c["ns"]
    kernel = pid_inside(c["kernel"], ns, ns)
    pair = {pid_inside(pid, ns, ns) for pid in c["pair"]}
    rows = data["rows"]
    for row in rows:  # a live process never reads as ended, or hidden by hidepid
        words = f"{row['what']} {row['identity_text']}"
        assert "ended" not in words and "hidepid" not in words, row
    [mine] = [row for row in rows if row["pid"] == kernel]
    assert mine["mine"] and mine["notebook"] == "alpha.ipynb", mine
    assert mine["kernel_id"] == c["kernel_id"] and mine["device"] == 0
    gpu0_others = [row for row in rows if row["device"] == 0 and row["pid"] != kernel]
    assert gpu0_others and all(row["identity"] in ("other", "unlisted") and not row["mine"]
                               for row in gpu0_others), gpu0_others
    assert any("another container" in row["identity_text"] or "other containers" in
               row["identity_text"] for row in gpu0_others), gpu0_others
    gpu1 = [row for row in rows if row["device"] == 1]
    assert {row["pid"] for row in gpu1} == pair, gpu1
    if behaviour == "host":
        # Host PIDs: which of the two holds what, nobody here can say; together, 5 GB.
        assert mine["identity"] == "shared" and mine["memory_bytes"] is None
        assert mine["group_memory_bytes"] == 35 * GB
        assert all(row["identity"] == "shared" and row["group_memory_bytes"] == 5 * GB
                   and "2 processes of this container on" in row["identity_text"]
                   and f"holding {format_memory(5 * GB)} together" in row["identity_text"]
                   for row in gpu1), gpu1
    else:
        assert mine["identity"] == "same" and mine["memory_bytes"] == 30 * GB
        assert sum(row["memory_bytes"] for row in gpu1) == 5 * GB
        assert all(row["identity"] == "same" for row in gpu1)
    if behaviour == "translated":  # host-PID samples are credited to no listed process
        assert mine["sm_pct"] is None
    [listed] = [k for k in glance["kernels"] if k["kernel_id"] == c["kernel_id"]]
    assert listed["path"] == "alpha.ipynb" and listed["devices"], listed
    assert listed["memory_known"] == (behaviour != "host")


@pytest.mark.parametrize("behaviour", ["host", "translated", "local"])
def test_the_kernel_is_yours_in_a_container(container: dict, behaviour: str) -> None:
    lab: JupyterLab = container["lab"]
    container["file"].write_text(json.dumps(_processes(container, behaviour)))
    start = table(lab)["process_passes"]
    deadline = time.monotonic() + 90
    while True:
        data = table(lab)
        status, body = lab.get("nvdashboard/glance.json")
        assert status == 200, body[:300]
        try:
            assert data["process_passes"] >= start + 3  # the new list, paired
            _check(container, behaviour, data, json.loads(body))
            return
        except (AssertionError, ValueError):
            if time.monotonic() > deadline:
                print(json.dumps(data, indent=1)[:6000], file=sys.stderr)
                raise
        time.sleep(0.3)


def test_a_busy_run_in_a_container_is_never_not_using_its_gpu() -> None:
    """A run's process inside the namespace holds GPU 1's node and keeps it 95% busy; the
    server, in the same namespace, judges it under each driver behaviour at once."""
    judge = str(Path(__file__).with_name("support") / "ns_judge.py")
    with PidNamespace(gpus=2) as ns:
        _, run = ns.holder(1)
        local = pid_inside(run, ns, ns)
        judges = {}
        for behaviour in ("host", "translated", "local"):
            listing = Path(ns.folder) / f"{behaviour}.json"
            processes = [{"gpu": 1, "pid": run, "used_memory_bytes": 20 * GB, "sm_pct": 95,
                          "namespace_pids": namespace_pids(run, ns)}]
            # Host PIDs are the simulated driver's default: a plain list says so.
            listing.write_text(json.dumps(processes if behaviour == "host" else
                                          {"pid_behaviour": behaviour, "processes": processes}))
            judges[behaviour] = subprocess.Popen(
                ns.command([sys.executable, judge, str(listing), str(local), "1"]),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        verdicts = {}
        for behaviour, process in judges.items():
            out, err = process.communicate(timeout=180)
            assert process.returncode == 0, err[-3000:]
            verdicts[behaviour] = json.loads(out.strip().splitlines()[-1])
    for behaviour, verdict in verdicts.items():
        assert verdict["cause"] not in ("not-using-gpu", "not-judged", "idle"), verdicts
        assert "not using" not in verdict["text"], verdicts
        # Host PIDs: the run is paired by elimination, not certain: judged on the GPU's own
        # signals, and said so. Translated or local: the driver names it by its PID here.
        hidden = "process identity not visible from this container" in verdict["text"]
        assert hidden == (behaviour == "host"), verdicts
