"""The sender: how a producer's batches reach the leader (aiokafka's ``Sender``).

:class:`Sender` runs one task per partition that cuts batches off the producer's
:class:`~jetsdk.producer.accumulator.Accumulator` and sends each as one Produce request,
retried until acknowledged or ``delivery_timeout`` (see :mod:`jetsdk.producer.producer`),
plus the fast path where the caller, or the answer's callback of a partition's previous
batch, writes the request of an idle partition. It settles every message's
:class:`~jetsdk.producer.handle.SendHandle` and keeps the count of messages not settled
yet, which the producer's backpressure and ``flush`` wait on.

The :class:`~jetsdk.producer.producer.Producer` holds an accumulator and a sender; the
sender reads the accumulator and owns everything else here.

Task safety: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Iterable

import anyio
import anyio.abc

from jetsdk.client import Client
from jetsdk.client_metadata import PartitionLeaders
from jetsdk.client_requests import decode_produce_answer
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import (
    ProduceRequest,
    ProduceResult,
    encode_produce_request_parts,
)
from jetsdk.connection import Connection, PendingResponse, RequestBody
from jetsdk.errors import ClientClosed, InvalidArgument, JetError, error_from_code
from jetsdk.message import Ack
from jetsdk.producer.accumulator import Accumulator, Batch
from jetsdk.producer.fan_in import FanIn, SectionAnswer
from jetsdk.producer.handle import SendHandle
from jetsdk.producer.in_flight import PartitionSender, Pending, Prepared, Written
from jetsdk.producer.retry_rules import (
    IDEMPOTENT_RETRY_CODES,
    MAX_BACKOFF_STEP,
    RETRY_CODES,
    expired,
    never,
    should_retry,
    should_retry_idempotent,
    stored_results,
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
    ) -> None:
        self._client = client
        self._stream = stream
        self._acc = acc
        self._max_in_flight = max_in_flight
        self._max_pending = max_pending
        self._ack_timeout_ms = int(ack_timeout * 1000)
        self._wait_s = ack_timeout + client.request_timeout
        """Seconds a request's answer may take: the server's wait and the client's."""
        self._delivery_timeout = delivery_timeout
        self.producer_id: int | None = None
        """The idempotent producer id (None: not idempotent); set by :meth:`start`."""
        self.retries = 0
        """Produce requests sent again so far (whole or partial batches)."""
        self._tg: anyio.abc.TaskGroup | None = None
        self._partitions: dict[int, PartitionSender] = {}
        self._wide = False  # several partitions, max_in_flight=1 (_answer_sends_next)
        self.states = self._partitions
        """Every partition's state, by partition (read by the direct sends)."""
        self._unresolved = 0
        self._space: anyio.Event | None = None
        """Set when room frees up (made by the first caller waiting for room, then again
        after each set: nothing to set, no event built, while nobody waits)."""
        self._idle: anyio.Event | None = None
        """Set when nothing is unresolved (made by :meth:`flush` when it has to wait)."""
        self._closed = False
        self._flushing = 0
        self.fan_in = FanIn()
        """Groups the requests of many partitions to one server into one request."""
        self.leaders = PartitionLeaders(client.metadata_cache, stream)
        """Each partition's leader connection, kept between sends (the direct ones too)."""

    def start(self, tg: anyio.abc.TaskGroup, producer_id: int | None) -> None:
        """Start sending: partition tasks run in ``tg``."""
        self._tg = tg
        self.producer_id = producer_id

    @property
    def unresolved(self) -> int:
        """Messages queued or in flight, not acknowledged or failed yet."""
        return self._unresolved

    async def wait_for_room(self) -> None:
        """Wait until fewer than ``max_pending`` messages are unresolved, or :meth:`close`."""
        if self._closed:
            return
        if self._space is None:
            self._space = anyio.Event()
        await self._space.wait()

    def queued(self, partition: int) -> None:
        """One more message was queued in the accumulator for ``partition``: count it, and
        have it sent (written here if the partition is idle, else by its task)."""
        self._unresolved += 1
        sender = self._partitions.get(partition)
        if sender is None:
            sender = self._start_partition(partition)
        if (
            sender.waiting
            and not sender.direct  # (a direct send's end sends what was queued behind it)
            and not self._send_now(partition, sender)
            and not (self._wide and self._answer_sends_next(sender))
        ):
            sender.wake.set()

    def _answer_sends_next(self, sender: PartitionSender) -> bool:
        """True if the answer's callback of the one batch in flight sends what is queued."""
        written = sender.written
        return self._wide and len(written) == 1 and not written[0].claimed

    def direct_sent(self) -> None:
        """A message was written by :class:`~jetsdk.producer.direct.DirectSends`: count it
        (its partition's ``direct`` holds the partition meanwhile)."""
        self._unresolved += 1

    def direct_acked(self, partition: int, sender: PartitionSender) -> None:
        """That message was stored: settle it and send what was queued behind it."""
        sender.direct = False
        self._settled(1)
        if sender.failure is not None or (
            self._acc.queued(partition) and not self._send_now(partition, sender)
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
        batch = Batch(partition, policy, (Pending(message, handle),), size)
        if self._closed:  # the sender task ends (or ended): it would not see it through
            self._fail(batch.items, ClientClosed("the producer was closed"))
            return handle
        request = self._request(batch, batch.items, seq)
        sender.in_flight.acquire_nowait()  # (free: the task stays parked while direct)
        sender.written.append(Written(batch, seq, request, response, sender, sent_at))
        sender.wake.set()
        return handle

    async def flush(self) -> None:
        """Send everything queued now (ignoring linger); wait until nothing is unresolved."""
        self._flushing += 1
        try:
            for sender in self._partitions.values():
                if not self._answer_sends_next(sender):  # (its callback sends, flushing)
                    sender.wake.set()
            while self._unresolved:
                if self._idle is None:
                    self._idle = anyio.Event()
                await self._idle.wait()
        finally:
            self._flushing -= 1

    def close(self, unsent: list[Pending]) -> None:
        """The producer closes: fail ``unsent`` (drained from the accumulator), wake the
        callers waiting for room (they see the close); the tasks end with its task group."""
        self._closed = True
        if self._space is not None:
            self._space.set()
        closed = ClientClosed("the producer was closed before the message was sent")
        self._fail(unsent, closed)

    def _start_partition(self, partition: int) -> PartitionSender:
        sender = PartitionSender(
            anyio.Event(), anyio.Semaphore(self._max_in_flight, fast_acquire=True)
        )
        self._partitions[partition] = sender
        self._wide = self._max_in_flight == 1 and len(self._partitions) > 1
        assert self._tg is not None
        self._tg.start_soon(self._send_loop, partition, sender)
        return sender

    async def _send_loop(self, partition: int, sender: PartitionSender) -> None:
        try:
            await self._send_batches(partition, sender)
        finally:
            self._fail_written(sender)

    async def _send_batches(self, partition: int, sender: PartitionSender) -> None:
        acc = self._acc
        while True:
            if sender.failure is not None:
                raise sender.failure
            await self._see_through(sender)
            while (
                not sender.written
                and (
                    sender.direct
                    or sender.deferred
                    or not acc.ready(partition, time.monotonic(), flushing=self._flushing > 0)
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
            if self._wide and sender.in_flight.value and self._write_or_defer(partition, sender):
                continue  # (one slot, free) seen through by its answer's callback: park
            await sender.in_flight.acquire()  # (callers write only while this waits above)
            batch = acc.drain(partition)
            if batch is None:
                sender.in_flight.release()
                continue
            base_seq = sender.next_seq
            sender.next_seq += len(batch.items)
            if self._max_in_flight == 1:
                await self._send_batch(batch, base_seq, sender)
            else:
                assert self._tg is not None
                self._tg.start_soon(self._send_batch, batch, base_seq, sender)

    def _send_now(self, partition: int, sender: PartitionSender) -> bool:
        """If ``partition``'s next batch is due, its sender is idle with no request in
        flight, and the leader's connection is open and free: cut the batch and write its
        request here, in the caller's task; the sender task only waits for the response
        (:meth:`_see_through`). True if it did.

        Only with nothing in flight: with ``linger=0`` batches form while a request is in
        flight (written one message per request while slots were free: 15-30 % less acked
        throughput, ``bench sdk``, ``max_in_flight=4``). The hand-off to the sender task
        is a loop turn before the write (~0.1 ms, ``bench latency``). Order is kept: the
        caller cuts and numbers the batch as the sender would, and the sender sees written
        batches through first, in order."""
        if sender.deferred:  # its batch is cut at the end of this loop turn
            return True
        if sender.direct:  # a direct send holds the partition
            return False
        if (
            not sender.waiting
            or sender.in_flight.value < self._max_in_flight  # not idle: batches form there
            or not self._acc.ready(partition, time.monotonic(), flushing=self._flushing > 0)
        ):
            return False
        return self._write_or_defer(partition, sender)

    def _write_or_defer(self, partition: int, sender: PartitionSender) -> bool:
        """Write ``partition``'s next batch (none in flight) now, or have it cut at the end of
        this turn with other partitions' (:class:`FanIn`), seen through by its answer's
        callback (also for a wide producer's task: a wake-up less per batch); True if so."""
        acc = self._acc
        conn = self.leaders.now(partition)
        if conn is None:
            return False
        # One partition's batch has no other to group with: past FanIn, whose mark of
        # the loop turn (a loop callback and turn per request) would serve none.
        fan_in = len(self._partitions) > 1 and self.fan_in.takes(conn)
        if fan_in and not self.fan_in.writes_now(conn):
            # Cut at the end of this loop turn, with what else is queued for the partition
            # meanwhile, and sent with the other partitions' batches to that server.
            sender.deferred = True
            self.fan_in.defer(
                conn, lambda answer: self._cut_deferred(partition, sender, answer), self._wait_s
            )
            return True
        if not fan_in and not conn.can_send_now:
            return False
        batch = acc.drain(partition)
        if batch is None:
            return False
        request = self._request(batch, batch.items, sender.next_seq)
        body = encode_produce_request_parts(request)
        response: PendingResponse | SectionAnswer | None
        if fan_in:  # written at once (the first of this loop turn: writes_now held)
            response = self.fan_in.write_now(
                conn, body, asyncio.get_running_loop()
            ) or self.fan_in.submit(conn, body, self._wait_s)
        else:
            # None cannot happen after can_send_now (nothing yielded); the sender sends it.
            response = conn.send_nowait(Api.PRODUCE, body)
        self._written(sender, batch, request, response)
        return True

    def _cut_deferred(
        self, partition: int, sender: PartitionSender, answer: SectionAnswer
    ) -> RequestBody | None:
        """End of the loop turn: cut the batch left for it (as :meth:`_write_or_defer`
        would), answered by ``answer``; its body (None: the sender task took it)."""
        sender.deferred = False
        if not sender.waiting or sender.in_flight.value < self._max_in_flight:
            sender.wake.set()
            return None
        batch = self._acc.drain(partition)
        if batch is None:
            return None
        request = self._request(batch, batch.items, sender.next_seq)
        body = encode_produce_request_parts(request)
        self._written(sender, batch, request, answer)
        return body

    def _written(
        self,
        sender: PartitionSender,
        batch: Batch[Pending],
        request: ProduceRequest,
        response: PendingResponse | SectionAnswer | None,
    ) -> None:
        """``batch``'s request was written outside the sender task: number it, hold its slot.
        On asyncio its answer's callback settles it when every message was stored
        (:meth:`_on_answer`); anything else (an error, the timeout, trio): the task's."""
        written = Written(batch, sender.next_seq, request, response, sender, time.monotonic())
        sender.in_flight.acquire_nowait()
        sender.written.append(written)
        sender.next_seq += len(batch.items)
        if response is None or not response.when_done(
            functools.partial(self._on_answer, written), self._answer_timeout(request)
        ):
            sender.wake.set()

    def _on_answer(self, written: Written, _future: object = None) -> None:
        """A batch :meth:`_written` registered was answered, or its wait timed out: if the
        task has not taken it and every message was stored, settle it, free its slot and
        send what was queued meanwhile; else wake the sender task to see it through."""
        if written.claimed:
            return
        sender = written.sender
        response = written.response
        body = None if response is None else response.body_now
        results = stored_results(body, len(written.request.messages))
        if results is None:
            sender.wake.set()
            return
        written.claimed = True
        sender.written.remove(written)
        sender.in_flight.release()
        batch = written.batch
        try:
            self._resolve_results(batch, batch.items, results, self.producer_id is not None)
        except BaseException as exc:  # a handle's callback: the sender task raises it
            sender.failure = exc
            sender.wake.set()
            return
        if self._acc.queued(batch.partition) and not self._send_now(batch.partition, sender):
            sender.wake.set()

    async def _see_through(self, sender: PartitionSender) -> None:
        """Deliver the batches callers wrote (:meth:`_send_now`), in order."""
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
            self._fail(written.batch.items, closed)

    def _request(
        self, batch: Batch[Pending], items: tuple[Pending, ...], seq: int
    ) -> ProduceRequest:
        """The Produce request for ``items`` of ``batch``, the first numbered ``seq``."""
        return ProduceRequest(
            stream=self._stream,
            partition=batch.partition,
            ack_policy=batch.ack_policy,
            timeout_ms=self._ack_timeout_ms,
            messages=(items[0].message,) if len(items) == 1 else tuple(p.message for p in items),
            producer_id=self.producer_id,
            base_seq=seq if self.producer_id is not None else 0,
        )

    async def _send_batch(
        self,
        batch: Batch[Pending],
        base_seq: int,
        sender: PartitionSender,
        written: Written | None = None,
    ) -> None:
        try:
            await self._deliver(batch, base_seq, written)
        except BaseException:
            closed = ClientClosed("the producer was closed while the message was in flight")
            for pending in batch.items:
                self._resolve(pending, None, closed)
            raise
        finally:
            sender.in_flight.release()

    async def _deliver(
        self, batch: Batch[Pending], base_seq: int, written: Written | None = None
    ) -> None:
        """Send ``batch`` (already written, as ``written``, by :meth:`_send_now`), then send
        again what failed retriably (same sequences) until every message is resolved or
        ``delivery_timeout`` passes."""
        idempotent = self.producer_id is not None
        retry_if = should_retry_idempotent if idempotent else should_retry
        sent_at = time.monotonic() if written is None else written.sent_at
        deadline = sent_at + self._delivery_timeout
        items = batch.items
        where = (self._stream, batch.partition)
        seq = base_seq
        tries = 0
        while True:
            request = self._request(batch, items, seq) if written is None else written.request
            error: JetError | None = None
            response = None if written is None else written.response
            written = None
            answer_s = self._answer_timeout(request)
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
                        self._fail(items, exc)
                        return
                    error = exc
                except Exception as exc:
                    # must fail this batch alone, never the producer's tasks.
                    self._fail(
                        items,
                        InvalidArgument(
                            f"the batch could not be sent: {exc!r}", details={"field": "message"}
                        ),
                    )
                    return
                else:
                    tuples = [(r.error_code, r.offset, r.timestamp) for r in results]
                    error = self._resolve_results(batch, items, tuples, idempotent)
                    if error is None:
                        return
            if scope is not None and scope.cancelled_caught:
                self._fail(items, expired(where, self._delivery_timeout, error))
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
                self._fail(items, expired(where, self._delivery_timeout, error))
                return
            await anyio.sleep(pause)
            if needs_metadata_refresh(error):
                with contextlib.suppress(JetError):
                    await self._client.refresh_metadata()
            self.retries += 1

    def _answer_timeout(self, request: ProduceRequest) -> float:
        """Seconds the answer to ``request`` may take: the server's wait and the client's."""
        return request.timeout_ms / 1000 + self._client.request_timeout

    async def _produce(
        self, request: ProduceRequest, conn: Connection | None = None
    ) -> list[ProduceResult]:
        """Send ``request`` to its partition's leader (``conn``: its connection, if the
        caller looked it up), with the other partitions' requests to that server of this
        loop turn where it takes them (:class:`FanIn`); its results. No retries inside:
        :meth:`_deliver` retries, so it knows every error."""
        client = self._client
        if conn is None:
            conn = self.leaders.now(request.partition)
        if conn is None:  # stale metadata, or not connected yet: may refresh and dial
            conn = await client.leader_connection(self._stream, request.partition)
        body = encode_produce_request_parts(request)
        wait = self._answer_timeout(request)
        answer = self.fan_in.submit(conn, body, wait)
        if answer is None:  # a server without ProduceMany, or not asyncio
            return await self._client.produce(request, retry_if=never)
        return decode_produce_answer(await answer.wait(wait), len(request.messages))

    def _fail(self, items: Iterable[Pending], error: JetError) -> None:
        for pending in items:
            self._resolve(pending, None, error)

    def _resolve_results(
        self,
        batch: Batch[Pending],
        items: tuple[Pending, ...],
        results: list[tuple[int, int, int]],
        idempotent: bool,
    ) -> JetError | None:
        """Settle ``items`` by their (error_code, offset, timestamp) results; return the error
        of the first that failed retriably (left unresolved, to go again), else None."""
        stream, partition = self._stream, batch.partition
        acked = 0
        retry: JetError | None = None
        for pending, (code, offset, timestamp) in zip(items, results):
            if code == ErrorCode.NONE or code == ErrorCode.DUPLICATE_SEQUENCE:
                if pending.handle._set_acked(stream, partition, offset, timestamp):
                    acked += 1
                continue
            error = error_from_code(
                code,
                f"send to {stream}/{partition} failed",
                {"stream": stream, "partition": partition},
            )
            if code in (IDEMPOTENT_RETRY_CODES if idempotent else RETRY_CODES):
                if retry is None:
                    retry = error
            else:
                self._resolve(pending, None, error)
        if acked:
            self._settled(acked)
        return retry

    def _resolve(self, pending: Pending, ack: Ack | None, error: JetError | None) -> None:
        if pending.handle.done():
            return
        pending.handle._set(ack, error)
        self._settled(1)

    def _settled(self, count: int) -> None:
        """``count`` more messages are acknowledged or failed."""
        self._unresolved -= count
        space = self._space
        if space is not None and self._unresolved < self._max_pending:
            self._space = None
            space.set()
        idle = self._idle
        if idle is not None and self._unresolved == 0:
            self._idle = None
            idle.set()
