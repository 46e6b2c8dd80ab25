"""The in-memory state of a table: the latest value and revision per key, the next offset
to read per partition, and the watchers to tell about changes.

Single-threaded (the table's event loop); no I/O. Records are applied in each partition's
offset order; a record below a partition's position is ignored (already applied).

Per-key TTL (spec/storage.md §11.2): a record with ``Jet-TTL`` is the key's entry until its
expiry (the record's timestamp + TTL, by this process's wall clock), then the key is removed
as by a tombstone and watchers see a delete with ``expired`` set (:meth:`TableView.expire`;
the table calls it at each expiry and before every read). A record already expired when it
is applied (a replay) is applied as such a delete.

The entries loaded from a snapshot stay in the snapshot's columns (:class:`Columns`) until
they are read: :attr:`TableView.entries` maps such a key to its index there (an ``int``)
instead of an :class:`Entry`, and :meth:`TableView.entry` builds the Entry when asked. A
record applied later replaces the index as it would an Entry; the columns are dropped once
no key refers to them (checked by :meth:`TableView.all`).
"""

from __future__ import annotations

import heapq
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from functools import partial
from itertools import accumulate
from operator import itemgetter
from typing import NamedTuple, cast

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from jetsdk.codec.slots import slot_setters
from jetsdk.errors import JetError

_new_tuple = tuple.__new__
"""Builds a NamedTuple without its Python-level ``__new__`` (per record)."""

_key = itemgetter(0)
_value = itemgetter(1)
_revision = itemgetter(2)

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


_new_entry = partial(_new_tuple, Entry)
"""Builds an Entry from a ``(key, value, revision, partition)`` tuple, in C."""


CHUNK_BITS = 32
"""An index in :class:`Columns` is ``chunk << CHUNK_BITS | position in the chunk``."""
_POSITION = (1 << CHUNK_BITS) - 1


@attrs.define(eq=False)
class ColumnChunk:
    """One chunk of a snapshot's entries, column by column (:mod:`jetsdk.table.snapshot`):
    entry ``i`` has a value of ``lengths[i]`` bytes in :attr:`values` (after those of the
    entries before it), ``revisions[i]`` and ``partitions[i]``."""

    values: bytes
    lengths: array[int]
    revisions: array[int]
    partitions: array[int]
    _starts: array[int] | None = None
    """Where each value starts in :attr:`values` (and the end), computed at first use."""

    def entry(self, key: bytes, position: int) -> Entry:
        """Entry ``position`` of the chunk (of key ``key``)."""
        starts = self._starts
        if starts is None:
            starts = self._starts = array("q", accumulate(self.lengths, initial=0))
        return _new_entry(
            (
                key,
                self.values[starts[position] : starts[position + 1]],
                self.revisions[position],
                self.partitions[position],
            )
        )


@attrs.frozen(eq=False)
class Columns:
    """Entries loaded from a snapshot, in its chunks (index: :data:`CHUNK_BITS`)."""

    chunks: list[ColumnChunk] = attrs.field(factory=list)

    def entry(self, key: bytes, index: int) -> Entry:
        """Entry ``index`` (of key ``key``)."""
        return self.chunks[index >> CHUNK_BITS].entry(key, index & _POSITION)

    def partition(self, index: int) -> int:
        """The partition of entry ``index``."""
        return self.chunks[index >> CHUNK_BITS].partitions[index & _POSITION]


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


_set_key, _set_value, _set_revision, _set_partition, _set_initial, _set_expired = slot_setters(
    Change, "key", "value", "revision", "partition", "initial", "expired"
)
_new_object = object.__new__


def initial_change(entry: Entry) -> Change:
    """``Change(*entry, initial=True)`` without attrs' ``__init__`` (a watch of a large
    table makes one per key: :mod:`jetsdk.codec.slots`)."""
    change: Change = _new_object(Change)
    _set_key(change, entry[0])
    _set_value(change, entry[1])
    _set_revision(change, entry[2])
    _set_partition(change, entry[3])
    _set_initial(change, True)
    _set_expired(change, False)
    return change


class WatchOverflow(JetError):
    """A watcher fell :data:`MAX_WATCH_BUFFER` changes behind and was closed (watch again,
    with ``initial=True`` to get the state it missed)."""


@attrs.define(eq=False)
class Watcher:
    """One watch: its prefix, where its changes go, and whether it fell behind."""

    prefix: bytes
    send: MemoryObjectSendStream[Change]
    receive: MemoryObjectReceiveStream[Change]
    overflowed: bool = False
    initial: list[Entry] = attrs.field(factory=list)
    """The entries when the watch started (``initial=True``), to be yielded before the
    changes queued in :attr:`receive` (not queued themselves: a table may hold far more
    keys than :data:`MAX_WATCH_BUFFER`)."""


