"""The direct send: one message to an idle partition, written and awaited in the caller's
task (no accumulator, no batch, no wake of the partition's sender task).

``await producer.send(...)`` with ``linger=0``, when nothing is queued, in
flight or being cut for the message's partition, its sender task is parked, the leader's
connection is open and takes a write at once (and, with other partitions, no fan-in
would group it): the caller encodes the Produce request of its one message, writes it,
and waits for its answer on a future of its own. A clean answer (stored, or a duplicate
of a stored copy) is the :class:`~jetsdk.message.Ack` at once. Anything else goes to the
partition's sender task as a batch a caller wrote (:meth:`Sender.hand_over
<jetsdk.producer.sender.Sender.hand_over>`): an error, a refusal, the timeout, and a
caller cancelled while waiting (the send goes on, as a queued message's would).

Order and sequences are the batching path's: the message takes the partition's next
sequence number, and while it is in flight its partition is held (``direct``): later
messages queue in the accumulator, the sender task stays parked, and what was queued is
sent once the message is settled or handed over (then behind it, the retry first).

Task safety: one event loop. On trio ``send`` goes this way too (its caller waits on the
answer's event, set by the connection's reader task); ``send_soon``'s :meth:`write`
needs asyncio (its answer's callback and the loop's shared timer).
"""

from __future__ import annotations

import functools
import time

from jetsdk.client import Client
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import (
    ProduceRequest,
    encode_produce_request_parts,
)
from jetsdk.codec.produce_one import decode_produce_one, encode_produce_one
from jetsdk.connection import PendingResponse, RequestBody
from jetsdk.message import Ack
from jetsdk.producer.accumulator import Accumulator
from jetsdk.producer.handle import SendHandle
from jetsdk.producer.in_flight import PartitionSender, Pending, Prepared
from jetsdk.producer.sender import Sender
from jetsdk.transport import running_asyncio_loop

__all__ = ["DirectSends"]

_STORED = frozenset({ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE})


class DirectSends:
    """A producer's direct sends (module doc); composed with its accumulator and sender."""

    def __init__(
        self,
        client: Client,
        stream: str,
        acc: Accumulator[Pending],
        sender: Sender,
        *,
        max_in_flight: int,
        ack_timeout: float,
    ) -> None:
        self._client = client
        self._stream = stream
        self._acc = acc
        self._sender = sender
        self._states = sender.states
        self._max_in_flight = max_in_flight
        self._timeout_ms = int(ack_timeout * 1000)
        self._answer_s = ack_timeout + client.request_timeout
        self.enabled = False
        """True once started with linger 0: :meth:`send` may take a message."""
        self.writes = False
        """And on asyncio: :meth:`write` may take one (its answer settles the handle from
        the reader, with the loop's shared timer for its timeout)."""
        self.sent = 0
        """Messages sent this way (tests, measurements)."""

    def start(self, linger: float) -> None:
        """Enable direct sends if ``linger`` is 0 (:meth:`write`: on asyncio)."""
        self.enabled = linger == 0
        self.writes = self.enabled and running_asyncio_loop() is not None

    async def send(self, prepared: Prepared) -> Ack | None:
        """Send ``prepared`` directly and wait for its ack, if its partition is idle and
        the producer has room (``max_pending``, ``max_pending_bytes``); None (nothing
        done) if not: queue it then.

        Raises:
            JetError: as :meth:`Producer.send <jetsdk.producer.producer.Producer.send>`
                (a failure is the sender task's, after its retries).
        """
        sender = self._sender
        if sender.outcomes.full():
            return None
        written = self._write(prepared)
        if written is None:
            return None
        state, response, seq, sent_at = written
        try:
            # asyncio: the response's own future, the only waiter until handed over; trio:
            # its event (woken by the connection's reader task).
            waiter = response.waiter(self._answer_s)
            if waiter is not None:
                await waiter
            else:
                await response.settled(self._answer_s)
        except BaseException:  # cancelled: the sender task sees the message through
            response.waiter_gone()
            sender.hand_over(state, prepared, seq, response, sent_at)
            raise
        body = response.body_now
        result = None if body is None else decode_produce_one(body)
        if result is None or result[0] not in _STORED:
            return await sender.hand_over(state, prepared, seq, response, sent_at).wait()
        sender.direct_acked(prepared.partition, state, prepared.size)
        return Ack(self._stream, prepared.partition, result[1], result[2])

    def write(self, prepared: Prepared, handle: SendHandle) -> bool:
        """Write ``prepared`` directly if its partition is idle, and have its answer settle
        ``handle`` (from the connection's reader, as it decodes the answer); False (nothing
        done) if not: queue it then. The caller checked the room for it
        (``send_soon``, the sync API's queue)."""
        written = self._write(prepared)
        if written is None:
            return False
        state, response, seq, sent_at = written
        answered = functools.partial(
            self._answered, prepared, handle, state, seq, sent_at, response
        )
        response.when_done(answered, self._answer_s)
        return True

    def _answered(
        self,
        prepared: Prepared,
        handle: SendHandle,
        state: PartitionSender,
        seq: int,
        sent_at: float,
        response: PendingResponse,
        _future: object,
    ) -> None:
        """The answer to a message :meth:`write` wrote came (or its wait timed out)."""
        body = response.body_now
        result = None if body is None else decode_produce_one(body)
        if result is None or result[0] not in _STORED:
            self._sender.hand_over(state, prepared, seq, response, sent_at, handle)
            return
        try:
            handle._set_acked(self._stream, prepared.partition, result[1], result[2])
        except BaseException as exc:  # a handle's callback: the sender task raises it
            state.failure = exc
        self._sender.direct_acked(prepared.partition, state, prepared.size)

    def _write(
        self, prepared: Prepared
    ) -> tuple[PartitionSender, PendingResponse, int, float] | None:
        """If ``prepared``'s partition is idle (module doc): write its Produce request, hold
        the partition and count the message; its state, response, sequence and send time.
        None (nothing done) if not."""
        message, partition, policy, size, _deferred = prepared
        state = self._states.get(partition)
        if state is None or not state.waiting or state.direct or state.deferred:
            return None
        if state.written or state.failure is not None or self._acc.queued(partition):
            return None
        sender = self._sender
        if state.in_flight.value < self._max_in_flight:
            return None
        conn = sender.leaders.now(partition)
        if conn is None or (len(self._states) > 1 and sender.fan_in.takes(conn)):
            return None  # grouped with other partitions' batches by the sender tasks
        pid = sender.producer_id
        seq = state.next_seq
        seq_sent = seq if pid is not None else 0
        start = not state.open  # (nothing in flight: every earlier sequence is settled)
        body: RequestBody | None = encode_produce_one(
            self._stream, partition, policy, self._timeout_ms, message, pid, seq_sent, start
        )
        if body is None:  # a key, headers, a subject or a large value: the request's parts
            request = ProduceRequest(
                self._stream,
                partition,
                policy,
                self._timeout_ms,
                (message,),
                pid,
                seq_sent,
                sequence_start=start,
            )
            body = encode_produce_request_parts(request)
        response = conn.send_nowait(Api.PRODUCE, body)
        if response is None:  # the connection is busy writing, or closed
            return None
        state.next_seq = seq + 1
        state.direct = True
        sender.direct_sent(size)
        self.sent += 1
        return state, response, seq, time.monotonic()
