"""Consuming: :class:`Consumer` (alone or in a consumer group), start positions, offsets."""

from jetsdk.consumer.consumer import Consumer
from jetsdk.consumer.membership import OffsetAndMetadata, PartitionRef, PartitionsCallback
from jetsdk.consumer.positions import StartAt

__all__ = ["Consumer", "OffsetAndMetadata", "PartitionRef", "PartitionsCallback", "StartAt"]
