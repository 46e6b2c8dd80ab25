"""How a producer's batches reach the leader: one Produce request each, retried until
acknowledged or ``delivery_timeout`` (see :mod:`jetsdk.producer.producer`), and the fast
path where the caller writes the request of an idle partition itself.

:class:`Delivering` is mixed into :class:`~jetsdk.producer.producer.Producer`, which holds
the fields declared here.

Task safety: one event loop.
"""

from __future__ import annotations

import collections
import contextlib
import time

import anyio
import anyio.abc
import attrs

from jetsdk.client import Client
from jetsdk.client_requests import decode_produce_answer
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    ProduceResult,
    encode_produce_request,
)
from jetsdk.connection import PendingResponse
from jetsdk.errors import ClientClosed, InvalidArgument, JetError, Timeout, error_from_code
from jetsdk.message import Ack
from jetsdk.producer.accumulator import Accumulator, Batch
from jetsdk.producer.handle import SendHandle
from jetsdk.producer.retry_rules import (
    IDEMPOTENT_RETRY_CODES,
    MAX_BACKOFF_STEP,
    RETRY_CODES,
    never,
    should_retry,
    should_retry_idempotent,
)
from jetsdk.retry import needs_metadata_refresh

__all__ = ["Delivering"]


@attrs.define(eq=False, slots=True)
class _Pending:
    message: ProduceMessage
    handle: SendHandle


@attrs.define(eq=False)
class _Written:
    """A batch whose first request the caller wrote (:meth:`Delivering._send_now`)."""

    batch: Batch[_Pending]
    base_seq: int
    request: ProduceRequest
    response: PendingResponse | None
    """None: not written after all (the sender task sends it)."""


@attrs.define(eq=False)
class _PartitionSender:
    wake: anyio.Event
    in_flight: anyio.Semaphore
    next_seq: int = 0
    waiting: bool = False
    written: collections.deque[_Written] = attrs.field(factory=collections.deque)
    """Batches written by callers, in order, for the sender task to see through."""


