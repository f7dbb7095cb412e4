"""The store's file: opening it safely, its schema and its migrations.

What may be found at the store's path, and what happens (one log line each, never a crash):

- nothing: a new store is made (its folder too, private to the user): our application id
  first, written to the file itself, then each schema version in one transaction, so a
  kill or a full disk at any step leaves an empty file or a store of ours at some version,
  which the next start finishes;
- our store (SQLite, ``APPLICATION_ID``, owned by this user) at this or an older schema
  version: used, migrated first when older; set to mode 0600 first if others could write
  it (``permissions.py``);
- a file with our mark and version but not the tables that version has (made by hand or by
  another program): found with a read-only connection before anything writes to it; never
  opened for writing, never moved; no store;
- a folder other users can write (no sticky bit), or another user's folder: no store
  (``permissions.py``);
- our store from a newer version of nvdashboard: left as it is (that version still uses it),
  and this server keeps no store;
- our store, damaged: renamed aside (``history.sqlite.corrupt-<time>``, nothing deleted) and
  a new one made;
- a file that is not ours (not SQLite, another program's database, another user's file), a
  symbolic link, or not a regular file: never opened, never touched; no store;
- a folder that cannot be written, or a store another program keeps locked: no store.

The project only ever deletes what it made itself: the buckets past their retention.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .permissions import folder_problem, make_private

log = logging.getLogger("nvdashboard")

# 'NVDB' in the SQLite header's application_id field (bytes 68-71): marks the file as ours.
APPLICATION_ID = 0x4E564442
SQLITE_MAGIC = b"SQLite format 3\x00"
# Seconds a connection waits on another's lock before it reports "database is locked".
BUSY_TIMEOUT_S = 5.0

# Version -> the statements that bring a store from the version before it to this one.
# Version 1 is the first layout; a new version appends its statements here, never edits old
# ones, so every older store can be brought forward step by step.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        # A bucket of one tier: its start (epoch seconds), the GPUs it has columns for, how
        # many samples it holds, and its mean, min and max rows (buckets.Bucket.encode).
        """CREATE TABLE buckets (
               tier INTEGER NOT NULL, start_s INTEGER NOT NULL, layout INTEGER NOT NULL,
               samples INTEGER NOT NULL, data BLOB NOT NULL,
               PRIMARY KEY (tier, start_s, layout)) WITHOUT ROWID""",
        # The GPU indices a bucket's columns are for, as text ("0,1,2"); one row per set.
        "CREATE TABLE layouts (id INTEGER PRIMARY KEY, gpus TEXT NOT NULL UNIQUE)",
        # A finished workload run's verdict row (apps/workload.py), kept past the history.
        """CREATE TABLE runs (source TEXT PRIMARY KEY, finished_s REAL NOT NULL,
               row TEXT NOT NULL)""",
    ),
    2: (
        # The seconds a bucket's samples stand for: its weight when buckets are merged or
        # rolled up (buckets.py). A bucket of version 1 weighed its sample count; it now
        # counts as fully covered, so its minute weighs as much as any other.
        "ALTER TABLE buckets ADD COLUMN covered_s REAL NOT NULL DEFAULT 0",
        "UPDATE buckets SET covered_s = CASE tier WHEN 0 THEN 5.0 ELSE 60.0 END",
        # Layouts name devices by UUID (buckets.device_key). A version 1 layout named rows
        # ("0,1"), whose GPUs are not known now: kept as "index:0,index:1", drawn under
        # none of today's GPUs rather than under whichever has that row now.
        "UPDATE layouts SET gpus = 'index:' || replace(gpus, ',', ',index:') WHERE gpus != ''",
        # Buckets taken out of the history but kept, with why: stamped ahead of the wall
        # clock (written while it was set wrong), never trusted and never shown.
        """CREATE TABLE set_aside (why TEXT NOT NULL, tier INTEGER NOT NULL,
               start_s INTEGER NOT NULL, layout INTEGER NOT NULL, samples INTEGER NOT NULL,
               covered_s REAL NOT NULL, data BLOB NOT NULL)""",
    ),
    3: (
        # The layouts version 2 rewrote as "index:N" (a version 1 store's rows), and
        # whether the GPUs behind them can still be known (``upgraded_rows.py``): pending
        # (1) when this start is the upgrade from version 1 (set by ``FROM_VERSION_1``), so
        # the GPUs the first sample shows are the same machine's; 0 for a store upgraded to
        # version 2 by an earlier start, whose first GPUs were never noted.
        """CREATE TABLE upgraded_rows (layout INTEGER PRIMARY KEY,
               pending INTEGER NOT NULL DEFAULT 0)""",
        "INSERT INTO upgraded_rows (layout) SELECT id FROM layouts WHERE gpus LIKE 'index:%'",
    ),
    4: (
        # Each holder's evidence per device and bucket, and each bucket's pass mark (device,
        # user and kernel empty): what a cell's verdict rests on once its span has left the
        # in-memory history (``holders.py``). A store upgraded from version 3 gets it empty:
        # its older spans are judged from the device readings they kept, as before.
        """CREATE TABLE holder_buckets (
               tier INTEGER NOT NULL, start_s INTEGER NOT NULL, device TEXT NOT NULL,
               user TEXT NOT NULL, kernel TEXT NOT NULL, passes INTEGER NOT NULL,
               covered_s REAL NOT NULL, first_s REAL NOT NULL, last_s REAL NOT NULL,
               held_first REAL, held_last REAL, held_mean REAL, held_max REAL,
               sampled INTEGER NOT NULL, sampled_s REAL NOT NULL, sm_mean REAL, sm_share REAL,
               device_mean REAL, device_share REAL, device_signal TEXT NOT NULL,
               alone INTEGER NOT NULL, others TEXT NOT NULL, others_count INTEGER NOT NULL,
               PRIMARY KEY (tier, start_s, user, kernel, device)) WITHOUT ROWID""",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)
# Statements run in the transaction of the migration they are keyed by, only when the store
# was found at version 1 in this start: that migration then knows the upgrade happens now.
FROM_VERSION_1: dict[int, tuple[str, ...]] = {
    3: ("UPDATE upgraded_rows SET pending = 1",),
}


class StoreUnusable(Exception):
    """The store cannot be used; the message is the one log line that says why."""


@dataclass(frozen=True)
class Opened:
    connection: sqlite3.Connection
    path: Path
    migrated_from: int  # the schema version found (0: a new store)


def _header(path: Path) -> bytes:
    with open(path, "rb") as file:  # noqa: PTH123 - the first 100 bytes only
        return file.read(100)


def _never_made(header: bytes) -> bool:
    """Whether a SQLite header is that of a database whose main file never held a table: one
    page, schema cookie 0 (bytes 28-31 and 40-43), no application id, version 0."""
    def field(at: int) -> int:
        return int.from_bytes(header[at:at + 4], "big")

    return (len(header) >= 100 and field(28) == 1 and field(40) == 0 and field(60) == 0
            and field(68) == 0)


def _inspect(path: Path) -> str:
    """'new', 'ours' or 'empty'; raises StoreUnusable for what must not be opened."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "new"
    except OSError as error:
        raise StoreUnusable(f"cannot read {path}: {error.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise StoreUnusable(f"{path} is a symbolic link; the store never follows one "
                            "(name the real file with --store)")
    if not stat.S_ISREG(info.st_mode):
        raise StoreUnusable(f"{path} is not a regular file")
    if info.st_uid != os.getuid():
        raise StoreUnusable(f"{path} belongs to another user; left untouched")
    if info.st_size == 0:
        return "empty"  # made by us and killed before the first write: SQLite starts it
    try:
        header = _header(path)
    except OSError as error:
        raise StoreUnusable(f"cannot read {path}: {error.strerror}") from None
    if not header.startswith(SQLITE_MAGIC):
        raise StoreUnusable(f"{path} is not an nvdashboard store (not a SQLite file); "
                            "left untouched")
    application = int.from_bytes(header[68:72], "big") if len(header) >= 72 else 0
    if application != APPLICATION_ID and _never_made(header):
        # What a kill or a full disk left while an nvdashboard before the header-first
        # write_header made its store. Not provably ours, so not touched; but the line says
        # what it likely is, and how to get a store again.
        raise StoreUnusable(f"{path} is an SQLite file without tables or an owner's mark, "
                            "likely a store whose making was cut short by an older "
                            "nvdashboard; left untouched: remove it (and its -wal and -shm) "
                            "to start a new store")
    if application != APPLICATION_ID:
        raise StoreUnusable(f"{path} is another program's SQLite database; left untouched")
    # The schema version (SQLite's user_version, bytes 60-63), read before opening: a
    # store of a newer nvdashboard is not even opened for writing.
    version = int.from_bytes(header[60:64], "big") if len(header) >= 64 else 0
    if version > SCHEMA_VERSION:
        raise StoreUnusable(f"{path} was written by a newer nvdashboard (store version "
                            f"{version}, this one knows {SCHEMA_VERSION}); left as it is, so "
                            "that version keeps its history")
    return "ours"


