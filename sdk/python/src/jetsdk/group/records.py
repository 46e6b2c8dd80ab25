"""Records of the group log (spec/groups.md, "Records"): value types and their JSON encoding.

Every record of a consumer group is one message in the internal stream ``__groups``, keyed by
the group name (so all of a group's records land in one partition, in one total order). The
value is a UTF-8 JSON object with a version ``"v"`` and a ``"type"``:

======== =========================================================================
type     meaning
======== =========================================================================
join     a member enters (or updates its subscriptions); static members name an instance
heartbeat the member is alive
commit   an offset commit for one partition, fenced by the owner generation
release  the member hands partitions back (with their final offsets, atomically)
leave    the member goes (final offsets; ``temporary`` keeps a static member's slot)
checkpoint the full group state as of an offset, so new readers need not replay history
======== =========================================================================

Validation is part of the protocol: a record that breaks a rule below is skipped by every
reader (:class:`InvalidGroupRecord`), so all readers keep the same view. A record with a
newer version raises :class:`UnsupportedGroupVersion`, which readers must not skip.

Pure code: no I/O. Values are immutable and thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import orjson

from jetsdk.group.errors import InvalidGroupRecord, UnsupportedGroupVersion
from jetsdk.group.stream_partition import StreamPartition

__all__ = [
    "GROUPS_STREAM",
    "MAX_ASSIGNORS",
    "MAX_ENTRIES",
    "MAX_ID_BYTES",
    "MAX_METADATA_BYTES",
    "MAX_PARTITIONS",
    "MAX_RECORD_BYTES",
    "MAX_SUBSCRIPTIONS",
    "MAX_TIMEOUT_MS",
    "MIN_TIMEOUT_MS",
    "RECORD_VERSION",
    "SIMPLE_GENERATION",
    "Checkpoint",
    "FinalOffset",
    "GroupRecord",
    "Heartbeat",
    "Join",
    "Leave",
    "OffsetCommit",
    "Release",
    "decode_record",
    "encode_record",
    "record_key",
]

GROUPS_STREAM = "__groups"
"""Name of the internal stream that holds every group's log."""
RECORD_VERSION = 1
"""The record version this module writes and the highest it reads."""
MAX_ID_BYTES = 255
"""Longest group name, member id, instance id, stream or assignor name (UTF-8 bytes)."""
MAX_METADATA_BYTES = 4096
"""Longest free-form ``metadata`` string (UTF-8 bytes)."""
MAX_SUBSCRIPTIONS = 1024
"""Most streams one member may subscribe to."""
MAX_PARTITIONS = 65536
"""Largest partition count of a subscribed stream (partitions are 0 .. count - 1)."""
MAX_ENTRIES = 65536
"""Most partitions in one release or leave record."""
MAX_ASSIGNORS = 16
"""Most assignor names in one join record."""
MIN_TIMEOUT_MS = 1
"""Smallest session or release timeout, milliseconds."""
MAX_TIMEOUT_MS = 86_400_000
"""Largest session or release timeout (one day), milliseconds."""
MAX_RECORD_BYTES = 16 * 1024 * 1024
"""Largest record value a reader decodes (checkpoints of big groups are the large ones)."""
MAX_INT64 = 2**63 - 1
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidGroupRecord(f"{what} must be a string")
    size = len(value.encode("utf-8", "surrogatepass"))
    if not 1 <= size <= MAX_ID_BYTES:
        raise InvalidGroupRecord(f"{what} must be 1..{MAX_ID_BYTES} UTF-8 bytes", reason="limit")
    if _CONTROL.search(value):
        raise InvalidGroupRecord(f"{what} must not contain control characters")
    return value


def _check_metadata(value: object, what: str = "metadata") -> str:
    if not isinstance(value, str):
        raise InvalidGroupRecord(f"{what} must be a string")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_METADATA_BYTES:
        raise InvalidGroupRecord(f"{what} over {MAX_METADATA_BYTES} bytes", reason="limit")
    return value


def _check_int(value: object, what: str, low: int, high: int = MAX_INT64) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidGroupRecord(f"{what} must be an integer")
    if not low <= value <= high:
        raise InvalidGroupRecord(f"{what} must be in {low}..{high}", reason="limit")
    return value


