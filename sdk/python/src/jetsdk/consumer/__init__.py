"""Consuming: :class:`Consumer` (alone or in a consumer group), start positions, offsets."""

from jetsdk.consumer.consumer import Consumer
from jetsdk.consumer.positions import StartAt
from jetsdk.consumer.values import OffsetAndMetadata, PartitionRef, PartitionsCallback

__all__ = ["Consumer", "OffsetAndMetadata", "PartitionRef", "PartitionsCallback", "StartAt"]
