"""One append's batch: the record bodies a sequencer admitted, who asked for each one's
ack and how, and the acks that result (broker/sequencer.py appends it).

An ack goes one of three ways: to a NATS inbox after the append (collected in
:attr:`AppendBatch.now`), to a direct Produce request's completion at once, or, for an ALL
ack of a record the high watermark has not passed yet, to the replica core's pending acks
(the committer sends it when the HW moves).

Task safety: event loop thread only (the sequencer's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import attrs

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetserver.broker.acks import PartitionAck, PendingAck
from jetserver.broker.direct import DirectAckTo
from jetserver.broker.seq_marks import seq_mark
from jetserver.replication.core import ReplicaCore
from jetserver.replication.producers import ProducerTable
from jetserver.storage.framing import Body

_LEADER = int(AckPolicy.LEADER)
_ALL = int(AckPolicy.ALL)
_new_tuple = tuple.__new__
"""Builds a NamedTuple from a tuple without its Python-level ``__new__`` (hot path)."""

__all__ = ["AppendBatch", "Wanted", "acks_after_append"]


class Wanted(NamedTuple):
    """Who asked for an ack of one message, and how (a tuple: built per message)."""

    inbox: str | DirectAckTo
    """A NATS inbox (JSON_ACK_MARK first: a JSON ack), or a direct request's completion."""
    corr: str
    policy: AckPolicy
    producer_id: int | None
    producer_seq: int


