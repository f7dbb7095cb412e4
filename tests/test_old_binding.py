"""The real oldest nvidia-ml-py we accept (12.535) imports and serves.

Binding 12.535 predates the PCIe byte-counter fields (12.555) and the NVLink byte-count
fields (12.560). Nothing may read those names at import, and the reader must only look
them up through its choke point. `.ci/install` downloads the wheel into `.ci/cache/`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.metrics import nvml
from tests.support.servers import cli_server, get

ROOT = Path(__file__).resolve().parents[1]
WHEEL = ROOT / ".ci" / "cache" / "bindings" / "nvidia_ml_py-12.535.161-py3-none-any.whl"


@pytest.fixture(scope="module")
def old_binding(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert WHEEL.exists(), f"{WHEEL} is missing: run `bash .ci/install` first"
    target = tmp_path_factory.mktemp("pynvml-12.535")
    with zipfile.ZipFile(WHEEL) as wheel:
        wheel.extract("pynvml.py", target)
    return target


def test_the_package_imports_and_reads_with_binding_12_535(old_binding: Path) -> None:
    script = (
        "import pynvml, jupyterlab_nvdashboard.server\n"
        "from jupyterlab_nvdashboard.metrics.nvml import NvmlReader\n"
        "assert not hasattr(pynvml, 'NVML_FI_DEV_PCIE_COUNT_TX_BYTES')\n"
        "print(pynvml.__file__)\n"
        "print(NvmlReader().ensure_initialized().value)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{old_binding}{os.pathsep}{ROOT}"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    where, state = result.stdout.split()
    assert where.startswith(str(old_binding))
    # No driver on a test machine: a state with a reason, not a crash.
    assert state in {"library_not_found", "driver_not_loaded", "ok", "no_devices"}


def test_the_server_serves_with_binding_12_535(old_binding: Path) -> None:
    env = {"PYTHONPATH": f"{old_binding}{os.pathsep}{ROOT}"}
    with cli_server(env=env) as (url, process):
        deadline = time.monotonic() + 30
        info = json.loads(get(url + "/info.json")[1])
        while info["nvml_state"] == "uninitialized" and time.monotonic() < deadline:
            time.sleep(0.2)  # NVML starts on its own thread, after the server answers
            info = json.loads(get(url + "/info.json")[1])
        assert info["nvml_state"] != "uninitialized" and info["nvml_message"]
        assert get(url + "/Machine-Resources")[0] == 200


def test_the_reader_reads_no_nvml_name_outside_its_choke_point() -> None:
    source = Path(nvml.__file__).read_text()
    # Constants only through constant("NVML_..."), functions only through invoke/query/call.
    direct = re.findall(r"(?:lib|_lib)\.(NVML_\w+|nvml(?!Init\b)\w+)", source)
    assert direct == []
