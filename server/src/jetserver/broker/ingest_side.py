"""The ingest half of a partition replica: where messages enter its sequencer's queue.

:class:`IngestSide` is mixed into :class:`~jetserver.broker.partition.PartitionReplica`
(which holds the fields declared here): the NATS sink (:meth:`IngestSide.accept`) and
callback (:meth:`IngestSide.on_message`) of its subscription, and the direct path of a
Produce request this server's leader appends itself (:meth:`IngestSide.ingest_direct`,
broker/stored_copy.py). The sequencer (broker/partition.py) drains the queue.

Task safety: event loop thread.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable, Sequence

from nats.aio.msg import Msg

from jetsdk.codec.envelope import COOKIE
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.transcode import DirectRecord
from jetserver import hops
from jetserver.broker.acks import PendingAck
from jetserver.broker.ingested import Ingested
from jetserver.broker.stored_copy import is_stored_copy
from jetserver.config import IngestConfig
from jetserver.lazy_event import LazyEvent
from jetserver.nats_fast import SkipMarked, header_lines
from jetserver.replication.core import ReplicaCore

__all__ = ["IngestSide"]


class IngestSide:
    """The ingest half of :class:`~jetserver.broker.partition.PartitionReplica`."""

    # Fields of PartitionReplica used here.
    ingest: IngestConfig
    skip_copies: SkipMarked
    _core: ReplicaCore[PendingAck]
    _queue: collections.deque[Ingested]
    _queued_bytes: int
    _wake: LazyEvent
    _space: LazyEvent
    _stopping: bool
    _copies_skipped: int
    _stored_value: bytes
    _direct_ok: bool | None
    _appending: bool
    _append_now: Callable[[list[Ingested]], Awaitable[None]]
    produce_direct: int
    produce_inline: int

    def accept(self, subject: str, reply: str, data: bytes) -> bool:
        """NATS sink (a message without headers): queue it for the sequencer and return True,
        or return False while the queue is full (it then comes through :meth:`on_message`,
        which waits for room). Messages arriving while not leading are dropped (True)."""
        if self._stopping or not self._core.leading:
            return True
        if self._queued_bytes >= self.ingest.max_pending_bytes:
            return False
        if hops.ENABLED:
            hops.mark("sink")
        self._queue.append((subject, reply, data, None))
        self._queued_bytes += len(data)
        self._wake.set()
        return True

    async def on_message(self, msg: Msg) -> None:
        """NATS callback: queue the message for the sequencer (waits when the queue is full)."""
        if self._stopping or not self._core.leading:
            return
        while self._queued_bytes >= self.ingest.max_pending_bytes and not self._stopping:
            self._space = LazyEvent() if self._space.is_set() else self._space
            await self._space.wait()
        headers = header_lines(msg)
        if headers and msg.data[:4] == COOKIE and is_stored_copy(headers, self._stored_value):
            self._copies_skipped += 1  # its leader stored it directly (broker/stored_copy.py)
            return
        if hops.ENABLED:
            hops.mark("sink")
        self._queue.append((msg.subject, msg.reply or "", msg.data, headers or None))
        self._queued_bytes += len(msg.data)
        self._wake.set()

    @property
    def copies_skipped(self) -> int:
        """NATS copies of messages this partition's leader stored directly, not stored
        again (dropped by the subscription filter or by :meth:`on_message`)."""
        return self._copies_skipped + self.skip_copies.count

    def takes_direct(self, policy: int) -> bool:
        """True if Produce with ack ``policy`` may append here directly
        (:meth:`ingest_direct`): leading, not stopping, no queue group (NATS picks the
        storing stream there), and one replica or an ALL ack. A replicated partition keeps
        the NATS path for the other acks: a leader cut off from its cluster would ack what
        it cannot commit, which through NATS also reaches the new leader. An ALL ack waits
        for the commit, so there the direct path risks nothing acknowledged (a cut-off
        leader's producers time out and retry, as with Kafka's acks=all)."""
        if not self._core.leading or self._stopping or self._direct_ok is None:
            return False
        return self._direct_ok or policy == AckPolicy.ALL

    async def ingest_direct(
        self,
        messages: Sequence[tuple[str, bytes]],
        records: Sequence[DirectRecord] | None = None,
        policy: int = AckPolicy.ALL,
    ) -> bool:
        """Queue enveloped messages of a Produce request as if they came from NATS, after
        waiting for room in the queue; False (nothing queued) if :meth:`takes_direct` no
        longer holds. Their NATS copies must carry the ``Jet-Stored`` header. If nothing is
        queued or being appended, they are appended at once in this task instead
        (``_append_now``), in the order they would have had in the queue.

        ``records[i]``, if given, says where message ``i`` lies in its request
        (:func:`~jetsdk.codec.transcode.produce_envelopes`): its record is then built
        from there instead of from its envelope (the same bytes, less work)."""
        while self._queued_bytes >= self.ingest.max_pending_bytes and not self._stopping:
            self._space = LazyEvent() if self._space.is_set() else self._space
            await self._space.wait()
        if not self.takes_direct(policy):
            return False
        if hops.ENABLED:
            hops.mark("sink")
        self.produce_direct += len(messages)
        if not self._queue and not self._appending:
            # The sequencer is idle: append in this task (no hand-off, no wait for acks).
            self.produce_inline += len(messages)
            if records is None:
                await self._append_now(
                    [(subject, "", payload, None) for subject, payload in messages]
                )
            else:
                await self._append_now(
                    [
                        (subject, "", payload, record)
                        for (subject, payload), record in zip(messages, records, strict=True)
                    ]
                )
            return True
        queue = self._queue
        size = 0
        if records is None:
            for subject, payload in messages:
                queue.append((subject, "", payload, None))
                size += len(payload)
        else:
            for (subject, payload), record in zip(messages, records, strict=True):
                queue.append((subject, "", payload, record))
                size += len(payload)
        self._queued_bytes += size
        self._wake.set()
        return True
