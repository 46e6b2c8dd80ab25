"""Where messages enter a partition replica: its NATS subscription and direct Produce.

:class:`Intake` holds the NATS sink (:meth:`Intake.accept`) and callback
(:meth:`Intake.on_message`) of the replica's subscription, and the direct path of a
Produce request this server's leader appends itself (:meth:`Intake.ingest_direct`,
broker/stored_copy.py). It hands messages to the :class:`~jetserver.broker.sequencer.
Sequencer`, which owns the queue.

Task safety: event loop thread.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from nats.aio.msg import Msg

from jetsdk.codec.envelope import COOKIE
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.transcode import DirectRecord
from jetserver.broker.acks import PartitionAck, PendingAck
from jetserver.broker.direct import DirectAckTo, DirectBatch, Result
from jetserver.broker.nats_port import SkipMarked, header_lines
from jetserver.broker.replica_base import ReplicaBase
from jetserver.broker.sequencer import Sequencer
from jetserver.broker.stored_copy import is_stored_copy, stored_skip, stored_value
from jetserver.infra import hops

__all__ = ["Intake"]

_ALL = int(AckPolicy.ALL)


@attrs.define(eq=False, repr=False)
class Intake:
    """The entry points of one partition replica's messages (module docstring)."""

    base: ReplicaBase
    """The replica's name, log, core and lifecycle (read only here)."""
    sequencer: Sequencer
    """Where accepted messages go."""
    direct_ok: bool | None
    """True: Produce appends directly (one replica); False: for ALL acks only (replicated);
    None: never (a load-balance group)."""
    produce_direct: int = 0
    """Produce messages queued by :meth:`ingest_direct` (appended without NATS)."""
    produce_inline: int = 0
    """Of those, the messages appended in their request's own task."""
    skip_copies: SkipMarked = attrs.field(init=False)
    """The subscription filter that drops stored copies before parsing."""
    _stored_value: bytes = attrs.field(init=False)
    _copies_skipped: int = 0

    def __repr__(self) -> str:
        return self.base.part_repr(self)

    def __attrs_post_init__(self) -> None:
        self._stored_value = stored_value(self.base.stream, self.base.partition)
        self.skip_copies = stored_skip(self.base.stream, self.base.partition)

    def accept(self, subject: str, reply: str, data: bytes) -> bool:
        """NATS sink (a message without headers): queue it for the sequencer and return True,
        or return False while the queue is full (it then comes through :meth:`on_message`,
        which waits for room). Messages arriving while not leading are dropped (True)."""
        base = self.base
        if base.life.stopping or not base.core.leading:
            return True
        sequencer = self.sequencer
        if not sequencer.has_room:
            return False
        if hops.ENABLED:
            hops.mark("sink")
        sequencer.offer((subject, reply, data, None), len(data))
        return True

    async def on_message(self, msg: Msg) -> None:
        """NATS callback: queue the message for the sequencer (waits when the queue is full)."""
        if self.base.life.stopping or not self.base.core.leading:
            return
        await self.sequencer.wait_for_room()
        headers = header_lines(msg)
        if headers and msg.data[:4] == COOKIE and is_stored_copy(headers, self._stored_value):
            self._copies_skipped += 1  # its leader stored it directly (broker/stored_copy.py)
            return
        if hops.ENABLED:
            hops.mark("sink")
        data = msg.data
        self.sequencer.offer((msg.subject, msg.reply or "", data, headers or None), len(data))

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
        if not self.base.core.leading or self.base.life.stopping or self.direct_ok is None:
            return False
        return self.direct_ok or policy == AckPolicy.ALL

    def appends_at_once(self, policy: int) -> bool:
        """True if :meth:`ingest_direct` of a request with ack ``policy`` would append it
        in the caller's task now, without waiting for anything: it takes it directly, the
        sequencer is idle and its queue has room."""
        sequencer = self.sequencer
        return sequencer.idle and sequencer.has_room and self.takes_direct(policy)

    async def ingest_direct(
        self,
        batch: DirectBatch,
        *,
        shield: bool = True,
        entered: Callable[[], None] | None = None,
        checked: bool = False,
    ) -> bool:
        """Hand the messages of a Produce request to the sequencer as one typed batch,
        after waiting for room in its queue; False (nothing taken) if
        :meth:`takes_direct` no longer holds. Their outcomes are settled on
        ``batch.completion`` in process; their NATS copies must carry the ``Jet-Stored``
        header. If nothing is queued or being appended, they are appended at once in this
        task (:meth:`Sequencer.append_now`), in the order they would have had in the
        queue (``shield``: as :meth:`Sequencer.append_now`).

        ``entered`` is called once the batch is taken, right before it is appended or
        queued, with no await in between: so in the order of the appends (where the
        request takes its copies' turn, :meth:`Committer.copies_turn`; after the append
        it could come after requests appended later: an ALL ack's append in its own task
        is followed by its fsync, which yields).

        ``checked``: the caller saw :meth:`takes_direct` hold in this turn (no await since):
        if the queue has room, it is not asked again."""
        sequencer = self.sequencer
        if not (checked and sequencer.has_room):
            await sequencer.wait_for_room()
            if not self.takes_direct(batch.policy):
                return False
        if entered is not None:
            entered()
        if hops.ENABLED:
            hops.mark("sink")
        count = len(batch.records)
        self.produce_direct += count
        if sequencer.idle:
            # The sequencer is idle: append in this task (no hand-off, no wait for acks).
            self.produce_inline += count
            await sequencer.append_now([batch], shield=shield)
            return True
        sequencer.offer(batch, batch.size)
        return True

    def append_one(
        self, subject: str, record: DirectRecord, to: DirectAckTo | None = None
    ) -> Result | None:
        """:meth:`ingest_direct` of one message with no controls or producer id, in the
        caller's step, its outcome returned (the caller saw :meth:`appends_at_once` hold
        in this turn: :meth:`Sequencer.append_one_now`); None, nothing done: a large
        write, for the general path. ``to``: where an ALL ack is settled, by the commit
        that passes its record (registered with the core's pending acks, as
        ``AppendBatch.success_ack``; settled now if the append committed it)."""
        if hops.ENABLED:
            hops.mark("sink")
        result = self.sequencer.append_one_now(subject, record)
        if result is not None:
            self.produce_direct += 1
            self.produce_inline += 1
            if to is not None and result[0] == 0 and result[1] >= 0:  # (else refused)
                _code, offset, ts = result
                if offset < self.base.log.high_watermark:  # (durability written)
                    to.completion.settle(0, 0, offset, ts)
                else:
                    ack = PartitionAck(offset, ts, "", _ALL, 0, "")
                    self.base.core.add_pending(PendingAck(offset, to, ack))
        return result
