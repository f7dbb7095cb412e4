"""Which nvidia-ml-py runs, and over which NVML library.

nvidia-ml-py is one pure-Python file (``pynvml.py``) that loads ``libnvidia-ml.so.1`` into
its module-level ``nvmlLib`` on the first ``nvmlInit`` and looks every C symbol up there.
So the reader can run the real binding over any object that plays that library:

- ``load_binding()``: the installed nvidia-ml-py over the real driver (``import pynvml``);
- ``load_binding(library)``: a private copy of that binding whose ``nvmlLib`` is ``library``
  (the server's composition root passes the simulated driver's, ``simnvml/``);
- ``load_binding(library, release)``: the same with another release's ``pynvml.py``, read
  from an nvidia-ml-py wheel or a ``pynvml.py`` file (the tests run every release they
  fetched this way).

A private copy is the binding's own code, executed unchanged in a module of its own, so two
simulated machines in one process never share a library, and the real driver's module is
never touched. ``binding_version`` says which release a module is.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import itertools
import re
import sys
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

_COPIES = itertools.count()
_WHEEL_VERSION = re.compile(r"nvidia_ml_py-(\d+(?:\.\d+)*)-")


class BindingError(ImportError):
    """No nvidia-ml-py could be loaded from where it was asked for (one line)."""


def installed_version() -> str:
    """The installed nvidia-ml-py's release number, or '' when it is not installed."""
    try:
        return importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        return ""


def binding_version(module: Any) -> str:
    """The nvidia-ml-py release ``module`` is ('' when unknown); pynvml has no __version__."""
    version = getattr(module, "__version__", None)
    if isinstance(version, str) and version:
        return version
    return installed_version() if getattr(module, "__name__", "") == "pynvml" else ""


@functools.lru_cache(maxsize=16)
def _compiled(release: str | None) -> tuple[types.CodeType, str, str]:
    """(code, file name, version) of a release's pynvml.py, compiled once per process."""
    if release is None:
        spec = importlib.util.find_spec("pynvml")
        if spec is None or spec.origin is None:
            raise BindingError("nvidia-ml-py is not installed (pip install nvidia-ml-py)")
        path, version = spec.origin, installed_version()
        source = Path(path).read_bytes()
    else:
        path = release
        try:
            if release.endswith(".whl"):
                with zipfile.ZipFile(release) as wheel:
                    source = wheel.read("pynvml.py")
                found = _WHEEL_VERSION.search(Path(release).name)
                version = found.group(1) if found else ""
            else:
                source = Path(release).read_bytes()
                version = ""
        except (OSError, KeyError, zipfile.BadZipFile) as error:
            raise BindingError(f"cannot read nvidia-ml-py from {release}: {error}") from None
    return compile(source, path, "exec"), path, version


def load_binding(library: Any = None, release: str | Path | None = None) -> types.ModuleType:
    """nvidia-ml-py (the installed one, or ``release``), over ``library`` when one is given.

    Raises ImportError (BindingError) with one line when the binding cannot be loaded."""
    if library is None and release is None:
        import pynvml

        return pynvml
    code, path, version = _compiled(None if release is None else str(release))
    name = f"pynvml_copy_{next(_COPIES)}"
    module = types.ModuleType(name, f"nvidia-ml-py {version} from {path}")
    module.__file__ = path
    # The binding builds its error classes from sys.modules[__name__] while it runs.
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - the binding's own, unchanged code
    finally:
        del sys.modules[name]
    module.__version__ = version  # type: ignore[attr-defined]
    if library is not None:
        module.nvmlLib = library  # type: ignore[attr-defined] - what _LoadNvmlLibrary sets
    return module


def binding_loader(library: Any = None, release: str | Path | None = None
                   ) -> Callable[[], types.ModuleType]:
    """A ``load_library`` for ``NvmlReader``: loads the binding once, on first use."""
    loaded: list[types.ModuleType] = []

    def load() -> types.ModuleType:
        if not loaded:
            loaded.append(load_binding(library, release))
        return loaded[0]

    return load