def set_aside(path: Path, why: str) -> Path:
    """Rename a damaged store of ours (and its WAL and shared-memory files) out of the way."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists() and not source.is_symlink():
            os.replace(source, f"{aside}{suffix}")
    log.warning("history store %s: %s; set aside as %s, starting a new one", path, why,
                aside.name)
    return aside


def check_readable(path: Path) -> None:
    """Raises StoreUnusable when another server's store at ``path`` cannot be read by this
    one (not ours, or a newer schema); a store not made yet is fine (its writer makes it)."""
    if _inspect(path) != "ours":
        return
    try:
        connection = connect(path, read_only=True)
        try:
            version = pragma(connection, "user_version")
        finally:
            connection.close()
    except sqlite3.Error as error:
        raise StoreUnusable(f"cannot read {path}: {error}") from None
    if version > SCHEMA_VERSION:
        raise StoreUnusable(f"{path} was written by a newer nvdashboard (store version "
                            f"{version}, this one knows {SCHEMA_VERSION}); left as it is")


def tables(connection: sqlite3.Connection) -> dict[str, list[str]]:
    """Each table of a database and its columns' names, in order."""
    names = [name for (name,) in connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "ORDER BY name")]
    return {name: [column[1] for column in connection.execute(
        "SELECT * FROM pragma_table_info(?)", (name,))] for name in names}


