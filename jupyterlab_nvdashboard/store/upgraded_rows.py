"""A version 1 store's GPU history, keyed by the UUIDs of its GPUs after the upgrade.

Version 1 named a bucket's GPUs by row number ("0,1"); version 2 keys them by UUID and
rewrote the old layouts as "index:0,index:1", which no GPU of today answers to: after the
upgrade, the stored GPU history was drawn under no GPU. A store is one user's on one machine,
so the GPUs the server sees at its first sample after the upgrade from version 1 are the ones
that history was read from: each row number becomes that row's UUID then, once
(``upgraded_rows.pending``, set by migration 3 only when it runs in the upgrade from version
1). A store upgraded to version 2 by an earlier start, or a row with no GPU at that first
sample, keeps "index:N": its GPU is not known, so its series are never drawn under
whichever GPU has that row now (``buckets.rows_now``), but under a device of its own,
"GPU N (before upgrade)" (``buckets.rows_before_upgrade``, ``before_upgrade_label``), which
the timelines' long windows and ``/history.csv`` show; a diagnosis, which judges today's
GPUs, leaves it out. Its host readings are drawn as ever.

Functions over a connection, each in the caller's transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from .buckets import (
    ROW_KEY_PREFIX,
    device_key,
    layout_text,
    parse_layout,
    rows_before_upgrade,
)


def pending(connection: sqlite3.Connection) -> bool:
    """Whether row-numbered layouts still wait for the first sample's UUIDs."""
    return connection.execute(
        "SELECT EXISTS (SELECT 1 FROM upgraded_rows WHERE pending = 1)").fetchone()[0] == 1


def key_by_uuid(connection: sqlite3.Connection, uuids: Mapping[int, str]) -> int:
    """Give each pending layout's row numbers the UUIDs ``uuids`` (row -> UUID, the first
    sample's) names; returns the layouts rewritten. Nothing is done, and they stay pending,
    when ``uuids`` names no GPU (NVML not read yet, or no driver now)."""
    if not uuids:
        return 0
    rows = connection.execute(
        "SELECT u.layout, l.gpus FROM upgraded_rows u JOIN layouts l ON l.id = u.layout "
        "WHERE u.pending = 1").fetchall()
    rewritten = 0
    for layout_id, text in rows:
        keys = parse_layout(text)
        if keys is None:
            continue
        keyed = tuple(device_key(int(key[len(ROW_KEY_PREFIX):]), uuids.get(
            int(key[len(ROW_KEY_PREFIX):]))) if key.startswith(ROW_KEY_PREFIX) else key
            for key in keys)
        new_text = layout_text(keyed)
        existing = connection.execute("SELECT id FROM layouts WHERE gpus = ?",
                                      (new_text,)).fetchone()
        if existing is None:
            connection.execute("UPDATE layouts SET gpus = ? WHERE id = ?",
                               (new_text, layout_id))
        else:
            # Today's GPUs already have this layout: the old buckets join it (a bucket at a
            # start it already holds, which a version 1 store cannot have, stays apart).
            connection.execute("UPDATE OR IGNORE buckets SET layout = ? WHERE layout = ?",
                               (existing[0], layout_id))
        rewritten += 1
    connection.execute("UPDATE upgraded_rows SET pending = 0")
    return rewritten



def kept_by_row(connection: sqlite3.Connection) -> frozenset[tuple[str, ...]]:
    """The layouts the upgrade from version 1 rewrote and no first sample will key any more
    (not pending): their "index:N" devices are GPUs from before the upgrade."""
    found = set()
    for (text,) in connection.execute(
            "SELECT l.gpus FROM upgraded_rows u JOIN layouts l ON l.id = u.layout "
            "WHERE u.pending = 0"):
        layout = parse_layout(text)
        if layout is not None:
            found.add(layout)
    return frozenset(found)


def rows_kept(connection: sqlite3.Connection) -> tuple[int, ...]:
    """The rows of the GPUs from before the upgrade that still have stored buckets: the
    devices a timeline draws beside today's GPUs (none once the retention has taken them)."""
    rows: set[int] = set()
    for layout in kept_by_row(connection):
        before = {row for row in rows_before_upgrade(layout, upgraded=True) if row is not None}
        if not before - rows:
            continue
        # The old buckets are the oldest: a scan of a tier by its start finds one at once.
        held = connection.execute(
            "SELECT EXISTS (SELECT 1 FROM buckets WHERE layout = (SELECT id FROM layouts "
            "WHERE gpus = ?))", (layout_text(layout),)).fetchone()[0]
        if held:
            rows |= before
    return tuple(sorted(rows))