@attrs.define(eq=False)
class TableView:
    """Latest value per key of every partition (module docstring)."""

    partitions: int
    entries: dict[bytes, Entry | int] = attrs.field(factory=dict)
    """An Entry per key, or the key's index in :attr:`columns` (module docstring): read
    through :meth:`entry` and :meth:`all`."""
    columns: Columns | None = None
    """Entries loaded from a snapshot and not replaced since."""
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

    def entry(self, key: bytes) -> Entry | None:
        """The key's entry (expired or not), or None."""
        found = self.entries.get(key)
        if isinstance(found, int):
            assert self.columns is not None
            return self.columns.entry(key, found)
        return found

    def all(self) -> list[Entry]:
        """Every entry (a new list; expired ones too)."""
        columns = self.columns
        if columns is None:  # no index without columns: Entries only
            return cast("list[Entry]", list(self.entries.values()))
        entry = columns.entry
        out = [e if not isinstance(e, int) else entry(k, e) for k, e in self.entries.items()]
        if int not in set(map(type, self.entries.values())):
            self.columns = None  # no key refers to them any more
        return out

    def apply(
        self,
        partition: int,
        decoded: list[Entry],
        expiring: dict[int, int],
        end: int | None,
    ) -> int:
        """Apply the entries of one Fetch response of ``partition``, in offset order
        (:func:`jetsdk.table.rows.table_rows`: an empty value is a tombstone; ``expiring``
        maps an index to its record's expiry), then move the position to ``end``; returns
        how many entries were new."""
        position = self.positions[partition]
        start = 0
        if decoded and decoded[0].revision < position:  # already applied (a refetch)
            start = bisect_left(decoded, position, key=_revision)
        todo = decoded if not start else decoded[start:]
        if expiring or self._watchers:
            self._apply_each(todo, {i - start: e for i, e in expiring.items() if i >= start})
        else:
            self._apply_plain(todo)
        if end is not None:
            self.advance(partition, end)
        return len(todo)

    def _apply_plain(self, decoded: list[Entry]) -> None:
        """:meth:`apply` without watchers to tell or TTLs to schedule: dict updates only."""
        entries = self.entries
        expiries = self.expiries
        if expiries:
            for entry in decoded:
                key = entry[0]
                if key in expiries:
                    del expiries[key]
                if entry[1]:
                    entries[key] = entry
                else:
                    entries.pop(key, None)
            return
        if all(map(_value, decoded)):  # puts only: one C-level update
            entries.update(zip(map(_key, decoded), decoded))
            return
        for entry in decoded:
            if entry[1]:
                entries[entry[0]] = entry
            else:
                entries.pop(entry[0], None)

    def _apply_each(self, decoded: list[Entry], expiring: dict[int, int]) -> None:
        """:meth:`apply` one entry at a time: expiries and watchers."""
        entries = self.entries
        expiries = self.expiries
        for i, entry in enumerate(decoded):
            key, value, offset, partition = entry
            if key in expiries:
                del expiries[key]
            expires = expiring.get(i) if expiring else None
            if value and (expires is None or expires > self.clock()):
                entries[key] = entry
                if expires is not None:
                    self._schedule(key, expires, offset)
                if self._watchers:
                    self._tell(Change(key, value, offset, partition))
            else:
                entries.pop(key, None)
                if self._watchers:
                    self._tell(Change(key, None, offset, partition, expired=bool(value)))

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
            entry = self.entry(key)
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
            entry = self.entry(key)
            if self.expiries.get(key) != expires or entry is None or entry.revision != revision:
                continue  # replaced since
            del self.entries[key], self.expiries[key]
            if self._watchers:
                self._tell(Change(key, None, revision, entry.partition, expired=True))
        return (heap[0][0] - now) / 1e9 if heap else None

    def live(self, key: bytes) -> Entry | None:
        """The key's entry, unless its TTL ran out (then it is removed first)."""
        entry = self.entries.get(key)  # as self.entry(key), one call less per get
        if isinstance(entry, int):
            assert self.columns is not None
            entry = self.columns.entry(key, entry)
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
        columns = self.columns
        gone = []
        for key, found in self.entries.items():
            if isinstance(found, int):
                assert columns is not None
                if columns.partition(found) == partition:
                    gone.append(key)
            elif found.partition == partition:
                gone.append(key)
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
        """A stream of changes of keys starting with ``prefix``; with ``initial``, the
        current entries (:attr:`Watcher.initial`, taken at the same moment the watcher
        starts listening)."""
        send, receive = anyio.create_memory_object_stream[Change](MAX_WATCH_BUFFER)
        watcher = Watcher(prefix, send, receive)
        if initial:
            values = self.all()
            if prefix:
                watcher.initial = [e for e in values if e.key.startswith(prefix)]
            else:
                watcher.initial = values
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
        return iter(self.all())
