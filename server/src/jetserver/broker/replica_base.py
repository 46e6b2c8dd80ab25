"""What every part of one partition replica shares: its name, log, core and lifecycle.

A :class:`~jetserver.broker.partition.PartitionReplica` builds one :class:`ReplicaBase`
and hands it whole to each of its parts (the sequencer, the committer, the intake, the
replica-fetch side, the role driver), instead of passing the same five references to each
one by one.

Task safety: immutable; what it refers to follows its own rules (event loop thread).
"""

from __future__ import annotations

from typing import Any

import attrs

from jetserver.broker.acks import PendingAck
from jetserver.broker.lifecycle import Lifecycle
from jetserver.logs import fields
from jetserver.replication.core import ReplicaCore
from jetserver.storage import Log

__all__ = ["ReplicaBase"]


@attrs.frozen(eq=False, repr=False)
class ReplicaBase:
    """The references every part of one partition replica holds (module docstring)."""

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    log: Log
    """The partition's log (owned by the replica; the sequencer is its single writer)."""
    core: ReplicaCore[PendingAck]
    """The replica's decisions (role, leader state, HW, pending ALL acks, producers)."""
    life: Lifecycle
    """The replica's running state (written by the replica only, read by its parts)."""

    def __str__(self) -> str:
        return f"{self.stream}/{self.partition}"

    def __repr__(self) -> str:
        return self.part_repr(self)

    def part_repr(self, part: object) -> str:
        """``Kind(stream/partition)``: the repr of a part. Not attrs' repr: the parts refer
        to each other and to the server's objects (callbacks), so a generated repr would
        print the whole server."""
        return f"{type(part).__name__}({self})"

    def fields(self, **extra: Any) -> dict[str, Any]:
        """The ``extra=`` of a log record about this replica (stream, partition, ``extra``)."""
        return fields(stream=self.stream, partition=self.partition, **extra)
