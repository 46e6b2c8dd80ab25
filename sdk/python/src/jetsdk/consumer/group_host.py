"""The consumer as its :class:`~jetsdk.consumer.group_side.GroupSide` sees it: the parts the
group side needs of its consumer (and nothing more), handed over by the consumer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs

from jetsdk.client import Client
from jetsdk.consumer.delivery import Delivery
from jetsdk.consumer.fetcher import PartitionRun
from jetsdk.consumer.progress import Progress
from jetsdk.group.stream_partition import StreamPartition

__all__ = ["ConsumerParts"]


@attrs.frozen
class ConsumerParts:
    """What :class:`~jetsdk.consumer.group_side.GroupSide` needs of its consumer, made of the
    consumer's parts."""

    client: Client
    """The consumer's client."""
    delivery: Delivery
    """The consumer's partition runs and fetched batches."""
    start: object
    """Where a partition without a committed offset starts (None: per ``reset``)."""
    initial_offset: Callable[[StreamPartition, object], Awaitable[int]]
    """``(key, start)``: the offset a partition without a committed offset starts at."""
    begin_run: Callable[[StreamPartition, int, int | None, Progress | None], PartitionRun]
    """``(key, offset, generation, inherited)``: start reading ``key`` from ``offset``."""
    fail: Callable[[BaseException], None]
    """Raise the error from the consumer's next call."""
