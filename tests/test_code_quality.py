"""The frontend's checks (jest, tsc --strict, `jlpm lint`) and ruff, run by the one test command."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def node_modules() -> None:
    if shutil.which("jlpm") is None:
        pytest.fail("jlpm (from jupyterlab) is not on PATH; run bash .ci/install")
    if not (ROOT / "node_modules").is_dir():
        result = run("jlpm", "install", "--immutable")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_typescript_is_strict_clean(node_modules: None) -> None:
    result = run("jlpm", "lint:tsc")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_frontend_lint_is_clean(node_modules: None) -> None:
    """`jlpm lint`: stylelint, prettier and eslint, in check mode (nothing is rewritten)."""
    result = run("jlpm", "lint")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_jest_unit_tests_pass(node_modules: None) -> None:
    result = run("jlpm", "test")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "failed" not in output.split("Tests:")[-1].split("\n")[0], output[-2000:]


def test_ruff_is_clean() -> None:
    result = run(sys.executable, "-m", "ruff", "check", ".")
    assert result.returncode == 0, result.stdout[-3000:]
