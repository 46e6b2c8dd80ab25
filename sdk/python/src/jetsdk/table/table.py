"""``Table``: a live local view of a compacted stream's latest value per key (issue 38).

    async with Client(["127.0.0.1:9292"]) as client:
        await client.create_stream("prices", compact=True)
        async with Table(client, "prices") as prices:
            rev = await prices.put(b"AAPL", b"189.5")
            await prices.update(b"AAPL", b"190.1", rev)   # compare-and-set
            await prices.modify(b"hits", lambda v: b"%d" % (int(v or 0) + 1))  # CAS loop
            await prices.sync()                          # read your writes
            prices.get(b"AAPL")                          # b"190.1", from memory

Reads (:meth:`get`, :meth:`items`, ``len``) answer from memory: one background task per
partition long-polls Fetch and applies each record to the view (a tombstone deletes its
key). Writes go to the partition leader as Produce messages with ack ALL
(:mod:`jetsdk.table.writes`), acknowledged under the stream's durability (spec/cluster.md,
"Durability settings": fsynced by default; a stream created with ``durability="written"``
acks before the fsync, as a JetStream KV bucket's default store); a write's revision is its
offset in its partition. A write is
in the view once its reader got it: :meth:`sync` waits for everything acknowledged before
the call, whichever process wrote it.

A write may carry a TTL (``put(key, value, ttl=60.0)``, spec/storage.md §11.2): the key
then expires that many seconds after the record's timestamp: :meth:`get` stops returning it
at once, watchers see a delete with ``Change.expired`` set, the server's compare-and-set
counts the key as absent, and compaction removes the record later. No record is written at
the expiry; the clocks of the server (which stamps the record) and of this process decide.

With ``partitions=[...]`` the table holds only those partitions of the stream (the keys
that live there: writes still go anywhere); :meth:`hold` and :meth:`release` change the set
while it is open. A consumer group member holds the partitions of a co-partitioned table
that match its assigned stream partitions with :func:`jetsdk.table.groups.co_partitioned`
(a stream-table join).

With ``snapshot=path`` the table loads its state from a local SQLite file at open (if the
file matches the stream and is fresh enough) and fetches only the records after the offsets
it reflects; it writes the file again at close and on :meth:`save`.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncGenerator, Callable, Iterable
from os import PathLike
from pathlib import Path

import anyio
import anyio.abc

from jetsdk.client import Client
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.record import iter_records
from jetsdk.codec.ttl import MAX_TTL_MS
from jetsdk.errors import (
    ClientClosed,
    InvalidArgument,
    JetError,
    OffsetOutOfRange,
)
from jetsdk.table import snapshot as snapshots
from jetsdk.table.linger import Linger
from jetsdk.table.own_writes import OwnWrites
from jetsdk.table.rows import table_rows
from jetsdk.table.view import Change, Entry, TableView, WatchOverflow, initial_change
from jetsdk.table.writes import ABSENT, TableWriter

FETCH_MAX_BYTES = 4 * 1024 * 1024
"""Bytes per Fetch of a partition reader."""
FETCH_WAIT_S = 1.0
"""Long-poll wait of a reader's Fetch."""
READ_RETRY_PAUSE_S = 0.2
"""Pause of a reader after a retriable error."""
DEFAULT_LINGER_S = 0.020
"""How long a reader waits, after an answer that caught its partition up, before it asks
again (``Table(linger=)``): changes committed meanwhile come in one answer. 20 ms, was 5:
``bench table``'s rows on this shared 2-CPU machine (2026-11-30, load 12-38, 8
interleaved pairs, medians of 5 / 20 ms): puts over 4 partitions 1,866 / 2,488 per s
(2.6x / 3.9x JetStream KV; 20 ms ahead in 7 pairs of 8), 4 racing compare-and-sets 172 /
292 won updates per s (0.56x / 0.72x; ahead in 4, behind in 3); Fetch answers per won
update 1.2-1.7 / 0.2-0.9. ``bench table_cost`` A/B against 5 ms (3 pairs, load 27-37): CPU
per won update of 4 racing writers, client 902 -> 640 us, server 1,620 -> 1,230 us. A
reader's answer at a commit competes with the writes' answers on the client's connection
and loop; in exchange, a watcher of a busy table sees its changes up to 20 ms later."""
MAX_MODIFY_ATTEMPTS = 1000
"""Compare-and-set tries of one :meth:`Table.modify` (each lost to another writer)."""
DEFAULT_DELETE_RETENTION_S = 86_400.0
"""A snapshot older than the stream's delete retention (this if the stream does not say)
is not used: a tombstone it never saw may be gone."""