def _id_validator(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _check_id(value, attribute.name)


def _optional_id_validator(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _check_id(value, attribute.name)


def _metadata_validator(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _check_metadata(value, attribute.name)


def _non_negative(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _check_int(value, attribute.name, 0)


def _partition_validator(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _check_int(value, attribute.name, 0, MAX_PARTITIONS - 1)


def _timeout_validator(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _check_int(value, attribute.name, MIN_TIMEOUT_MS, MAX_TIMEOUT_MS)


def _subscriptions(
    value: Mapping[str, int] | Iterable[tuple[str, int]],
) -> tuple[tuple[str, int], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    out = tuple(sorted(items))
    if len(out) > MAX_SUBSCRIPTIONS:
        raise InvalidGroupRecord(f"more than {MAX_SUBSCRIPTIONS} subscriptions", reason="limit")
    seen: set[str] = set()
    for stream, count in out:
        _check_id(stream, "subscribed stream")
        _check_int(count, "partition count", 1, MAX_PARTITIONS)
        if stream in seen:
            raise InvalidGroupRecord(f"stream {stream!r} subscribed twice")
        seen.add(stream)
    return out


def _assignor_names(value: Iterable[str]) -> tuple[str, ...]:
    out = tuple(value)
    if not 1 <= len(out) <= MAX_ASSIGNORS:
        raise InvalidGroupRecord(f"assignors must list 1..{MAX_ASSIGNORS} names", reason="limit")
    for name in out:
        _check_id(name, "assignor name")
    if len(set(out)) != len(out):
        raise InvalidGroupRecord("assignor names repeat")
    return out


@attrs.frozen
class _MemberRecord:
    """The fields every group-log record starts with."""

    group: str = attrs.field(validator=_id_validator)
    """The group name."""
    member: str = attrs.field(validator=_id_validator)
    """The id of the member that wrote the record: unique per process incarnation."""


@attrs.frozen
class Join(_MemberRecord):
    """A member enters the group, or updates its subscriptions (same member id)."""

    subscriptions: tuple[tuple[str, int], ...] = attrs.field(converter=_subscriptions)
    """(stream, partition count as the member sees it), sorted by stream; a mapping is accepted."""
    instance: str | None = attrs.field(default=None, validator=_optional_id_validator)
    """Static membership: a stable id kept across restarts (group.instance.id); None: dynamic."""
    assignors: tuple[str, ...] = attrs.field(
        default=("sticky", "range", "roundrobin"), converter=_assignor_names
    )
    """Assignor names this member supports, most preferred first."""
    session_timeout_ms: int = attrs.field(default=10_000, validator=_timeout_validator)
    """The member is expired when the log clock passes its last record's time by more than this."""
    release_timeout_ms: int = attrs.field(default=30_000, validator=_timeout_validator)
    """How long the member may keep a partition after being asked to release it."""
    metadata: str = attrs.field(default="", validator=_metadata_validator)
    """Free-form client information (host, version); not used by the protocol."""

    @property
    def subscription_map(self) -> dict[str, int]:
        """The subscriptions as a dict."""
        return dict(self.subscriptions)


@attrs.frozen
class Heartbeat(_MemberRecord):
    """The member is alive."""

    generation: int = attrs.field(default=0, validator=_non_negative)
    """The generation of the member's view when it sent this (informational)."""


SIMPLE_GENERATION = -1
"""The generation of a *simple* commit: from outside the membership (Kafka's generation -1),
accepted only while no member owns or targets the partition (spec/groups.md §7.2)."""


def _commit_generation(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _check_int(value, attribute.name, SIMPLE_GENERATION)


@attrs.frozen
class OffsetCommit(_MemberRecord):
    """An offset commit for one partition: from its owner in its owner generation, or a simple
    commit (generation :data:`SIMPLE_GENERATION`) while nobody owns or targets it."""

    stream: str = attrs.field(validator=_id_validator)
    """The stream name."""
    partition: int = attrs.field(validator=_partition_validator)
    """The partition number."""
    generation: int = attrs.field(validator=_commit_generation)
    """The owner generation: the group generation in which the member acquired the partition
    (:data:`SIMPLE_GENERATION` for a simple commit from outside the membership)."""
    offset: int = attrs.field(validator=_non_negative)
    """The next offset to consume (every record below it is processed)."""
    metadata: str = attrs.field(default="", validator=_metadata_validator)
    """Free-form text stored with the offset."""

    @property
    def stream_partition(self) -> StreamPartition:
        """The partition this commit is for."""
        return StreamPartition(self.stream, self.partition)

    @classmethod
    def of(
        cls,
        group: str,
        member: str,
        partition: StreamPartition,
        generation: int,
        offset: int,
        metadata: str = "",
    ) -> OffsetCommit:
        """The commit of ``offset`` for ``partition`` (the inverse of :attr:`stream_partition`)."""
        return cls(
            group, member, partition.stream, partition.partition, generation, offset, metadata
        )


@attrs.frozen
class FinalOffset:
    """One partition handed back by a release or a leave, with its final offset."""

    stream: str = attrs.field(validator=_id_validator)
    """The stream name."""
    partition: int = attrs.field(validator=_partition_validator)
    """The partition number."""
    generation: int = attrs.field(validator=_non_negative)
    """The owner generation of the member's ownership of this partition."""
    offset: int | None = attrs.field(default=None)
    """Offset to commit with the release, or None to commit nothing."""
    metadata: str = attrs.field(default="", validator=_metadata_validator)
    """Free-form text stored with the offset."""

    @offset.validator
    def _offset_ok(self, _attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None:
            _check_int(value, "offset", 0)

    @property
    def stream_partition(self) -> StreamPartition:
        """The partition this entry is for."""
        return StreamPartition(self.stream, self.partition)


def _final_offsets(value: Iterable[FinalOffset]) -> tuple[FinalOffset, ...]:
    out = tuple(value)
    if len(out) > MAX_ENTRIES:
        raise InvalidGroupRecord(f"more than {MAX_ENTRIES} partitions", reason="limit")
    keys = {(e.stream, e.partition) for e in out}
    if len(keys) != len(out):
        raise InvalidGroupRecord("a partition appears twice")
    return out


@attrs.frozen
class Release(_MemberRecord):
    """The member hands partitions back; each entry's offset is committed first, atomically."""

    partitions: tuple[FinalOffset, ...] = attrs.field(converter=_final_offsets)
    """The released partitions (at least one)."""

    @partitions.validator
    def _not_empty(self, _attribute: attrs.Attribute[Any], value: tuple[FinalOffset, ...]) -> None:
        if not value:
            raise InvalidGroupRecord("a release names at least one partition")


@attrs.frozen
class Leave(_MemberRecord):
    """The member goes: final offsets are committed, then all its partitions are released."""

    temporary: bool = attrs.field(default=False)
    """A static member keeps its slot (no rebalance) until its session timeout passes."""
    final_offsets: tuple[FinalOffset, ...] = attrs.field(default=(), converter=_final_offsets)
    """Offsets to commit before the partitions are released."""

    @temporary.validator
    def _bool(self, _attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, bool):
            raise InvalidGroupRecord("temporary must be a boolean")


@attrs.frozen
class Checkpoint(_MemberRecord):
    """The whole group state as of log offset ``as_of`` (see :mod:`jetsdk.group.snapshot`)."""

    as_of: int = attrs.field()
    """Offset of the last record the state includes (-1: none)."""
    state: Mapping[str, Any] = attrs.field(hash=False)
    """The state object, as produced by ``GroupState.snapshot()``."""

    @as_of.validator
    def _as_of_ok(self, _attribute: attrs.Attribute[Any], value: object) -> None:
        _check_int(value, "as_of", -1)

    @state.validator
    def _state_ok(self, _attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, Mapping):
            raise InvalidGroupRecord("state must be an object")


GroupRecord = Join | Heartbeat | OffsetCommit | Release | Leave | Checkpoint
"""Any record of the group log."""


def record_key(record: GroupRecord) -> bytes:
    """The message key to append ``record`` with: the group name in UTF-8.

    Every record of a group has the same key, so the keyed partitioner sends them all to one
    partition of ``__groups``. The stream must not be compacted (spec/groups.md explains why).
    """
    return record.group.encode("utf-8")


def _final_to_json(entry: FinalOffset) -> dict[str, Any]:
    return {
        "stream": entry.stream,
        "partition": entry.partition,
        "generation": entry.generation,
        "offset": entry.offset,
        "metadata": entry.metadata,
    }


def _finals_to_json(entries: tuple[FinalOffset, ...]) -> list[dict[str, Any]]:
    return [_final_to_json(e) for e in entries]


_ENCODED: dict[type, tuple[str, tuple[str, ...]]] = {
    Join: (
        "join",
        (
            "instance",
            "subscriptions",
            "assignors",
            "session_timeout_ms",
            "release_timeout_ms",
            "metadata",
        ),
    ),
    Heartbeat: ("heartbeat", ("generation",)),
    OffsetCommit: ("commit", ("stream", "partition", "generation", "offset", "metadata")),
    Release: ("release", ("partitions",)),
    Leave: ("leave", ("temporary", "final_offsets")),
    Checkpoint: ("checkpoint", ("as_of", "state")),
}
"""Record class -> (its ``type``, its fields after ``group`` and ``member``, in spec order)."""
_AS_JSON: dict[str, Callable[[Any], Any]] = {
    "subscriptions": dict,
    "partitions": _finals_to_json,
    "final_offsets": _finals_to_json,
}
"""Fields whose value is not JSON as it is (tuples are: arrays)."""


def encode_record(record: GroupRecord) -> bytes:
    """Encode a record as the UTF-8 JSON value of its message.

    Field order is fixed (as in spec/groups.md) so the bytes are reproducible; readers must not
    depend on it.
    """
    kind, fields = _ENCODED[type(record)]
    obj: dict[str, Any] = {
        "v": RECORD_VERSION,
        "type": kind,
        "group": record.group,
        "member": record.member,
    }
    for name in fields:
        value = getattr(record, name)
        convert = _AS_JSON.get(name)
        obj[name] = value if convert is None else convert(value)
    return orjson.dumps(obj)


def _field(obj: Mapping[str, Any], name: str) -> Any:
    if name not in obj:
        raise InvalidGroupRecord(f"missing field {name!r}")
    return obj[name]


def _opt(obj: Mapping[str, Any], name: str, default: Any) -> Any:
    value = obj.get(name, default)
    return default if value is None else value


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidGroupRecord(f"{what} must be an array")
    return value


def _final_from_json(obj: object) -> FinalOffset:
    if not isinstance(obj, dict):
        raise InvalidGroupRecord("a partition entry must be an object")
    return FinalOffset(
        stream=_field(obj, "stream"),
        partition=_field(obj, "partition"),
        generation=_field(obj, "generation"),
        offset=obj.get("offset"),
        metadata=_opt(obj, "metadata", ""),
    )


def _decode_object(obj: dict[str, Any]) -> GroupRecord:
    kind = _field(obj, "type")
    group = _field(obj, "group")
    member = _field(obj, "member")
    if kind == "join":
        subs = _field(obj, "subscriptions")
        if not isinstance(subs, dict):
            raise InvalidGroupRecord("subscriptions must be an object")
        return Join(
            group=group,
            member=member,
            subscriptions=subs,
            instance=obj.get("instance"),
            assignors=_list(_field(obj, "assignors"), "assignors"),
            session_timeout_ms=_field(obj, "session_timeout_ms"),
            release_timeout_ms=_field(obj, "release_timeout_ms"),
            metadata=_opt(obj, "metadata", ""),
        )
    if kind == "heartbeat":
        return Heartbeat(group=group, member=member, generation=_opt(obj, "generation", 0))
    if kind == "commit":
        return OffsetCommit(
            group=group,
            member=member,
            stream=_field(obj, "stream"),
            partition=_field(obj, "partition"),
            generation=_field(obj, "generation"),
            offset=_field(obj, "offset"),
            metadata=_opt(obj, "metadata", ""),
        )
    if kind == "release":
        entries = _list(_field(obj, "partitions"), "partitions")
        return Release(group=group, member=member, partitions=map(_final_from_json, entries))
    if kind == "leave":
        entries = _list(_opt(obj, "final_offsets", []), "final_offsets")
        return Leave(
            group=group,
            member=member,
            temporary=_opt(obj, "temporary", False),
            final_offsets=map(_final_from_json, entries),
        )
    if kind == "checkpoint":
        return Checkpoint(
            group=group, member=member, as_of=_field(obj, "as_of"), state=_field(obj, "state")
        )
    raise InvalidGroupRecord(f"unknown record type {kind!r}", reason="type")


def record_group(data: bytes | memoryview) -> str | None:
    """The ``group`` field of a group-log value, whatever else it holds (None: not a JSON
    object with a string ``group``). Readers use it to leave other groups' records alone."""
    if len(data) > MAX_RECORD_BYTES:
        return None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    group = obj.get("group") if isinstance(obj, dict) else None
    return group if isinstance(group, str) else None


def decode_record(data: bytes | memoryview) -> GroupRecord:
    """Decode a group-log message value.

    Raises:
        UnsupportedGroupVersion: ``v`` is above :data:`RECORD_VERSION` (do not skip).
        InvalidGroupRecord: anything else wrong; readers skip the record.
    """
    if len(data) > MAX_RECORD_BYTES:
        raise InvalidGroupRecord(f"record over {MAX_RECORD_BYTES} bytes", reason="limit")
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidGroupRecord(f"not JSON: {exc}", reason="json") from None
    if not isinstance(obj, dict):
        raise InvalidGroupRecord("a group record is a JSON object", reason="json")
    version = _field(obj, "v")
    _check_int(version, "v", 1)
    if version > RECORD_VERSION:
        raise UnsupportedGroupVersion(version)
    try:
        return _decode_object(obj)
    except InvalidGroupRecord:
        raise
    except (TypeError, ValueError) as exc:  # a wrongly typed field caught by a converter
        raise InvalidGroupRecord(str(exc)) from None
