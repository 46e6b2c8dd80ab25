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

:class:`SectionProduce` serves a section of a one-replica partition led here, ack LEADER
or NONE, no producer id, no header controls, no values asked, the sequencer idle, as
:class:`~jetserver.broker.produce_one.OneProduce` serves one message: the same checks,
its records appended in this step (:func:`~jetserver.broker.append_many.
append_records_now`), the answer built from the first offset, and the same after-work
(the NATS copies once committed, in their turn and with their ticket, taken as the
records are appended). Anything else, or anything it is unsure of, it leaves to the
general path (None) before it changed anything, which answers it (or refuses it) as
before.

Task safety: event loop thread only.
"""

from __future__ import annotations

import time

import attrs

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.errors import CodecError
from jetsdk.codec.messages import (
    ProduceHead,
    encode_produce_result_tuples,
    produce_wants_current_values,
)
from jetsdk.codec.transcode import DirectRecord, EnvelopeBytes, produce_envelopes
from jetserver.broker.append_many import append_records_now
from jetserver.broker.direct import Result
from jetserver.broker.direct_copies import After
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.produce_one import OneProduce, check_subjects, partition_subject_of
from jetserver.errors import ApiError
from jetserver.metadata.reserved import is_internal

__all__ = ["SectionProduce"]

_LEADER = int(AckPolicy.LEADER)
_ACK_NONE = int(AckPolicy.NONE)
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
        self, body: bytes | memoryview, head: ProduceHead
    ) -> tuple[bytes, After | None] | None:
        """The section's response body and its after-work (None: nothing after), served
        in this step; None, nothing done, for the general path (which also answers what
        this one's checks would refuse)."""
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
        if no_copies:
            appended = append_records_now(replica.intake, subjects, records)
            if appended is None:
                return None
            self.served += 1
            return _response(appended, count, policy), replica.commit_deferred
        # The copies' turn and ticket, taken as the records enter the sequencer (in append
        # order, as CopiesPlace does on the general path), passed on if not appended here.
        turns = replica.committer.copy_turns
        turn = turns.take()
        backlog = self.one.backlog
        ticket = backlog.enter(size)
        appended = None
        try:
            appended = append_records_now(replica.intake, subjects, records)
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
        return _response(appended, count, policy), after

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
        stream, partition, policy, _timeout_ms, producer_id, _seq, count, _pos = head
        if (
            not one.direct
            or count < 1
            or (policy != _LEADER and policy != _ACK_NONE)
            or producer_id is not None
            or produce_wants_current_values(body)
        ):
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


def _response(appended: Result, count: int, policy: int) -> bytes:
    """The answer to a section of ``count`` messages appended with outcome ``appended``
    (an error for all of them, or the first offset and the timestamp)."""
    code, first, ts = appended
    if policy == _ACK_NONE:
        return encode_produce_result_tuples([_PUBLISHED] * count)
    if code != 0:
        return encode_produce_result_tuples([appended] * count)
    return encode_produce_result_tuples([(0, first + i, ts) for i in range(count)])