class Table:
    """A live view of the compacted stream ``stream`` (module docstring).

    Args:
        client: an open client.
        stream: a compacted stream (InvalidArgument otherwise).
        snapshot: a local SQLite file to load at open and write at close (None: none).
        partitions: the partitions to hold (None: all; not with ``snapshot``).
        timeout: bound on :meth:`sync` and on the server's wait for a write's acks, seconds.
        linger: seconds a partition's reader waits after an answer that brought records and
            caught the partition up, before it asks again (0: at once). Changes committed
            within it reach the view together, one Fetch answer for all instead of one per
            commit (a busy table's reads cost the server and this process a fraction);
            a change after a quiet spell still comes at once (the reader's Fetch waits for
            it on the server). :meth:`sync` and :meth:`wait_for` end it. Longer while its
            :meth:`modify` tries are refused (:mod:`jetsdk.table.linger`).
    """

    def __init__(
        self,
        client: Client,
        stream: str,
        *,
        snapshot: str | PathLike[str] | None = None,
        timeout: float = 30.0,
        partitions: Iterable[int] | None = None,
        linger: float = DEFAULT_LINGER_S,
    ) -> None:
        self._client = client
        self.stream = stream
        self._snapshot = Path(snapshot) if snapshot is not None else None
        self._timeout = timeout
        self._view: TableView | None = None
        self._writer: TableWriter | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._failure: JetError | None = None
        self._closed = False
        self._only = None if partitions is None else sorted(set(partitions))
        if self._only is not None and self._snapshot is not None:
            raise InvalidArgument(
                "a snapshot holds a whole table: not with partitions=",
                details={"field": "partitions"},
            )
        self._readers: dict[int, anyio.CancelScope] = {}
        self._own_writes = OwnWrites()
        if not (math.isfinite(linger) and linger >= 0):
            raise InvalidArgument(
                f"linger must be >= 0 seconds, not {linger!r}", details={"field": "linger"}
            )
        self._linger = linger
        self._lingers: Linger | None = None
        """The readers' waits after an answer (made at open, in the loop they run in)."""
        self.loaded_from_snapshot = 0
        """Entries the last open loaded from the snapshot (0: none used)."""
        self.records_read = 0
        """Records fetched from the stream since open (not counting the snapshot)."""
        self.fetches = 0
        """Fetch answers the readers applied since open (a metric and a test hook)."""

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Table:
        info = await self._client.stream_info(self.stream, refresh=True)
        if not info.compact:
            raise InvalidArgument(
                f"stream {self.stream!r} is not compacted: a table needs a compacted stream",
                details={"field": "stream"},
            )
        count = len(info.partitions)
        _check_partitions(self._only or (), count)
        view = TableView(count)
        if self._snapshot is not None:
            found = await anyio.to_thread.run_sync(
                snapshots.load, self._snapshot, self.stream, count
            )
            horizon = float(info.config.get("delete_retention_s") or DEFAULT_DELETE_RETENTION_S)
            if found is not None and time.time_ns() - found.saved_ns < horizon * 1e9:
                view.entries = found.entries
                view.columns = found.columns
                view.positions = found.positions
                view.restore_expiries(found.expiries)
                view.expire()
                self.loaded_from_snapshot = len(found.entries)
        self._view = view
        self._lingers = Linger(self._linger)
        self._writer = TableWriter(self._client, self.stream, count, self._timeout)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        for partition in range(count) if self._only is None else self._only:
            self._start_reader(partition)
        tg.start_soon(self._expire)
        try:
            await self.sync()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._closed:
            return
        self._closed = True
        tg, self._tg = self._tg, None
        if tg is not None:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
        if self._view is not None:
            self._view.close_watchers()
            if self._snapshot is not None and self._failure is None:
                await self.save()

    async def save(self) -> None:
        """Write the snapshot file now (its entries and offsets are taken at one moment).

        Raises:
            InvalidArgument: the table has no snapshot path.
        """
        if self._snapshot is None:
            raise InvalidArgument("this table has no snapshot file", details={"field": "snapshot"})
        view = self._opened()
        view.expire()
        entries = dict(view.entries)
        positions = list(view.positions)
        expiries = dict(view.expiries)
        await anyio.to_thread.run_sync(
            snapshots.save, self._snapshot, self.stream, entries, positions, expiries, view.columns
        )

    # ---------------------------------------------------------------- reads (memory)

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        """The key's latest value in the view, or ``default``."""
        entry = self._opened().live(key)
        return default if entry is None else entry.value

    def entry(self, key: bytes) -> Entry | None:
        """The key's latest value with its revision, or None."""
        return self._opened().live(key)

    def revision(self, key: bytes) -> int:
        """The key's revision in the view (-1: absent)."""
        entry = self._opened().live(key)
        return ABSENT if entry is None else entry.revision

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every (key, value) in the view (a copy)."""
        return [(e.key, e.value) for e in self._current().all()]

    def __len__(self) -> int:
        """Keys in the view."""
        return len(self._current().entries)

    def __contains__(self, key: object) -> bool:
        """True if ``key`` has a value in the view."""
        return isinstance(key, bytes) and self._opened().live(key) is not None

    @property
    def positions(self) -> list[int]:
        """Next offset the view will apply, per partition."""
        return list(self._opened().positions)

    # ---------------------------------------------------------------- writes

    async def put(self, key: bytes, value: bytes, *, ttl: float | None = None) -> int:
        """Set ``key`` to ``value`` (not empty: an empty value is a delete); its revision.
        With ``ttl`` (seconds, > 0, rounded up to ms) the key expires that long after the
        write (module docstring)."""
        _check_value(value)
        return await self._writes().write(key, value, None, _ttl_ms(ttl))

    async def delete(self, key: bytes) -> int:
        """Delete ``key`` (a tombstone); the tombstone's revision."""
        return await self._writes().write(key, b"", None)

    async def create(self, key: bytes, value: bytes, *, ttl: float | None = None) -> int:
        """Set ``key`` only if it has no value (an expired key has none); its revision.
        ``ttl`` as in :meth:`put` (e.g. a lock that frees itself).

        Raises:
            WrongExpectedKeyOffset: it has one (``current_revision``).
        """
        _check_value(value)
        return await self._writes().write(key, value, ABSENT, _ttl_ms(ttl))

    async def update(
        self, key: bytes, value: bytes, revision: int, *, ttl: float | None = None
    ) -> int:
        """Set ``key`` only if its revision is ``revision`` (compare-and-set); the new one.
        ``ttl`` as in :meth:`put` (without it the new value does not expire).

        Raises:
            WrongExpectedKeyOffset: the key is at another revision (``current_revision``,
                -1 if it has no value).
        """
        _check_value(value)
        if revision < 0:
            raise InvalidArgument("a revision is >= 0 (create a key that has no value)")
        return await self._writes().write(key, value, revision, _ttl_ms(ttl))

    async def modify(
        self,
        key: bytes,
        change: Callable[[bytes | None], bytes],
        *,
        ttl: float | None = None,
    ) -> int:
        """Set ``key`` to ``change(value)`` of its value (None: it has none) by
        compare-and-set, and when another write got there first, again on the value that
        won (a read-modify-write that loses no update); the new revision. The first value
        is the view's, or the one this table's last modify of the key stored (or the later
        one that modify's answer named: racing writers built on it) if the view does not
        have that yet (:mod:`jetsdk.table.own_writes`); a refusal carries the winner's value
        back (no read in between).

        ``change`` may be called several times (keep it free of side effects), and with a
        value that is not committed yet (a racing write just stored it): the write built on
        it is committed only if that value is, so nothing is built on a value that is lost.
        ``ttl`` as in :meth:`put`.

        Raises:
            WrongExpectedKeyOffset: still refused after :data:`MAX_MODIFY_ATTEMPTS` tries.
            InvalidArgument: ``change`` returned an empty value, or a refusal came without
                its value (e.g. a stream with a load-balance group: through NATS) and this
                table does not hold the key's partition to read it from.
            TimeoutError: such a value did not reach the view within the table's timeout.
        """
        writer = self._writes()
        ttl_ms = _ttl_ms(ttl)
        view = self._opened()
        partition = writer.partition_of(key)
        entry = self._own_writes.newer(key, view.live(key), view.positions[partition])
        value, revision = (None, ABSENT) if entry is None else (entry.value, entry.revision)
        for attempt in range(1, MAX_MODIFY_ATTEMPTS + 1):
            new = change(value)
            _check_value(new)
            result = await writer.write_try(key, new, revision, ttl_ms)  # a refusal returned
            if result.error_code != ErrorCode.WRONG_EXPECTED_KEY_OFFSET:
                stored, latest = result.offset, result.latest_offset
                if latest > stored and result.current_value is not None:
                    # Racing writers built on this write while it committed: the next
                    # modify of the key starts from their latest (its own would be refused).
                    hint = Entry(key, result.current_value, latest, partition)
                else:
                    hint = Entry(key, new, stored, partition)
                self._own_writes.wrote(hint, view.positions)
                return stored
            if attempt == MAX_MODIFY_ATTEMPTS:
                writer.outcome(key, revision, result)  # raises the refusal
            if self._lingers is not None:
                self._lingers.raced()  # its view can wait (jetsdk.table.linger)
            revision, value = result.offset, result.current_value
            if revision != ABSENT and value is None:  # left out: the view has it soon
                seen = await self.wait_for(key, revision)
                if seen is None:
                    value, revision = None, ABSENT
                else:
                    value, revision = seen.value, seen.revision
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    # ---------------------------------------------------------------- waiting, history

    async def sync(self) -> None:
        """Return once the view holds every record acknowledged before the call (in any
        process): each partition's high watermark, asked now, is reached.

        Raises:
            TimeoutError: not within the table's timeout.
            JetError: a reader failed for good (e.g. the stream was deleted).
        """
        await self._sync(list(self._readers))

    async def _sync(self, partitions: list[int]) -> None:
        view = self._opened()
        targets = [(p, (await self._client.list_offsets(self.stream, p)).hw) for p in partitions]
        self._end_linger()
        with anyio.fail_after(self._timeout):
            while True:
                self._raise_failure()
                if all(view.positions[p] >= hw for p, hw in targets):
                    return
                await view.wait_moved()

    @property
    def held(self) -> list[int]:
        """The partitions this table holds (reads and keeps up to date)."""
        return sorted(self._readers)

    async def hold(self, partitions: Iterable[int]) -> None:
        """Hold ``partitions`` too: read each from its start and return once the view holds
        every record acknowledged before the call in them (as :meth:`sync`).

        Raises:
            InvalidArgument: a partition the stream does not have.
        """
        view = self._opened()
        new = sorted(set(partitions) - set(self._readers))
        _check_partitions(new, view.partitions)
        for partition in new:
            self._start_reader(partition)
        await self._sync(new)

    def release(self, partitions: Iterable[int]) -> None:
        """Stop holding ``partitions``: their reader stops and their keys leave the view
        (watchers are not told; :meth:`get` of such a key returns None)."""
        view = self._opened()
        for partition in set(partitions):
            scope = self._readers.pop(partition, None)
            if scope is not None:
                scope.cancel()
                view.drop_partition(partition)

    async def wait_for(self, key: bytes, revision: int) -> Entry | None:
        """Return ``key``'s entry once the view holds its partition up to ``revision``
        (e.g. the ``current_revision`` of a refused update: then its value is the one the
        update lost to, unless a later write changed it again). Cheaper than :meth:`sync`:
        no request to the server.

        Raises:
            TimeoutError: not within the table's timeout.
        """
        view = self._opened()
        partition = self._writes().partition_of(key)
        if partition not in self._readers:
            raise InvalidArgument(
                f"key {key[:40]!r} is in partition {partition}, which this table does not hold",
                details={"field": "key", "partition": partition},
            )
        if view.positions[partition] <= revision:
            self._end_linger()
        with anyio.fail_after(self._timeout):
            while view.positions[partition] <= revision:
                self._raise_failure()
                await view.wait_moved()
        return view.entry(key)

    async def watch(
        self, prefix: bytes = b"", *, initial: bool = True
    ) -> AsyncGenerator[Change, None]:
        """Changes of the keys starting with ``prefix``, as they reach the view: with
        ``initial`` first every current entry (``Change.initial``), then every change from
        that moment on; without it, only changes from now. Ends when the table closes.

        Raises:
            WatchOverflow: this watch fell more than ``MAX_WATCH_BUFFER`` live changes
                behind (the initial entries are not queued: any number is yielded).
        """
        view = self._current()
        watcher = view.watch(prefix, initial)
        try:
            initial_state, watcher.initial = watcher.initial, []
            for entry in initial_state:
                yield initial_change(entry)
            async for change in watcher.receive:
                yield change
            if watcher.overflowed:
                raise WatchOverflow(f"watch of {self.stream!r} fell behind and was closed")
        finally:
            view.unwatch(watcher)

    async def history(self, key: bytes) -> list[Change]:
        """Every record of ``key`` the partition still stores (compaction keeps the latest
        only), oldest first; a delete has ``value`` None."""
        partition = self._writes().partition_of(key)
        start = (await self._client.list_offsets(self.stream, partition, "earliest")).offset
        hw = (await self._client.list_offsets(self.stream, partition)).hw
        out: list[Change] = []
        offset = start
        while offset < hw:
            _h, data = await self._client.fetch(
                self.stream, partition, offset, max_bytes=FETCH_MAX_BYTES, max_wait=0.0
            )
            moved = offset
            for record in iter_records(data):
                moved = record.offset + 1
                if record.key == key and record.offset < hw:
                    out.append(Change(key, record.value or None, record.offset, partition))
            if moved == offset:
                break
            offset = moved
        return out

    # ---------------------------------------------------------------- internals

    def _start_reader(self, partition: int) -> None:
        assert self._tg is not None
        scope = anyio.CancelScope()
        self._readers[partition] = scope
        self._tg.start_soon(self._follow_in, partition, scope)

    async def _follow_in(self, partition: int, scope: anyio.CancelScope) -> None:
        with scope:
            await self._follow(partition, scope)

    async def _follow(self, partition: int, scope: anyio.CancelScope) -> None:
        view = self._opened()
        while True:
            position = view.positions[partition]
            hurried = None if self._lingers is None else self._lingers.hurries
            try:
                header, data = await self._client.fetch(
                    self.stream,
                    partition,
                    position,
                    max_bytes=FETCH_MAX_BYTES,
                    max_wait=FETCH_WAIT_S,
                )
            except OffsetOutOfRange as exc:
                start = exc.log_start
                if start is not None and start > position:  # retention removed the start
                    view.advance(partition, start)
                    continue
                self._failure = exc
                return
            except ClientClosed as exc:
                self._failure = exc
                return
            except JetError as exc:
                if exc.retriable:
                    await anyio.sleep(READ_RETRY_PAUSE_S)
                    continue
                self._failure = exc
                view.wake()  # sync() raises it
                return
            if self._readers.get(partition) is not scope:
                return  # released (and maybe held again by a new reader) meanwhile
            decoded = table_rows(data, partition)
            self.records_read += decoded.records
            self.fetches += 1
            view.apply(partition, decoded.entries, decoded.expiries, decoded.next_offset)
            lingers = self._lingers
            if (
                lingers is not None
                and lingers.seconds
                and decoded.records
                and view.positions[partition] >= header.hw
            ):
                await lingers.wait(hurried)

    def _end_linger(self) -> None:
        """Wake the readers that linger (someone waits for the view)."""
        if self._lingers is not None:
            self._lingers.hurry()

    async def _expire(self) -> None:
        """Remove entries as their TTLs run out (and tell watchers), for the table's life."""
        view = self._opened()
        while True:
            delay = view.expire()
            with anyio.move_on_after(math.inf if delay is None else delay):
                await view.wait_scheduled()

    def _current(self) -> TableView:
        view = self._opened()
        view.expire()
        return view

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _opened(self) -> TableView:
        if self._view is None:
            raise ClientClosed(f"table {self.stream!r} is not open (use async with)")
        return self._view

    def _writes(self) -> TableWriter:
        if self._writer is None or self._closed:
            raise ClientClosed(f"table {self.stream!r} is not open")
        return self._writer


def _check_partitions(partitions: Iterable[int], count: int) -> None:
    for partition in partitions:
        if not 0 <= partition < count:
            raise InvalidArgument(
                f"partition {partition} out of range: the stream has {count}",
                details={"field": "partitions"},
            )


def _ttl_ms(ttl: float | None) -> int | None:
    if ttl is None:
        return None
    if not (isinstance(ttl, (int, float)) and math.isfinite(ttl) and ttl > 0):
        raise InvalidArgument(f"ttl must be > 0 seconds, not {ttl!r}", details={"field": "ttl"})
    ms = max(1, math.ceil(ttl * 1000))
    if ms > MAX_TTL_MS:
        raise InvalidArgument(
            f"ttl of {ttl} s is over the longest, {MAX_TTL_MS // 1000} s",
            details={"field": "ttl"},
        )
    return ms


def _check_value(value: bytes) -> None:
    if not value:
        raise InvalidArgument("an empty value deletes its key: use delete()")