def expected_tables(version: int) -> dict[str, list[str]]:
    """The tables a store of ``version`` has: its migrations, run on an empty database."""
    with contextlib.closing(sqlite3.connect(":memory:")) as memory:
        for target in sorted(v for v in MIGRATIONS if v <= version):
            for statement in MIGRATIONS[target]:
                memory.execute(statement)
        return tables(memory)


def check_tables(path: Path) -> None:
    """Raises StoreUnusable when the file at ``path``, marked as ours, lacks a table or a
    column its version has; read on a read-only connection (sqlite3.DatabaseError when it is
    damaged)."""
    with contextlib.closing(connect(path, read_only=True)) as connection:
        version = int(pragma(connection, "user_version") or 0)
        found = tables(connection)
    expected = expected_tables(min(version, SCHEMA_VERSION))
    wrong = sorted(name for name, columns in expected.items() if found.get(name) != columns)
    if wrong:
        raise StoreUnusable(f"{path} carries nvdashboard's mark (store version {version}) but "
                            f"not the tables of that version ({', '.join(wrong)} missing or "
                            "different), so nvdashboard did not make it; left untouched")


def pragma(connection: sqlite3.Connection, statement: str) -> object:
    """The first value a PRAGMA answers, its statement finished: one left open holds a
    read lock that makes a later checkpoint fail ("database table is locked")."""
    rows = connection.execute(f"PRAGMA {statement}").fetchall()
    return rows[0][0] if rows else None


def connect(path: Path, read_only: bool = False) -> sqlite3.Connection:
    """A connection with the store's settings: WAL, so readers never wait on the writer."""
    if read_only:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S,
                                     check_same_thread=False)
    else:
        connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    return connection


def _prepare(path: Path) -> Opened:
    """Open (and make or migrate) our store at ``path``; raises StoreUnusable, or
    sqlite3.DatabaseError when the file is damaged."""
    kind = _inspect(path)
    if kind == "new":
        # Private to the user (SQLite gives its WAL files the same mode), and never through
        # a link that appeared since the look above.
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY
                         | getattr(os, "O_NOFOLLOW", 0), 0o600))
    if kind in ("new", "empty"):
        write_header(path)
    if kind == "ours":
        # Before anything writes to it (a journal-mode switch, a chmod included): a file
        # with our mark but other tables is not one we made.
        check_tables(path)
    if kind in ("ours", "empty"):
        make_private(path)
    if kind == "ours":
        # Reads the whole file's structure: a damaged page shows here, not mid-write. On a
        # connection of its own: after a quick_check, a connection that switches a store
        # from rollback-journal mode to WAL cannot checkpoint ("database table is locked").
        with contextlib.closing(connect(path)) as check:
            problem = pragma(check, "quick_check")
        if problem != "ok":
            raise sqlite3.DatabaseError(str(problem)[:200])
    connection = connect(path)
    try:
        version = pragma(connection, "user_version")
        if version > SCHEMA_VERSION:
            raise StoreUnusable(f"{path} was written by a newer nvdashboard (store version "
                                f"{version}, this one knows {SCHEMA_VERSION}); left as it "
                                "is, so that version keeps its history")
        if kind == "ours" and str(pragma(connection, "journal_mode")).lower() != "wal":
            # Another tool (the sqlite3 shell, a backup) left it in rollback-journal mode.
            log.info("history store %s: found in rollback-journal mode (another tool opened "
                     "it); back to WAL", path)
        if str(pragma(connection, "journal_mode=WAL")).lower() != "wal":
            raise StoreUnusable(f"{path}: the file system does not allow SQLite's WAL mode")
        # A commit survives the process being killed; only a power loss may cost the
        # newest transactions (never the file's consistency).
        connection.execute("PRAGMA synchronous=NORMAL")
        migrate(connection, version)
        # The header, with its application id and version, into the main file now: that is
        # what another server (and the next start) looks at before opening it.
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return Opened(connection, path, version)
    except BaseException:
        connection.close()
        raise


