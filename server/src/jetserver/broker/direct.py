"""The typed in-process path of a Produce request to a partition led by this server.

A Produce request that arrives on this server's jet port for a partition whose leader is
here reaches that partition's sequencer as one :class:`DirectBatch`: where each message
lies in the request (:class:`~jetsdk.codec.transcode.DirectRecord`, so its record body is
cut from the request's bytes without parsing an envelope), the request's ack policy, and
a :class:`ProduceCompletion` that the sequencer (LEADER acks, errors, duplicates) and the
committer (ALL acks once the HW passes) settle by message index, in process: no ack inbox,
no correlation ids, nothing encoded or decoded on the way back.

Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, Protocol, cast

import attrs

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import encode_produce_result_tuples
from jetsdk.codec.transcode import DirectRecord, EnvelopeBytes
from jetserver.infra import hops
from jetserver.infra.lazy_event import LazyEvent
from jetserver.logs import fields
from jetserver.storage.framing import CheckedBody

log = logging.getLogger(__name__)

__all__ = [
    "INVALID",
    "NOT_LEADER",
    "SHUTTING_DOWN",
    "TIMEOUT",
    "TOO_LARGE",
    "AnswerAtCommit",
    "AnswerNow",
    "DirectAckTo",
    "DirectBatch",
    "ProduceCompletion",
    "Result",
    "Settles",
    "batch_of",
    "fail_unappended",
    "stored_of",
]

Result = tuple[int, int, int]
"""A message's outcome: (error_code, offset, timestamp)."""

NOT_LEADER: Result = (int(ErrorCode.NOT_LEADER), -1, -1)
"""Its partition's leadership left this server before its ack (it may or may not be
stored: an idempotent producer's retry is deduplicated)."""
SHUTTING_DOWN: Result = (int(ErrorCode.SHUTTING_DOWN), -1, -1)
INVALID: Result = (int(ErrorCode.INVALID_ARGUMENT), -1, -1)
TOO_LARGE: Result = (int(ErrorCode.MESSAGE_TOO_LARGE), -1, -1)
TIMEOUT: Result = (int(ErrorCode.TIMEOUT), -1, -1)


def fail_unappended(items: Iterable[object], result: Result) -> None:
    """Answer the direct requests among ``items`` (queued, dropped, not appended) with
    ``result`` at once (through NATS their publishers would time out: the outcome is the
    same, unknown, only sooner)."""
    for item in items:
        if type(item) is DirectBatch:
            item.completion.fail_unsettled(result)


@attrs.define(eq=False)
class ProduceCompletion:
    """The outcome of every message of one Produce request, filled in as it is known."""

    stream: str
    """The request's stream."""
    partition: int
    """The request's partition."""
    results: list[Result | None]
    """One per message of the request, in order (None: not known yet)."""
    remaining: int
    """Messages whose outcome is still awaited."""
    done: LazyEvent = attrs.field(factory=LazyEvent)
    """Set once :attr:`remaining` reaches 0 (an anyio.Event only if someone waits: most
    requests that append in their own task never do)."""
    on_done: Callable[[], None] | None = None
    """Called once, in the turn :attr:`remaining` reaches 0, before :attr:`done` is set:
    the request's answer written from the turn that settled its last message (the HW's
    advance of an ALL ack), not from its task's later wake-up
    (:meth:`~jetserver.broker.produce.ProduceService.produce_then`). Must not raise."""

    def settle(self, index: int, code: int, offset: int, timestamp: int) -> None:
        """Message ``index`` ended with ``code`` at ``offset`` (-1: none). An index out of
        range or already settled is ignored (an ack that came twice: the first counts)."""
        results = self.results
        if not 0 <= index < len(results) or results[index] is not None:
            return
        results[index] = (code, offset, timestamp)
        self.remaining -= 1
        if self.remaining <= 0:
            if hops.ENABLED:
                hops.mark("acked")
            self._finish()

    def settle_from_wire(self, acks: Iterable[tuple[int, int, str, int]]) -> None:
        """Settle ``(offset, timestamp, correlation id, code)`` acks that came to the
        request's NATS inbox: there the correlation id is the message's index as text (the
        wire's envelope field, :func:`~jetsdk.codec.transcode.produce_envelopes`); an id
        that is not one is ignored, as are unknown or repeated indexes."""
        for offset, timestamp, corr, code in acks:
            try:
                index = int(corr)
            except ValueError:
                continue
            self.settle(index, code, offset, timestamp)

    def fail_unsettled(self, result: Result) -> None:
        """Give every message not settled yet ``result`` and wake the request."""
        results = self.results
        for i, known in enumerate(results):
            if known is None:
                results[i] = result
        self.remaining = 0
        self._finish()

    def _finish(self) -> None:
        on_done = self.on_done
        if on_done is not None:
            self.on_done = None
            on_done()
        self.done.set()


@attrs.define(eq=False)
class AnswerNow:
    """A :attr:`ProduceCompletion.on_done`: writes the request's answer (its response body
    to ``write``, which frames and sends it, or says False) in the turn that settled its
    last message. An ALL ack at RF 3 is settled in the turn of the replica fetch that
    moved the HW; its request's task woke one loop turn later to write the same bytes
    (``docs/latency.md``, RF 3). :attr:`sent`: the answer is on its way (the task only
    ends the request)."""

    write: Callable[[bytes], bool]
    """Frames and writes a response body now: True if it is on its way."""
    results: list[Result | None]
    """The request's results (every one known when this is called)."""
    sent: bool = False

    def __call__(self) -> None:
        results = self.results
        if None in results:
            return  # not all known (cannot happen once remaining is 0): the task answers
        try:
            self.sent = self.write(encode_produce_result_tuples(cast(list[Result], results)))
        except Exception as exc:  # the task answers as always
            log.debug("early Produce answer failed", extra=fields(error=repr(exc)))


