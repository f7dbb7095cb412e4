"""What a user installs is this project (issue 54, item 5).

The wheel is built from this checkout, installed (``--no-deps``) into a fresh virtual
environment that sees this machine's packages for its dependencies but has its own copy of
ours, and started from a folder outside the checkout, so nothing of the checkout can stand
in for the installed package: the version it reports on ``/info.json`` and ``--version``,
and the one its labextension (the sidebar) was built with, must be ``pyproject.toml``'s.
That version must sort above every release published under the same distribution name by
another project (rapidsai's jupyterlab-nvdashboard), so ``pip install -U`` never swaps it
for theirs; and the README's install lines must install this checkout or its wheel, never
that name from the package index.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from tests.support.bokeh_client import TEST_TOKEN
from tests.support.servers import free_port, get, wait_until_serving

ROOT = Path(__file__).resolve().parents[1]
VERSION = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(),
                    re.MULTILINE).group(1)  # type: ignore[union-attr]
# Every release of the distribution name "jupyterlab-nvdashboard" on the package index, all
# rapidsai's (`pip index versions jupyterlab-nvdashboard`, 7 Dec 2026).
PUBLISHED_BY_OTHERS = (
    "0.15.0", "0.14.0", "0.13.0", "0.12.0", "0.11.0", "0.10.0", "0.9.0", "0.8.0", "0.7.0",
    "0.6.0", "0.5.0", "0.4.0", "0.3.1", "0.3.0", "0.2.1", "0.2.0", "0.1.11200212", "0.1.11",
    "0.1.10", "0.1.9", "0.1.8", "0.1.7", "0.1.6", "0.1.5", "0.1.3", "0.1.2", "0.1.1", "0.1.0")


WITH_VALUE = {"-w", "--wheel-dir"}  # pip options that take a value


def test_the_version_sorts_above_every_release_of_the_name_by_another_project() -> None:
    assert all(Version(VERSION) > Version(theirs) for theirs in PUBLISHED_BY_OTHERS)
    assert json.loads((ROOT / "package.json").read_text())["version"] == VERSION


def test_the_readme_install_lines_install_this_checkout_or_its_wheel() -> None:
    readme = (ROOT / "README.md").read_text()
    install = readme[readme.index("## Install"):readme.index("## In JupyterLab")]
    commands = re.findall(r"pip (?:install|wheel)[^\n`]*", install)
    assert commands
    for command in commands:
        words = shlex.split(command.split("#")[0])[2:]
        # What is installed or built: the words that are neither options nor their values.
        targets = [word for before, word in zip(["", *words], words, strict=False)
                   if not word.startswith("-") and before not in WITH_VALUE]
        if targets == ["jupyterlab"]:
            continue  # JupyterLab itself, for the panel
        for target in targets:  # none: a flag named in the text (`pip install -U`)
            assert target.startswith((".", "dist/")), command  # the checkout or its wheel
    assert f"jupyterlab_nvdashboard-{VERSION}-py3-none-any.whl" in install


def built_wheel(folder: Path) -> Path:
    """The wheel of this checkout (its labextension as last built: ``jlpm build``)."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(folder), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = folder.glob("jupyterlab_nvdashboard-*.whl")
    return wheel


@pytest.mark.skipif(sys.platform != "linux", reason="the venv layout below is Linux's")
def test_the_installed_wheel_reports_this_projects_version(tmp_path: Path) -> None:
    pytest.importorskip("hatchling", reason="the test extras install hatchling")
    wheel = built_wheel(tmp_path / "dist")
    assert wheel.name == f"jupyterlab_nvdashboard-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        labextension = json.loads(archive.read(
            f"jupyterlab_nvdashboard-{VERSION}.data/data/share/jupyter/labextensions/"
            "jupyterlab-nvdashboard/package.json"))
    # The sidebar's bundle was built from this version (else: `jlpm build` after a bump).
    assert labextension["version"] == VERSION

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    python = str(venv / "bin" / "python")
    # --ignore-installed: where this machine's packages already hold the same version (CI
    # installs the checkout itself), pip would call the wheel satisfied and install nothing.
    installed = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps",
                                "--ignore-installed", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-3000:]
    outside = tmp_path / "elsewhere"  # not the checkout: its package cannot be imported
    outside.mkdir()
    where = subprocess.run([python, "-c", "import jupyterlab_nvdashboard as p; print(p.__file__)"],
                           capture_output=True, text=True, cwd=outside, timeout=60, check=True)
    assert where.stdout.strip().startswith(str(venv)), where.stdout

    reported = subprocess.run([python, "-m", "jupyterlab_nvdashboard.server", "--version"],
                              capture_output=True, text=True, cwd=outside, timeout=60)
    assert reported.returncode == 0 and reported.stdout.strip() == \
        f"jupyterlab-nvdashboard {VERSION}", reported

    port = free_port()
    server = subprocess.Popen(
        [python, "-m", "jupyterlab_nvdashboard.server", str(port), "--simulate", "1",
         "--no-store"], cwd=outside, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**{name: value for name, value in os.environ.items() if name != "PYTHONPATH"},
             "NVDASHBOARD_TOKEN": TEST_TOKEN, "NVDASHBOARD_RUNS_DIR": str(tmp_path / "runs")})
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(url + "/", process=server)
        status, body = get(url + "/info.json")
        assert status == 200 and json.loads(body)["version"] == VERSION
    finally:
        server.terminate()
        server.wait(30)
