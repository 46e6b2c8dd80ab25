"""Values a consumer's API speaks in: partition references, the partition callbacks'
type, and a committed position."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs

from jetsdk.group.stream_partition import StreamPartition

__all__ = ["OffsetAndMetadata", "PartitionRef", "PartitionsCallback"]

PartitionRef = int | StreamPartition | tuple[str, int]
"""A partition: its number (single-stream consumers), or (stream, number)."""
PartitionsCallback = Callable[[list[StreamPartition]], Awaitable[None] | None]
"""``on_assigned``/``on_revoked``/``on_lost``: a plain or async callable taking partitions."""


@attrs.frozen
class OffsetAndMetadata:
    """A committed (or to-be-committed) position of one partition."""

    offset: int
    """Next offset to consume: every record below it was processed."""
    metadata: str = ""
    """Free-form text stored with it."""
