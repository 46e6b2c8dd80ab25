"""Which local replica serves a request, and whether it may (leader checks).

:class:`ReplicaLookup` reads the metadata and the running partitions of a
:class:`~jetserver.broker.streams.StreamManager` (which owns both) and answers the Produce,
Fetch and admin services: the replica of a partition, or a typed error saying why there is
none here (not found, offline, not the leader, not open yet).

Task safety: event loop thread only.
"""

from __future__ import annotations

import anyio
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.broker.offline import OfflinePartitions
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.pending_opens import PendingOpens
from jetserver.broker.running import MetadataView, RunningPartition
from jetserver.config.server import ServerConfig
from jetserver.errors import ApiError, partition_not_found, stream_not_found
from jetserver.metadata.model import StreamMeta

PARTITION_READY_TIMEOUT_S = 5.0
"""Default bound of :meth:`ReplicaLookup.wait_partition_ready`."""

__all__ = ["PARTITION_READY_TIMEOUT_S", "ReplicaLookup"]


@attrs.define(eq=False)
class ReplicaLookup:
    """Lookups of the local replicas (module docstring)."""

    store: MetadataView
    """The metadata (read only here)."""
    running: dict[tuple[str, int], RunningPartition]
    """The running partitions by (stream, partition) (owned by the stream manager)."""
    offline: OfflinePartitions
    """Partitions whose replica here cannot open."""
    config: ServerConfig
    """This server's id and whether it is clustered."""
    pending: PendingOpens = attrs.field(factory=PendingOpens)
    """A server alone: partitions not opened yet (a request for one waits for its open)."""

    def _stream(self, name: str) -> StreamMeta:
        meta = self.store.state.streams.get(name)
        if meta is None:
            raise stream_not_found(name)
        return meta

    def replica(self, name: str, partition: int) -> PartitionReplica:
        """The local replica of ``name``/``partition``.

        Raises:
            ApiError: STREAM_NOT_FOUND, PARTITION_NOT_FOUND, PARTITION_OFFLINE if it is offline
                (it could not open), or UNAVAILABLE if it is not open (yet; a
                :class:`PartitionOpening` if it opens next).
        """
        meta = self._stream(name)
        if not 0 <= partition < meta.spec.partitions:
            raise partition_not_found(name, partition, meta.spec.partitions)
        self.offline.check(name, partition)
        if self.pending.wanted:
            self.pending.check(name, partition)
        running = self.running.get((name, partition))
        if running is None or running.replica.closed or running.stream_id != meta.stream_id:
            raise ApiError(
                ErrorCode.UNAVAILABLE,
                f"partition {name}/{partition} is not open on this server",
                {"stream": name, "partition": partition},
            )
        return running.replica

    def leader_replica(self, name: str, partition: int) -> PartitionReplica | None:
        """Check that this server leads ``name``/``partition`` and return its replica.

        Single server: no check (this server leads everything); returns None (the replica
        may not be needed, e.g. by Produce).

        Raises:
            ApiError: STREAM_NOT_FOUND, PARTITION_NOT_FOUND, NOT_LEADER (details ``leader``,
                ``leader_epoch``), UNAVAILABLE (this server leads it but has not opened it
                as leader yet).
        """
        if not self.config.cluster.enabled:
            return None
        meta = self._stream(name)
        if not 0 <= partition < meta.spec.partitions:
            raise partition_not_found(name, partition, meta.spec.partitions)
        a = meta.partitions[partition]
        if a.leader != self.config.server.id:
            raise ApiError(
                ErrorCode.NOT_LEADER,
                f"partition {name}/{partition} is led by {a.leader}, not by this server",
                {
                    "stream": name,
                    "partition": partition,
                    "leader": a.leader,
                    "leader_epoch": a.leader_epoch,
                },
            )
        running = self.running.get((name, partition))
        if (
            running is None
            or running.replica.closed
            or running.applied is None
            or running.applied[0].leader_epoch != a.leader_epoch
        ):
            raise ApiError(
                ErrorCode.UNAVAILABLE,
                f"partition {name}/{partition} is not open as leader on this server yet",
                {"stream": name, "partition": partition},
            )
        return running.replica

    async def wait_partition_ready(
        self, name: str, partition: int, timeout_s: float = PARTITION_READY_TIMEOUT_S
    ) -> bool:
        """Wait until the local replica of ``name``/``partition`` has had an assignment
        applied (cluster mode); False if it did not happen within ``timeout_s``."""
        with anyio.move_on_after(timeout_s):
            while True:
                running = self.running.get((name, partition))
                if running is not None and running.ready.is_set():
                    return True
                await anyio.sleep(0.01)
        return False