class Delivering:
    """The delivery half of :class:`~jetsdk.producer.producer.Producer`."""

    # Fields of Producer used here.
    client: Client
    stream: str
    producer_id: int | None
    delivery_timeout: float
    ack_timeout: float
    max_in_flight: int
    max_pending: int
    retries: int
    _acc: Accumulator[_Pending]
    _tg: anyio.abc.TaskGroup | None
    _space: anyio.Event | None
    _idle: anyio.Event | None
    _unresolved: int
    _flushing: int

    def _send_now(self, partition: int, sender: _PartitionSender) -> bool:
        """If ``partition``'s next batch is due, its sender is idle with no request in
        flight, and the leader's connection is open and free: cut the batch and write its
        request here, in the caller's task; the sender task only waits for the response
        (:meth:`_see_through`). True if it did.

        Only with nothing in flight: with ``linger=0`` batches form while a request is in
        flight, and a burst written one message per request while in-flight slots were
        free cut acked throughput by 15-30 % (``python -m bench sdk``, ack ALL and LEADER
        with ``max_in_flight=4``).

        The hand-off to the sender task is an event-loop turn before the write (about a
        tenth of a millisecond at light load on the 2-core dev VM, ``send -> write`` in
        ``python -m bench latency``); this takes it off the way of a message sent to an
        idle partition. Order is kept: the caller cuts and numbers the batch as the
        sender would, and the sender sees written batches through first, in order."""
        acc = self._acc
        if (
            not sender.waiting
            or sender.in_flight.value < self.max_in_flight  # not idle: batches form there
            or not acc.ready(partition, time.monotonic(), flushing=self._flushing > 0)
        ):
            return False
        conn = self.client.leader_connection_now(self.stream, partition)
        if conn is None or not conn.can_send_now:
            return False
        batch = acc.drain(partition)
        if batch is None:
            return False
        request = self._request(batch, batch.items, sender.next_seq)
        # None cannot happen after can_send_now (nothing yielded); the sender would send it.
        response = conn.send_nowait(Api.PRODUCE, encode_produce_request(request))
        sender.in_flight.acquire_nowait()
        sender.written.append(_Written(batch, sender.next_seq, request, response))
        sender.next_seq += len(batch.items)
        sender.wake.set()
        return True

    async def _see_through(self, sender: _PartitionSender) -> None:
        """Deliver the batches callers wrote (:meth:`_send_now`), in order."""
        while sender.written:
            written = sender.written.popleft()
            if self.max_in_flight == 1:
                await self._send_batch(written.batch, written.base_seq, sender, written)
            else:
                assert self._tg is not None
                self._tg.start_soon(
                    self._send_batch, written.batch, written.base_seq, sender, written
                )

    def _fail_written(self, sender: _PartitionSender) -> None:
        """The sender ends (the producer closes): fail what it never saw through."""
        closed = ClientClosed("the producer was closed while the message was in flight")
        while sender.written:
            for pending in sender.written.popleft().batch.items:
                self._resolve(pending, None, closed)

    def _request(
        self, batch: Batch[_Pending], items: tuple[_Pending, ...], seq: int
    ) -> ProduceRequest:
        """The Produce request for ``items`` of ``batch``, the first numbered ``seq``."""
        return ProduceRequest(
            stream=self.stream,
            partition=batch.partition,
            ack_policy=batch.ack_policy,
            timeout_ms=int(self.ack_timeout * 1000),
            messages=tuple(p.message for p in items),
            producer_id=self.producer_id,
            base_seq=seq if self.producer_id is not None else 0,
        )

    async def _send_batch(
        self,
        batch: Batch[_Pending],
        base_seq: int,
        sender: _PartitionSender,
        written: _Written | None = None,
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
        self, batch: Batch[_Pending], base_seq: int, written: _Written | None = None
    ) -> None:
        """Send ``batch`` (already written, as ``written``, by :meth:`_send_now`), then send
        again what failed retriably (same sequences) until every message is resolved or
        ``delivery_timeout`` passes."""
        idempotent = self.producer_id is not None
        retry_if = should_retry_idempotent if idempotent else should_retry
        deadline = time.monotonic() + self.delivery_timeout
        items = batch.items
        seq = base_seq
        tries = 0
        while True:
            request = self._request(batch, items, seq) if written is None else written.request
            error: JetError | None = None
            with anyio.move_on_after(deadline - time.monotonic()) as scope:
                try:
                    response = None if written is None else written.response
                    written = None
                    if response is not None:
                        wait = request.timeout_ms / 1000 + self.client.request_timeout
                        answer = await response.wait(wait)
                        results = decode_produce_answer(answer, len(request.messages))
                    else:
                        # No retries inside: this loop retries, so it knows every error.
                        results = await self.client.produce(request, retry_if=never)
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
                    error = self._resolve_results(batch, items, results, idempotent)
                    if error is None:
                        return
            if scope.cancelled_caught:
                self._fail(items, self._expired(batch, error))
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
            pause = self.client.retry.delay(min(tries, MAX_BACKOFF_STEP))
            if time.monotonic() + pause >= deadline:
                self._fail(items, self._expired(batch, error))
                return
            await anyio.sleep(pause)
            if needs_metadata_refresh(error):
                with contextlib.suppress(JetError):
                    await self.client.refresh_metadata()
            self.retries += 1

    def _expired(self, batch: Batch[_Pending], error: JetError | None) -> JetError:
        """The error for messages not delivered within ``delivery_timeout``."""
        where = f"{self.stream}/{batch.partition}"
        details = {"stream": self.stream, "partition": batch.partition}
        if error is None:
            return Timeout(
                f"send to {where} not acknowledged within delivery_timeout="
                f"{self.delivery_timeout} s; the message may or may not be stored",
                details=details,
            )
        return type(error)(
            f"send to {where} failed after retrying for delivery_timeout="
            f"{self.delivery_timeout} s: {error}",
            code=error.code,
            details={**details, **error.details},
        )

    def _fail(self, items: tuple[_Pending, ...], error: JetError) -> None:
        for pending in items:
            self._resolve(pending, None, error)

    def _resolve_results(
        self,
        batch: Batch[_Pending],
        items: tuple[_Pending, ...],
        results: list[ProduceResult],
        idempotent: bool,
    ) -> JetError | None:
        """Settle the handles of ``items``; return the error of the first message that
        failed retriably (left unresolved, to be sent again), else None."""
        stream, partition = self.stream, batch.partition
        acked = 0
        retry: JetError | None = None
        for pending, result in zip(items, results):
            code = result.error_code
            if code == ErrorCode.NONE or code == ErrorCode.DUPLICATE_SEQUENCE:
                if pending.handle._set_acked(stream, partition, result.offset, result.timestamp):
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

    def _resolve(self, pending: _Pending, ack: Ack | None, error: JetError | None) -> None:
        if pending.handle.done():
            return
        pending.handle._set(ack, error)
        self._settled(1)

    def _settled(self, count: int) -> None:
        """``count`` more messages are acknowledged or failed."""
        assert self._space is not None
        assert self._idle is not None
        self._unresolved -= count
        if self._unresolved < self.max_pending:
            self._space.set()
        if self._unresolved == 0:
            self._idle.set()
