"""The sender: how a producer's batches reach the leader (aiokafka's ``Sender``).

:class:`Sender` runs one task per partition that cuts batches off the producer's
:class:`~jetsdk.producer.accumulator.Accumulator` and sends each as one Produce request,
retried until acknowledged or ``delivery_timeout`` (see :mod:`jetsdk.producer.producer`).
It is composed of the fast path where the caller, or the answer's callback of a
partition's previous batch, writes the request of an idle partition
(:class:`~jetsdk.producer.batch_writes.BatchWrites`, with the fan-in of many partitions to
one server) and of the messages' outcomes: every
:class:`~jetsdk.producer.handle.SendHandle` settled, and the count (messages and bytes) of
those not settled yet, which the producer's backpressure and ``flush`` wait on
(:class:`~jetsdk.producer.outcomes.Outcomes`).

The :class:`~jetsdk.producer.producer.Producer` holds an accumulator and a sender; the
sender reads the accumulator and owns everything else here.

Task safety: one event loop.
"""

from __future__ import annotations

import contextlib
import time

import anyio
import anyio.abc

from jetsdk.client import Client
from jetsdk.client_metadata import PartitionLeaders
from jetsdk.client_requests import decode_produce_answer
from jetsdk.codec.messages import ProduceRequest, ProduceResult, encode_produce_request_parts
from jetsdk.connection import Connection, PendingResponse
from jetsdk.errors import ClientClosed, InvalidArgument, JetError
from jetsdk.producer.accumulator import Accumulator, Batch
from jetsdk.producer.batch_writes import BatchWrites
from jetsdk.producer.handle import SendHandle
from jetsdk.producer.in_flight import PartitionSender, Pending, Prepared, Written
from jetsdk.producer.outcomes import DEFAULT_MAX_PENDING_BYTES, Outcomes
from jetsdk.producer.retry_rules import (
    MAX_BACKOFF_STEP,
    expired,
    never,
    should_retry,
    should_retry_idempotent,
)
from jetsdk.retry import needs_metadata_refresh

__all__ = ["Pending", "Sender"]

_UNSCOPED = contextlib.nullcontext()


