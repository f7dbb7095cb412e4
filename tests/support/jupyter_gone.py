"""Waiting for a dashboard server to end once its Jupyter server is gone, and checking what
it left: shared by the fake-Jupyter and the real-lab tests of issue 57."""

from __future__ import annotations

import os
import re
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import psutil

from jupyterlab_nvdashboard.store.file import WriterLock
from tests.support.waiting import until

# The "within a few seconds", on a loaded 2-core machine: the watch looks four
# times a second, and a clean stop writes the store's last batch.
EXIT_WITHIN_S = 10.0


def has_ended(pid: int) -> bool:
    """Whether ``pid`` has ended: gone, or a zombie whose new parent has not reaped it."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def lock_is_free(store: Path) -> bool:
    """Whether the next server would become the store's writer now."""
    lock = WriterLock(store)
    try:
        return lock.try_acquire()
    finally:
        lock.release()


def lock_is_held(store: Path) -> bool:
    """Whether some process holds the store's writer lock now, read from ``/proc/locks``
    without taking it (a test that took it, even for a moment, could make the server a
    reader)."""
    try:
        inode = os.stat(f"{store}.writer").st_ino
    except FileNotFoundError:
        return False
    # "1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234 0 EOF": the file is MAJOR:MINOR:INODE.
    with open("/proc/locks") as locks:
        return any(re.search(rf"\s[0-9a-f]+:[0-9a-f]+:{inode}\s", line) for line in locks)


def stored_buckets(store: Path) -> int:
    with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        return db.execute("SELECT count(*) FROM buckets").fetchone()[0]


def seconds_to_end(pid: int, log: Path | None = None) -> float:
    """How long ``pid`` took to end from now (printed: ``-s`` shows it); it is killed, and
    the test fails with its output (``log``), when it runs past ``EXIT_WITHIN_S``."""
    started = time.monotonic()
    try:
        until(lambda: has_ended(pid), "the dashboard server exits", EXIT_WITHIN_S)
    except AssertionError:
        output = log.read_text()[-2000:] if log is not None and log.exists() else ""
        psutil.Process(pid).kill()
        raise AssertionError(f"the dashboard server outlived its Jupyter server:\n"
                             f"{output}") from None
    took = time.monotonic() - started
    print(f"the dashboard server ended {took:.2f} s after its Jupyter server")
    return took
