"""Consuming: :class:`Consumer` and start positions."""

from jetsdk.consumer.consumer import Consumer
from jetsdk.consumer.positions import StartAt

__all__ = ["Consumer", "StartAt"]
