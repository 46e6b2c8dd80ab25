"""The table snapshot's file layout (issue 38 item 3, ``jetsdk.table.snapshot``): entries
stored column by column in chunks of ``CHUNK_ENTRIES`` (a reopen reads a few dozen SQLite
rows, not one per key), read back exactly; a damaged chunk or a format 1 file is not used
(the table then replays in full). Real SQLite files, no server."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from jetsdk.table import snapshot
from jetsdk.table.view import Entry, TableView


def _by_key(entries: list[Entry]) -> dict[bytes, Entry]:
    return {e.key: e for e in entries}


def _loaded(found: snapshot.Snapshot | None) -> dict[bytes, Entry]:
    """The entries of a loaded snapshot, built from its columns (as a table's view does)."""
    assert found is not None
    view = TableView(len(found.positions), found.entries, found.columns)
    return {e.key: e for e in view.all()}


def _entries(n: int) -> list[Entry]:
    return [
        Entry(b"k%d" % i + b"\x00" * (i % 3), b"v" * (1 + i % 300), i * 7 + (1 << 40), i % 5)
        for i in range(n)
    ]


def test_roundtrip_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "CHUNK_ENTRIES", 1000)
    path = tmp_path / "t.sqlite"
    entries = _entries(2500)
    expiries = {entries[1].key: 123 << 40, entries[2000].key: 7}
    snapshot.save(path, "s", _by_key(entries), [10, 20, 30, 40, 50], expiries)
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM chunks").fetchone() == (3,)
    assert db.execute("SELECT sum(count) FROM chunks").fetchone() == (2500,)
    db.close()
    loaded = snapshot.load(path, "s", 5)
    assert loaded is not None
    assert loaded.positions == [10, 20, 30, 40, 50]
    assert _loaded(loaded) == {e.key: e for e in entries}
    assert all(type(e) is Entry for e in _loaded(loaded).values())
    assert loaded.expiries == expiries
    assert snapshot.load(path, "other", 5) is None
    assert snapshot.load(path, "s", 4) is None
    # Saved again with fewer entries: the old chunks are gone.
    snapshot.save(path, "s", _by_key(entries[:10]), [1, 1, 1, 1, 1])
    again = snapshot.load(path, "s", 5)
    assert again is not None
    assert len(again.entries) == 10


def test_roundtrip_of_same_length_keys_and_values(tmp_path: Path) -> None:
    # Keys and values all of one length are split with one repeated struct code.
    path = tmp_path / "t.sqlite"
    entries = [Entry(b"key-%08d" % i, b"%0100d" % i, i, i % 2) for i in range(3000)]
    snapshot.save(path, "s", _by_key(entries), [0, 0])
    loaded = snapshot.load(path, "s", 2)
    assert loaded is not None
    assert _loaded(loaded) == {e.key: e for e in entries}
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE chunks SET vals = substr(vals, 1, length(vals) - 1) || x'00ff'")
    db.close()
    assert snapshot.load(path, "s", 2) is None


def test_roundtrip_of_keys_of_any_length(tmp_path: Path) -> None:
    # Keys of different lengths, one over the struct codes kept ready (1,024 bytes).
    path = tmp_path / "t.sqlite"
    entries = [Entry(b"k" * n, b"v%d" % n, n, 0) for n in (1, 5, 1023, 1024, 4000, 0)]
    snapshot.save(path, "s", _by_key(entries), [0])
    assert _loaded(snapshot.load(path, "s", 1)) == _by_key(entries)


def test_empty_table(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    snapshot.save(path, "s", {}, [0, 0])
    loaded = snapshot.load(path, "s", 2)
    assert loaded is not None
    assert loaded.entries == {}
    assert loaded.positions == [0, 0]


@pytest.mark.parametrize(
    ("column", "damage"),
    [
        ("key_lengths", "substr(key_lengths, 1, length(key_lengths) - 4)"),
        ("vals", "substr(vals, 2)"),
        ("revisions", "x'00'"),
        ("partitions", "zeroblob(length(partitions)) || x'0900'"),
        ("count", "count + 1"),
    ],
)
def test_damaged_chunk_is_not_used(tmp_path: Path, column: str, damage: str) -> None:
    path = tmp_path / "t.sqlite"
    snapshot.save(path, "s", _by_key(_entries(100)), [0, 0, 0, 0, 0])
    db = sqlite3.connect(path)
    with db:
        db.execute(f"UPDATE chunks SET {column} = {damage}")
    db.close()
    assert snapshot.load(path, "s", 5) is None


def test_format_1_file_is_not_used_and_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT)")
        db.execute("CREATE TABLE positions(partition INTEGER PRIMARY KEY, next_offset INTEGER)")
        db.execute("CREATE TABLE entries(key BLOB PRIMARY KEY, value BLOB, revision, partition)")
        db.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("format", "1"), ("stream", "s"), ("partitions", "1"), ("saved_ns", "1")],
        )
        db.execute("INSERT INTO entries VALUES (x'61', x'62', 0, 0)")
    db.close()
    assert snapshot.load(path, "s", 1) is None
    snapshot.save(path, "s", _by_key(_entries(1)), [5])
    loaded = snapshot.load(path, "s", 1)
    assert loaded is not None
    assert loaded.positions == [5]
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert "entries" not in tables
