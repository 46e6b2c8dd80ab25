"""A message handed out by a share group (:class:`ShareMessage`) and dead-letter headers.

spec/share-groups.md §5-§7. The outcome methods go back to the :class:`ShareConsumer` that
handed the message out; the first outcome wins, later ones do nothing.
"""

from __future__ import annotations

from collections import deque
from enum import StrEnum

import attrs

from jetsdk.codec.record import Record
from jetsdk.message import DONE, Done, Headers, RecordView
from jetsdk.share.member import Handout

__all__ = [
    "DLQ_COUNT",
    "DLQ_GROUP",
    "DLQ_OFFSET",
    "DLQ_PARTITION",
    "DLQ_REASON",
    "DLQ_STREAM",
    "AcknowledgeType",
    "Outcome",
    "ShareMessage",
    "dead_letter_headers",
    "is_dead_letter_of",
]

DLQ_GROUP = "Jet-Share-Group"
DLQ_STREAM = "Jet-Share-Stream"
DLQ_PARTITION = "Jet-Share-Partition"
DLQ_OFFSET = "Jet-Share-Offset"
DLQ_COUNT = "Jet-Share-Delivery-Count"
DLQ_REASON = "Jet-Share-Reason"


def dead_letter_headers(group: str, handout: Handout, original: Headers) -> Headers:
    """The original headers plus where the record came from (spec §6)."""
    return (
        *original,
        (DLQ_GROUP, group.encode()),
        (DLQ_STREAM, handout.stream.encode()),
        (DLQ_PARTITION, str(handout.partition).encode()),
        (DLQ_OFFSET, str(handout.offset).encode()),
        (DLQ_COUNT, str(handout.delivery_count).encode()),
        (DLQ_REASON, (handout.reason or "max_deliveries").encode()),
    )


def is_dead_letter_of(headers: Headers, group: str, handout: Handout) -> bool:
    """Whether a dead-letter record with ``headers`` is the one of ``handout``."""
    want = {
        DLQ_GROUP: group.encode(),
        DLQ_STREAM: handout.stream.encode(),
        DLQ_PARTITION: str(handout.partition).encode(),
        DLQ_OFFSET: str(handout.offset).encode(),
    }
    seen = {name: value for name, value in headers if name in want}
    return seen == want


Outcome = tuple[str, Handout, float]
"""(``ack`` | ``nack`` | ``reject`` | ``in_progress``, the handout, the nack delay)."""


class AcknowledgeType(StrEnum):
    """The outcome of a share-group message, as Kafka's ``AcknowledgeType`` (KIP-932, 4.2)
    names them; :meth:`ShareMessage.ack` takes one."""

    ACCEPT = "accept"
    """Processed: never delivered again (``ack()``)."""
    RELEASE = "release"
    """Give it back for redelivery; counts as a delivery (``nack()``)."""
    REJECT = "reject"
    """Straight to the dead-letter stream (``reject()``)."""
    RENEW = "renew"
    """Still working on it: restart the ack deadline (``in_progress()``)."""


@attrs.define(eq=False, repr=False)
class ShareMessage(RecordView):
    """A message from a share group: the record, its delivery count, and its outcome methods.

    ``delivery_count``: how many times an application was handed this message, this time
    included (spec/share-groups.md §7): acquired-but-never-handed-out deliveries are given
    back uncounted; it does count a delivery to a member that crashed before handing the
    message out.

    The outcome methods queue the outcome and return at once (:data:`~jetsdk.message.DONE`,
    awaitable at no cost, as ``Message.ack()`` returns); the first outcome wins, later ones
    do nothing. Thread-safe. :meth:`ShareConsumer.flush` waits until they are stored.
    """

    stream: str
    partition: int
    record: Record
    delivery_count: int
    _handout: Handout
    _outcomes: deque[Outcome]
    _settled: bool = False

    def __repr__(self) -> str:
        return (
            f"ShareMessage({self.stream}/{self.partition}@{self.offset}, "
            f"delivery_count={self.delivery_count})"
        )

    def ack(self, kind: AcknowledgeType | str = AcknowledgeType.ACCEPT) -> Done:
        """Acknowledge with ``kind`` (default ``accept``: done, never delivered again once
        the batched settle is stored; see :class:`AcknowledgeType` for the others)."""
        if kind is AcknowledgeType.ACCEPT:  # the usual call: no conversion
            return self._settle("ack", 0.0)
        kind = AcknowledgeType(kind)
        if kind is AcknowledgeType.RELEASE:
            return self.nack()
        if kind is AcknowledgeType.REJECT:
            return self.reject()
        if kind is AcknowledgeType.RENEW:
            return self.in_progress()
        return self._settle("ack", 0.0)

    def nack(self, delay: float = 0.0, *, backoff: bool = False, max_delay: float = 300.0) -> Done:
        """Give it back for redelivery (to any member) not before ``delay`` seconds; with
        ``backoff``, after ``delay * 2 ** (delivery_count - 1)`` capped by ``max_delay``.
        It counts as a delivery: after ``max_deliveries`` it is dead-lettered."""
        if backoff:
            delay = min(max_delay, delay * 2 ** max(0, self.delivery_count - 1))
        return self._settle("nack", max(0.0, delay))

    def reject(self) -> Done:
        """Straight to the dead-letter stream (written by this consumer, exactly once)."""
        return self._settle("reject", 0.0)

    def in_progress(self) -> Done:
        """Still working on it: restart the ack deadline of this message (this message
        only: the others this member holds keep theirs). Call it again before each
        deadline; a message whose deadline passed cannot be renewed."""
        if not self._settled:
            self._outcomes.append(("in_progress", self._handout, 0.0))
        return DONE

    def _settle(self, kind: str, delay: float) -> Done:
        if not self._settled:  # the first outcome wins
            self._settled = True
            self._outcomes.append((kind, self._handout, delay))
        return DONE
