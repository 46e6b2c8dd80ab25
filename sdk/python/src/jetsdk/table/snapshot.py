"""A table's local snapshot: an SQLite file (stdlib ``sqlite3``) with every entry and the
offsets it reflects, so a table reopens by loading it and fetching only what came after.

Layout (one transaction writes all of it; a crash mid-write leaves the previous snapshot)::

    meta(name TEXT PRIMARY KEY, value TEXT)      -- format, stream, partitions, saved_ns
    positions(partition INTEGER PRIMARY KEY, next_offset INTEGER)
    entries(key BLOB PRIMARY KEY, value BLOB, revision INTEGER, partition INTEGER)

A snapshot is used only for the same stream with the same partition count, and only if it
is younger than the stream's ``delete_retention`` (older, a tombstone it never saw may have
been compacted away: the table replays in full instead). Blocking: call from a worker
thread.
"""

from __future__ import annotations

import gc
import sqlite3
import time
from pathlib import Path

import attrs

from jetsdk.table.view import Entry

FORMAT = "1"
"""Snapshot layout version (meta ``format``)."""
WRITE_CHUNK = 50_000
"""Rows per executemany call."""


@attrs.frozen
class Snapshot:
    """What a snapshot file holds."""

    entries: dict[bytes, Entry]
    positions: list[int]
    saved_ns: int
    """When it was written (wall clock, ns)."""


def save(path: Path, stream: str, entries: list[Entry], positions: list[int]) -> None:
    """Write a snapshot of ``entries`` reflecting ``positions``, replacing the file's
    previous content atomically (one transaction)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("BEGIN IMMEDIATE")
        db.execute("CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT)")
        db.execute(
            "CREATE TABLE IF NOT EXISTS positions"
            "(partition INTEGER PRIMARY KEY, next_offset INTEGER)"
        )
        db.execute(
            "CREATE TABLE IF NOT EXISTS entries"
            "(key BLOB PRIMARY KEY, value BLOB, revision INTEGER, partition INTEGER)"
            " WITHOUT ROWID"
        )
        for table in ("meta", "positions", "entries"):
            db.execute(f"DELETE FROM {table}")
        meta = {
            "format": FORMAT,
            "stream": stream,
            "partitions": str(len(positions)),
            "saved_ns": str(time.time_ns()),
        }
        db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        db.executemany("INSERT INTO positions VALUES (?, ?)", enumerate(positions))
        for start in range(0, len(entries), WRITE_CHUNK):
            db.executemany(
                "INSERT INTO entries VALUES (?, ?, ?, ?)",
                (
                    (e.key, e.value, e.revision, e.partition)
                    for e in entries[start : start + WRITE_CHUNK]
                ),
            )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    finally:
        db.close()


def load(path: Path, stream: str, partitions: int) -> Snapshot | None:
    """The snapshot in ``path``, or None if there is none or it is of another stream,
    partition count or format (or unreadable: a table then replays in full)."""
    if not path.exists():
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        meta = dict(db.execute("SELECT name, value FROM meta").fetchall())
        if (
            meta.get("format") != FORMAT
            or meta.get("stream") != stream
            or meta.get("partitions") != str(partitions)
        ):
            return None
        positions = [0] * partitions
        for partition, offset in db.execute("SELECT partition, next_offset FROM positions"):
            if 0 <= partition < partitions:
                positions[partition] = offset
        rows = db.execute("SELECT key, value, revision, partition FROM entries")
        new = tuple.__new__  # rows are (key, value, revision, partition): Entry's fields
        collecting = gc.isenabled()
        gc.disable()  # a million new tuples would run the cycle collector again and again
        try:
            entries = {row[0]: new(Entry, row) for row in rows}
        finally:
            if collecting:
                gc.enable()
        return Snapshot(entries, positions, int(meta.get("saved_ns", "0")))
    except (sqlite3.Error, ValueError):
        return None
    finally:
        db.close()
