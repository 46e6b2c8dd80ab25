"""A table's local snapshot: an SQLite file (stdlib ``sqlite3``) with every entry and the
offsets it reflects, so a table reopens by loading it and fetching only what came after.

Layout (one transaction writes all of it; a crash mid-write leaves the previous snapshot)::

    meta(name TEXT PRIMARY KEY, value TEXT)      -- format, stream, partitions, saved_ns
    positions(partition INTEGER PRIMARY KEY, next_offset INTEGER)
    chunks(seq INTEGER PRIMARY KEY, count INTEGER, keys BLOB, key_lengths BLOB,
           vals BLOB, value_lengths BLOB, revisions BLOB, partitions BLOB)
    expiries(key BLOB PRIMARY KEY, expires_ns INTEGER)   -- entries with a TTL only

Entries are stored in chunks of up to :data:`CHUNK_ENTRIES`, column by column: the keys
(values) of a chunk concatenated, with their lengths as little-endian u32s; revisions as
little-endian i64s; partitions as little-endian u16s. A chunk whose columns do not add up is
a damaged file: not used.

A load reads a few dozen rows and builds one key object and one int per entry, no more: a
chunk's keys come from one ``struct`` unpack, and each key maps to its index in the chunk's
columns (:class:`~jetsdk.table.view.Columns`), which the view keeps and builds an Entry
from when one is read. A save writes a loaded chunk that is still whole in the view from
its columns again, and builds the entries of the others. 1,000,000 entries of 100 B, CPU of
the load in a table's reopen: one SQLite row per entry (format 1) 1.41 s; chunks of
Entries 1.41 s; keys split by ``struct`` 1.04 s; values left in the columns 0.52 s (medians
of 5, 2-core VM shared at load 7-15, 2026-11-28; the dict of a million keys is most of
what is left).

A snapshot is used only for the same stream with the same partition count, and only if it
is younger than the stream's ``delete_retention`` (older, a tombstone it never saw may have
been compacted away: the table replays in full instead). Blocking: call from a worker
thread.
"""

from __future__ import annotations

import sqlite3
import struct
import sys
import time
from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

from jetsdk.table.view import CHUNK_BITS, ColumnChunk, Columns, Entry

FORMAT = "2"
"""Snapshot layout version (meta ``format``); 1 had one row per entry."""
CHUNK_ENTRIES = 50_000
"""Entries per row of ``chunks``."""

_BIG_ENDIAN = sys.byteorder == "big"
_CODES = tuple(f"{n}s" for n in range(1024))
"""The struct code of a piece of each length below 1,024 (no ``str`` per key at a load)."""
assert array("I").itemsize == 4
assert array("q").itemsize == 8
assert array("H").itemsize == 2


@attrs.frozen
class Snapshot:
    """What a snapshot file holds."""

    entries: dict[bytes, Entry | int]
    """Each key -> its index in :attr:`columns` (the view's lazy form: ``TableView.entries``)."""
    columns: Columns
    positions: list[int]
    saved_ns: int
    """When it was written (wall clock, ns)."""
    expiries: dict[bytes, int] = attrs.field(factory=dict)
    """Expiry (ns) of the entries with a TTL."""


class _Damaged(Exception):
    """A chunk's columns do not add up."""


def _pack(code: str, values: list[int]) -> bytes:
    packed = array(code, values)
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def _column(code: str, data: bytes, count: int) -> array[int]:
    column = array(code)
    if len(data) != count * column.itemsize:
        raise _Damaged
    column.frombytes(data)
    if _BIG_ENDIAN:
        column.byteswap()
    return column


def _chunk_row(seq: int, chunk: list[Entry]) -> tuple[object, ...]:
    keys = [e.key for e in chunk]
    values = [e.value for e in chunk]
    return (
        seq,
        len(chunk),
        b"".join(keys),
        _pack("I", list(map(len, keys))),
        b"".join(values),
        _pack("I", list(map(len, values))),
        _pack("q", [e.revision for e in chunk]),
        _pack("H", [e.partition for e in chunk]),
    )


def _kept_row(seq: int, keys: list[bytes], chunk: ColumnChunk) -> tuple[object, ...]:
    """A chunk loaded from a snapshot whose every entry is still in the view, as loaded:
    written again from its columns."""
    return (
        seq,
        len(keys),
        b"".join(keys),
        _pack("I", list(map(len, keys))),
        chunk.values,
        _array_bytes(chunk.lengths),
        _array_bytes(chunk.revisions),
        _array_bytes(chunk.partitions),
    )


def _array_bytes(column: array[int]) -> bytes:
    if _BIG_ENDIAN:
        column = array(column.typecode, column)
        column.byteswap()
    return column.tobytes()


