"""What a producer's :class:`~jetsdk.producer.sender.Sender` keeps per partition and per
message in flight (value types, shared with :mod:`jetsdk.producer.direct`).

Task safety: one event loop.
"""

from __future__ import annotations

import collections
from typing import NamedTuple

import anyio
import attrs

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.connection import PendingResponse
from jetsdk.producer.accumulator import Batch
from jetsdk.producer.fan_in import SectionAnswer
from jetsdk.producer.handle import SendHandle

__all__ = ["PartitionSender", "Pending", "Prepared", "Written"]


class Prepared(NamedTuple):
    """A checked message with its partition, ack policy and accounted size."""

    message: ProduceMessage
    partition: int
    policy: AckPolicy
    size: int
    deferred: bool
    """Its value is still to be compressed, by the producer's
    :class:`~jetsdk.producer.compression_stage.CompressionStage`."""


@attrs.define(eq=False, slots=True)
class Pending:
    """A message queued or in flight, with the handle of its outcome."""

    message: ProduceMessage
    handle: SendHandle
    size: int = 0
    """Its estimated size (``Prepared.size``), counted against ``max_pending_bytes``."""


@attrs.define(eq=False)
class Written:
    """A batch whose first request the caller wrote (:meth:`BatchWrites.send_now
    <jetsdk.producer.batch_writes.BatchWrites.send_now>`)."""

    batch: Batch[Pending]
    base_seq: int
    request: ProduceRequest
    response: PendingResponse | SectionAnswer | None
    """None: not written after all (the sender task sends it)."""
    sender: PartitionSender
    sent_at: float
    """``time.monotonic()`` when it was written: ``delivery_timeout`` counts from there."""
    claimed: bool = False
    """Seen through already: by the sender task (:meth:`Sender._see_through`) or by its
    answer's callback (``BatchWrites._on_answer``), whichever came first."""


@attrs.define(eq=False)
class PartitionSender:
    """One partition's state in the sender: its task's wake-up, its in-flight window, its
    idempotent sequence, what callers wrote for it."""

    wake: anyio.Event
    in_flight: anyio.Semaphore
    next_seq: int = 0
    waiting: bool = False
    deferred: bool = False
    """Its next batch is cut at the end of this loop turn (``BatchWrites._cut_deferred``)."""
    written: collections.deque[Written] = attrs.field(factory=collections.deque)
    """Batches written by callers, in order, for the sender task to see through."""
    failure: BaseException | None = None
    """What a handle's callback raised when ``BatchWrites._on_answer`` settled a batch: the
    sender task raises it (as it would have, settling the batch itself)."""
    open: dict[int, None] = attrs.field(factory=dict)
    """The first sequences of the batches holding a slot of :attr:`in_flight` (sent, not
    settled yet). The lowest one's requests carry the sequence-start flag: every earlier
    sequence is settled (:meth:`starts`)."""
    direct: bool = False
    """A message sent by :class:`~jetsdk.producer.direct.DirectSends` is in flight: the
    sender task stays parked (nothing is cut or sent behind it) until it is settled or
    handed over (as a :class:`Written` batch)."""

    def starts(self, base_seq: int) -> bool:
        """True if the batch numbered from ``base_seq`` (holding a slot) is the oldest one
        not settled: its request may carry the sequence-start flag."""
        return min(self.open) == base_seq
