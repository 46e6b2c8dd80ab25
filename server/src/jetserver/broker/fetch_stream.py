"""FetchStream (api 18): one consumer Fetch answered by several responses
(spec/protocol.md, "18 FetchStream").

A :class:`FetchStream` is the server's side of one such request: each :meth:`next_answer`
is a Fetch (:func:`jetserver.broker.fetch.fetch`: the same checks, the same park on the
partition's high watermark, the same record slices, the tail from memory included) from
the offset after the previous answer's records, with what is left of the stream's idle
wait. It says whether more answers follow: not after the ``max_responses``-th, an answer
without records (the idle wait ran out) or an ``OFFSET_OUT_OF_RANGE`` answer. Errors
(``NOT_LEADER`` once the leadership the stream began under ended, even if this server
still follows the partition in its ISR; ``STREAM_NOT_FOUND`` after a delete...) are
raised as from :func:`fetch` and end the stream.

The connection runs the answers one after the other in the request's task, which stays one
request in flight for the stream's life; a closed connection cancels it. A CancelFetchStream
(api 19) from its client calls :meth:`FetchStream.cancel`: the stream ends with an empty
last answer (at once if it is parked: its wait is woken and ends). A FetchStreamCredit
(api 20) calls :meth:`FetchStream.grant`: more answers before the last (its
:attr:`~FetchStream.limit` moves), unless the last answer was decided already.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.fetch_messages import encode_fetch_records_frame
from jetsdk.codec.fetch_stream import MAX_FETCH_STREAM_RESPONSES, FetchStreamRequest
from jetsdk.codec.frames import FLAG_MORE, FLAG_RESPONSE
from jetserver.broker.fetch import FetchAnswer, fetch_from
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.streams import StreamManager
from jetserver.config.server import LimitsConfig
from jetserver.errors import ApiError, invalid_argument
from jetserver.infra import hops
from jetserver.replication.core import ROLE_SINGLE

_MORE = FLAG_RESPONSE | FLAG_MORE
EARLY_EMPTY_ROUNDS = 8
"""Fetches one answer may take when they come back empty before the idle wait ran out
(a closed partition, a wake-up for nothing, compaction gaps past ``MAX_GAP_SKIPS``); then
the answer is the empty last one."""


@attrs.define(eq=False)
class FetchStream:
    """One FetchStream request being answered."""

    streams: StreamManager
    """Streams and partitions."""
    limits: LimitsConfig
    """``max_fetch_bytes``, ``max_fetch_wait_s``."""
    request: FetchStreamRequest
    """The request (its ``max_responses`` checked)."""
    offset: int
    """Where the next answer starts."""
    idle_s: float
    """The idle wait, clamped to ``limits.max_fetch_wait_s``."""
    deadline: float
    """When the stream ends without records (monotonic clock)."""
    limit: int = 0
    """Answers it may give in all: the request's ``max_responses``, raised by grants."""
    answered: int = 0
    """Answers given so far."""
    ended: bool = False
    """Its last answer was decided (a grant comes too late)."""
    led_epoch: int | None = None
    """The leader epoch this server led the partition in at the first answer (None: a
    read replica's stream): a stream ends with NOT_LEADER once that leadership ended."""
    cancelled: bool = False
    """Its client asked to end it (:meth:`cancel`): the next answer is the empty last one."""
    replica: PartitionReplica | None = None
    """On a server alone, the partition's replica as the first answer found it
    (``fetch``'s ``replica``; None again after an early empty answer: looked up anew)."""
    push: Callable[[bytes], bool] | None = None
    """Writes a whole answer frame on the stream's connection now, from outside its task
    (False: not now, the task writes it): set, :meth:`next_tail` parks with a tail
    pusher, whose answers go from the turn that moves the HW."""

    @classmethod
    def open(
        cls, streams: StreamManager, limits: LimitsConfig, request: FetchStreamRequest
    ) -> FetchStream:
        """The stream of ``request``.

        Raises:
            ApiError: INVALID_ARGUMENT (``max_responses`` 0 or above
                MAX_FETCH_STREAM_RESPONSES).
        """
        if not 1 <= request.max_responses <= MAX_FETCH_STREAM_RESPONSES:
            raise invalid_argument(
                "max_responses",
                f"max_responses must be within [1, {MAX_FETCH_STREAM_RESPONSES}], "
                f"got {request.max_responses}",
            )
        idle_s = min(request.max_wait_ms / 1000, limits.max_fetch_wait_s)
        now = time.monotonic()
        return cls(
            streams, limits, request, request.offset, idle_s, now + idle_s, request.max_responses
        )

    def grant(self, more: int) -> int:
        """FetchStreamCredit: ``more`` answers on top of those it may still give (at most
        MAX_FETCH_STREAM_RESPONSES in all). Returns how many it may give now: 0 if its
        last answer was decided already (or it was cancelled), the grant void."""
        if self.ended or self.cancelled:
            return 0
        left = min(self.limit - self.answered + more, MAX_FETCH_STREAM_RESPONSES)
        self.limit = self.answered + left
        return left

    async def next_answer(self) -> tuple[FetchAnswer, bool]:
        """The next answer, and whether more answers follow it.

        Raises:
            ApiError: as :func:`jetserver.broker.fetch.fetch` (the stream ends).
        """
        try:
            answer, more = await self._next_answer()
        except BaseException:
            self.ended = True
            raise
        self.ended = not more
        return answer, more

    async def _next_answer(self) -> tuple[FetchAnswer, bool]:
        req = self.request
        for _ in range(EARLY_EMPTY_ROUNDS):
            if self.cancelled:
                return self._last_empty_answer(), False
            if self.led_epoch is not None:  # raises NOT_LEADER: go to the new leader
                self.streams.replica(req.stream, req.partition).check_leader(self.led_epoch)
            wait_ms = max(0, int((self.deadline - time.monotonic()) * 1000))
            answer = await fetch_from(
                self.streams,
                self.limits,
                req.stream,
                req.partition,
                self.offset,
                req.max_bytes,
                wait_ms,
                self._is_cancelled,
                self.replica,
            )
            if self._is_cancelled():  # meanwhile (mypy narrowed the attribute above)
                if answer.records is not None:
                    answer.records.close()
                return self._last_empty_answer(), False
            if answer.records is not None or answer.error_code or wait_ms == 0:
                break
            self.replica = None  # the next fetch looks the partition up (a delete woke it?)
            # Empty before the idle wait ran out: the partition closed (a delete, a role
            # change: the next fetch says why) or a wake-up for nothing. Ask again.
        self.answered += 1
        if self.answered == 1:
            self.led_epoch = self._leader_epoch()
        records = answer.records
        if answer.error_code != ErrorCode.NONE or records is None:
            return answer, False
        self.offset = records.next_offset
        self.deadline = time.monotonic() + self.idle_s
        return answer, self.answered < self.limit

    async def next_tail(self, api: int, correlation_id: int) -> tuple[bytes, bool] | None:
        """The next answer in one step in the common case: a server alone (the replica
        in its single role, as the first answer found it), the reader at the log end
        waiting for the next append to be committed, whose bytes are then still in
        memory (``Log.read_tail``). Returns the answer's whole response frame (of ``api``
        and ``correlation_id``) and whether more answers follow: the frame of what
        :meth:`next_answer` (``fetch_from``, ``read_records``) gives then. None where
        anything else holds (cancelled, closed, an idle wait run out, records to read
        from the files...), having waited no longer than :meth:`next_answer` would have:
        then :meth:`next_answer`, which finds what the wait left."""
        replica = self.replica
        if replica is None or self.cancelled or replica.closed:
            return None
        core = replica.core
        if core.role != ROLE_SINGLE or self.led_epoch is not None:
            return None
        log = replica.log
        offset = self.offset
        if offset >= log.high_watermark:
            if offset != log.log_end_offset:
                return None
            wait_ms = int((self.deadline - time.monotonic()) * 1000)
            if wait_ms <= 0:
                return None
            if self.push is None:
                await replica.wait_for_hw_above(offset, wait_ms / 1000, self._is_cancelled)
            else:
                await self._park_pushing(replica, api, correlation_id, wait_ms / 1000)
            if self.cancelled or replica.closed or core.role != ROLE_SINGLE:
                return None
        tail = log.read_tail(self.offset, min(self.request.max_bytes, self.limits.max_fetch_bytes))
        if tail is None:
            return None  # (next_answer marks the hop)
        if hops.ENABLED:
            hops.mark("fetch.woken")
        records, self.offset = tail
        self.answered += 1
        self.deadline = time.monotonic() + self.idle_s
        more = self.answered < self.limit
        self.ended = not more
        flags = _MORE if more else FLAG_RESPONSE
        hw, start, leo = log.high_watermark, log.log_start_offset, log.log_end_offset
        return encode_fetch_records_frame(api, correlation_id, flags, hw, start, leo, records), more

    async def _park_pushing(
        self, replica: PartitionReplica, api: int, correlation_id: int, seconds: float
    ) -> None:
        """Park at the log end as ``wait_for_hw_above`` does, but while parked each commit
        that moves the HW writes the next answer itself (:meth:`_push`, called by the
        committer's :meth:`~jetserver.broker.hw_waits.HwWaits.wake` in the turn
        that moved it): no wake-up of this task, no loop turn, per answer. Returns when an
        answer cannot go so (then :meth:`next_tail` goes on as after any wait: its tail
        read, or None for the general path), the stream's idle wait ran out (from its
        last answer) or the task is cancelled."""
        committer = replica.committer
        loop = committer.running_loop()
        woken: asyncio.Future[None] = loop.create_future()
        max_bytes = min(self.request.max_bytes, self.limits.max_fetch_bytes)

        def push() -> bool:
            if woken.done():
                return False
            try:
                if self._push(replica, api, correlation_id, max_bytes):
                    return True
            except Exception:  # the task meets it again on its own path
                pass
            woken.set_result(None)
            return False

        timer: asyncio.TimerHandle | None = None

        def expire() -> None:
            nonlocal timer
            if woken.done():
                return
            left = self.deadline - time.monotonic()
            if left > 0:  # answers went meanwhile: the idle wait runs from the last
                timer = loop.call_later(left, expire)
            else:
                woken.set_result(None)

        timer = loop.call_later(seconds, expire)
        committer.waits.add_tail_pusher(push)
        committer.waits.fetch_waiters += 1
        try:
            await woken
        finally:
            timer.cancel()  # (the last one armed)
            committer.waits.fetch_waiters -= 1
            committer.waits.drop_tail_pusher(push)

    def _push(
        self, replica: PartitionReplica, api: int, correlation_id: int, max_bytes: int
    ) -> bool:
        """The HW moved (or a wake-up): write the next answer now if :meth:`next_tail`
        would answer it so with more to follow, and the connection takes it now. True:
        written, or nothing new to answer (still parked); False: the task takes over."""
        if self.cancelled or replica.closed or replica.life.stopping:
            return False
        core = replica.core
        if core.role != ROLE_SINGLE:
            return False
        log = replica.log
        offset = self.offset
        hw, start, leo = log.ends()  # (the read below, in this step, changes none of them)
        if hw <= offset:
            return True  # a wake-up for nothing new
        if self.answered + 1 >= self.limit:
            return False  # the last answer: the task's
        tail = log.read_tail(offset, max_bytes)
        if tail is None:
            return False
        records, next_offset = tail
        frame = encode_fetch_records_frame(api, correlation_id, _MORE, hw, start, leo, records)
        assert self.push is not None
        if not self.push(frame):
            return False
        if hops.ENABLED:
            hops.mark("fetch.woken")  # (answered in the HW move's turn)
        self.offset = next_offset
        self.answered += 1
        self.deadline = time.monotonic() + self.idle_s
        return True

    def cancel(self) -> None:
        """End the stream early (CancelFetchStream): its next answer is the empty last
        one; a parked wait for records is woken and ends."""
        if self.cancelled:
            return
        self.cancelled = True
        try:
            replica = self.streams.replica(self.request.stream, self.request.partition)
        except ApiError:
            return  # gone: its wait ended or ends by itself
        replica.wake_waiters()

    def _is_cancelled(self) -> bool:
        return self.cancelled

    def _last_empty_answer(self) -> FetchAnswer:
        """The answer that ends a cancelled stream: no records, the log's offsets now."""
        self.answered += 1
        log = self.streams.replica(self.request.stream, self.request.partition).log
        return FetchAnswer(
            ErrorCode.NONE, log.high_watermark, log.log_start_offset, log.log_end_offset
        )

    def _leader_epoch(self) -> int | None:
        """The epoch this server leads the partition in now (None: it does not)."""
        replica = self.streams.replica(self.request.stream, self.request.partition)
        if not self.streams.clustered:
            self.replica = replica
        try:
            return replica.check_leader(-1).leader_epoch
        except ApiError:
            return None