def _chunk_rows(
    entries: Mapping[bytes, Entry | int], columns: Columns | None
) -> Iterator[tuple[object, ...]]:
    """The rows of ``chunks`` for ``entries`` (a view's: an int is an index in ``columns``).

    A loaded chunk still wholly in the view is written from its columns; the entries of
    the other loaded chunks are built and written with the view's own entries. The indexes
    are in increasing order in ``entries``: they were added in that order at the load and
    an index is never added again (a record applied to its key replaces it with an Entry).
    """
    fresh: list[Entry] = []
    keys: list[bytes] = []
    indexes: list[int] = []
    for key, found in entries.items():
        if isinstance(found, int):
            keys.append(key)
            indexes.append(found)
        else:
            fresh.append(found)
    if indexes != sorted(indexes):  # not a view's order (see above): sort them
        pairs = sorted(zip(indexes, keys))
        indexes, keys = [i for i, _ in pairs], [k for _, k in pairs]
    seq = 0
    if columns is not None and indexes:
        hi = 0
        for number, chunk in enumerate(columns.chunks):
            lo, hi = hi, bisect_left(indexes, (number + 1) << CHUNK_BITS, hi)
            if hi - lo == len(chunk.revisions):
                yield _kept_row(seq, keys[lo:hi], chunk)
                seq += 1
            elif hi > lo:
                first = number << CHUNK_BITS
                positions = [index - first for index in indexes[lo:hi]]
                fresh.extend(map(chunk.entry, keys[lo:hi], positions))
    for start in range(0, len(fresh), CHUNK_ENTRIES):
        yield _chunk_row(seq, fresh[start : start + CHUNK_ENTRIES])
        seq += 1


def _split(blob: bytes, lengths: array[int]) -> tuple[bytes, ...]:
    """The pieces of ``blob`` of the given lengths, in order: one ``struct`` unpack of
    ``"<len>s"`` per piece (all pieces built in C; ``"12s" * count`` when they are all
    alike, as keys often are)."""
    if not lengths:
        fmt = ""
    elif (size := min(lengths)) == (longest := max(lengths)):
        fmt = f"{size}s" * len(lengths)
    elif longest < len(_CODES):
        fmt = "".join(map(_CODES.__getitem__, lengths))
    else:
        fmt = "s".join(map(str, lengths)) + "s"
    try:
        return struct.Struct(fmt).unpack(blob)  # not struct.unpack: no cache of the format
    except struct.error:
        raise _Damaged from None


def save(
    path: Path,
    stream: str,
    entries: Mapping[bytes, Entry | int],
    positions: list[int],
    expiries: dict[bytes, int] | None = None,
    columns: Columns | None = None,
) -> None:
    """Write a snapshot of ``entries`` (key -> Entry, or its index in ``columns``: a
    view's) reflecting ``positions``, replacing the file's previous content atomically (one
    transaction)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("BEGIN IMMEDIATE")
        db.execute("DROP TABLE IF EXISTS entries")  # format 1
        db.execute("CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT)")
        db.execute(
            "CREATE TABLE IF NOT EXISTS positions"
            "(partition INTEGER PRIMARY KEY, next_offset INTEGER)"
        )
        db.execute(
            "CREATE TABLE IF NOT EXISTS chunks(seq INTEGER PRIMARY KEY, count INTEGER,"
            " keys BLOB, key_lengths BLOB, vals BLOB, value_lengths BLOB, revisions BLOB,"
            " partitions BLOB)"
        )
        db.execute(
            "CREATE TABLE IF NOT EXISTS expiries(key BLOB PRIMARY KEY, expires_ns INTEGER)"
            " WITHOUT ROWID"
        )
        for table in ("meta", "positions", "chunks", "expiries"):
            db.execute(f"DELETE FROM {table}")
        meta = {
            "format": FORMAT,
            "stream": stream,
            "partitions": str(len(positions)),
            "saved_ns": str(time.time_ns()),
        }
        db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        db.executemany("INSERT INTO positions VALUES (?, ?)", enumerate(positions))
        for row in _chunk_rows(entries, columns):
            db.execute("INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
        db.executemany("INSERT INTO expiries VALUES (?, ?)", (expiries or {}).items())
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    finally:
        db.close()


def _load_chunks(
    db: sqlite3.Connection, partitions: int
) -> tuple[dict[bytes, Entry | int], Columns]:
    """Each key -> its index in the columns (:class:`~jetsdk.table.view.Columns`: the
    values stay in the chunk's blob, no object per value)."""
    entries: dict[bytes, Entry | int] = {}
    columns = Columns()
    rows = db.execute(
        "SELECT count, keys, key_lengths, vals, value_lengths, revisions, partitions"
        " FROM chunks ORDER BY seq"
    )
    for count, keys_blob, key_lengths, values_blob, value_lengths, revs, parts in rows:
        if not 0 <= count < 1 << CHUNK_BITS:
            raise _Damaged
        keys = _split(keys_blob, _column("I", key_lengths, count))
        lengths = _column("I", value_lengths, count)
        if sum(lengths) != len(values_blob):
            raise _Damaged
        in_partition = _column("H", parts, count)
        if in_partition and max(in_partition) >= partitions:
            raise _Damaged
        revisions = _column("q", revs, count)
        base = len(columns.chunks) << CHUNK_BITS
        columns.chunks.append(ColumnChunk(values_blob, lengths, revisions, in_partition))
        entries.update(zip(keys, range(base, base + count)))
    return entries, columns


def load(path: Path, stream: str, partitions: int) -> Snapshot | None:
    """The snapshot in ``path``, or None if there is none or it is of another stream,
    partition count or format (or unreadable or damaged: a table then replays in full)."""
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
        entries, columns = _load_chunks(db, partitions)
        expiries = dict(db.execute("SELECT key, expires_ns FROM expiries"))
        saved_ns = int(meta.get("saved_ns", "0"))
        return Snapshot(entries, columns, positions, saved_ns, expiries)
    except (sqlite3.Error, ValueError, TypeError, _Damaged):
        return None
    finally:
        db.close()