def write_header(path: Path) -> None:
    """The first write to a new store: our application id into the main file's header, in
    one rollback-journal transaction, before WAL mode and the tables. From then on, whatever
    ends the first start (a kill, a full disk), the file is recognisably ours: a store at
    version 0 (or an empty file, when even this was rolled back) that the next start
    finishes. Written in WAL mode, the id would reach the main file only at the first
    checkpoint, and a kill before it left a file refused as another program's."""
    with contextlib.closing(connect(path)) as connection:
        connection.execute(f"PRAGMA application_id={APPLICATION_ID}")


def migrate(connection: sqlite3.Connection, version: int) -> None:
    """Apply each migration after ``version``, each in one explicit transaction with the
    version it brings: all of it or none of it, whenever the process ends. (Python's
    sqlite3 opens a transaction of its own only before INSERT, UPDATE and DELETE, so each
    CREATE or ALTER would otherwise commit alone.) ``FROM_VERSION_1`` runs in its
    migration's transaction when ``version`` (the version found) is 1."""
    for target in sorted(v for v in MIGRATIONS if v > version):
        connection.execute("BEGIN IMMEDIATE")
        try:
            for statement in MIGRATIONS[target]:
                connection.execute(statement)
            for statement in FROM_VERSION_1.get(target, ()) if version == 1 else ():
                connection.execute(statement)
            connection.execute(f"PRAGMA application_id={APPLICATION_ID}")
            connection.execute(f"PRAGMA user_version={target}")
            connection.execute("COMMIT")
        except BaseException:
            connection.rollback()
            raise


def make_folder(path: Path) -> None:
    """The store's folder, made private to the user when it is new; StoreUnusable if it
    cannot be made, or others could change what is in it (``permissions.py``)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as error:
        raise StoreUnusable(f"cannot make the store's folder {path.parent}: "
                            f"{error.strerror}") from None
    problem = folder_problem(path.parent)
    if problem is not None:
        raise StoreUnusable(problem)


def open_store(path: Path, on_set_aside: Callable[[Path], None] | None = None) -> Opened:
    """Our store at ``path``, ready to use; raises StoreUnusable (its one log line) when
    there can be none. A damaged store of ours is set aside and a new one made."""
    make_folder(path)
    try:
        return _prepare(path)
    except StoreUnusable:
        raise
    except sqlite3.OperationalError as error:
        # Locked by a program that holds its lock (not another nvdashboard: those share
        # it), a read-only folder (WAL needs to make its files), a full disk.
        raise StoreUnusable(f"cannot use {path}: {error}") from None
    except sqlite3.DatabaseError as error:
        try:
            aside = set_aside(path, f"damaged ({error})")
        except OSError as rename_error:
            raise StoreUnusable(f"{path} is damaged ({error}) and cannot be set aside: "
                                f"{rename_error.strerror}") from None
        if on_set_aside is not None:
            on_set_aside(aside)
        try:
            return _prepare(path)
        except (StoreUnusable, sqlite3.Error) as again:
            raise StoreUnusable(f"cannot start a new store at {path}: {again}") from None
    except OSError as error:
        raise StoreUnusable(f"cannot use {path}: {error.strerror or error}") from None


class WriterLock:
    """Which server of this user writes the store: the one holding an exclusive lock on
    ``<store>.writer`` (a file the store makes next to itself). The others read; the lock
    goes with the process, however it ends, so a reader takes over from a killed writer."""

    def __init__(self, path: Path) -> None:
        self.path = Path(f"{path}.writer")
        self._descriptor: int | None = None

    @property
    def held(self) -> bool:
        return self._descriptor is not None

    def try_acquire(self) -> bool:
        """True when this process holds the lock now; False when another one does. Raises
        StoreUnusable when the lock file cannot be made (a read-only folder, a link)."""
        import fcntl

        if self._descriptor is not None:
            return True
        flags = (os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0))
        try:
            descriptor = os.open(self.path, flags, 0o600)
        except OSError as error:
            raise StoreUnusable(f"cannot make {self.path}: {error.strerror}") from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)
            return False
        self._descriptor = descriptor
        return True

    def release(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing releases the lock
            self._descriptor = None