class Settles(Protocol):
    """What a direct message's outcome is settled on (:class:`ProduceCompletion`,
    :class:`AnswerAtCommit`)."""

    def settle(self, index: int, code: int, offset: int, timestamp: int) -> None: ...


@attrs.define(eq=False)
class AnswerAtCommit:
    """The completion of a one-message request with an ALL ack answered with no task
    (broker/produce_one.py): its answer written by the turn that settles it, the commit
    (the fsync's end, heard in the loop's I/O phase) or the cut that fails it, as the
    replica core releases its other pending ALL acks; or, if none came by the request's
    timeout (an fsync that does not return: a hung disk), TIMEOUT by :meth:`expire`
    (its :attr:`timer`), as the general path answers a wait that timed out."""

    write: Callable[[bytes], None]
    """Frames and sends the response body (must not raise)."""
    sent: bool = False
    timer: asyncio.TimerHandle | None = None
    """The loop timer of :meth:`expire` (None: none armed, or it ran)."""

    def settle(self, index: int, code: int, offset: int, timestamp: int) -> None:
        """Write the answer of the request's one message (once; ``index`` is 0)."""
        if self.sent:
            return
        self.sent = True
        timer = self.timer
        if timer is not None:
            self.timer = None
            timer.cancel()
        if hops.ENABLED:
            hops.mark("acked")
        self.write(encode_produce_result_tuples([(code, offset, timestamp)]))

    def expire(self) -> None:
        """The request's timeout passed before its commit: answered TIMEOUT (retriable;
        the record may still be committed, and then stays stored: nothing was
        acknowledged). A later commit or cut finds it answered."""
        self.timer = None
        if not self.sent:
            self.sent = True
            self.write(encode_produce_result_tuples([TIMEOUT]))


class DirectAckTo(NamedTuple):
    """Where a message of a direct batch is acked: its request's completion, at its index."""

    completion: Settles
    """The request's completion."""
    position: int
    """The message's index in its request."""


@attrs.frozen
class DirectBatch:
    """The messages of one Produce request for the sequencer (module docstring)."""

    subjects: Sequence[str]
    """Each message's subject (the partition's subject where the request named none)."""
    records: Sequence[DirectRecord]
    """Where each message lies in the request."""
    indexes: Sequence[int]
    """Each message's index in its request (the index its outcome is settled at)."""
    policy: int
    """The request's ack policy."""
    completion: ProduceCompletion
    """Where the outcomes go."""
    size: int
    """Bytes it counts for in the sequencer's queue (``max_pending_bytes``)."""
    sequence_start: bool = False
    """The request's sequence-start flag (its first message's producer sequence is taken
    as the next one: ``AppendBatch.out_of_order``)."""


def record_body(record: DirectRecord, subjects: bytes) -> tuple[bytes, bytes | memoryview]:
    """The record body of a direct Produce message, as
    :func:`~jetsdk.codec.transcode.direct_record` builds it without its ack fields, in two
    parts (:data:`~jetserver.storage.framing.Body`): its head (producer field, key, subject
    and reply fields ``subjects``), then its headers and value, a view of the request (the
    log frames the record around it: no copy)."""
    request, key_end = record.request, record.key_end
    head = b"".join((record.prefix, request[record.key_pos : key_end], subjects))
    tail = memoryview(request)[key_end : record.end]
    if record.value_crc >= 0:  # a large value's CRC, taken once (framing.CheckedBody)
        return CheckedBody(head, tail, record.value_crc, record.value_len)
    return head, tail


def batch_of(
    to_send: list[tuple[str, EnvelopeBytes]],
    records: list[DirectRecord | None] | None,
    indexes: list[int],
    policy: int,
    completion: ProduceCompletion,
    sequence_start: bool = False,
) -> DirectBatch:
    """The typed batch of the messages at ``indexes`` (``to_send[i]`` is message
    ``indexes[i]``, each with an envelope, so each has a record; ``sequence_start``: the
    request's flag)."""
    assert records is not None  # built whenever a replica here may take them directly
    subjects: list[str] = []
    taken: list[DirectRecord] = []
    size = 0
    # One loop, not two comprehensions and a generator (a request has one message at
    # light load: their frames cost more than the work).
    for (subject, payload), i in zip(to_send, indexes, strict=True):
        record = records[i]
        assert record is not None  # each message with an envelope has a record
        subjects.append(subject)
        taken.append(record)
        size += len(payload)
    return DirectBatch(subjects, taken, indexes, policy, completion, size, sequence_start)


def stored_of(
    messages: list[tuple[str, EnvelopeBytes]],
    indexes: list[int],
    results: list[Result | None],
    policy: int,
    appended_end: int,
) -> tuple[list[tuple[str, EnvelopeBytes]], int]:
    """Of ``messages`` (request message ``indexes[i]`` each), those acked as stored and the
    end of their offsets; with ack NONE (no offsets known) all of them, and
    ``appended_end``, the log end when their append returned."""
    if policy == AckPolicy.NONE:
        return messages, appended_end
    stored: list[tuple[str, EnvelopeBytes]] = []
    end = 0
    for message, i in zip(messages, indexes, strict=True):
        result = results[i]
        if result is not None and result[0] == ErrorCode.NONE and result[1] >= 0:
            stored.append(message)
            end = max(end, result[1] + 1)
    return stored, end
