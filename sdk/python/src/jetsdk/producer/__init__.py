"""Producing: :class:`Producer`, its :class:`SendHandle` and the batching accumulator."""

from jetsdk.producer.handle import SendHandle
from jetsdk.producer.producer import Producer

__all__ = ["Producer", "SendHandle"]
