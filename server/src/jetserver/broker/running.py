"""What the stream manager keeps per started partition, and the metadata view it reads.

Task safety: the server's event loop.
"""

from __future__ import annotations

from typing import Protocol

import anyio
import attrs

from jetserver.broker.nats_port import NatsSubscription
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.role_burst import RoleBurst
from jetserver.broker.services import ReplicaServices
from jetserver.config.server import ServerConfig
from jetserver.infra.lazy_event import LazyEvent
from jetserver.metadata.model import MetadataState, PartitionAssignment, StreamMeta
from jetserver.metadata.validate import partition_subject
from jetserver.replication.producers import ProducerTable
from jetserver.storage import Log
from jetserver.storage.space import DiskSpace

QUEUE_GROUP_PREFIX = "jet.lb."
"""NATS queue group of a load-balance group ``g`` is ``jet.lb.g``."""

__all__ = ["QUEUE_GROUP_PREFIX", "MetadataView", "RunningPartition", "Wanted", "queue_group"]


class MetadataView(Protocol):
    """Where the manager reads the metadata: the single-server store or the Raft member."""

    @property
    def state(self) -> MetadataState:
        """The current metadata."""
        ...


def queue_group(meta: StreamMeta) -> str:
    """The NATS queue group of ``meta``'s subscriptions ("" if it has no group)."""
    return QUEUE_GROUP_PREFIX + meta.spec.group if meta.spec.group else ""


Wanted = tuple[PartitionAssignment, tuple[tuple[str, str], ...]]
"""An assignment and the client addresses of its replicas (what a replica is handed)."""


@attrs.define(eq=False)
class RunningPartition:
    """A started partition of the :class:`~jetserver.broker.streams.StreamManager`: its
    replica, its NATS subscription and the assignment it was handed."""

    replica: PartitionReplica
    sub: NatsSubscription | None = None
    stream_id: str = ""
    queue: str = ""
    wanted: Wanted | None = None
    applied: Wanted | None = None
    wake: LazyEvent = attrs.field(factory=LazyEvent)
    """Set when ``wanted`` changes (the applier waits on it; in a cluster only)."""
    ready: LazyEvent = attrs.field(factory=LazyEvent)
    scope: anyio.CancelScope | None = None
    burst: RoleBurst | None = None
    """The burst of role changes ``wanted`` came with, until it is applied (role_burst)."""


def new_replica(
    meta: StreamMeta,
    assignment: PartitionAssignment,
    log_: Log,
    producers: ProducerTable,
    *,
    config: ServerConfig,
    services: ReplicaServices,
    disk: DiskSpace | None = None,
) -> PartitionReplica:
    """The replica of one partition over its opened log (not started yet); its appends
    are refused below ``disk``'s floor, except an internal stream's: group heartbeats,
    commits and share records are small, and a group whose members cannot heartbeat falls
    apart (spec/storage.md §13)."""
    p = assignment.partition
    if disk is not None and not meta.spec.internal:
        log_.space_guard = disk.check
    return PartitionReplica(
        stream=meta.name,
        partition=p,
        subject=partition_subject(meta.spec.subject, p),
        log=log_,
        services=services,
        max_message_bytes=meta.spec.max_message_bytes or config.limits.max_message_bytes,
        ingest=config.ingest,
        storage=config.storage,
        leader_epoch=assignment.leader_epoch,
        compact=meta.spec.compact,
        producers=producers,
        queue_group=queue_group(meta),
        replication_factor=meta.spec.replication_factor,
        spec=meta.spec,
    )
