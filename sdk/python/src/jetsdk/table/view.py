"""The in-memory state of a table: the latest value and revision per key, the next offset
to read per partition, and the watchers to tell about changes.

Single-threaded (the table's event loop); no I/O. Records are applied in each partition's
offset order; a record below a partition's position is ignored (already applied).

Per-key TTL (spec/storage.md §11.2): a record with ``Jet-TTL`` is the key's entry until its
expiry (the record's timestamp + TTL, by this process's wall clock), then the key is removed
as by a tombstone and watchers see a delete with ``expired`` set (:meth:`TableView.expire`;
the table calls it at each expiry and before every read). A record already expired when it
is applied (a replay) is applied as such a delete.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from jetsdk.codec.record import Record
from jetsdk.codec.ttl import expiry_ns

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
    expired: bool = False
    """A delete because the key's TTL ran out (no record was written for it)."""

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
    expiries: dict[bytes, int] = attrs.field(factory=dict)
    """Expiry (ns since the epoch) of the entries that have a TTL."""
    clock: Callable[[], int] = time.time_ns
    """The wall clock expiries are compared with (ns)."""
    _heap: list[tuple[int, bytes, int]] = attrs.field(factory=list)
    """(expiry, key, revision) of entries with a TTL, earliest first (stale ones skipped)."""
    _watchers: list[Watcher] = attrs.field(factory=list)
    _moved: anyio.Event = attrs.field(factory=anyio.Event)
    _scheduled: anyio.Event = attrs.field(factory=anyio.Event)

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
            value = record.value
            expires = (
                expiry_ns(key, value, record.timestamp, record.headers) if record.headers else None
            )
            if key in self.expiries:
                del self.expiries[key]
            if value and (expires is None or expires > self.clock()):
                entries[key] = _new_tuple(Entry, (key, value, record.offset, partition))
                change = Change(key, value, record.offset, partition)
                if expires is not None:
                    self._schedule(key, expires, record.offset)
            else:
                if entries.pop(key, None) is None and not watchers:
                    continue
                change = Change(key, None, record.offset, partition, expired=bool(value))
            if watchers:
                self._tell(change)
        self.advance(partition, position)
        return applied

    def _schedule(self, key: bytes, expires: int, revision: int) -> None:
        self.expiries[key] = expires
        heap = self._heap
        if not heap or expires < heap[0][0]:
            self._scheduled.set()
            self._scheduled = anyio.Event()
        heapq.heappush(heap, (expires, key, revision))

    def restore_expiries(self, expiries: dict[bytes, int]) -> None:
        """Take the expiries of entries loaded from a snapshot."""
        for key, expires in expiries.items():
            entry = self.entries.get(key)
            if entry is not None:
                self._schedule(key, expires, entry.revision)

    def expire(self) -> float | None:
        """Remove the entries whose TTL ran out (telling watchers); the seconds until the
        next expiry, or None if no entry has a TTL."""
        heap = self._heap
        if not heap:
            return None
        now = self.clock()
        while heap and heap[0][0] <= now:
            expires, key, revision = heapq.heappop(heap)
            entry = self.entries.get(key)
            if self.expiries.get(key) != expires or entry is None or entry.revision != revision:
                continue  # replaced since
            del self.entries[key], self.expiries[key]
            if self._watchers:
                self._tell(Change(key, None, revision, entry.partition, expired=True))
        return (heap[0][0] - now) / 1e9 if heap else None

    def live(self, key: bytes) -> Entry | None:
        """The key's entry, unless its TTL ran out (then it is removed first)."""
        entry = self.entries.get(key)
        if entry is not None and self.expiries:
            expires = self.expiries.get(key)
            if expires is not None and expires <= self.clock():
                self.expire()
                return None
        return entry

    async def wait_scheduled(self) -> None:
        """Return once an entry gets an expiry earlier than every other one."""
        await self._scheduled.wait()

    def drop_partition(self, partition: int) -> int:
        """Forget every entry of ``partition`` and its position (the table stopped holding
        it; watchers are not told: the data did not change); how many entries went."""
        gone = [key for key, entry in self.entries.items() if entry.partition == partition]
        for key in gone:
            del self.entries[key]
            self.expiries.pop(key, None)
        self.positions[partition] = 0
        return len(gone)

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
