"""Shim for people and tools that still run ``python setup.py``.

The package, including the JupyterLab extension build (jlpm via
hatch-jupyter-builder), is defined entirely in ``pyproject.toml``. There is
nothing for setuptools to do here, so this script only says where to go and
exits with status 2 instead of half-building something.
"""

import sys

MESSAGE = (
    "This project builds from pyproject.toml: "
    'run `pip install .` (or `pip install -e ".[test]"`) instead.\n'
)

sys.stderr.write(MESSAGE)
sys.exit(2)
