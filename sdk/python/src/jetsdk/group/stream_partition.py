"""The unit of assignment: one partition of one stream."""

from __future__ import annotations

from typing import NamedTuple


class StreamPartition(NamedTuple):
    """One partition of one stream; orders by (stream, partition).

    A NamedTuple rather than an attrs class on purpose: it is a dict key and a sort key on
    every hot path of the group state machine, where tuple hashing and comparison are several
    times faster (kafka-python's TopicPartition is a namedtuple for the same reason).
    """

    stream: str
    """The stream name."""
    partition: int
    """The partition number, from 0."""

    def __str__(self) -> str:
        return f"{self.stream}[{self.partition}]"
