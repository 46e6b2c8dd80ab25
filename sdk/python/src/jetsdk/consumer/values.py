"""Values a consumer's API speaks in: partition references, the partition callbacks'
type, and a committed position (:class:`~jetsdk.group.offsets.OffsetAndMetadata`,
defined with the group's offset table)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from jetsdk.errors import InvalidArgument
from jetsdk.group.offsets import OffsetAndMetadata
from jetsdk.group.stream_partition import StreamPartition

__all__ = ["OffsetAndMetadata", "PartitionRef", "PartitionsCallback", "stream_names"]

PartitionRef = int | StreamPartition | tuple[str, int]
"""A partition: its number (single-stream consumers), or (stream, number)."""
PartitionsCallback = Callable[[list[StreamPartition]], Awaitable[None] | None]
"""``on_assigned``/``on_revoked``/``on_lost``: a plain or async callable taking partitions."""


def stream_names(
    stream: str | None, streams: Iterable[str] | None, partitions: object | None
) -> list[str]:
    """The streams a consumer reads (``stream`` first, then ``streams``), as its
    constructor was given them.

    Raises:
        InvalidArgument: none, one named twice, or ``partitions`` with more than one.
    """
    names = ([stream] if stream is not None else []) + list(streams or ())
    if not names or len(set(names)) != len(names):
        raise InvalidArgument("name a stream, or distinct streams", details={"field": "streams"})
    if partitions is not None and len(names) != 1:
        raise InvalidArgument(
            "partitions= needs exactly one stream", details={"field": "partitions"}
        )
    return names
