"""The dependency floors in pyproject.toml exclude the server-side advisories the project
has checked (each cited there), and the installed releases meet them."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
# The first release with every fix cited in pyproject.toml (GHSA-3hv7-mjh2-fv65 in 6.5.9,
# CVE-2026-123534 in 6.6, the percent-decoding DoS in 6.6.1).
FLOORS = {"tornado": Version("6.6.1")}


def test_floors_exclude_the_cited_advisories() -> None:
    # Python 3.10 has no tomllib: the dependency list is read as the quoted lines it is.
    block = PYPROJECT.read_text().split("\ndependencies = [", 1)[1].split("]", 1)[0]
    dependencies = re.findall(r'"([^"]+)"', block)
    requirements = {Requirement(text).name: Requirement(text) for text in dependencies}
    for name, floor in FLOORS.items():
        specifier = requirements[name].specifier
        assert not specifier.contains(Version("6.6.0")), f"{name} {specifier} admits 6.6.0"
        assert specifier.contains(floor), f"{name} {specifier} refuses {floor}"
        assert Version(version(name)) >= floor, f"installed {name} {version(name)}"
    text = PYPROJECT.read_text()
    for advisory in ("GHSA-3hv7-mjh2-fv65", "CVE-2026-123534"):
        assert advisory in text, advisory
