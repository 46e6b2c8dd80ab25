"""Cluster metadata as the SDK sees it: servers, streams, partitions, leaders.

Value types parsed from the JSON bodies of Metadata, CreateStream, DescribeStream and
ListOffsets (spec/protocol.md). Parsing is strict about types and raises
:class:`~jetsdk.errors.MalformedFrame` for a body that does not match the spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from jetsdk.errors import MalformedFrame

__all__ = [
    "ClusterMetadata",
    "OffsetInfo",
    "PartitionInfo",
    "ServerInfo",
    "StreamInfo",
    "is_under_replicated",
    "partition_state",
    "partition_subject",
]

_T = TypeVar("_T")


def partition_subject(stream_subject: str, partition: int) -> str:
    """The NATS subject partition ``partition`` listens on (spec: partition subjects)."""
    return stream_subject if partition == 0 else f"{stream_subject}.{partition}"


@attrs.frozen
class ServerInfo:
    """One server of the cluster."""

    id: str
    """Server id (as used in leader and replica lists)."""
    address: str
    """``host:port`` clients connect to."""
    live: bool = True
    """False if the answering server's liveness probes find it down."""


def is_under_replicated(
    offline: bool, leader: str | None, isr: tuple[str, ...], replicas: tuple[str, ...]
) -> bool:
    """A partition is under-replicated: offline, without a leader, or with fewer in-sync
    replicas than replicas."""
    return offline or leader is None or len(isr) < len(replicas)


def partition_state(offline: bool, under_replicated: bool) -> str:
    """A partition's state as shown: ``"offline"``, ``"under-replicated"`` or ``"ok"`` (the
    worst that holds)."""
    if offline:
        return "offline"
    return "under-replicated" if under_replicated else "ok"


@attrs.frozen
class PartitionInfo:
    """One partition of a stream."""

    partition: int
    """Partition number."""
    subject: str
    """NATS subject the partition listens on."""
    leader: str | None
    """Id of the leading server, or None while there is none."""
    replicas: tuple[str, ...]
    """Ids of the servers holding a replica."""
    isr: tuple[str, ...]
    """Ids of the in-sync replicas."""
    leader_epoch: int
    """Current leader epoch."""
    hw: int | None = None
    """High watermark (DescribeStream only; None if the answering server holds no replica)."""
    leo: int | None = None
    """Log end offset (DescribeStream only)."""
    log_start: int | None = None
    """First stored offset (DescribeStream only)."""
    size_bytes: int | None = None
    """Bytes on disk (DescribeStream only)."""
    segments: int | None = None
    """Segment count (DescribeStream only)."""
    offline: str | None = None
    """None, or why the partition is offline: it has no live leader (``"no leader"``,
    ``"leader s3 does not answer"``, as the answering server's liveness view finds it:
    nothing can be produced to it or read from it until a leader is back), or, in a
    DescribeStream answer, why the answering server's replica cannot open (too many open
    files, a damaged disk...; Produce and Fetch to it there fail at once with
    PartitionOffline)."""

    @property
    def is_offline(self) -> bool:
        """True if the partition is offline (see :attr:`offline`)."""
        return self.offline is not None

    @property
    def under_replicated(self) -> bool:
        """Offline, without a leader, or with fewer in-sync replicas than replicas."""
        return is_under_replicated(self.is_offline, self.leader, self.isr, self.replicas)

    @property
    def state(self) -> str:
        """``"offline"``, ``"under-replicated"`` or ``"ok"`` (the worst that holds)."""
        return partition_state(self.is_offline, self.under_replicated)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> PartitionInfo:
        """Parse a PartitionInfo object; MalformedFrame if it does not match the spec."""
        return cls(
            partition=_get(obj, "partition", int),
            subject=_get(obj, "subject", str),
            leader=_get_opt(obj, "leader", str),
            replicas=tuple(_get_list(obj, "replicas", str)),
            isr=tuple(_get_list(obj, "isr", str)),
            leader_epoch=_get_opt(obj, "leader_epoch", int) or 0,
            hw=_get_opt(obj, "hw", int),
            leo=_get_opt(obj, "leo", int),
            log_start=_get_opt(obj, "log_start", int),
            size_bytes=_get_opt(obj, "size_bytes", int),
            segments=_get_opt(obj, "segments", int),
            offline=_get_opt(obj, "offline", str),
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the wire field names)."""
        return {
            "partition": self.partition,
            "subject": self.subject,
            "leader": self.leader,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "leader_epoch": self.leader_epoch,
            "hw": self.hw,
            "leo": self.leo,
            "log_start": self.log_start,
            "size_bytes": self.size_bytes,
            "segments": self.segments,
            "offline": self.offline,
        }


INTERNAL_PREFIX = "__"
"""Names of internal streams start with this (the group log ``__groups``, share logs
``__share.*``): listings leave them out unless asked."""


@attrs.frozen
class StreamInfo:
    """A stream and its partitions."""

    name: str
    """Stream name."""
    subject: str
    """NATS subject of partition 0 (partition p > 0 listens on ``<subject>.<p>``)."""
    group: str | None
    """Load-balance group, or None."""
    partitions: tuple[PartitionInfo, ...]
    """Partitions, ordered by number."""
    replication_factor: int
    """Replicas per partition."""
    compact: bool
    """True if the stream is compacted by key."""
    config: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    """Retention and segment settings as the server reports them."""
    created_ns: int = 0
    """Creation time, ns since the epoch."""

    @property
    def partition_count(self) -> int:
        """Number of partitions."""
        return len(self.partitions)

    @property
    def internal(self) -> bool:
        """True for an internal stream (its name starts with ``__``)."""
        return self.name.startswith(INTERNAL_PREFIX)

    def partition(self, number: int) -> PartitionInfo | None:
        """The partition ``number``, or None."""
        partitions = self.partitions
        if 0 <= number < len(partitions):
            info = partitions[number]  # numbered 0..n-1 in order: no scan (a keyed
            if info.partition == number:  # producer asks once per batch, 500 partitions)
                return info
        for info in partitions:
            if info.partition == number:
                return info
        return None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> StreamInfo:
        """Parse a StreamInfo object; MalformedFrame if it does not match the spec."""
        raw_parts = _get_list(obj, "partitions", dict)
        partitions = sorted(
            (PartitionInfo.from_json(p) for p in raw_parts), key=lambda p: p.partition
        )
        config = obj.get("config") or {}
        if not isinstance(config, dict):
            raise MalformedFrame("stream 'config' must be an object")
        return cls(
            name=_get(obj, "name", str),
            subject=_get(obj, "subject", str),
            group=_get_opt(obj, "group", str),
            partitions=tuple(partitions),
            replication_factor=_get_opt(obj, "replication_factor", int) or 1,
            compact=bool(obj.get("compact", False)),
            config=config,
            created_ns=_get_opt(obj, "created_ns", int) or 0,
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the wire field names)."""
        return {
            "name": self.name,
            "subject": self.subject,
            "group": self.group,
            "partitions": [p.to_json() for p in self.partitions],
            "replication_factor": self.replication_factor,
            "compact": self.compact,
            "config": dict(self.config),
            "created_ns": self.created_ns,
        }


