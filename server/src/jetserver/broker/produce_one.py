"""A Produce request's common case in one function: one message to a one-replica
partition led here, ack LEADER, the partition's sequencer idle.

:class:`OneProduce` takes such a request from its decoded head to its append and its
answer (:meth:`Sequencer.append_one`: the outcome returned, not settled on a
:class:`~jetserver.broker.direct.ProduceCompletion`), with the checks of the general path
(:meth:`~jetserver.broker.produce.ProduceService.produce_then`) and the same answer and
NATS copy, but without its per-stage objects (no completion, typed batch, copies place,
ack tuples or registration of the request for acks). Anything else, or anything it is
unsure of, it leaves to the general path (None), before it changed anything.

Task safety: event loop thread only.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections.abc import Callable

import attrs

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import (
    ProduceHead,
    encode_produce_result_tuples,
    produce_wants_current_values,
)
from jetsdk.codec.transcode import (
    DirectRecord,
    EnvelopeBytes,
    ProducedEnvelope,
    one_message_envelope,
    produce_envelopes,
)
from jetserver.broker.copy_backlog import CopyBacklog, CopyTicket
from jetserver.broker.direct import AnswerAtCommit, DirectAckTo
from jetserver.broker.direct_copies import After, Copies, DirectCopies
from jetserver.broker.nats_port import NatsPort
from jetserver.broker.one_target import OneTarget
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.produce_replicated import ReplicatedOne
from jetserver.broker.streams import StreamManager
from jetserver.config.server import LimitsConfig
from jetserver.errors import ApiError, invalid_argument, partition_not_found
from jetserver.metadata.model import StreamMeta
from jetserver.metadata.reserved import is_internal
from jetserver.metadata.validate import (
    has_wildcard,
    partition_subject,
    subject_error,
    subject_matches,
)

__all__ = ["OneProduce", "check_subjects", "link_down", "partition_subject_of"]

log = logging.getLogger(__name__)

PARTITION_SUBJECTS_CACHED = 65_536
"""Most partition subjects :func:`partition_subject_of` remembers (least recently used
dropped first): a few MiB at most, and more partitions than a server leads in practice."""
_LEADER = int(AckPolicy.LEADER)
_ACK_NONE = int(AckPolicy.NONE)
_ALL = int(AckPolicy.ALL)
_NONE = int(ErrorCode.NONE)
_PUBLISHED_ANSWER = encode_produce_result_tuples([(_NONE, -1, -1)])
"""The answer to a Produce of one message with ack NONE, taken (the general path's)."""


def _answer(
    record: DirectRecord, result: tuple[int, int, int], at_commit: AnswerAtCommit | None
) -> bytes:
    """The answer to a request of the one message ``record`` appended with ``result``:
    with ack NONE, no offset (published), as the general path answers; empty if its
    commit answers it (``at_commit``, an ALL ack: appended, so settled by the commit)."""
    if record.policy == _ACK_NONE:
        return _PUBLISHED_ANSWER
    if at_commit is not None and result[0] == _NONE and result[1] >= 0:
        return b""
    return encode_produce_result_tuples([result])


def _bound(replica: PartitionReplica, at_commit: AnswerAtCommit, timeout_s: float) -> None:
    """Arm the request's timeout on the ALL answer its commit owes (appended, pending):
    TIMEOUT then if no commit came (:meth:`AnswerAtCommit.expire`; an fsync that never
    returns holds its commit, not its answer)."""
    loop = replica.committer.running_loop()
    at_commit.timer = loop.call_later(timeout_s, at_commit.expire)


@functools.lru_cache(maxsize=PARTITION_SUBJECTS_CACHED)
def partition_subject_of(stream_subject: str, partition: int) -> tuple[str, bool]:
    """The subject of ``partition`` of a stream on ``stream_subject``, and whether it has
    wildcards (remembered: a ProduceMany request asks for hundreds per request)."""
    psubj = partition_subject(stream_subject, partition)
    return psubj, has_wildcard(psubj)


def check_subjects(psubj: str, wildcard: bool, messages: list[ProducedEnvelope]) -> None:
    """Check each message's subject against the partition subject ``psubj``.

    Raises:
        ApiError: INVALID_ARGUMENT (``subject``).
    """
    for i, (subject, _size, _envelope) in enumerate(messages):
        if not subject:
            if wildcard:
                raise invalid_argument(
                    "subject",
                    f"message {i}: partition subject {psubj!r} has wildcards, so each "
                    "message needs a subject",
                )
            continue
        error = subject_error(subject, allow_wildcards=False)
        if error is not None:
            raise invalid_argument("subject", f"message {i}: {error}")
        if not subject_matches(psubj, subject):
            raise invalid_argument(
                "subject",
                f"message {i}: subject {subject!r} does not match partition subject {psubj!r}",
            )


def link_down() -> ApiError:
    """The error of a Produce request while this server's NATS link is down."""
    return ApiError(
        ErrorCode.UNAVAILABLE,
        "the server's NATS link is down; retry later or use another server",
    )


@attrs.define(eq=False)
class OneProduce:
    """Serves the common Produce request in one step (module docstring)."""

    streams: StreamManager
    """Stream lookups."""
    link: NatsPort
    """The NATS link (up or down, its max_payload)."""
    limits: LimitsConfig
    """Produce timeout cap and the default message size limit."""
    copies: DirectCopies
    """Publishes the NATS copy after the answer."""
    backlog: CopyBacklog
    """The bound on copies waiting for NATS."""
    tokens: itertools.count[int]
    """The ack inboxes' tokens (the Produce service's: one sequence for both paths)."""
    direct: bool = True
    """False: :meth:`serve_now` serves nothing (``ProduceService.direct``)."""
    inbox_prefix: str = ""
    """This server's ack inboxes' prefix (set when the Produce service starts)."""
    replicated: ReplicatedOne | None = None
    """Serves :meth:`serve_now`'s ALL acks at a replicated partition's leader
    (broker/produce_replicated.py; None: the general path does)."""

    async def serve(
        self,
        body: bytes | bytearray | memoryview,
        head: ProduceHead,
        inbox: str,
        answer_now: Callable[[bytes], bool] | None,
    ) -> tuple[bytes, After | None] | None:
        """As :meth:`ProduceService.produce_then` of a request in its own task, for the
        common case; None (nothing done) for the general path. ``inbox``: the request's
        ack inbox (its NATS copy's envelope carries it). ``answer_now``: writes the
        response now (as ``produce_then``'s): then the copy can go in this step, without
        after-work (the response returned is empty: it went)."""
        checked = self._checked(body, head, inbox)
        if checked is None:
            return None
        replica, subject, record, payload, timeout_s = checked
        deadline = time.monotonic() + timeout_s
        if payload is None:  # no NATS copies (no_nats_copies)
            result = replica.intake.append_one(subject, record)
            if result is None:
                return None
            return encode_produce_result_tuples([result]), replica.commit_deferred
        failures = replica.sync_failures
        # The copy's turn and ticket, taken as the message enters the sequencer (as
        # CopiesPlace does on the general path), passed on if it is not appended here.
        committer = replica.committer
        turn = committer.copy_turns.take()  # (Committer.copies_turn without its call)
        backlog = self.backlog
        ticket = backlog.enter(len(payload))
        result = None
        try:
            result = replica.intake.append_one(subject, record)
        finally:
            if result is None:  # (or raised)
                backlog.leave(ticket)
                committer.copy_turns.finish(turn)
        if result is None:
            return None  # a large write: the general path's
        code, offset, _ts = result
        stored = code == _NONE and offset >= 0
        message = (subject, payload)
        response = encode_produce_result_tuples([result])
        # Answered now, unless it must wait for room for its copy (backpressure): then
        # the copy goes in this step if it may, else in the after-work as always.
        if answer_now is not None and ticket.admitted is None and answer_now(response):
            response = b""
            if stored:
                sent = self.copies.send_now(replica, message, offset + 1, failures, turn, ticket)
                if sent is not False:
                    if sent is not True:
                        await sent()  # (something was pending on the NATS connection)
                    return response, None
                # Not committed yet (durability flushed): after the fsync, in the after-work.
                return response, self._let_in(
                    replica, message, offset, failures, timeout_s, turn, ticket
                )
        after = self.copies.after_commit(
            replica,
            [message] if stored else [],
            offset + 1 if stored else 0,
            failures,
            timeout_s,
            turn,
            ticket,
            deadline,
        )
        if isinstance(after, Copies) and after.ticket.admitted is not None:
            return response, await self.copies.room_for(after, deadline)
        return response, after

    def serve_now(
        self, body: bytes, answer_later: Callable[[bytes], None] | None = None
    ) -> tuple[bytes, After | None] | None:
        """:meth:`serve` with no await, from the connection's reader callback (no task),
        of the common request decoded in one pass (:func:`one_message_envelope`): the
        response (to write now) and the after-work (None: nothing left). None, nothing
        done, where :meth:`serve` would not serve it, raise (the task's path answers the
        same error) or wait (no room for its copy in the backlog).

        An ALL ack on a server alone is answered by its commit, through
        ``answer_later`` (None: not taken here), once, with the outcome the general path
        answers: the fsync's end (heard in the loop's I/O phase, broker/commit_soon.py),
        the cut back after a failed fsync, the partition's stop (the replica core's
        pending ALL acks, :class:`AnswerAtCommit`); the response returned is then empty.
        Before that answer the connection counts the request in flight."""
        if not self.direct:
            return None
        inbox = f"{self.inbox_prefix}.{next(self.tokens):x}"
        one = one_message_envelope(body, inbox)
        if one is None:
            return None
        stream, partition, timeout_ms, subject, size, envelope, record = one
        rf3 = self.replicated if record.policy == _ALL and answer_later is not None else None
        try:
            checked = self._check_one(stream, partition, subject, size, envelope, record, rf3)
        except Exception:
            return None
        if checked is None:
            return None
        replica, subject, payload = checked
        timeout_s = min(timeout_ms / 1000, self.limits.max_produce_timeout_s)
        if rf3 is not None and replica.replication_factor != 1:
            assert answer_later is not None  # (rf3 only with it)
            return rf3.serve_now(replica, subject, record, envelope, inbox, timeout_s, answer_later)
        at_commit = to = None
        if record.policy == _ALL:
            if answer_later is None:
                return None
            at_commit = AnswerAtCommit(answer_later)
            to = DirectAckTo(at_commit, 0)
        if payload is None:  # no NATS copies (no_nats_copies)
            result = replica.intake.append_one(subject, record, to)
            if result is None:
                return None
            replica.committer.soon().after_commit(None)  # (the fsync left to it, if any)
            response = _answer(record, result, at_commit)
            if at_commit is not None and not response and not at_commit.sent:
                _bound(replica, at_commit, timeout_s)
            return response, None
        if not self.backlog.admits(len(payload)):
            return None
        failures = replica.sync_failures
        result = replica.intake.append_one(subject, record, to)
        if result is None:
            return None
        response = _answer(record, result, at_commit)
        offset = result[1]
        if offset < 0 or result[0] != _NONE:
            return response, None
        if at_commit is not None and not at_commit.sent:
            _bound(replica, at_commit, timeout_s)
        if at_commit is None:
            return response, self._copy(
                replica, (subject, payload), offset + 1, failures, timeout_s
            )
        try:  # (appended: its commit answers it, the one answer, whatever its copy does)
            return response, self._copy(
                replica, (subject, payload), offset + 1, failures, timeout_s
            )
        except Exception:
            log.exception("a Produce's NATS copy failed", extra=replica.base.fields())
            return response, None

    def _copy(
        self,
        replica: PartitionReplica,
        message: tuple[str, EnvelopeBytes],
        end: int,
        failures: int,
        timeout_s: float,
    ) -> After | None:
        """The NATS copy of a message :meth:`serve_now` appended below ``end`` in this
        step (after the backlog admitted its size): sent now if it may (committed, no
        earlier copy of the partition waiting: no turn or ticket taken,
        :meth:`DirectCopies.send_alone`), or from its commit (CommitSoon), or the
        after-work returned. Its turn and ticket are taken here, after the append: in
        this same step, so in append order (nothing else appended in between)."""
        copies = self.copies
        committed = replica.log.high_watermark >= end
        if committed and copies.send_alone(replica, message, failures):
            return None
        turn = replica.committer.copy_turns.take()
        size = len(message[1])
        if committed:
            sent = copies.send_now(
                replica, message, end, failures, turn, self.backlog.enter(size)
            )  # (let in: admitted before the append; held until sent, as hold's)
            if sent is not False:
                return None if sent is True else sent
        else:  # its bytes held with no ticket (admitted before the append)
            self.backlog.hold(size)
        # Not committed yet (durability flushed): after the fsync, from its commit.
        replica.committer.soon().after_commit(
            functools.partial(
                copies.copy_committed, replica, message, end, failures, timeout_s, turn, size
            )
        )
        return None

    def _let_in(
        self,
        replica: PartitionReplica,
        message: tuple[str, EnvelopeBytes],
        offset: int,
        failures: int,
        timeout_s: float,
        turn: int,
        ticket: CopyTicket,
    ) -> After:
        """The after-work of an answered request whose copy waits for its commit."""
        return functools.partial(
            self.copies.publish_let_in,
            replica,
            (message,),
            offset + 1,
            failures,
            timeout_s,
            turn,
            ticket,
        )

    def _checked(
        self, body: bytes | bytearray | memoryview, head: ProduceHead, inbox: str
    ) -> tuple[PartitionReplica, str, DirectRecord, EnvelopeBytes | None, float] | None:
        """The checks of the general path, for the common case: its replica, subject,
        record, NATS copy (None: no_nats_copies) and timeout; None for the general path.

        Raises:
            ApiError, CodecError: as the general path.
        """
        stream, partition, policy, timeout_ms, producer_id, _seq, count, _pos = head
        if count != 1 or policy != _LEADER or producer_id is not None:
            return None
        if produce_wants_current_values(body):
            return None
        records: list[DirectRecord | None] = []
        head, messages = produce_envelopes(body, inbox, records, head, split=True)
        subject, size, payload = messages[0]
        record = records[0]
        if record is None or payload is None:
            return None  # the general path answers (or refuses) it
        checked = self._check_one(stream, partition, subject, size, payload, record)
        if checked is None:
            return None
        timeout_s = min(timeout_ms / 1000, self.limits.max_produce_timeout_s)
        return checked[0], checked[1], record, checked[2], timeout_s

    def _check_one(
        self,
        stream: str,
        partition: int,
        subject: str,
        size: int,
        payload: EnvelopeBytes,
        record: DirectRecord,
        rf3: ReplicatedOne | None = None,
    ) -> tuple[PartitionReplica, str, EnvelopeBytes | None] | None:
        """The general path's checks of a request of one message with a LEADER ack: the
        replica, the subject (the partition's if none), the NATS copy (None:
        no_nats_copies); None for the general path. What depends only on the stream's
        metadata is checked once per change of it (:meth:`_target`, kept on the
        replica: broker/one_target.py); the message and the replica's state, each time.
        ``rf3``: a replicated partition's too (an ALL ack, :class:`ReplicatedOne`).

        Raises:
            ApiError: as the general path.
        """
        replica = self.streams.local_replica(stream, partition)
        if replica is None or (replica.replication_factor != 1 and rf3 is None):
            return None
        sequencer = replica.sequencer
        if not (
            sequencer.idle and sequencer.has_room and replica.intake.takes_direct(record.policy)
        ):
            return None
        meta = self.streams.stream(stream)
        target = replica.one_target
        if target is None or target.meta is not meta:
            target = self._target(stream, partition, replica, meta)
            if target is None:
                return None
        else:
            offline = self.streams.offline
            if offline.reasons:  # (none offline: no call)
                offline.check(stream, partition)
        psubj = target.subject
        if target.wildcard or subject:  # (no subject, none needed: nothing to check)
            check_subjects(psubj, target.wildcard, [(subject, size, payload)])
        link = self.link
        if not link.connected:
            raise link_down()
        max_payload = link.max_payload
        if (
            size > replica.max_message_bytes
            or (max_payload and len(payload) > max_payload)
            or record.controls is not None
        ):
            return None  # the general path answers (or refuses) it
        return replica, subject or psubj, payload if target.copies else None

    def _target(
        self, stream: str, partition: int, replica: PartitionReplica, meta: StreamMeta
    ) -> OneTarget | None:
        """:meth:`_check_one`'s checks of ``replica`` that depend only on the stream's
        metadata ``meta``, kept on the replica for it; None
        (nothing kept) for the general path.

        Raises:
            ApiError: as the general path (the partition missing, offline, led elsewhere).
        """
        if is_internal(stream):
            return None
        spec = meta.spec
        if not 0 <= partition < spec.partitions:
            raise partition_not_found(stream, partition, spec.partitions)
        offline = self.streams.offline
        if offline.reasons:
            offline.check(stream, partition)
        leader = self.streams.lookup.leader_replica(stream, partition)  # (no forwarding call)
        if leader is not None and leader is not replica:
            return None  # the general path answers (or refuses) it
        psubj, wildcard = partition_subject_of(spec.subject, partition)
        target = replica.one_target = OneTarget(
            meta,
            psubj,
            wildcard,
            not spec.no_nats_copies,
        )
        return target
