"""A git revision checked out beside this tree, for the benchmarks that time it side by side
(``--baseline REV``): ``with revision_worktree("e0ff05b", folder) as tree: ...``, or
``in_turn(...)`` to run a benchmark on both in alternating fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.figures import load_line

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


def in_turn(revision: str, rounds: int, script: str, arguments: Sequence[str],
            root_variable: str) -> dict[str, list[dict[str, Any]]]:
    """Each side's figures, a round at a time: ``script`` run with ``arguments`` and
    ``--json FILE`` in a fresh process on ``revision``'s package (checked out in a temporary
    worktree), then on this tree's, ``rounds`` times; the package is the one the script
    puts first on ``sys.path`` from ``root_variable``. In turn, so drift in the machine's
    load hits both sides alike; the sides are named ``revision`` and "this tree"."""
    sides: dict[str, list[dict[str, Any]]] = {revision: [], "this tree": []}
    with tempfile.TemporaryDirectory(prefix="nvdashboard-baseline-") as folder, \
            revision_worktree(revision, Path(folder)) as tree:
        for round_number in range(rounds):
            for side, root in ((revision, tree), ("this tree", ROOT)):
                print(f"... round {round_number + 1}/{rounds}: {side} (load {load_line()})",
                      file=sys.stderr, flush=True)
                out = Path(folder) / "out.json"
                subprocess.run([sys.executable, script, *arguments, "--json", str(out)],
                               check=True, stdout=subprocess.DEVNULL,
                               env={**os.environ, root_variable: str(root)})
                sides[side].append(json.loads(out.read_text()))
    return sides