@attrs.frozen
class ClusterMetadata:
    """A snapshot of the Metadata response."""

    servers: Mapping[str, ServerInfo] = attrs.field(factory=dict, hash=False)
    """Servers by id."""
    streams: Mapping[str, StreamInfo] = attrs.field(factory=dict, hash=False)
    """Streams by name."""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ClusterMetadata:
        """Parse a Metadata response; MalformedFrame if it does not match the spec."""
        servers = {}
        for raw in _get_list(obj, "servers", dict):
            live = raw.get("live", True)
            if not isinstance(live, bool):
                raise MalformedFrame(f"field 'live' must be bool, got {live!r}")
            info = ServerInfo(id=_get(raw, "id", str), address=_get(raw, "address", str), live=live)
            servers[info.id] = info
        streams = {}
        for raw in _get_list(obj, "streams", dict):
            stream = StreamInfo.from_json(raw)
            streams[stream.name] = stream
        return cls(servers=servers, streams=streams)


@attrs.frozen
class OffsetInfo:
    """A ListOffsets answer."""

    offset: int
    """The offset asked for (earliest: log start; latest: HW; timestamp: first at/after)."""
    hw: int
    """High watermark: the offset the next committed message will get."""
    log_start: int
    """First offset still stored."""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> OffsetInfo:
        """Parse a ListOffsets response; MalformedFrame if it does not match the spec."""
        return cls(
            offset=_get(obj, "offset", int),
            hw=_get(obj, "hw", int),
            log_start=_get(obj, "log_start", int),
        )


def _check(value: Any, kind: type[_T], name: str) -> _T:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedFrame(f"field {name!r} must be {kind.__name__}, got {value!r}")
    return value


def _get(obj: Mapping[str, Any], name: str, kind: type[_T]) -> _T:
    if name not in obj:
        raise MalformedFrame(f"missing field {name!r}")
    return _check(obj[name], kind, name)


def _get_opt(obj: Mapping[str, Any], name: str, kind: type[_T]) -> _T | None:
    value = obj.get(name)
    return None if value is None else _check(value, kind, name)


def _get_list(obj: Mapping[str, Any], name: str, kind: type[_T]) -> list[_T]:
    value = obj.get(name) or []
    if not isinstance(value, list):
        raise MalformedFrame(f"field {name!r} must be a list")
    return [_check(v, kind, name) for v in value]
