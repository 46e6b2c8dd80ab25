"""A table view loaded from a snapshot keeps the entries in the snapshot's columns until they
are read (issue 38 item 3, ``jetsdk.table.view.Columns``): every read answers as if they
were Entries, a record applied later replaces them, and a save writes the chunks still whole
from their columns and builds the others. Real SQLite files, no server."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from jetsdk.table import snapshot
from jetsdk.table.view import Entry, TableView

CHUNK = 10
PARTITIONS = 3


def _entries(n: int) -> list[Entry]:
    return [
        Entry(b"k%03d" % i + b"x" * (i % 4), b"v%d" % i * (1 + i % 5), 100 + i, i % PARTITIONS)
        for i in range(n)
    ]


def _load(path: Path, clock: int = 0) -> TableView:
    found = snapshot.load(path, "s", PARTITIONS)
    assert found is not None
    view = TableView(PARTITIONS, found.entries, found.columns, clock=lambda: clock)
    view.positions = found.positions
    view.restore_expiries(found.expiries)
    return view


@pytest.fixture
def saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[Entry]]:
    monkeypatch.setattr(snapshot, "CHUNK_ENTRIES", CHUNK)
    path = tmp_path / "t.sqlite"
    entries = _entries(35)  # chunks of 10, 10, 10, 5
    snapshot.save(path, "s", {e.key: e for e in entries}, [1000] * PARTITIONS)
    return path, entries


def _chunk_counts(path: Path) -> list[int]:
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute("SELECT count FROM chunks ORDER BY seq")]
    finally:
        db.close()


def test_reads_answer_from_the_columns(saved: tuple[Path, list[Entry]]) -> None:
    path, entries = saved
    view = _load(path)
    assert view.columns is not None
    assert len(view.entries) == 35
    assert all(isinstance(i, int) for i in view.entries.values())  # nothing built yet
    for e in entries:
        found = view.entry(e.key)
        assert found == e
        assert type(found) is Entry
        assert view.live(e.key) == e
    assert view.entry(b"absent") is None
    assert view.all() == entries
    assert list(view) == entries


def test_applied_records_replace_loaded_entries_and_save_keeps_whole_chunks(
    saved: tuple[Path, list[Entry]],
) -> None:
    path, entries = saved
    view = _load(path)
    by_key = {e.key: e for e in entries}
    # Partition 0: overwrite an entry of chunk 1, delete one of chunk 2, add a new key.
    changed = Entry(entries[12].key, b"new", 1000, 0)
    gone = Entry(entries[21].key, b"", 1001, 0)
    added = Entry(b"added", b"a", 1002, 0)
    assert entries[12].partition == entries[21].partition == 0
    view.apply(0, [changed, gone, added], {}, 1003)
    by_key[changed.key] = changed
    del by_key[gone.key]
    by_key[added.key] = added
    assert view.entry(changed.key) == changed
    assert view.entry(gone.key) is None
    assert {e.key: e for e in view.all()} == by_key
    assert view.columns is not None  # chunks 0 and 3 are still referred to
    snapshot.save(path, "s", dict(view.entries), view.positions, None, view.columns)
    # Chunks 0 and 3 whole again from their columns; the 18 entries left of chunks 1 and 2
    # with the 2 applied ones rebuilt in chunks of 10.
    assert _chunk_counts(path) == [10, 5, 10, 10]
    again = _load(path)
    assert {e.key: e for e in again.all()} == by_key
    assert again.positions == [1003, 1000, 1000]


def test_a_view_that_replaced_every_loaded_entry_drops_the_columns(
    saved: tuple[Path, list[Entry]],
) -> None:
    path, entries = saved
    view = _load(path)
    for partition in range(PARTITIONS):
        mine = [e for e in entries if e.partition == partition]
        view.apply(
            partition,
            [Entry(e.key, b"z", 1000 + i, partition) for i, e in enumerate(mine)],
            {},
            None,
        )
    assert view.columns is not None
    assert all(e.value == b"z" for e in view.all())
    assert view.columns is None


def test_drop_partition_and_watch_see_loaded_entries(saved: tuple[Path, list[Entry]]) -> None:
    path, entries = saved
    view = _load(path)
    watcher = view.watch(b"k00", initial=True)
    assert watcher.initial == [e for e in entries if e.key.startswith(b"k00")]
    assert view.drop_partition(1) == sum(e.partition == 1 for e in entries)
    assert view.all() == [e for e in entries if e.partition != 1]
    view.unwatch(watcher)


def test_expiry_of_a_loaded_entry(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    entries = _entries(5)
    expiries = {entries[2].key: 50, entries[3].key: 500}
    snapshot.save(path, "s", {e.key: e for e in entries}, [0] * PARTITIONS, expiries)
    view = _load(path, clock=100)
    assert view.expire() == pytest.approx(400 / 1e9)
    assert view.entry(entries[2].key) is None
    assert view.entry(entries[3].key) == entries[3]
    assert len(view.entries) == 4
