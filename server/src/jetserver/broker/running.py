"""What the stream manager keeps per started partition, and the metadata view it reads.

Task safety: the server's event loop.
"""

from __future__ import annotations

from typing import Protocol

import anyio
import attrs

from jetserver.broker.partition import PartitionReplica
from jetserver.lazy_event import LazyEvent
from jetserver.metadata.model import MetadataState, PartitionAssignment, StreamMeta
from jetserver.nats_link import SubscriptionHandle

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
    sub: SubscriptionHandle | None = None
    stream_id: str = ""
    queue: str = ""
    wanted: Wanted | None = None
    applied: Wanted | None = None
    wake: anyio.Event = attrs.field(factory=anyio.Event)
    ready: LazyEvent = attrs.field(factory=LazyEvent)
    scope: anyio.CancelScope | None = None
