"""A partition's batch written from outside its sender task: by the caller that queued a
message for an idle partition, or by the answer's callback of the partition's previous
batch (a wide producer's: its batches go from their answers' callbacks, not the partition
tasks, issue 34), through the :class:`~jetsdk.producer.fan_in.FanIn` where many
partitions go to one server.

A batch written here is numbered and holds its partition's in-flight slot as the sender
task's would; its answer's callback settles it when every message was stored, and leaves
everything else (an error, the timeout, trio) to the partition's sender task
(:class:`~jetsdk.producer.sender.Sender`), which sees written batches through first, in
order.

Task safety: one event loop.
"""

from __future__ import annotations

import functools
import operator
import time

from jetsdk.client_metadata import PartitionLeaders
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import ProduceRequest, encode_produce_request_parts
from jetsdk.connection import PendingResponse, RequestBody
from jetsdk.producer.accumulator import Accumulator, Batch
from jetsdk.producer.fan_in import FanIn, SectionAnswer
from jetsdk.producer.in_flight import PartitionSender, Pending, Written
from jetsdk.producer.outcomes import Outcomes
from jetsdk.producer.retry_rules import stored_results

__all__ = ["BatchWrites"]

_MESSAGE = operator.attrgetter("message")


class BatchWrites:
    """Writes partitions' batches outside their sender tasks (module docstring); composed
    by the :class:`~jetsdk.producer.sender.Sender`, which shares its partitions' states."""

    def __init__(
        self,
        stream: str,
        acc: Accumulator[Pending],
        outcomes: Outcomes,
        leaders: PartitionLeaders,
        states: dict[int, PartitionSender],
        *,
        max_in_flight: int,
        ack_timeout_ms: int,
        request_timeout: float,
    ) -> None:
        self._stream = stream
        self._acc = acc
        self._outcomes = outcomes
        self._leaders = leaders
        self._states = states
        self._max_in_flight = max_in_flight
        self._ack_timeout_ms = ack_timeout_ms
        self._request_timeout = request_timeout
        self.wait_s = ack_timeout_ms / 1000 + request_timeout
        """Seconds a request's answer may take: the server's wait and the client's."""
        self.fan_in = FanIn()
        """Groups the requests of many partitions to one server into one request."""
        self.producer_id: int | None = None
        """The idempotent producer id (None: not idempotent); set as the sender starts."""
        self.wide = False
        """Several partitions, ``max_in_flight=1``: a batch's answer's callback sends what
        was queued behind it (:meth:`answer_sends_next`)."""
        self.flushing = 0
        """Flushes under way (every queued batch is ready, linger or not)."""

    def started(self, partitions: int) -> None:
        """A partition's sender started: ``partitions`` have one now."""
        self.wide = self._max_in_flight == 1 and partitions > 1

    def answer_sends_next(self, sender: PartitionSender) -> bool:
        """True if the answer's callback of the one batch in flight sends what is queued."""
        written = sender.written
        return self.wide and len(written) == 1 and not written[0].claimed

    def answer_timeout(self, request: ProduceRequest) -> float:
        """Seconds the answer to ``request`` may take: the server's wait and the client's."""
        return request.timeout_ms / 1000 + self._request_timeout

    def request(
        self, batch: Batch[Pending], items: tuple[Pending, ...], seq: int, start: bool = False
    ) -> ProduceRequest:
        """The Produce request for ``items`` of ``batch``, the first numbered ``seq``
        (``start``: every earlier sequence is settled, its sequence-start flag)."""
        pid = self.producer_id
        return ProduceRequest(
            stream=self._stream,
            partition=batch.partition,
            ack_policy=batch.ack_policy,
            timeout_ms=self._ack_timeout_ms,
            # (map of an attrgetter: no Python line per message, as a generator's)
            messages=(items[0].message,) if len(items) == 1 else tuple(map(_MESSAGE, items)),
            producer_id=pid,
            base_seq=seq if pid is not None else 0,
            sequence_start=start,
        )

    def send_now(self, partition: int, sender: PartitionSender) -> bool:
        """If ``partition``'s next batch is due, its sender is idle with no request in
        flight, and the leader's connection is open and free: cut the batch and write its
        request here, in the caller's task; the sender task only waits for the response
        (``Sender._see_through``). True if it did.

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
            or not self._acc.ready(partition, time.monotonic(), flushing=self.flushing > 0)
        ):
            return False
        return self.write_or_defer(partition, sender)

    def write_or_defer(self, partition: int, sender: PartitionSender) -> bool:
        """Write ``partition``'s next batch (none in flight) now, or have it cut at the end of
        this turn with other partitions' (:class:`FanIn`), seen through by its answer's
        callback (also for a wide producer's task: a wake-up less per batch); True if so."""
        conn = self._leaders.now(partition)
        if conn is None:
            return False
        # One partition's batch has no other to group with: past FanIn, whose mark of
        # the loop turn (a loop callback and turn per request) would serve none.
        fan_in = len(self._states) > 1 and self.fan_in.takes(conn)
        if fan_in and not self.fan_in.writes_now(conn):
            # Cut at the end of this loop turn, with what else is queued for the partition
            # meanwhile, and sent with the other partitions' batches to that server.
            sender.deferred = True
            self.fan_in.defer(
                conn, lambda answer: self._cut_deferred(partition, sender, answer), self.wait_s
            )
            return True
        if not fan_in and not conn.can_send_now:
            return False
        cut = self._cut(partition, sender)
        if cut is None:
            return False
        batch, request, body = cut
        response: PendingResponse | SectionAnswer | None
        if fan_in:  # written at once (the first of this loop turn: writes_now held)
            loop = self.fan_in.loop()
            assert loop is not None  # (takes held)
            response = self.fan_in.write_now(conn, body, loop) or self.fan_in.submit(
                conn, body, self.wait_s
            )
        else:
            # None cannot happen after can_send_now (nothing yielded); the sender sends it.
            response = conn.send_nowait(Api.PRODUCE, body)
        self._written(sender, batch, request, response)
        return True

    def _cut_deferred(
        self, partition: int, sender: PartitionSender, answer: SectionAnswer
    ) -> RequestBody | None:
        """End of the loop turn: cut the batch left for it (as :meth:`write_or_defer`
        would), answered by ``answer``; its body (None: the sender task took it)."""
        sender.deferred = False
        if not sender.waiting or sender.in_flight.value < self._max_in_flight:
            sender.wake.set()
            return None
        cut = self._cut(partition, sender)
        if cut is None:
            return None
        batch, request, body = cut
        self._written(sender, batch, request, answer)
        return body

    def _cut(
        self, partition: int, sender: PartitionSender
    ) -> tuple[Batch[Pending], ProduceRequest, RequestBody] | None:
        """``partition``'s next batch cut off the accumulator, its request and the request's
        body, numbered from ``sender``'s next sequence (None: nothing queued)."""
        batch = self._acc.drain(partition)
        if batch is None:
            return None
        request = self.request(batch, batch.items, sender.next_seq, not sender.open)
        return batch, request, encode_produce_request_parts(request)

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
        sender.open[written.base_seq] = None
        sender.written.append(written)
        sender.next_seq += len(batch.items)
        if response is None or not response.when_done(
            functools.partial(self._on_answer, written), self.answer_timeout(request)
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
        sender.open.pop(written.base_seq, None)
        sender.in_flight.release()
        batch = written.batch
        try:
            self._outcomes.resolve_results(
                batch.partition, batch.items, results, self.producer_id is not None
            )
        except BaseException as exc:  # a handle's callback: the sender task raises it
            sender.failure = exc
            sender.wake.set()
            return
        if self._acc.queued(batch.partition) and not self.send_now(batch.partition, sender):
            sender.wake.set()