@attrs.define(eq=False, slots=True)
class AppendBatch:
    """What one append collects: the bodies admitted and who to ack for each."""

    bodies: list[Body] = attrs.Factory(list)
    split_from: int = 0
    """Bodies below this index are whole (a direct message's comes in two parts)."""
    wanted: list[Wanted | None] = attrs.Factory(list)
    """One per body (None: no ack, no producer)."""
    now: list[tuple[str, PartitionAck]] = attrs.Factory(list)
    """Acks to NATS inboxes to send after the append."""
    dups: list[tuple[Wanted, int | None, int, int]] = attrs.Factory(list)
    """Duplicates: (who, index in this batch or None, stored offset, timestamp)."""
    in_batch: dict[tuple[int, int] | bytes, int] = attrs.Factory(dict)
    """Producer (id, seq) or msg id -> index in this batch."""
    msg_ids: list[tuple[int, bytes]] = attrs.Factory(list)
    """(index in this batch, Nats-Msg-Id) of plain messages."""
    next_seqs: dict[int, int] = attrs.Factory(dict)
    """Producer id -> the sequence after its last one admitted in this batch."""

    def error_ack(self, who: Wanted, code: ErrorCode, text: str, offset: int = -1) -> None:
        """An error ack (``offset``: the ack's offset field, -1 unless the error says one)."""
        if who.policy == AckPolicy.NONE:
            return
        to = who.inbox
        if isinstance(to, str):
            self.now.append((to, PartitionAck(offset, -1, who.corr, who.policy, code, text)))
        else:
            to.completion.settle(to.position, code, offset, -1)

    def duplicate(self, who: Wanted, producers: ProducerTable) -> bool:
        """True (noted in :attr:`dups`) if an idempotent producer's message is already
        stored (``producers``) or earlier in this batch; otherwise it is noted as in this
        batch."""
        producer_id = who.producer_id
        if producer_id is None:
            return False
        producer_seq = who.producer_seq
        stored = producers.lookup(producer_id, producer_seq)
        if stored is not None:
            self.dups.append((who, None, stored[0], stored[1]))
            return True
        index = self.in_batch.get((producer_id, producer_seq))
        if index is not None:
            self.dups.append((who, index, -1, -1))
            return True
        self.in_batch[(producer_id, producer_seq)] = len(self.bodies)
        return False

    def out_of_order(self, who: Wanted, producers: ProducerTable, start: bool) -> bool:
        """True (answered OUT_OF_ORDER_SEQUENCE, with the sequence expected in the offset,
        -1: none) if an idempotent producer's message comes before the one after its
        latest sequence (admitted in this batch, else stored: ``producers``) and
        ``start`` (its request's sequence-start flag, for its first message) is not set;
        a producer not remembered must start at 0 or with the flag. Otherwise it becomes
        its producer's latest (spec/protocol.md "Sequences")."""
        producer_id = who.producer_id
        if producer_id is None:
            return False
        seq = who.producer_seq
        expected = self.next_seqs.get(producer_id)
        if expected is None:
            expected = producers.expected(producer_id)
        if start or (seq == 0 if expected is None else seq <= expected):
            if start or expected is None or seq >= expected:
                self.next_seqs[producer_id] = seq + 1
            return False
        text = f"sequence {seq} of producer {producer_id} before {expected}"
        self.error_ack(
            who, ErrorCode.OUT_OF_ORDER_SEQUENCE, text, -1 if expected is None else expected
        )
        return True

    def duplicate_or_skips(
        self,
        who: Wanted,
        producers: ProducerTable,
        headers: Sequence[tuple[str, bytes]] | None,
    ) -> bool:
        """For a message from NATS (``headers``: its NATS header lines): :meth:`out_of_order`
        if a server marked it as part of a sequenced Produce request (``Jet-Seq``,
        broker/seq_marks.py) and it has a producer id and an ack to answer a refusal with
        (unmarked ones are stored as before), then :meth:`duplicate`."""
        if headers and who.producer_id is not None and who.policy != AckPolicy.NONE:
            mark = seq_mark(headers)
            if mark is not None and self.out_of_order(who, producers, mark):
                return True
        return self.duplicate(who, producers)

    def seen_msg_id(
        self, msg_id: bytes, producers: ProducerTable, now_ns: int, window_ns: int
    ) -> tuple[int | None, int, int] | None:
        """Where a plain message with ``msg_id`` is already stored (``producers``, within
        ``window_ns`` of ``now_ns``) or earlier in this batch, as a :attr:`dups` entry's
        tail ``(batch index or None, offset, timestamp)``; None if it is new."""
        stored = producers.lookup_msg_id(msg_id, now_ns, window_ns)
        if stored is not None:
            return None, stored[0], stored[1]
        index = self.in_batch.get(msg_id)
        return (index, -1, -1) if index is not None else None

    def success_ack(
        self,
        who: Wanted,
        offset: int,
        ts: int,
        core: ReplicaCore[PendingAck],
        hw: int,
        code: ErrorCode = ErrorCode.NONE,
    ) -> None:
        """LEADER: ack now; ALL: once the HW (now ``hw``) passes ``offset`` (now if it
        already has)."""
        if who.policy == AckPolicy.NONE:
            return
        text = "" if code == ErrorCode.NONE else f"already stored at offset {offset}"
        ack = PartitionAck(offset, ts, who.corr, who.policy, code, text)
        to = who.inbox
        if who.policy == AckPolicy.ALL and offset >= hw:
            core.add_pending(PendingAck(offset, to, ack))
        elif isinstance(to, str):
            self.now.append((to, ack))
        else:
            to.completion.settle(to.position, code, offset, ts)


def acks_after_append(
    out: list[tuple[str, PartitionAck]],
    wanted: list[Wanted | None],
    first: int,
    ts: int,
    hw: int,
    core: ReplicaCore[PendingAck],
) -> None:
    """:meth:`AppendBatch.success_ack` for each appended message (``wanted[i]`` at
    ``first + i``; the HW is now ``hw``), inlined (this runs per message) and recording
    idempotent producers in ``core``."""
    producers = core.producers
    offset = first - 1
    for who in wanted:
        offset += 1
        if who is None:
            continue
        to, corr, policy, producer_id, producer_seq = who
        if producer_id is not None:
            producers.record(producer_id, producer_seq, offset, ts)
        if policy == _LEADER:
            if isinstance(to, str):
                out.append((to, _new_tuple(PartitionAck, (offset, ts, corr, policy, 0, ""))))
            else:
                to.completion.settle(to.position, 0, offset, ts)
        elif policy == _ALL:
            if offset < hw:
                if isinstance(to, str):
                    ack = _new_tuple(PartitionAck, (offset, ts, corr, policy, 0, ""))
                    out.append((to, ack))
                else:
                    to.completion.settle(to.position, 0, offset, ts)
                continue
            ack = _new_tuple(PartitionAck, (offset, ts, corr, policy, 0, ""))
            core.add_pending(PendingAck(offset, to, ack))
