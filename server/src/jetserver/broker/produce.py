"""Produce through the server: append directly where the leader is here, else publish.

Every Produce request waits on a :class:`~jetserver.broker.direct.ProduceCompletion`, one
result per message. Where this server leads the partition and may take the request
directly, its messages reach the sequencer as one typed
:class:`~jetserver.broker.direct.DirectBatch`, settled in process by message index (no
inbox, no correlation ids); their NATS copies for live subscribers follow the commit.

Otherwise the messages are published to NATS in envelopes with the ack inbox
``<prefix>.<token>`` (a token per request) and correlation ids ``"0"``, ``"1"``, ... (the
message index, as the wire's envelope carries it). One wildcard subscription
``<prefix>.*`` receives every ack for this server and routes it by token to the waiting
request, which answers once every message is acked or its timeout passes (TIMEOUT for the
missing ones: they may or may not be stored). Acks to these inboxes from a replica of this
server (a message that came back through NATS) arrive in process
(:meth:`ProduceService._on_local_acks`, registered in
:attr:`~jetserver.broker.acks.AckRouter.local_inboxes`).

Task safety: event loop thread only.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Sequence

import anyio
import attrs
from nats.aio.msg import Msg

from jetsdk.codec.envelope_acks import decode_ack_tuples
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.messages import (
    ProduceHead,
    ProduceRequest,
    ProduceResult,
    decode_produce_head,
    decode_produce_response,
    encode_produce_request,
    encode_produce_result_tuples,
    produce_starts_sequence,
    produce_wants_current_values,
    produce_wants_latest_values,
)
from jetsdk.codec.produce_values import (
    decode_produce_response_values,
    encode_produce_result_values,
)
from jetsdk.codec.transcode import DirectRecord, EnvelopeBytes, ProducedEnvelope, produce_envelopes
from jetserver.broker.acks import PartitionAck
from jetserver.broker.copy_backlog import CopyBacklog
from jetserver.broker.current_values import (
    current_values,
    latest_values,
    lean_refusal,
    refusal_answer,
)
from jetserver.broker.direct import (
    INVALID,
    NOT_LEADER,
    TIMEOUT,
    TOO_LARGE,
    AnswerNow,
    ProduceCompletion,
    Result,
    batch_of,
    stored_of,
)
from jetserver.broker.direct_copies import (
    After,
    Copies,
    CopiesPlace,
    DirectCopies,
    ingest_taking_place,
)
from jetserver.broker.nats_port import NatsPort, NatsSubscription, NatsUnavailable
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.produce_cas import CasProduce
from jetserver.broker.produce_one import (
    OneProduce,
    check_subjects,
    link_down,
    partition_subject_of,
)
from jetserver.broker.produce_replicated import ReplicatedOne
from jetserver.broker.produce_section import SectionProduce
from jetserver.broker.seq_marks import publish_marked
from jetserver.broker.streams import StreamManager
from jetserver.config.server import LimitsConfig
from jetserver.errors import ApiError, invalid_argument, partition_not_found
from jetserver.infra import hops
from jetserver.logs import fields
from jetserver.metadata.reserved import is_internal

_PUBLISHED: Result = (ErrorCode.NONE, -1, -1)
"""Result of a message with ack policy NONE that reached NATS."""
_UNAVAILABLE: Result = (ErrorCode.UNAVAILABLE, -1, -1)
_UNSCOPED = contextlib.nullcontext()

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class ProduceService:
    """Publishes Produce requests to NATS and waits for their acks."""

    link: NatsPort
    """NATS link."""
    streams: StreamManager
    """Stream lookups."""
    limits: LimitsConfig
    """Produce timeout cap and the default message size limit."""
    direct: bool = True
    """Append a request's messages directly when this server leads the partition (their
    NATS copies carry ``Jet-Stored``); False: always through NATS (JET_PRODUCE_VIA_NATS=1,
    for comparison in ``bench latency``)."""
    _prefix: str = ""
    _sub: NatsSubscription | None = None
    _waiting: dict[str, ProduceCompletion] = attrs.field(factory=dict)
    _tokens: itertools.count[int] = attrs.field(factory=itertools.count)
    copy_backlog: CopyBacklog = attrs.field(factory=CopyBacklog)
    """Bytes of the NATS copies of directly stored records not yet handed to NATS, and
    their bound (backpressure, then dropped: broker/copy_backlog.py)."""
    acks_unmatched: int = 0
    """Acks received for no waiting request (late, after a timeout)."""
    _copies: DirectCopies = attrs.field(init=False)
    one: OneProduce = attrs.field(init=False)
    """The common case in one step (broker/produce_one.py); its :meth:`OneProduce.
    serve_now` serves it from the connection's reader callback (None: not ``direct``)."""
    _cas: CasProduce = attrs.field(init=False)
    """A table's compare-and-set in one step (broker/produce_cas.py)."""
    section: SectionProduce = attrs.field(init=False)
    """A ProduceMany section's common case in one step (broker/produce_section.py)."""

    def __attrs_post_init__(self) -> None:
        self._copies = DirectCopies(self.link, self.copy_backlog)
        self.one = OneProduce(
            self.streams,
            self.link,
            self.limits,
            self._copies,
            self.copy_backlog,
            self._tokens,
            self.direct,
        )
        if self.direct:  # (else the NATS path, for comparison: not these either)
            self.one.replicated = ReplicatedOne(self.link, self._waiting)
        self._cas = CasProduce(self.one)
        self.section = SectionProduce(self.one)

    async def start(self) -> None:
        """Subscribe to this server's ack inboxes."""
        self._prefix = self.one.inbox_prefix = self.link.new_inbox()
        self.streams.acks.local_inboxes[self._prefix] = self._on_local_acks
        self._sub = await self.link.subscribe(self._prefix + ".*", self._on_acks)
        await self.link.flush(5.0)
        self.streams.leadership_listeners.append(self.leadership_lost)

    def leadership_lost(self, stream: str, partition: int) -> None:
        """This server stopped leading ``stream``/``partition``: answer the requests still
        waiting for its acks now (NOT_LEADER for the messages not acked yet) instead of at
        their timeout; NATS drops what is published while no replica subscribes."""
        for waiting in self._waiting.values():
            if waiting.stream == stream and waiting.partition == partition:
                waiting.fail_unsettled(NOT_LEADER)

    async def stop(self) -> None:
        """Unsubscribe; waiting requests time out on their own."""
        self.streams.acks.local_inboxes.pop(self._prefix, None)
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    async def _on_acks(self, msg: Msg) -> None:
        token = msg.subject.rsplit(".", 1)[-1]
        waiting = self._waiting.get(token)
        if waiting is None:
            self.acks_unmatched += 1
            return
        try:
            acks = decode_ack_tuples(msg.data)
        except CodecError as exc:
            log.warning("undecodable ack", extra=fields(subject=msg.subject, error=str(exc)))
            return
        stream, partition = waiting.stream, waiting.partition
        # Every stream a subject feeds acks the message; only ours counts.
        waiting.settle_from_wire(
            (
                (offset, timestamp, corr, code)
                for ack_stream, ack_partition, offset, timestamp, corr, _p, code, _t in acks
                if ack_partition == partition and ack_stream == stream
            ),
        )

    def _on_local_acks(
        self, token: str, stream: str, partition: int, acks: Sequence[PartitionAck]
    ) -> None:
        """Acks of ``stream``/``partition`` on this server to ``<prefix>.<token>``: of
        messages that reached a replica here through NATS (a replicated partition's LEADER
        acks); those appended directly are settled in process (broker/direct.py)."""
        waiting = self._waiting.get(token)
        if waiting is None:
            self.acks_unmatched += 1
            return
        if partition != waiting.partition or stream != waiting.stream:
            return  # another stream fed by the same subject
        waiting.settle_from_wire(
            ((offset, timestamp, corr, code) for offset, timestamp, corr, _p, code, _t in acks),
        )

    def _direct_replica(self, stream: str, partition: int, policy: int) -> PartitionReplica | None:
        """The replica here if the partition is open here and takes Produce directly now
        (a hint: :meth:`_check` decides, with no await in between, so a replica it picks
        always has the records this asked for; it uses this one without asking again)."""
        if not (self.direct or is_internal(stream)):
            return None
        replica = self.streams.local_replica(stream, partition)
        return replica if replica is not None and replica.takes_direct(policy) else None

    def answers_at_once(
        self, stream: str, partition: int, policy: int, all_acks: bool = False
    ) -> bool:
        """True if a request (in a task of its own) with ack ``policy`` would be appended
        and answered by :meth:`produce_then` without waiting for anything now: this server
        leads the partition, one replica, LEADER or NONE acks, its sequencer idle (a
        hint for ProduceMany, which then serves such sections one after the other in its
        own task instead of a task each). ``all_acks``: an ALL ack too, appended so, its
        answer awaited after (ProduceMany's sections, broker/produce_section.py)."""
        if policy == AckPolicy.ALL and not all_acks:
            return False
        replica = self.streams.local_replica(stream, partition)
        return (
            replica is not None
            and replica.replication_factor == 1
            and (self.direct or is_internal(stream))
            and replica.appends_at_once(policy)
        )

    def _check(
        self,
        stream: str,
        partition: int,
        policy: int,
        messages: list[ProducedEnvelope],
        direct: PartitionReplica | None,
    ) -> tuple[str, int, PartitionReplica | None, bool, bool]:
        """Validate the request; return the partition subject, the message size limit,
        the local replica to append to directly (None: publish and let NATS deliver;
        ``direct``: :meth:`_direct_replica` in this turn), whether records stored directly
        get NATS copies (not with ``no_nats_copies``) and whether the stream is internal."""
        meta = self.streams.stream(stream)
        if not 0 <= partition < meta.spec.partitions:
            raise partition_not_found(stream, partition, meta.spec.partitions)
        self.streams.offline.check(stream, partition)
        if self.streams.pending.wanted:  # after a restart: not all open yet (pending_opens)
            self.streams.pending.check(stream, partition)
        # In a cluster only the partition leader answers: NATS drops what nobody subscribes.
        replica = self.streams.leader_replica(stream, partition)
        if replica is not None and not replica.leading:
            # Between its epochs (it gave up one after a failed fsync and waits for the
            # next): through NATS the messages would reach no subscriber.
            raise ApiError(
                ErrorCode.UNAVAILABLE,
                f"partition {stream}/{partition} is between leader epochs here; retry",
                {"stream": stream, "partition": partition},
            )
        internal = is_internal(stream)
        if replica is None:
            replica = direct  # the replica here if it takes the request directly
        elif replica is not direct and not (
            (self.direct or internal) and replica.takes_direct(policy)
        ):
            replica = None
        psubj, wildcard = partition_subject_of(meta.spec.subject, partition)
        if internal:
            _check_internal(stream, partition, policy, replica)
        elif (
            replica is not None
            and replica.replication_factor > 1
            and self.link.echo_needed({s or psubj for s, _n, _e in messages}, replica)
        ):
            replica = None  # copies on the main connection: its own subscription gets them
        check_subjects(psubj, wildcard, messages)
        limit = meta.spec.max_message_bytes or self.limits.max_message_bytes
        return psubj, limit, replica, not meta.spec.no_nats_copies, internal

    async def produce(self, req: ProduceRequest) -> list[ProduceResult]:
        """As :meth:`produce_body` for a decoded request: one result per message, in order.

        Raises:
            ApiError: as :meth:`produce_body`.
        """
        body = await self.produce_body(encode_produce_request(req))
        if req.current_values:
            return decode_produce_response_values(body, req.latest_values)
        return decode_produce_response(body)

    async def produce_body(self, body: bytes) -> bytes:
        """Serve a Produce request body: publish every message, return the response body
        (one result per message, in order); as :meth:`produce_then`, with its after-work
        done before returning.

        Raises:
            CodecError, ApiError: as :meth:`produce_then`.
        """
        response, after = await self.produce_then(body)
        if after is not None:
            await after()
        return response

    async def produce_then(
        self,
        body: bytes | bytearray | memoryview,
        head: ProduceHead | None = None,
        *,
        own_task: bool = False,
        hold_for_room: bool = True,
        answer_now: Callable[[bytes], bool] | None = None,
    ) -> tuple[bytes, After | None]:
        """Serve a Produce request body: the response body (one result per message, in
        order) and the work to do once the response is on its way (None: nothing).

        The messages go from the request bytes to envelopes without being decoded into
        objects (:func:`~jetsdk.codec.transcode.produce_envelopes`) and to NATS in one
        write. Where this server stored them directly (one replica), their NATS copies for
        live subscribers are the after-work: they go once the records are committed, so
        neither the response nor the fsync and the consumers' wake-up that commit them
        wait behind a NATS write (on the 2-core dev VM that write and its flush took 0.1-0.5
        ms at light load, ``python -m bench latency``); and a record an fsync failure cut
        back is not copied.

        ``own_task``: the caller runs this in a plain asyncio task of its own, with no
        anyio cancel scope around it (a jet-port request), so nothing but that task's
        cancellation stops it midway.

        ``hold_for_room``: the response waits until the copies were let in to the
        :class:`CopyBacklog` (producer backpressure); False: the caller waits for that
        itself (:meth:`DirectCopies.in_order`: a section of a ProduceMany request), the
        after-work waits for the rest.

        ``answer_now``: frames and writes a response body now (True if it went). A
        replicated partition's ALL acks are then answered from the turn that settles them
        (:class:`AnswerNow`), and the response returned is empty: it went already.

        Raises:
            CodecError: the body does not decode (MALFORMED_FRAME for the caller).
            ApiError: STREAM_NOT_FOUND, PARTITION_NOT_FOUND, INVALID_ARGUMENT (subjects),
                UNAVAILABLE (NATS link down, or the leader here is between epochs),
                NOT_LEADER (cluster: another server leads).
        """
        token = format(next(self._tokens), "x")
        inbox = f"{self._prefix}.{token}"
        # Where each message lies in the request, if this server may append it directly.
        if head is None:
            head = decode_produce_head(body)
        asks_values = produce_wants_current_values(body)
        lost = None  # (b"": a lone compare-and-set passed its check, its append decides)
        if asks_values and self.direct:
            lost = lean_refusal(self.streams, self.link, self.limits, body, head)
        if lost:  # a compare-and-set that lost a race: answered at once
            return lost, None
        if own_task and hold_for_room and self.direct:
            served = await self.one.serve(body, head, inbox, answer_now)
            if served is None and asks_values:  # a table's compare-and-set (produce_cas)
                served = await self._cas.serve(body, head, inbox, checked=lost == b"")
            if served is not None:
                return served
        direct = self._direct_replica(head[0], head[1], head[2])
        records: list[DirectRecord | None] | None = [] if direct is not None else None
        # Large values stay views of the request (split): not copied into an envelope
        # only to be written to NATS.
        head, messages = produce_envelopes(body, inbox, records, head, split=True)
        stream, partition, policy, timeout_ms, pid, _seq, n, _pos = head
        # internal: appended here only, no NATS copies (security.md §2)
        psubj, limit, replica, nats_copies, internal = self._check(
            stream, partition, policy, messages, direct
        )
        if not self.link.connected:
            raise link_down()
        if n == 1 and records and replica is not None and asks_values and lost is None:
            _subject, size, payload = messages[0]  # a lost compare-and-set: answered at once
            max_payload = self.link.max_payload
            if (
                payload is not None
                and size <= limit
                and not (max_payload and len(payload) > max_payload)
            ):
                lost = refusal_answer(replica.sequencer, replica.log, records[0], policy)
                if lost is not None:
                    return lost, None
        results: list[Result | None] = [None] * n
        after: After | None = None
        waiting = ProduceCompletion(stream, partition, results=results, remaining=0)
        if policy != AckPolicy.NONE:
            self._waiting[token] = waiting
        timeout_s = min(timeout_ms / 1000, self.limits.max_produce_timeout_s)
        to_send: list[tuple[str, EnvelopeBytes]] = []
        sent_index: list[int] = []
        max_payload = self.link.max_payload
        for i, (subject, size, payload) in enumerate(messages):
            if size > limit:
                results[i] = TOO_LARGE
            elif payload is None:
                results[i] = INVALID
            elif max_payload and len(payload) > max_payload:
                # NATS itself would refuse it (its max_payload is below our message limit).
                results[i] = TOO_LARGE
            else:
                to_send.append((subject or psubj, payload))
                sent_index.append(i)
        if policy != AckPolicy.NONE:
            # Counted before publishing: an ack may arrive while a publish yields.
            waiting.remaining = len(to_send)
        values_wanted = produce_wants_current_values(body)
        early: AnswerNow | None = None
        # An fsync failure from here on may cut what this request appends: no copies then.
        failures = -1 if replica is None else replica.sync_failures
        # A request in its own task whose append runs here at once waits only for its
        # commit below and (replicated) for NATS to take its copies, each bounded: no
        # cancel scope for its timeout (and none to shield the append from), about a tenth
        # of the Python calls of such a request.
        at_once = (  # (the replica takes the request directly: _check, in this turn)
            own_task
            and replica is not None
            and replica.sequencer.idle
            and replica.sequencer.has_room
        )
        deadline = time.monotonic() + timeout_s
        try:
            with _UNSCOPED if at_once else anyio.move_on_after(timeout_s):
                batch = (
                    None
                    if replica is None
                    else batch_of(
                        to_send, records, sent_index, policy, waiting, produce_starts_sequence(body)
                    )
                )
                # Copies of a one-replica partition: their turn and their place in the
                # backlog, taken as the batch enters the sequencer (in append order).
                single = replica is not None and replica.replication_factor == 1
                place = (
                    CopiesPlace(replica, self.copy_backlog, batch.size)
                    if single and nats_copies and replica is not None and batch is not None
                    else None
                )
                if (
                    replica is not None
                    and batch is not None
                    and await ingest_taking_place(replica, batch, place, shield=not at_once)
                ):
                    appended_end = replica.log.log_end_offset  # if appended in this task
                    turn = ticket = None
                    if place is not None:
                        turn, ticket = place.turn, place.ticket
                        assert turn is not None  # taken: ingest_direct took the batch
                    if replica.replication_factor > 1 and not internal:
                        # Replicated: not marked stored, before the ack wait, so that a
                        # new leader elected meanwhile (this one cut off from its cluster)
                        # stores them as through NATS (sequence checked) and acks them.
                        starts = produce_starts_sequence(body)
                        unstored = functools.partial(
                            self.link.publish_unstored_copies,
                            within_s=max(deadline - time.monotonic(), 0.0),
                        )
                        await publish_marked(unstored, to_send, pid is not None, starts)
                    try:
                        if policy == AckPolicy.NONE:
                            for i in sent_index:
                                results[i] = _PUBLISHED
                        elif waiting.remaining > 0:
                            if answer_now is not None and not single and not values_wanted:
                                early = waiting.on_done = AnswerNow(answer_now, results)
                            await waiting.done.wait_within(
                                deadline - time.monotonic(), replica.committer.running_loop()
                            )
                            waiting.on_done = None
                            if early is not None and early.sent:
                                return b"", None  # answered (nothing after: not single)
                    except BaseException:
                        waiting.on_done = None
                        # Cancelled (the connection closed, or the scope of the request's
                        # timeout): no after-work will run, its copies are given up.
                        if place is not None:
                            stored, _end = stored_of(
                                to_send, sent_index, results, policy, appended_end
                            )
                            self.copy_backlog.dropped += len(stored)
                            place.give_up()
                        raise
                    # Stored here; the NATS copies are for live subscribers only. They go
                    # after the response (see the docstring), and also when the wait timed
                    # out, for the records it stored.
                    if single and not nats_copies:
                        # No copies (no_nats_copies): the after-work is only the fsync
                        # its append may have left to it (Committer.defer_flush).
                        after = replica.commit_deferred
                    if turn is not None:
                        copies, end = stored_of(to_send, sent_index, results, policy, appended_end)
                        if internal:
                            copies = []
                        assert ticket is not None  # taken with the turn
                        after = self._copies.after_commit(
                            replica, copies, end, failures, timeout_s, turn, ticket, deadline
                        )
                    final = [r if r is not None else TIMEOUT for r in results]
                    if values_wanted:  # a refusal's value (§6)
                        keys = replica.sequencer.checks.keys
                        values = current_values(replica.log, records, final, index=keys)
                        latest = None
                        if produce_wants_latest_values(body):  # a won one's successor (§6)
                            latest = latest_values(replica.sequencer, records, final)
                        response = encode_produce_result_values(final, values, latest)
                    else:
                        response = encode_produce_result_tuples(final)
                    if (
                        hold_for_room
                        and isinstance(after, Copies)
                        and after.ticket.admitted is not None
                    ):
                        after = await self._copies.room_for(after, deadline)
                    return response, after
                assert not at_once  # checked with no await in between: it was taken
                if internal:
                    raise ApiError(
                        ErrorCode.NOT_LEADER,
                        f"partition {stream}/{partition} is no longer led here; retry",
                        {"stream": stream, "partition": partition},
                    )
                # Sequenced (a producer id, acked, no queue group: NATS picks the storing
                # stream there): the leader checks their order (broker/seq_marks.py).
                sequenced = pid is not None and policy != AckPolicy.NONE
                sequenced = sequenced and self.streams.stream(stream).spec.group is None
                starts = produce_starts_sequence(body)
                queued = await publish_marked(self.link.publish_many, to_send, sequenced, starts)
                if hops.ENABLED:
                    hops.mark("published")
                for i in sent_index[queued:]:
                    # Not published (the NATS link went down): certainly not stored.
                    if results[i] is None:
                        results[i] = _UNAVAILABLE
                        waiting.remaining -= 1
                if policy == AckPolicy.NONE:
                    published = sent_index[:queued]
                    for i in published:
                        results[i] = _PUBLISHED
                    try:
                        await self.link.flush(timeout_s)
                    except NatsUnavailable:
                        for i in published:
                            results[i] = _UNAVAILABLE
                elif waiting.remaining > 0:
                    await waiting.done.wait()
        finally:
            self._waiting.pop(token, None)
        final = [r if r is not None else TIMEOUT for r in results]
        if produce_wants_current_values(body):  # through NATS: no values (§6)
            latest = [(-1, None)] * n if produce_wants_latest_values(body) else None
            return encode_produce_result_values(final, [None] * n, latest), None
        return encode_produce_result_tuples(final), None

    async def copies_in_order(self, afters: Sequence[After]) -> list[After]:
        """:meth:`DirectCopies.in_order` (a ProduceMany request's sections)."""
        return await self._copies.in_order(afters)

    def give_up_copies(self, afters: Iterable[After | None]) -> None:
        """:meth:`DirectCopies.give_up` (sections of a cancelled ProduceMany request)."""
        self._copies.give_up(a for a in afters if a is not None)


def _check_internal(
    stream: str, partition: int, policy: int, replica: PartitionReplica | None
) -> None:
    """An internal stream takes no NATS messages: its partition's replica here must append
    the request directly.

    Raises:
        ApiError: INVALID_ARGUMENT (``ack_policy``: a replicated internal stream takes ALL
            acks only), UNAVAILABLE (the replica is not open or not leading here yet).
    """
    if replica is not None:
        return
    if policy != AckPolicy.ALL:
        raise invalid_argument(
            "ack_policy", f"internal stream {stream!r} is replicated: it takes ALL acks only"
        )
    raise ApiError(
        ErrorCode.UNAVAILABLE,
        f"partition {stream}/{partition} does not take writes here yet; retry",
        {"stream": stream, "partition": partition},
    )
