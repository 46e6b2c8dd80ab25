"""Values of the cluster metadata: stream specs, partition assignments, the whole state.

All values are frozen and hold only JSON-friendly data, so the same state can be persisted
to metadata.json (single server) or replicated through Raft (a cluster, spec/cluster.md).
``to_dict``/``from_dict`` are the one serialization, used for the file, for Raft snapshots
and for replay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from jetsdk.codec.stream_settings import (
    DEFAULT_DELETE_RETENTION_S,
    DEFAULT_SEGMENT_MAX_AGE_S,
    DEFAULT_SEGMENT_MAX_BYTES,
    repair_stored,
)
from jetsdk.codec.stream_settings import DEFAULT_DUPLICATE_WINDOW_S as DEFAULT_DUPLICATE_WINDOW_S
from jetsdk.codec.stream_settings import DURABILITIES as DURABILITIES
from jetsdk.codec.stream_settings import DURABILITY_FLUSHED as DURABILITY_FLUSHED
from jetsdk.codec.stream_settings import DURABILITY_REPLICATED as DURABILITY_REPLICATED
from jetsdk.codec.stream_settings import DURABILITY_WRITTEN as DURABILITY_WRITTEN
from jetserver.logs import fields
from jetserver.security.grants import Grant as Grant  # the metadata holds the ACLs

log = logging.getLogger(__name__)

DEFAULT_PARTITIONS = 1
DEFAULT_REPLICATION_FACTOR = 1


@attrs.frozen
class StreamSpec:
    """What a client asked for when creating a stream (defaults filled in)."""

    name: str
    """Stream name (validated: see metadata.validate)."""
    subject: str
    """NATS subject of partition 0 (wildcards allowed)."""
    partitions: int = DEFAULT_PARTITIONS
    """Number of partitions; partition p > 0 listens on ``<subject>.<p>``."""
    replication_factor: int = DEFAULT_REPLICATION_FACTOR
    """Replicas per partition."""
    group: str | None = None
    """Load-balance group: streams of one group share a NATS queue subscription."""
    compact: bool = False
    """Key compaction on."""
    retention_max_age_s: float | None = None
    """Delete segments older than this (None: keep)."""
    retention_max_bytes: int | None = None
    """Keep at most this many bytes per partition (None: no limit)."""
    retention_max_messages: int | None = None
    """Keep at most this many messages per partition (None: no limit)."""
    segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES
    """Roll the active segment at this size."""
    segment_max_age_s: float = DEFAULT_SEGMENT_MAX_AGE_S
    """Roll the active segment at this age."""
    delete_retention_s: float = DEFAULT_DELETE_RETENTION_S
    """How long compaction keeps tombstones."""
    max_message_bytes: int | None = None
    """Largest message stored (None: the server's limit)."""
    internal: bool = False
    """An internal stream (name starting with ``__``), e.g. the SDK's ``__offsets``."""
    min_isr: int = 1
    """Fewest in-sync replicas for an ALL ack (NOT_ENOUGH_REPLICAS below it)."""
    durability: str = DURABILITY_FLUSHED
    """What commit means: ``flushed`` (fsync on every ISR member) or ``replicated``."""
    duplicate_window_s: float = DEFAULT_DUPLICATE_WINDOW_S
    """A plain message whose ``Nats-Msg-Id`` was stored this recently is not stored again."""
    no_nats_copies: bool = False
    """Records the leader stores directly (one replica) are not republished to NATS."""

    def to_dict(self) -> dict[str, Any]:
        """The spec as a JSON object."""
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamSpec:
        """Inverse of :meth:`to_dict` (unknown keys ignored).

        Settings outside today's limits (written by an older version that accepted them)
        are clamped to the nearest limit with a warning naming the stream and the setting
        (:func:`jetsdk.codec.stream_settings.repair_stored`): the stream keeps serving, and
        no runtime value derived from a setting can overflow.
        """
        names = {f.name for f in attrs.fields(cls)}
        repaired, notes = repair_stored(data)
        for note in notes:
            log.warning(
                "stream setting out of limits in stored metadata; clamped",
                extra=fields(stream=data.get("name"), change=note),
            )
        return cls(**{k: v for k, v in repaired.items() if k in names})

    def config_dict(self) -> dict[str, Any]:
        """The settings shown as ``config`` in StreamInfo."""
        d = self.to_dict()
        for key in ("name", "subject", "partitions", "replication_factor", "group", "compact"):
            d.pop(key)
        return d


@attrs.frozen
class PartitionAssignment:
    """Who holds one partition."""

    partition: int
    """Partition number."""
    leader: str
    """Server id of the leader."""
    replicas: tuple[str, ...]
    """Server ids holding a replica; the first is the preferred leader (the leader at
    creation). Not reordered when the leader changes."""
    isr: tuple[str, ...]
    """In-sync replicas (the leader included)."""
    leader_epoch: int = 0
    """Bumped at every leader change."""
    partition_epoch: int = 0
    """Bumped at every change of this assignment (ISR, leader, epoch): ISR updates are
    compare-and-set on it (like Kafka's partition epoch in AlterPartition), so a proposal
    computed from an older view is refused."""

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object."""
        return {
            "partition": self.partition,
            "leader": self.leader,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
        }

    def changed(self, **changes: Any) -> PartitionAssignment:
        """A copy with ``changes`` and the partition epoch bumped."""
        return attrs.evolve(self, partition_epoch=self.partition_epoch + 1, **changes)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartitionAssignment:
        """Inverse of :meth:`to_dict`."""
        return cls(
            partition=int(data["partition"]),
            leader=str(data["leader"]),
            replicas=tuple(data["replicas"]),
            isr=tuple(data["isr"]),
            leader_epoch=int(data.get("leader_epoch", 0)),
            partition_epoch=int(data.get("partition_epoch", 0)),
        )


@attrs.frozen
class StreamMeta:
    """One stream as the metadata knows it."""

    spec: StreamSpec
    """The settings it was created with."""
    stream_id: str
    """Unique id of this incarnation (a re-created stream gets a new one; names its data)."""
    created_ns: int
    """Creation time, nanoseconds since the epoch (chosen by the proposer)."""
    partitions: tuple[PartitionAssignment, ...]
    """One assignment per partition, in partition order."""

    @property
    def name(self) -> str:
        """The stream name."""
        return self.spec.name

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object."""
        return {
            "spec": self.spec.to_dict(),
            "stream_id": self.stream_id,
            "created_ns": self.created_ns,
            "partitions": [p.to_dict() for p in self.partitions],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamMeta:
        """Inverse of :meth:`to_dict`."""
        return cls(
            spec=StreamSpec.from_dict(data["spec"]),
            stream_id=str(data["stream_id"]),
            created_ns=int(data["created_ns"]),
            partitions=tuple(PartitionAssignment.from_dict(p) for p in data["partitions"]),
        )


@attrs.frozen
class RegisteredServer:
    """A server of the cluster, as it registered itself (RegisterServer)."""

    server_id: str
    """Its server id."""
    client_address: str
    """``host:port`` of its client protocol (what Metadata lists and peers dial)."""
    raft_address: str
    """``host:port`` of its metadata Raft member."""
    incarnation: str = ""
    """Id of the server's current run (a new one at every start; "" if never given)."""

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object."""
        return {
            "server_id": self.server_id,
            "client_address": self.client_address,
            "raft_address": self.raft_address,
            "incarnation": self.incarnation,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RegisteredServer:
        """Inverse of :meth:`to_dict`."""
        return cls(
            server_id=str(data["server_id"]),
            client_address=str(data["client_address"]),
            raft_address=str(data["raft_address"]),
            incarnation=str(data.get("incarnation", "")),
        )


@attrs.frozen
class MetadataState:
    """The whole metadata: every stream, the registered servers, and how many operations
    produced it.

    Treat as immutable: :func:`jetserver.metadata.ops.apply` returns a new state.
    """

    streams: Mapping[str, StreamMeta] = attrs.field(factory=dict)
    """Streams by name."""
    applied: int = 0
    """Operations applied so far (the state-machine index under Raft)."""
    servers: Mapping[str, RegisteredServer] = attrs.field(factory=dict)
    """Registered servers by id (empty on a single server without a cluster)."""
    acls: Mapping[str, tuple[Grant, ...]] = attrs.field(factory=dict)
    """Identity -> its grants (an empty tuple: an identity with no rights)."""

    def assignment(self, stream: str, partition: int) -> PartitionAssignment | None:
        """Partition ``partition`` of ``stream`` (None: no such stream or partition)."""
        meta = self.streams.get(stream)
        if meta is None or not 0 <= partition < len(meta.partitions):
            return None
        return meta.partitions[partition]

    def client_addresses(self) -> dict[str, str]:
        """Server id -> client ``host:port`` of every registered server."""
        return {i: s.client_address for i, s in self.servers.items()}

    def to_dict(self, stream: Callable[[StreamMeta], Any] = StreamMeta.to_dict) -> dict[str, Any]:
        """As a JSON object (the content of metadata.json; ``servers`` only if any);
        ``stream`` encodes each stream (the Raft snapshot's keeps the unchanged ones'
        encodings)."""
        out: dict[str, Any] = {
            "version": 1,
            "applied": self.applied,
            "streams": [stream(s) for s in sorted(self.streams.values(), key=lambda s: s.name)],
        }
        if self.servers:
            out["servers"] = [self.servers[i].to_dict() for i in sorted(self.servers)]
        if self.acls:
            out["acls"] = {i: [g.to_dict() for g in self.acls[i]] for i in sorted(self.acls)}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetadataState:
        """Inverse of :meth:`to_dict`."""
        streams = [StreamMeta.from_dict(s) for s in data.get("streams", [])]
        servers = [RegisteredServer.from_dict(s) for s in data.get("servers", [])]
        return cls(
            streams={s.name: s for s in streams},
            applied=int(data.get("applied", 0)),
            servers={s.server_id: s for s in servers},
            acls={
                str(i): tuple(Grant.from_dict(g) for g in grants)
                for i, grants in data.get("acls", {}).items()
            },
        )