class Sender:
    """Delivers the batches of one producer's accumulator and settles their handles.

    Started by the producer (:meth:`start`) with its task group; closed by :meth:`close`.
    """

    def __init__(
        self,
        client: Client,
        stream: str,
        acc: Accumulator[Pending],
        *,
        max_in_flight: int,
        max_pending: int,
        ack_timeout: float,
        delivery_timeout: float,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
    ) -> None:
        self._client = client
        self._stream = stream
        self._acc = acc
        self._max_in_flight = max_in_flight
        self._delivery_timeout = delivery_timeout
        self.retries = 0
        """Produce requests sent again so far (whole or partial batches)."""
        self._tg: anyio.abc.TaskGroup | None = None
        self._partitions: dict[int, PartitionSender] = {}
        self.states = self._partitions
        """Every partition's state, by partition (read by the direct sends)."""
        self.outcomes = Outcomes(
            stream, max_pending=max_pending, max_pending_bytes=max_pending_bytes
        )
        """Settles the messages; counts those unsettled (backpressure, ``flush``)."""
        self.leaders = PartitionLeaders(client.metadata_cache, stream)
        """Each partition's leader connection, kept between sends (the direct ones too)."""
        self._writes = BatchWrites(
            stream,
            acc,
            self.outcomes,
            self.leaders,
            self._partitions,
            max_in_flight=max_in_flight,
            ack_timeout_ms=int(ack_timeout * 1000),
            request_timeout=client.request_timeout,
        )
        self.fan_in = self._writes.fan_in
        """Groups the requests of many partitions to one server into one request."""

    def start(self, tg: anyio.abc.TaskGroup, producer_id: int | None) -> None:
        """Start sending: partition tasks run in ``tg``."""
        self._tg = tg
        self._writes.producer_id = producer_id

    @property
    def producer_id(self) -> int | None:
        """The idempotent producer id (None: not idempotent); set by :meth:`start`."""
        return self._writes.producer_id

    @property
    def unresolved(self) -> int:
        """Messages queued or in flight, not acknowledged or failed yet."""
        return self.outcomes.unresolved

    async def wait_for_room(self) -> None:
        """Wait until a message was settled (then check :meth:`full` again), or :meth:`close`."""
        await self.outcomes.wait_for_room()

    def queued(self, partition: int, size: int = 0) -> None:
        """One more message (``size`` estimated bytes) was queued in the accumulator for
        ``partition``: count it, and have it sent (written here if the partition is idle,
        else by its task)."""
        outcomes = self.outcomes  # (Outcomes.added, inline: once per message)
        outcomes.unresolved += 1
        outcomes.unresolved_bytes += size
        sender = self._partitions.get(partition)
        if sender is None:
            sender = self._start_partition(partition)
        writes = self._writes
        if (
            sender.waiting
            and not sender.direct  # (a direct send's end sends what was queued behind it)
            # A wide producer's message mostly meets its partition's batch in flight, whose
            # answer sends it: asked first (send_now would refuse it then, holding no slot).
            # (BatchWrites.answer_sends_next, inline: once per message.)
            and not (writes.wide and len(written := sender.written) == 1 and not written[0].claimed)
            and not writes.send_now(partition, sender)
        ):
            sender.wake.set()

    def direct_sent(self, size: int) -> None:
        """A message (``size`` estimated bytes) was written by
        :class:`~jetsdk.producer.direct.DirectSends`: count it (its partition's ``direct``
        holds the partition meanwhile)."""
        self.outcomes.added(size)

    def direct_acked(self, partition: int, sender: PartitionSender, size: int) -> None:
        """That message was stored: settle it and send what was queued behind it."""
        sender.direct = False
        self.outcomes.settled(1, size)
        if sender.failure is not None or (
            self._acc.queued(partition) and not self._writes.send_now(partition, sender)
        ):
            sender.wake.set()  # (a failure: raised by the sender task)

    def hand_over(
        self,
        sender: PartitionSender,
        prepared: Prepared,
        seq: int,
        response: PendingResponse,
        sent_at: float,
        handle: SendHandle | None = None,
    ) -> SendHandle:
        """That message's answer was not a clean ack (an error, a refusal, the timeout) or
        its caller stopped waiting: the sender task sees it through as a written batch
        (retries, ``delivery_timeout``), settling ``handle`` (default: a new one)."""
        sender.direct = False
        handle = SendHandle() if handle is None else handle
        message, partition, policy, size, _deferred = prepared
        batch = Batch(partition, policy, (Pending(message, handle, size),), size)
        if self.outcomes.closed:  # the sender task ends (or ended): it would not see it through
            self.outcomes.fail(batch.items, ClientClosed("the producer was closed"))
            return handle
        request = self._writes.request(batch, batch.items, seq)
        sender.in_flight.acquire_nowait()  # (free: the task stays parked while direct)
        sender.open[seq] = None
        sender.written.append(Written(batch, seq, request, response, sender, sent_at))
        sender.wake.set()
        return handle

    async def flush(self) -> None:
        """Send everything queued now (ignoring linger); wait until nothing is unresolved."""
        writes = self._writes
        writes.flushing += 1
        try:
            for sender in self._partitions.values():
                if not writes.answer_sends_next(sender):  # (its callback sends, flushing)
                    sender.wake.set()
            await self.outcomes.wait_idle()
        finally:
            writes.flushing -= 1

    def close(self, unsent: list[Pending]) -> None:
        """The producer closes: fail ``unsent`` (drained from the accumulator), wake the
        callers waiting for room (they see the close); the tasks end with its task group."""
        self.outcomes.close()
        closed = ClientClosed("the producer was closed before the message was sent")
        self.outcomes.fail(unsent, closed)

    def _start_partition(self, partition: int) -> PartitionSender:
        sender = PartitionSender(
            anyio.Event(), anyio.Semaphore(self._max_in_flight, fast_acquire=True)
        )
        self._partitions[partition] = sender
        self._writes.started(len(self._partitions))
        assert self._tg is not None
        self._tg.start_soon(self._send_loop, partition, sender)
        return sender

    async def _send_loop(self, partition: int, sender: PartitionSender) -> None:
        try:
            await self._send_batches(partition, sender)
        finally:
            self._fail_written(sender)

    async def _send_batches(self, partition: int, sender: PartitionSender) -> None:
        acc, writes = self._acc, self._writes
        while True:
            if sender.failure is not None:
                raise sender.failure
            await self._see_through(sender)
            while (
                not sender.written
                and (
                    sender.direct
                    or sender.deferred
                    or not acc.ready(partition, time.monotonic(), flushing=writes.flushing > 0)
                )
                and sender.failure is None
            ):
                sender.wake = anyio.Event()
                deadline = None if sender.deferred else acc.deadline(partition)  # (cut soon)
                sender.waiting = True
                try:
                    if deadline is None:
                        await sender.wake.wait()
                    else:
                        with anyio.move_on_after(deadline - time.monotonic()):
                            await sender.wake.wait()
                finally:
                    sender.waiting = False
            if sender.written or sender.failure is not None:
                continue  # a caller wrote a batch (and holds its slot), or a callback failed
            if writes.wide and sender.in_flight.value and writes.write_or_defer(partition, sender):
                continue  # (one slot, free) seen through by its answer's callback: park
            await sender.in_flight.acquire()  # (callers write only while this waits above)
            batch = acc.drain(partition)
            if batch is None:
                sender.in_flight.release()
                continue
            base_seq = sender.next_seq
            sender.next_seq += len(batch.items)
            sender.open[base_seq] = None
            if self._max_in_flight == 1:
                await self._send_batch(batch, base_seq, sender)
            else:
                assert self._tg is not None
                self._tg.start_soon(self._send_batch, batch, base_seq, sender)

    async def _see_through(self, sender: PartitionSender) -> None:
        """Deliver the batches callers wrote (``BatchWrites.send_now``), in order."""
        while sender.written:
            written = sender.written.popleft()
            written.claimed = True
            if self._max_in_flight == 1:
                await self._send_batch(written.batch, written.base_seq, sender, written)
            else:
                assert self._tg is not None
                self._tg.start_soon(
                    self._send_batch, written.batch, written.base_seq, sender, written
                )

    def _fail_written(self, sender: PartitionSender) -> None:
        """The sender ends (the producer closes): fail what it never saw through."""
        closed = ClientClosed("the producer was closed while the message was in flight")
        while sender.written:
            written = sender.written.popleft()
            written.claimed = True
            sender.open.pop(written.base_seq, None)
            self.outcomes.fail(written.batch.items, closed)

    async def _send_batch(
        self,
        batch: Batch[Pending],
        base_seq: int,
        sender: PartitionSender,
        written: Written | None = None,
    ) -> None:
        try:
            await self._deliver(batch, base_seq, sender, written)
        except BaseException:
            closed = ClientClosed("the producer was closed while the message was in flight")
            self.outcomes.fail(batch.items, closed)
            raise
        finally:
            sender.open.pop(base_seq, None)
            sender.in_flight.release()

    async def _deliver(
        self,
        batch: Batch[Pending],
        base_seq: int,
        sender: PartitionSender,
        written: Written | None = None,
    ) -> None:
        """Send ``batch`` (already written, as ``written``, by ``BatchWrites.send_now``), then send
        again what failed retriably (same sequences) until every message is resolved or
        ``delivery_timeout`` passes. An idempotent producer's request carries the
        sequence-start flag while its batch is the partition's oldest not settled
        (:meth:`PartitionSender.starts`): a request after a hole in the leader's sequences
        (one lost, refused, or a leader that does not know the producer) is refused
        OUT_OF_ORDER_SEQUENCE until then, so batches land in sequence order."""
        idempotent = self.producer_id is not None
        retry_if = should_retry_idempotent if idempotent else should_retry
        sent_at = time.monotonic() if written is None else written.sent_at
        deadline = sent_at + self._delivery_timeout
        items = batch.items
        where = (self._stream, batch.partition)
        seq = base_seq
        tries = 0
        while True:
            request = (
                written.request
                if written
                else self._writes.request(batch, items, seq, idempotent and sender.starts(base_seq))
            )
            error: JetError | None = None
            response = None if written is None else written.response
            written = None
            answer_s = self._writes.answer_timeout(request)
            time_left = deadline - time.monotonic()
            conn = None
            if response is None:
                conn = self.leaders.now(request.partition)
            # A request written (or to be written now, through the fan-in) whose answer's
            # wait ends within the delivery time left is bounded by it: no cancel scope
            # (one per batch was a fifth of the Python calls per batch of a wide fan-out).
            bounded = answer_s < time_left and (
                response is not None or (conn is not None and self.fan_in.takes(conn))
            )
            scope = None if bounded else anyio.move_on_after(time_left)
            with scope or _UNSCOPED:
                try:
                    if response is not None:
                        answer = await response.wait(answer_s)
                        results = decode_produce_answer(answer, len(request.messages))
                    else:
                        results = await self._produce(request, conn)
                except JetError as exc:
                    if not retry_if(exc):
                        self.outcomes.fail(items, exc)
                        return
                    error = exc
                except Exception as exc:
                    # must fail this batch alone, never the producer's tasks.
                    self.outcomes.fail(
                        items,
                        InvalidArgument(
                            f"the batch could not be sent: {exc!r}", details={"field": "message"}
                        ),
                    )
                    return
                else:
                    tuples = [(r.error_code, r.offset, r.timestamp) for r in results]
                    error = self.outcomes.resolve_results(
                        batch.partition, items, tuples, idempotent
                    )
                    if error is None:
                        return
            if scope is not None and scope.cancelled_caught:
                self.outcomes.fail(items, expired(where, self._delivery_timeout, error))
                return
            assert error is not None
            # What is still unresolved goes again: with the same sequences (idempotent: one
            # contiguous run from the first to the last unresolved message), else alone.
            left = [i for i, p in enumerate(items) if not p.handle.done()]
            if not left:
                return
            if idempotent:
                seq += left[0]
                items = items[left[0] : left[-1] + 1]
            else:
                items = tuple(items[i] for i in left)
            tries += 1
            pause = self._client.retry.delay(min(tries, MAX_BACKOFF_STEP))
            if time.monotonic() + pause >= deadline:
                self.outcomes.fail(items, expired(where, self._delivery_timeout, error))
                return
            await anyio.sleep(pause)
            if needs_metadata_refresh(error):
                with contextlib.suppress(JetError):
                    await self._client.refresh_metadata()
            self.retries += 1

    async def _produce(
        self, request: ProduceRequest, conn: Connection | None = None
    ) -> list[ProduceResult]:
        """Send ``request`` to its partition's leader (``conn``: its connection, if the
        caller looked it up), with the other partitions' requests to that server of this
        loop turn where it takes them (:class:`~jetsdk.producer.fan_in.FanIn`); its
        results. No retries inside: :meth:`_deliver` retries, so it knows every error."""
        client = self._client
        if conn is None:
            conn = self.leaders.now(request.partition)
        if conn is None:  # stale metadata, or not connected yet: may refresh and dial
            conn = await client.leader_connection(self._stream, request.partition)
        body = encode_produce_request_parts(request)
        wait = self._writes.answer_timeout(request)
        answer = self.fan_in.submit(conn, body, wait)
        if answer is None:  # a server without ProduceMany, or not asyncio
            return await self._client.produce(request, retry_if=never)
        return decode_produce_answer(await answer.wait(wait), len(request.messages))
