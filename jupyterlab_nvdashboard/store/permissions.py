"""Who else may write the store: its folder and its file, checked before the store is used.

Another user who can write the store's file can rewrite the history; one who can write its
folder (without the sticky bit, which keeps each user to their own files) can replace the
file, or plant a link or a look-alike beside it. So, before the writer opens the store:

- a folder another user can write (group or others, no sticky bit) or that another user
  (not root) owns is refused: one log line, no store. The folder the store makes is private
  (0700); one found open was opened by someone, and changing a folder it did not make is not
  the store's to do;
- a store file of ours (owned by this user, with nvdashboard's mark and tables: ``file.py``
  checks those first) that others can write is set to 0600, with its ``-wal`` and ``-shm``:
  one log line. The file is the store's own, made 0600; whoever opened it up, the history
  in it is this user's. (One others may only read is left as it is: that is the user's
  choice to share it, and no one can rewrite it.)
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("nvdashboard")

PRIVATE_FILE = 0o600
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` is unsafe to keep the store in; None when only this user (or root) can
    change what is in it."""
    try:
        found = os.stat(folder)
    except OSError as error:
        return f"cannot read {folder}: {error.strerror}"
    mode = stat.S_IMODE(found.st_mode)
    if found.st_uid not in (os.geteuid(), 0) and not mode & stat.S_ISVTX:
        return (f"the store's folder {folder} belongs to uid {found.st_uid}, who could "
                "replace the store; left untouched (name a folder of yours with --store)")
    if mode & WRITABLE_BY_OTHERS and not mode & stat.S_ISVTX:
        return (f"the store's folder {folder} can be written by other users (mode "
                f"{mode:o}, no sticky bit), who could replace the store; left as it is "
                f"(chmod go-w {folder}, or name another with --store)")
    return None


def make_private(path: Path) -> None:
    """Set the store's file (and its ``-wal`` and ``-shm``, where there) to 0600 when others
    can write it; one log line. Only files of this user: another's is refused before
    (``file.py``)."""
    opened_up = []
    for suffix in ("", "-wal", "-shm"):
        part = Path(f"{path}{suffix}")
        try:
            # Through a descriptor, never a link that appeared since the look before.
            descriptor = os.open(part, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                                 | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue  # not there (or a link: file.py refuses it)
        try:
            found = os.fstat(descriptor)
            mode = stat.S_IMODE(found.st_mode)
            if (stat.S_ISREG(found.st_mode) and found.st_uid == os.geteuid()
                    and mode & WRITABLE_BY_OTHERS):
                os.fchmod(descriptor, PRIVATE_FILE)
                opened_up.append(f"{part.name} {mode:o}")
        finally:
            os.close(descriptor)
    if opened_up:
        log.warning("history store %s: other users could write it (%s); set to 600",
                    path, ", ".join(opened_up))
