# generated — do not edit: made by tools/gen_sync.py from jetsdk/table/table.py

"""Blocking :class:`Table` (generated from :mod:`jetsdk.table.table`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from os import PathLike

from jetsdk._sync_support import SyncWrapper
from jetsdk.sync.client import Client
from jetsdk.table.table import DEFAULT_LINGER_S
from jetsdk.table.table import Table as _AsyncTable
from jetsdk.table.view import Change, Entry


class Table(SyncWrapper[_AsyncTable]):
    """A live view of the compacted stream ``stream`` (module docstring).

    Blocking version of :class:`jetsdk.table.table.Table` (generated): each
    method runs the async one it names, documented there, in the client's private
    event-loop thread. Thread-safe.
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
        """Arguments as for :class:`jetsdk.table.table.Table`."""
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
        """Blocking :meth:`jetsdk.table.table.Table.save`."""
        self._run(self._obj.save)

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        """Blocking :meth:`jetsdk.table.table.Table.get`."""
        return self._run_sync(self._obj.get, key, default)

    def entry(self, key: bytes) -> Entry | None:
        """Blocking :meth:`jetsdk.table.table.Table.entry`."""
        return self._run_sync(self._obj.entry, key)

    def revision(self, key: bytes) -> int:
        """Blocking :meth:`jetsdk.table.table.Table.revision`."""
        return self._run_sync(self._obj.revision, key)

    def items(self) -> list[tuple[bytes, bytes]]:
        """Blocking :meth:`jetsdk.table.table.Table.items`."""
        return self._run_sync(self._obj.items)

    def __len__(self) -> int:
        """Blocking :meth:`jetsdk.table.table.Table.__len__`."""
        return self._run_sync(self._obj.__len__)

    def __contains__(self, key: object) -> bool:
        """Blocking :meth:`jetsdk.table.table.Table.__contains__`."""
        return self._run_sync(self._obj.__contains__, key)

    @property
    def positions(self) -> list[int]:
        """As :attr:`jetsdk.table.table.Table.positions`."""
        return self._obj.positions

    def put(self, key: bytes, value: bytes, *, ttl: float | None = None) -> int:
        """Blocking :meth:`jetsdk.table.table.Table.put`."""
        return self._run(self._obj.put, key, value, ttl=ttl)

    def delete(self, key: bytes) -> int:
        """Blocking :meth:`jetsdk.table.table.Table.delete`."""
        return self._run(self._obj.delete, key)

    def create(self, key: bytes, value: bytes, *, ttl: float | None = None) -> int:
        """Blocking :meth:`jetsdk.table.table.Table.create`."""
        return self._run(self._obj.create, key, value, ttl=ttl)

    def update(self, key: bytes, value: bytes, revision: int, *, ttl: float | None = None) -> int:
        """Blocking :meth:`jetsdk.table.table.Table.update`."""
        return self._run(self._obj.update, key, value, revision, ttl=ttl)

    def modify(
        self,
        key: bytes,
        change: Callable[[bytes | None], bytes],
        *,
        ttl: float | None = None,
    ) -> int:
        """Blocking :meth:`jetsdk.table.table.Table.modify`."""
        return self._run(self._obj.modify, key, change, ttl=ttl)

    def sync(self) -> None:
        """Blocking :meth:`jetsdk.table.table.Table.sync`."""
        self._run(self._obj.sync)

    @property
    def held(self) -> list[int]:
        """As :attr:`jetsdk.table.table.Table.held`."""
        return self._obj.held

    def hold(self, partitions: Iterable[int]) -> None:
        """Blocking :meth:`jetsdk.table.table.Table.hold`."""
        self._run(self._obj.hold, partitions)

    def release(self, partitions: Iterable[int]) -> None:
        """Blocking :meth:`jetsdk.table.table.Table.release`."""
        self._run_sync(self._obj.release, partitions)

    def wait_for(self, key: bytes, revision: int) -> Entry | None:
        """Blocking :meth:`jetsdk.table.table.Table.wait_for`."""
        return self._run(self._obj.wait_for, key, revision)

    def history(self, key: bytes) -> list[Change]:
        """Blocking :meth:`jetsdk.table.table.Table.history`."""
        return self._run(self._obj.history, key)
