"""The record accumulator: per-partition queues cut into Produce batches (pure, no I/O).

Messages wait in their partition's queue until the batch at the head of the queue is
*ready*:

- full: ``max_batch_messages`` messages or ``max_batch_bytes`` bytes are queued, or the
  next message has another ack policy (a Produce request carries one ack policy, so a
  change of policy closes the batch);
- old enough: its oldest message has waited ``linger`` seconds;
- or the producer is flushing or closing.

:meth:`Accumulator.drain` then cuts one batch off the head of the queue. Time is passed in
(``now``, seconds on any monotonic clock) so the logic is tested without sleeping.

Not thread-safe; the producer calls it from its event loop only.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, NamedTuple, TypeVar

import attrs

from jetsdk.codec.error_codes import AckPolicy

__all__ = [
    "DEFAULT_LINGER",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_BATCH_MESSAGES",
    "Accumulator",
    "Batch",
    "Queued",
]

DEFAULT_LINGER = 0.0
"""Seconds a message may wait for others to share its batch. 0: batches form naturally
while the partition's previous request is in flight (measured on one server: sequential
``send`` 1.8-2.4 ms each vs 7-10 ms with 5 ms; 50 concurrent senders 7.6-11.9k msg/s vs
4.2-5.5k; bulk ``send_soon`` throughput unchanged)."""
DEFAULT_MAX_BATCH_MESSAGES = 1000
"""Most messages in one Produce request."""
DEFAULT_MAX_BATCH_BYTES = 1024 * 1024
"""Most (estimated) message bytes in one Produce request."""

T = TypeVar("T")


class Queued(NamedTuple, Generic[T]):
    """One message waiting in a partition queue (a tuple: one is built per message)."""

    item: T
    """The caller's payload (the producer's pending message)."""
    size: int
    """Estimated encoded size in bytes."""
    ack_policy: AckPolicy
    """Ack policy of the message."""
    enqueued_at: float
    """When it was queued (caller's clock, seconds)."""


@attrs.frozen
class Batch(Generic[T]):
    """Messages cut off the head of one partition queue, to go in one Produce request."""

    partition: int
    """Partition number."""
    ack_policy: AckPolicy
    """The ack policy every message of the batch shares."""
    items: tuple[T, ...]
    """The messages, in send order."""
    size: int
    """Sum of the estimated sizes."""


@attrs.define
class _Queue(Generic[T]):
    entries: deque[Queued[T]] = attrs.field(factory=deque)
    size: int = 0
    mixed: bool = False
    """Some queued message has another ack policy than the head (closes the head batch)."""


class Accumulator(Generic[T]):
    """Per-partition FIFO queues of pending messages and the rule for cutting batches."""

    def __init__(
        self,
        *,
        linger: float = DEFAULT_LINGER,
        max_batch_messages: int = DEFAULT_MAX_BATCH_MESSAGES,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> None:
        """Configure the batching rule.

        Raises:
            ValueError: a negative linger or a non-positive limit.
        """
        if linger < 0:
            raise ValueError("linger must be >= 0")
        if max_batch_messages < 1 or max_batch_bytes < 1:
            raise ValueError("max_batch_messages and max_batch_bytes must be >= 1")
        self.linger = linger
        self.max_batch_messages = max_batch_messages
        self.max_batch_bytes = max_batch_bytes
        self._queues: dict[int, _Queue[T]] = {}
        self._total = 0

    @property
    def total_queued(self) -> int:
        """Messages queued over all partitions."""
        return self._total

    def queued(self, partition: int) -> int:
        """Messages queued for ``partition``."""
        queue = self._queues.get(partition)
        return len(queue.entries) if queue else 0

    def partitions(self) -> list[int]:
        """Partitions with at least one queued message."""
        return [p for p, q in self._queues.items() if q.entries]

    def append(
        self, partition: int, item: T, *, size: int, ack_policy: AckPolicy, now: float
    ) -> bool:
        """Queue a message; return True if this made the head batch of its partition full
        (it was not before)."""
        queue = self._queues.get(partition)
        if queue is None:
            queue = self._queues[partition] = _Queue()
        entries = queue.entries
        count = len(entries)
        if count >= self.max_batch_messages or queue.size >= self.max_batch_bytes or queue.mixed:
            was_full = True
        else:
            was_full = False
            # A later message with another policy closes the head batch.
            if count and ack_policy != entries[0].ack_policy:
                queue.mixed = True
        entries.append(Queued(item, size, ack_policy, now))
        queue.size += size
        self._total += 1
        # _head_full of a queue just appended to (not empty), without the call.
        return not was_full and (
            count >= self.max_batch_messages - 1
            or queue.size >= self.max_batch_bytes
            or queue.mixed
        )

    def _head_full(self, queue: _Queue[T]) -> bool:
        entries = queue.entries
        if not entries:
            return False
        return (
            len(entries) >= self.max_batch_messages
            or queue.size >= self.max_batch_bytes
            or queue.mixed
        )

    def deadline(self, partition: int) -> float | None:
        """When the head batch becomes ready by age (None if the queue is empty)."""
        queue = self._queues.get(partition)
        if queue is None or not queue.entries:
            return None
        return queue.entries[0].enqueued_at + self.linger

    def ready(self, partition: int, now: float, *, flushing: bool = False) -> bool:
        """True if a batch should be cut now (full, old enough, or flushing)."""
        queue = self._queues.get(partition)
        if queue is None or not queue.entries:
            return False
        # By age first: with linger 0 (the default) every batch is ready so.
        return (
            now >= queue.entries[0].enqueued_at + self.linger or flushing or self._head_full(queue)
        )

    def drain(self, partition: int) -> Batch[T] | None:
        """Cut the head batch off ``partition``'s queue (None if empty).

        The batch holds the longest run of same-policy messages from the head within the
        limits, and always at least one message (even one over ``max_batch_bytes``).
        """
        queue = self._queues.get(partition)
        if queue is None or not queue.entries:
            return None
        entries = queue.entries
        if len(entries) == 1:  # a message alone (sent to an idle partition): no scan
            head = entries.popleft()
            queue.size -= head.size
            queue.mixed = False
            self._total -= 1
            return Batch(partition, head.ack_policy, (head.item,), head.size)
        policy = entries[0].ack_policy
        items: list[T] = []
        size = 0
        while entries and len(items) < self.max_batch_messages:
            head = entries[0]
            if head.ack_policy != policy:
                break
            if items and size + head.size > self.max_batch_bytes:
                break
            entries.popleft()
            items.append(head.item)
            size += head.size
        queue.size -= size
        self._total -= len(items)
        if queue.mixed:
            first_policy = entries[0].ack_policy if entries else policy
            queue.mixed = any(e.ack_policy != first_policy for e in entries)
        return Batch(partition, policy, tuple(items), size)

    def drain_all(self) -> list[T]:
        """Remove and return every queued item (used when failing them on close)."""
        items = [q.item for queue in self._queues.values() for q in queue.entries]
        self._queues.clear()
        self._total = 0
        return items
