# generated — do not edit: made by tools/gen_sync.py from jetsdk/table/table.py

"""Blocking :class:`Table` (generated from :mod:`jetsdk.table.table`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from os import PathLike

from jetsdk._sync_support import Forwarded, SyncWrapper
from jetsdk.sync.client import Client
from jetsdk.table.table import DEFAULT_LINGER_S
from jetsdk.table.table import Table as _AsyncTable
from jetsdk.table.view import Change, Entry


class Table(SyncWrapper[_AsyncTable]):
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

    Blocking version of :class:`jetsdk.table.table.Table`
    (generated); every call runs in the client's private event-loop thread. Thread-safe.
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
        self._factory = lambda: _AsyncTable(
            client._obj,
            stream,
            snapshot=snapshot,
            timeout=timeout,
            partitions=partitions,
            linger=linger,
        )
        self._owner = client

    def save(self) -> None:
        """Write the snapshot file now (its entries and offsets are taken at one moment).

        Raises:
            InvalidArgument: the table has no snapshot path.
        """
        self._run(self._obj.save)

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        """The key's latest value in the view, or ``default``."""
        return self._run_sync(self._obj.get, key, default)

    def entry(self, key: bytes) -> Entry | None:
        """The key's latest value with its revision, or None."""
        return self._run_sync(self._obj.entry, key)

    def revision(self, key: bytes) -> int:
        """The key's revision in the view (-1: absent)."""
        return self._run_sync(self._obj.revision, key)

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every (key, value) in the view (a copy)."""
        return self._run_sync(self._obj.items)

    def __len__(self) -> int:
        """Keys in the view."""
        return self._run_sync(self._obj.__len__)

    def __contains__(self, key: object) -> bool:
        """True if ``key`` has a value in the view."""
        return self._run_sync(self._obj.__contains__, key)

    positions = Forwarded(_AsyncTable.positions)
    """Next offset the view will apply, per partition."""

    def put(self, key: bytes, value: bytes, *, ttl: float | None = None) -> int:
        """Set ``key`` to ``value`` (not empty: an empty value is a delete); its revision.
        With ``ttl`` (seconds, > 0, rounded up to ms) the key expires that long after the
        write (module docstring).
        """
        return self._run(self._obj.put, key, value, ttl=ttl)

    def delete(self, key: bytes) -> int:
        """Delete ``key`` (a tombstone); the tombstone's revision."""
        return self._run(self._obj.delete, key)

    def create(self, key: bytes, value: bytes, *, ttl: float | None = None) -> int:
        """Set ``key`` only if it has no value (an expired key has none); its revision.
        ``ttl`` as in :meth:`put` (e.g. a lock that frees itself).

        Raises:
            WrongExpectedKeyOffset: it has one (``current_revision``).
        """
        return self._run(self._obj.create, key, value, ttl=ttl)

    def update(self, key: bytes, value: bytes, revision: int, *, ttl: float | None = None) -> int:
        """Set ``key`` only if its revision is ``revision`` (compare-and-set); the new one.
        ``ttl`` as in :meth:`put` (without it the new value does not expire).

        Raises:
            WrongExpectedKeyOffset: the key is at another revision (``current_revision``,
                -1 if it has no value).
        """
        return self._run(self._obj.update, key, value, revision, ttl=ttl)

    def modify(
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
        return self._run(self._obj.modify, key, change, ttl=ttl)

    def sync(self) -> None:
        """Return once the view holds every record acknowledged before the call (in any
        process): each partition's high watermark, asked now, is reached.

        Raises:
            TimeoutError: not within the table's timeout.
            JetError: a reader failed for good (e.g. the stream was deleted).
        """
        self._run(self._obj.sync)

    held = Forwarded(_AsyncTable.held)
    """The partitions this table holds (reads and keeps up to date)."""

    def hold(self, partitions: Iterable[int]) -> None:
        """Hold ``partitions`` too: read each from its start and return once the view holds
        every record acknowledged before the call in them (as :meth:`sync`).

        Raises:
            InvalidArgument: a partition the stream does not have.
        """
        self._run(self._obj.hold, partitions)

    def release(self, partitions: Iterable[int]) -> None:
        """Stop holding ``partitions``: their reader stops and their keys leave the view
        (watchers are not told; :meth:`get` of such a key returns None).
        """
        self._run_sync(self._obj.release, partitions)

    def wait_for(self, key: bytes, revision: int) -> Entry | None:
        """Return ``key``'s entry once the view holds its partition up to ``revision``
        (e.g. the ``current_revision`` of a refused update: then its value is the one the
        update lost to, unless a later write changed it again). Cheaper than :meth:`sync`:
        no request to the server.

        Raises:
            TimeoutError: not within the table's timeout.
        """
        return self._run(self._obj.wait_for, key, revision)

    def history(self, key: bytes) -> list[Change]:
        """Every record of ``key`` the partition still stores (compaction keeps the latest
        only), oldest first; a delete has ``value`` None.
        """
        return self._run(self._obj.history, key)
