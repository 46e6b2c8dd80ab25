"""The in-memory state of a table: the latest value and revision per key, the next offset
to read per partition, and the watchers to tell about changes.

Single-threaded (the table's event loop); no I/O. Records are applied in each partition's
offset order; a record below a partition's position is ignored (already applied).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from jetsdk.codec.record import Record

_new_tuple = tuple.__new__
"""Builds a NamedTuple without its Python-level ``__new__`` (per record)."""

MAX_WATCH_BUFFER = 10_000
"""Changes a watcher may have waiting; past that it is closed with :class:`WatchOverflow`."""


class Entry(NamedTuple):
    """A key's latest value in the table (a tuple: a table holds millions and a snapshot
    load builds them straight from SQLite rows, ``(key, value, revision, partition)``)."""

    key: bytes
    value: bytes
    revision: int
    """The offset of the record that set it (per partition)."""
    partition: int = 0


@attrs.frozen
class Change:
    """One change a watcher sees: a put (``value`` set) or a delete (``value`` None)."""

    key: bytes
    value: bytes | None
    revision: int
    """The offset of the record (its partition's); for the initial state, the entry's."""
    partition: int = 0
    initial: bool = False
    """Part of the state when the watch started (``watch(initial=True)``)."""

    @property
    def deleted(self) -> bool:
        """True for a delete (a tombstone)."""
        return self.value is None


class WatchOverflow(Exception):
    """A watcher fell :data:`MAX_WATCH_BUFFER` changes behind and was closed (watch again,
    with ``initial=True`` to get the state it missed)."""


@attrs.define(eq=False)
class Watcher:
    """One watch: its prefix, where its changes go, and whether it fell behind."""

    prefix: bytes
    send: MemoryObjectSendStream[Change]
    receive: MemoryObjectReceiveStream[Change]
    overflowed: bool = False


@attrs.define(eq=False)
class TableView:
    """Latest value per key of every partition (module docstring)."""

    partitions: int
    entries: dict[bytes, Entry] = attrs.field(factory=dict)
    positions: list[int] = attrs.field(init=False)
    """Next offset to apply, per partition."""
    _watchers: list[Watcher] = attrs.field(factory=list)
    _moved: anyio.Event = attrs.field(factory=anyio.Event)

    def __attrs_post_init__(self) -> None:
        self.positions = [0] * self.partitions

    def apply(self, partition: int, records: Iterable[Record]) -> int:
        """Apply records of ``partition`` in offset order; returns how many were new."""
        applied = 0
        position = self.positions[partition]
        entries = self.entries
        watchers = self._watchers
        for record in records:
            if record.offset < position:
                continue
            position = record.offset + 1
            key = record.key
            if key is None:
                continue
            applied += 1
            if record.value:
                entries[key] = _new_tuple(Entry, (key, record.value, record.offset, partition))
                change = Change(key, record.value, record.offset, partition)
            else:
                if entries.pop(key, None) is None and not watchers:
                    continue
                change = Change(key, None, record.offset, partition)
            if watchers:
                self._tell(change)
        self.advance(partition, position)
        return applied

    def advance(self, partition: int, position: int) -> None:
        """Everything below ``position`` of ``partition`` is applied (a compaction gap, or
        records applied by :meth:`apply`)."""
        if position > self.positions[partition]:
            self.positions[partition] = position
            self.wake()

    def wake(self) -> None:
        """Wake :meth:`wait_moved` (a position moved, or a reader failed)."""
        self._moved.set()
        self._moved = anyio.Event()

    async def wait_moved(self) -> None:
        """Return once any partition's position moves."""
        await self._moved.wait()

    def watch(self, prefix: bytes, initial: bool) -> Watcher:
        """A stream of changes of keys starting with ``prefix``; with ``initial``, first the
        current entries (taken at the same moment the watcher starts listening)."""
        send, receive = anyio.create_memory_object_stream[Change](MAX_WATCH_BUFFER)
        watcher = Watcher(prefix, send, receive)
        if initial:
            for entry in self.entries.values():
                if entry.key.startswith(prefix):
                    change = Change(entry.key, entry.value, entry.revision, entry.partition, True)
                    if not self._offer(watcher, change):
                        break
        if not watcher.overflowed:
            self._watchers.append(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        """Forget ``watcher`` (its iterator was closed)."""
        watcher.receive.close()
        watcher.send.close()
        if watcher in self._watchers:
            self._watchers.remove(watcher)

    def close_watchers(self) -> None:
        """End every watch (the table closes)."""
        for watcher in self._watchers:
            watcher.send.close()
        self._watchers.clear()

    def _tell(self, change: Change) -> None:
        gone = False
        for watcher in self._watchers:
            if change.key.startswith(watcher.prefix) and not self._offer(watcher, change):
                gone = True
        if gone:
            self._watchers = [w for w in self._watchers if not w.overflowed]

    @staticmethod
    def _offer(watcher: Watcher, change: Change) -> bool:
        try:
            watcher.send.send_nowait(change)
        except anyio.WouldBlock:
            watcher.overflowed = True
            watcher.send.close()
            return False
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            watcher.overflowed = True
            return False
        return True

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries.values())
