"""A ProduceMany section's common case in one step, with no await (issue 34 item 4).

A keyed producer writing to many partitions sends each server one ProduceMany request
whose sections hold ~10-40 messages for one partition each (``bench fanout``: 20 a
section, 500 partitions). Served through the general path
(:meth:`~jetserver.broker.produce.ProduceService.produce_then`), each section paid its
request-sized costs: the ack inbox and completion registered, the envelopes' checks, a
typed batch, the copies' place, the sequencer's coroutine chain (``ingest_direct`` ->
``append_now`` -> ``_append_batch`` -> ``_append``), a who-is-acked tuple, an order and a
duplicate check and an ack settled per message, and the results gathered back (about 690
server lines a section beyond its messages, docs/latency.md).

:class:`SectionProduce` serves a section of a one-replica partition led here, no header
controls, no values asked, the sequencer idle, as
:class:`~jetserver.broker.produce_one.OneProduce` serves one message: the same checks,
its records appended in this step (:func:`~jetserver.broker.append_many.
append_records_now`: an idempotent producer's next sequences too), the answer built from
the first offset, and the same after-work (the NATS copies once committed, in their turn
and with their ticket, taken as the records are appended). Anything else, or anything it
is unsure of, it leaves to the general path (None) before it changed anything, which
answers it (or refuses it) as before.

An ALL-acked section (issue 38: a table's puts, idempotent, a ProduceMany of a section
per partition each round) is appended so too, its fsync left to the request's group
(:class:`~jetserver.broker.commit_group.FsyncGroup`), and answered by an
:class:`AllAnswer`: the request awaits it once the group is closed. It waits for one
pending ALL ack, its last record's, settled by its partition's commit (or failed by its
fsync, by a lost leadership) as the general path's per-message acks are: its result is
every message's (a failed commit fails the section's records together: they were
appended and fsynced together), TIMEOUT for all if it does not come in time.

Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import time

import attrs

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.errors import CodecError
from jetsdk.codec.messages import (
    ProduceHead,
    encode_produce_result_tuples,
    produce_starts_sequence,
    produce_wants_current_values,
)
from jetsdk.codec.transcode import DirectRecord, EnvelopeBytes, produce_envelopes
from jetserver.broker.append_many import append_records_now
from jetserver.broker.direct import TIMEOUT, ProduceCompletion, Result
from jetserver.broker.direct_copies import After
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.produce_one import OneProduce, check_subjects, partition_subject_of
from jetserver.errors import ApiError
from jetserver.metadata.reserved import is_internal

__all__ = ["AllAnswer", "SectionProduce"]

_LEADER = int(AckPolicy.LEADER)
_ACK_NONE = int(AckPolicy.NONE)
_ALL = int(AckPolicy.ALL)
_PUBLISHED: Result = (0, -1, -1)
"""A message with ack NONE: taken, no offset (the general path's answer)."""


@attrs.define(eq=False)
class SectionProduce:
    """Serves a ProduceMany section's common case in one step (module docstring)."""

    one: OneProduce
    """The one-message path, whose lookups, link, limits, copies and ack tokens it shares."""
    served: int = 0
    """Sections served here (the rest went to the general path)."""

    def serve_now(
        self, body: bytes | memoryview, head: ProduceHead, all_acks: bool = False
    ) -> tuple[bytes | AllAnswer, After | None] | None:
        """The section's response body and its after-work (None: nothing after), served
        in this step; None, nothing done, for the general path (which also answers what
        this one's checks would refuse). ``all_acks``: an ALL-acked section may be taken
        too (its fsync left to the caller's open group), answered by an
        :class:`AllAnswer` once committed."""
        if head[2] == _ALL and not all_acks:
            return None
        try:
            checked = self._checked(body, head)
        except (ApiError, CodecError):
            return None
        if checked is None:
            return None
        replica, subjects, records, copies, size, no_copies = checked
        count, policy = len(records), head[2]
        timeout_s = min(head[3] / 1000, self.one.limits.max_produce_timeout_s)
        failures = replica.sync_failures
        starts = head[4] is not None and produce_starts_sequence(body)
        wait = None
        if policy == _ALL:
            wait = ProduceCompletion(head[0], head[1], results=[None], remaining=1)
        if no_copies:
            appended = append_records_now(replica.intake, subjects, records, starts, wait)
            if appended is None:
                return None
            self.served += 1
            answer = _answer(appended, count, policy, wait, timeout_s, replica)
            return answer, replica.commit_deferred
        # The copies' turn and ticket, taken as the records enter the sequencer (in append
        # order, as CopiesPlace does on the general path), passed on if not appended here.
        turns = replica.committer.copy_turns
        turn = turns.take()
        backlog = self.one.backlog
        ticket = backlog.enter(size)
        appended = None
        try:
            appended = append_records_now(replica.intake, subjects, records, starts, wait)
        finally:
            if appended is None:  # (or raised)
                backlog.leave(ticket)
                turns.finish(turn)
        if appended is None:
            return None
        self.served += 1
        code, first, _ts = appended
        after = self.one.copies.after_commit(
            replica,
            copies if code == 0 else [],
            first + count,
            failures,
            timeout_s,
            turn,
            ticket,
            time.monotonic() + timeout_s,
        )
        return _answer(appended, count, policy, wait, timeout_s, replica), after

    def _checked(
        self, body: bytes | memoryview, head: ProduceHead
    ) -> (
        tuple[
            PartitionReplica,
            list[str],
            list[DirectRecord],
            list[tuple[str, EnvelopeBytes]],
            int,
            bool,
        ]
        | None
    ):
        """The general path's checks, for the common case: the replica, each message's
        subject, record and NATS copy, the copies' bytes, and whether the stream has
        none (``no_nats_copies``); None for the general path.

        Raises:
            ApiError, CodecError: as the general path would.
        """
        one = self.one
        stream, partition, policy, _timeout_ms, _producer_id, _seq, count, _pos = head
        if not one.direct or count < 1 or produce_wants_current_values(body):
            return None
        streams = one.streams
        replica = streams.local_replica(stream, partition)
        if replica is None or replica.replication_factor != 1 or is_internal(stream):
            return None
        sequencer = replica.sequencer
        if not (sequencer.idle and sequencer.has_room and replica.takes_direct(policy)):
            return None
        spec = streams.stream(stream).spec
        link = one.link
        if (
            not 0 <= partition < spec.partitions
            or streams.offline.reasons
            or streams.pending.wanted
            or not link.connected
        ):
            return None  # the general path answers (or refuses) it
        leader = streams.lookup.leader_replica(stream, partition)
        if leader is not None and leader is not replica:
            return None
        records: list[DirectRecord | None] = []
        inbox = f"{one.inbox_prefix}.{next(one.tokens):x}"
        head, messages = produce_envelopes(body, inbox, records, head, split=True)
        psubj, wildcard = partition_subject_of(spec.subject, partition)
        limit = spec.max_message_bytes or one.limits.max_message_bytes
        max_payload = link.max_payload
        subjects: list[str] = []
        taken: list[DirectRecord] = []
        copies: list[tuple[str, EnvelopeBytes]] = []
        named = wildcard
        size = 0
        for (subject, message_size, payload), record in zip(messages, records, strict=True):
            if (
                payload is None
                or record is None
                or record.controls is not None
                or message_size > limit
                or (max_payload and len(payload) > max_payload)
            ):
                return None  # answered (or refused) one by one by the general path
            named = named or bool(subject)
            subject = subject or psubj
            subjects.append(subject)
            taken.append(record)
            copies.append((subject, payload))
            size += len(payload)
        if named:
            check_subjects(psubj, wildcard, messages)
        return replica, subjects, taken, copies, size, spec.no_nats_copies


@attrs.define(eq=False)
class AllAnswer:
    """The answer of an ALL-acked section appended at once: :meth:`body` once its
    partition committed it (module docstring)."""

    wait: ProduceCompletion
    """Settled by the commit of the section's last record (or its failure)."""
    first: int
    """The section's first offset."""
    count: int
    """Its messages."""
    deadline: float
    """``time.monotonic()`` past which its messages are answered TIMEOUT."""
    loop: asyncio.AbstractEventLoop | None
    """The replica's event loop (for the bounded wait)."""

    async def body(self) -> bytes:
        """The section's response body, once committed (or failed, or timed out)."""
        wait = self.wait
        if wait.remaining > 0:
            await wait.done.wait_within(self.deadline - time.monotonic(), self.loop)
        result = wait.results[0]
        if result is None:
            return encode_produce_result_tuples([TIMEOUT] * self.count)
        code, _last, ts = result
        first = self.first
        return encode_produce_result_tuples([(code, first + i, ts) for i in range(self.count)])


def _answer(
    appended: Result,
    count: int,
    policy: int,
    wait: ProduceCompletion | None,
    timeout_s: float,
    replica: PartitionReplica,
) -> bytes | AllAnswer:
    """:func:`_response`, or for an ALL-acked section appended, its :class:`AllAnswer`."""
    if wait is None or appended[0] != 0:
        return _response(appended, count, policy)
    loop = replica.committer.running_loop()
    return AllAnswer(wait, appended[1], count, time.monotonic() + timeout_s, loop)


def _response(appended: Result, count: int, policy: int) -> bytes:
    """The answer to a section of ``count`` messages appended with outcome ``appended``
    (an error for all of them, or the first offset and the timestamp)."""
    code, first, ts = appended
    if policy == _ACK_NONE:
        return encode_produce_result_tuples([_PUBLISHED] * count)
    if code != 0:
        return encode_produce_result_tuples([appended] * count)
    return encode_produce_result_tuples([(0, first + i, ts) for i in range(count)])
