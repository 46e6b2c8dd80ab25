"""Values a consumer's API speaks in: partition references, the partition callbacks'
type, and a committed position (:class:`~jetsdk.group.offsets.OffsetAndMetadata`,
defined with the group's offset table)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from jetsdk.group.offsets import OffsetAndMetadata
from jetsdk.group.stream_partition import StreamPartition

__all__ = ["OffsetAndMetadata", "PartitionRef", "PartitionsCallback"]

PartitionRef = int | StreamPartition | tuple[str, int]
"""A partition: its number (single-stream consumers), or (stream, number)."""
PartitionsCallback = Callable[[list[StreamPartition]], Awaitable[None] | None]
"""``on_assigned``/``on_revoked``/``on_lost``: a plain or async callable taking partitions."""
