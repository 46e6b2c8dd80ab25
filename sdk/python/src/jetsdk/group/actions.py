"""What a :class:`~jetsdk.group.member.GroupMember` asks its driver to do (the member's
actions; values, no I/O). Importable from :mod:`jetsdk.group.member` too."""

from __future__ import annotations

import attrs

from jetsdk.group.records import GroupRecord, encode_record, record_key
from jetsdk.group.stream_partition import StreamPartition

__all__ = [
    "Action",
    "AppendRecord",
    "Fenced",
    "LosePartition",
    "RevokePartition",
    "StartPartition",
]


@attrs.frozen
class AppendRecord:
    """Append ``record`` to the group log, then call ``on_appended`` with its timestamp."""

    record: GroupRecord
    """The record."""

    @property
    def key(self) -> bytes:
        """The message key (the group name)."""
        return record_key(self.record)

    @property
    def value(self) -> bytes:
        """The encoded message value."""
        return encode_record(self.record)


@attrs.frozen
class StartPartition:
    """Start consuming ``partition`` from ``offset`` (None: use the reset policy)."""

    partition: StreamPartition
    """The partition."""
    offset: int | None
    """First offset to consume, or None if the group has no committed offset."""
    generation: int
    """The owner generation (commits carry it; the member adds it)."""


@attrs.frozen
class RevokePartition:
    """Stop fetching ``partition``, finish in-flight work, call ``release`` before ``deadline``."""

    partition: StreamPartition
    """The partition."""
    deadline: float
    """Local time after which the partition is lost instead (LosePartition follows)."""


@attrs.frozen
class LosePartition:
    """Stop consuming ``partition`` at once; another member may own it already."""

    partition: StreamPartition
    """The partition."""
    reason: str
    """taken (expired, forced or fenced in the log) or lease (the view is too old to be sure)."""


@attrs.frozen
class Fenced:
    """Another incarnation with this member's instance id joined; close without rejoining."""

    by: str
    """The member id of the new incarnation."""


Action = AppendRecord | StartPartition | RevokePartition | LosePartition | Fenced
"""Any action."""
