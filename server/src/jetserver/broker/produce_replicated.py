"""An RF 3 (replicated) partition's common ALL-ack Produce in one step, from the reader
callback: no task per request.

:meth:`OneProduce.serve_now <jetserver.broker.produce_one.OneProduce.serve_now>` hands
it a request of one message with an ALL ack, no producer id and no header controls, to a
replicated partition this server leads, its sequencer idle: :class:`ReplicatedOne`
checks what the general path (:meth:`ProduceService.produce_then
<jetserver.broker.produce.ProduceService.produce_then>`) checks on top of the one-step
checks (the ingest subscription echo, enough replicas in sync, room for the NATS copy),
appends the record (:meth:`Sequencer.append_one_now
<jetserver.broker.sequencer.Sequencer.append_one_now>`: the followers' parked fetches
poked, the leader's fsync started from loop callbacks), queues its NATS copy not marked
stored (written at the end of the turn, as the general path's; a new leader elected
meanwhile stores it as through NATS and acks it to the request's inbox) and leaves the
answer to the HW's advance past it (:class:`AnswerAtHw`). The request is registered with
the Produce service's waiting requests under its inbox token, as the general path's: an
ack from a new leader, the end of this leadership (NOT_LEADER) and its timeout (TIMEOUT)
answer it as they answer a request waiting in its task. Anything else it leaves to the
general path (None), before it changed anything.

Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.messages import encode_produce_result_tuples
from jetsdk.codec.transcode import DirectRecord, EnvelopeBytes
from jetserver.broker.direct import TIMEOUT, DirectAckTo, ProduceCompletion
from jetserver.broker.nats_port import NatsPort
from jetserver.broker.partition import PartitionReplica

__all__ = ["AnswerAtHw", "ReplicatedOne"]

log = logging.getLogger(__name__)

_NONE = int(ErrorCode.NONE)


@attrs.define(eq=False)
class AnswerAtHw:
    """The :attr:`ProduceCompletion.on_done` of a request :class:`ReplicatedOne` appended:
    writes its answer in the turn that settles it (the HW past its record, a failure, the
    leadership's end, an ack through NATS, or :meth:`expire`) and leaves the waiting
    requests."""

    completion: ProduceCompletion
    token: str
    waiting: dict[str, ProduceCompletion]
    """The Produce service's requests waiting for acks, by inbox token."""
    write: Callable[[bytes], None]
    """Frames and sends the response body (must not raise)."""
    timer: asyncio.TimerHandle | None = None
    """The timer of :meth:`expire` (None: not armed, or it ran)."""

    def __call__(self) -> None:
        if self.waiting.get(self.token) is self.completion:
            del self.waiting[self.token]
        timer = self.timer
        if timer is not None:
            self.timer = None
            timer.cancel()
        result = self.completion.results[0]
        self.write(encode_produce_result_tuples([TIMEOUT if result is None else result]))

    def expire(self) -> None:
        """The request's timeout passed before its commit: TIMEOUT (retriable; the record
        may still be committed), as the general path answers a wait that timed out."""
        self.timer = None
        self.completion.fail_unsettled(TIMEOUT)


@attrs.define(eq=False)
class ReplicatedOne:
    """Serves a replicated partition's common ALL-ack request in one step (module
    docstring)."""

    link: NatsPort
    """Where the copy goes (not marked stored)."""
    waiting: dict[str, ProduceCompletion]
    """The Produce service's requests waiting for acks, by inbox token (shared)."""

    def serve_now(
        self,
        replica: PartitionReplica,
        subject: str,
        record: DirectRecord,
        envelope: EnvelopeBytes,
        inbox: str,
        timeout_s: float,
        answer_later: Callable[[bytes], None],
    ) -> tuple[bytes, None] | None:
        """Append ``record`` (checked by :meth:`OneProduce._check_one` in this step, its
        subject ``subject``, its NATS copy ``envelope`` carrying the ack ``inbox``) and
        leave its answer to ``answer_later``, once: the response returned is empty. None,
        nothing done: the general path serves it."""
        link = self.link
        core = replica.base.core
        if (
            not core.enough_replicas()  # (the general path answers NOT_ENOUGH_REPLICAS)
            or link.echo_needed((subject,), replica)
            or not link.unstored_copy_room(len(envelope) + len(subject))  # (the general path waits)
        ):
            return None
        token = inbox.rsplit(".", 1)[1]
        completion = ProduceCompletion(
            replica.base.stream, replica.base.partition, results=[None], remaining=1
        )
        answer = AnswerAtHw(completion, token, self.waiting, answer_later)
        completion.on_done = answer
        result = replica.intake.append_one(subject, record, DirectAckTo(completion, 0))
        if result is None:
            return None  # (a large write: nothing done)
        code, offset, _ts = result
        if code != _NONE or offset < 0:  # refused: answered now
            completion.on_done = None
            return encode_produce_result_tuples([result]), None
        if completion.remaining:  # (else settled by its append: answered)
            self.waiting[token] = completion
            answer.timer = replica.committer.running_loop().call_later(timeout_s, answer.expire)
        try:
            if not link.queue_unstored_copy(subject, envelope):  # (the link went down)
                log.debug("NATS copy not queued", extra=replica.base.fields(offset=offset))
        except Exception:  # (appended: its commit answers it, whatever its copy does)
            log.exception("a Produce's NATS copy failed", extra=replica.base.fields())
        return b"", None
