"""A Client's metadata cache: the cluster metadata it last fetched, whether it is stale,
and the partition leaders it names (:class:`MetadataCache`); and a producer's leader
connection per partition kept between sends (:class:`PartitionLeaders`).

Task safety: one event loop, as :class:`jetsdk.client.Client`.
"""

from __future__ import annotations

from jetsdk.client_dial import ConnectionPool
from jetsdk.connection import Connection
from jetsdk.errors import InvalidArgument
from jetsdk.metadata import ClusterMetadata
from jetsdk.transport import parse_address

__all__ = ["MetadataCache", "PartitionLeaders"]


class MetadataCache:
    """The metadata a Client routes partition requests by (its Metadata answers).

    :attr:`epoch` changes whenever a leader it named may have changed: metadata
    installed, or marked stale (a NotLeader, a lost connection, a stream created or
    changed). A copy of a leader look-up made in one epoch is good while the epoch stays
    and its connection is open (:class:`PartitionLeaders`)."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self.metadata = ClusterMetadata()
        """The last metadata installed (empty until the first)."""
        self.stale = True
        """Fetch it again before use (:meth:`mark_stale`)."""
        self.version = 0
        """Metadata installed so far (concurrent refreshes share one request)."""
        self.epoch = 0
        """Changes with every install and every :meth:`mark_stale`."""
        self.closed = False
        """The client closed: no leader connections (set by the client)."""

    def mark_stale(self) -> None:
        """The metadata may be out of date: fetch it again before it is used next."""
        self.stale = True
        self.epoch += 1

    def install(self, metadata: ClusterMetadata) -> None:
        """A Metadata answer: use it, and learn the server addresses it lists."""
        self.metadata = metadata
        for server in metadata.servers.values():
            try:
                self._pool.address_of_id[server.id] = parse_address(server.address)
            except InvalidArgument:
                continue
        self.stale = False
        self.version += 1
        self.epoch += 1

    def leader_connection_now(self, stream: str, partition: int) -> Connection | None:
        """The open connection to the partition's leader, if the metadata (not stale)
        names one and a connection to it is open; None otherwise. Never waits."""
        info = None if self.stale else self.metadata.streams.get(stream)
        part = None if info is None or self.closed else info.partition(partition)
        if part is None or part.leader is None:
            return None
        address = self._pool.address_for(self.metadata, part.leader)
        return None if address is None else self._pool.open_connection(address)


class PartitionLeaders:
    """One producer's leader connection per partition of its stream: looked up in the
    client's :class:`MetadataCache` once, then kept while the cache's epoch stays (no
    NotLeader, metadata refresh or stale mark since) and the connection is open; a
    send's look-up is then one dict read."""

    def __init__(self, cache: MetadataCache, stream: str) -> None:
        self._cache = cache
        self._stream = stream
        self._epoch = -1
        self._conns: dict[int, Connection] = {}

    def now(self, partition: int) -> Connection | None:
        """:meth:`MetadataCache.leader_connection_now` of the partition, kept."""
        cache = self._cache
        conns = self._conns
        if self._epoch != cache.epoch:
            conns.clear()
            self._epoch = cache.epoch
        conn = conns.get(partition)
        if conn is None or conn.closed:
            conn = cache.leader_connection_now(self._stream, partition)
            if conn is None:
                conns.pop(partition, None)
                return None
            conns[partition] = conn
        return conn
