"""A git revision checked out beside this tree, for the benchmarks that time it side by side
(``--baseline REV``): ``with revision_worktree("e0ff05b", folder) as tree: ...``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def revision_worktree(revision: str, folder: Path) -> Iterator[Path]:
    """``revision`` as a detached worktree in ``folder``, removed again afterwards; the
    tree's folder is named after the revision (what a benchmark's table calls it)."""
    tree = folder / revision
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree),
                    revision], check=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       check=False)
