"""ShareConsumer: queue semantics on a stream (spec/share-groups.md), the async driver.

Many members consume the same partitions; each message goes to one member at a time, is
acknowledged one by one, comes back after a nack or when its lease runs out, and goes to a
dead-letter stream after ``max_deliveries``. Coordination is the pure
:class:`~jetsdk.share.member.ShareMember` over the group's share log ``__share.<group>``; this
module only does the I/O, in four tasks:

- the **reader** long-polls the share log and feeds every record to the member;
- one **fetcher** per partition long-polls the stream ahead of the group's SPEO and caches the
  records (the high watermarks it learns decide how big a new range may be);
- the **appender** sends claims and settles in order, batched in one Produce request (ack ALL),
  and reports each stored record's server time (the lease clock);
- the **driver** asks the member for claims and hand-outs, writes dead letters, and flushes
  queued outcomes every ``ack_interval`` as settle records.

``async for msg in consumer`` hands messages out; ``await msg.ack()`` (or ``nack``,
``reject``, ``in_progress``) queues the outcome. ``await consumer.flush()`` waits until every
queued outcome is stored.
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import attrs

from jetsdk.client import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.codec.record import Record, iter_records
from jetsdk.consumer.share_message import (
    Outcome,
    ShareMessage,
    dead_letter_headers,
    is_dead_letter_of,
)
from jetsdk.consumer.share_streams import (
    LOG_FETCH_MAX_BYTES,
    check_dead_letter_options,
    ensure_dead_letter_stream,
    ensure_share_stream,
    read_share_group,
    share_stream_info,
)
from jetsdk.errors import JetError, OffsetOutOfRange
from jetsdk.retry import RetryPolicy
from jetsdk.share.member import Handout, ShareConfig, ShareMember
from jetsdk.share.records import Claim, ShareRecord, encode_share_record, share_stream_name

__all__ = ["ShareConsumer", "ensure_share_stream", "read_share_group"]

FETCH_MAX_BYTES = 1 << 20
MAX_APPEND_BATCH = 500
_BACKOFF = RetryPolicy(attempts=1_000_000, backoff=0.05, backoff_max=1.0)


@attrs.define(eq=False)
class _Queued:
    record: ShareRecord
    key: bytes


class ShareConsumer:
    """A member of share group ``group`` on ``stream`` (see the module docstring).

    Args:
        ack_deadline: seconds a member holds what it acquired before it goes to another
            member (extend with ``msg.in_progress()``).
        max_deliveries: deliveries before a message is dead-lettered.
        dead_letter_stream: where dead letters go (default ``<group>-dlq``). Created if
            missing, with one partition and the share log's replication factor unless
            ``dead_letter_options`` say otherwise; an existing stream is used with its own
            settings (refused if compacted: ``InvalidArgument`` with ``field`` ``compact``).
        dead_letter_options: :meth:`Client.create_stream` settings for creating the
            dead-letter stream (``replication_factor``, ``retention_max_age``, ...).
        batch: most offsets acquired at once (one range).
        max_held: ranges acquired ahead of the application.
        ack_interval: how long outcomes wait to be batched into settle records.
        partitions: the partitions to consume (default: all).
    """

    def __init__(
        self,
        client: Client,
        stream: str,
        group: str = "workers",
        *,
        ack_deadline: float = 30.0,
        max_deliveries: int = 5,
        dead_letter_stream: str | None = None,
        dead_letter_options: Mapping[str, Any] | None = None,
        batch: int = 200,
        max_held: int = 4,
        ack_interval: float = 0.02,
        partitions: list[int] | None = None,
    ) -> None:
        share_stream_name(group)
        if ack_deadline <= 0 or max_deliveries < 1 or batch < 1 or max_held < 1:
            raise ValueError("ack_deadline, max_deliveries, batch and max_held must be positive")
        self.client = client
        self.stream = stream
        self.group = group
        self.ack_deadline = ack_deadline
        self.max_deliveries = max_deliveries
        self.dead_letter_stream = dead_letter_stream or f"{group}-dlq"
        self.dead_letter_options = check_dead_letter_options(dead_letter_options or {})
        self.batch = batch
        self.max_held = max_held
        self.ack_interval = ack_interval
        self.member_id = "s-" + uuid.uuid4().hex[:16]
        self._partitions = partitions
        self._member: ShareMember | None = None
        self._log = ""
        self._cache: dict[int, dict[int, Record]] = {}
        self._hws: dict[int, int] = {}
        self._loading: dict[tuple[int, int], anyio.Event] = {}
        self._dead: list[Handout] = []
        self._outcomes: deque[Outcome] = deque()
        self._queue: list[_Queued] = []
        self._seq = 0
        self._caught_up = False
        self._wake = anyio.Event()
        self._ready_event = anyio.Event()
        self._queue_event = anyio.Event()
        self._stored = anyio.Event()
        self._sent = 0
        self._done = 0
        self._stored_end = 0  # end of the share-log records this member stored
        self._read_end = 0  # where the member's view has read the share log to
        self._read = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._error: BaseException | None = None
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def member(self) -> ShareMember:
        """The pure member (its ``view`` is the group state as this member knows it)."""
        if self._member is None:
            raise RuntimeError("ShareConsumer is not open")
        return self._member

    async def __aenter__(self) -> ShareConsumer:
        info = await self.client.stream_info(self.stream, refresh=True)
        parts = self._partitions or list(range(info.partition_count))
        log = await share_stream_info(self.client, self.group)
        self._log = log.name
        await ensure_dead_letter_stream(
            self.client, self.dead_letter_stream, self.dead_letter_options, log.replication_factor
        )
        self._member = ShareMember(
            ShareConfig(
                group=self.group,
                member=self.member_id,
                stream=self.stream,
                partitions=tuple(parts),
                ack_deadline=self.ack_deadline,
                max_deliveries=self.max_deliveries,
                batch=self.batch,
                max_held=self.max_held,
            )
        )
        self._cache = {p: {} for p in parts}
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._guard, self._read_loop)
        self._tg.start_soon(self._guard, self._append_loop)
        self._tg.start_soon(self._guard, self._drive_loop)
        for p in parts:
            self._tg.start_soon(self._guard, self._fetch_loop, p)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Flush the outcomes the application gave, give back at once what was acquired
        but not handed out (its delivery count unchanged) and release what was handed out
        and not settled, so other members get them now (spec §5, "Leaving"); stop."""
        if self._closed or self._tg is None:
            return
        self._closed = True  # no new claims
        member = self.member
        with anyio.move_on_after(max(2.0, self.ack_interval * 10)):
            await self._flush_now()  # claims in flight are stored and read back: all wins known
            await self._apply_outcomes()
            member.release_all()
            await self._flush_now()
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        self._tg = None

    async def _guard(self, fn: object, *args: object) -> None:
        try:
            await fn(*args)  # type: ignore[operator]
        except JetError as exc:
            self._error = exc
            self._ready_event.set()
            raise

    # -- the application side -------------------------------------------------------------

    def __aiter__(self) -> ShareConsumer:
        return self

    async def __anext__(self) -> ShareMessage:
        msg = await self.next(timeout=None)
        if msg is None:
            raise StopAsyncIteration
        return msg

    async def next(self, timeout: float | None = None) -> ShareMessage | None:
        """The next message, or None after ``timeout`` seconds (None: wait) or once closed."""
        batch = await self._take(1, timeout)
        return batch[0] if batch else None

    async def fetch(
        self, max_records: int = 500, timeout: float | None = None
    ) -> list[ShareMessage]:
        """Up to ``max_records`` messages: those ready now, else waits up to ``timeout``
        seconds (None: until there is one) for the first; empty after the timeout or once
        closed. Each message counts as a delivery: hand it on, or ``nack()`` it."""
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        return await self._take(max_records, timeout)

    async def _take(self, limit: int, timeout: float | None) -> list[ShareMessage]:
        deadline = None if timeout is None else time.monotonic() + timeout
        member = self.member
        out: list[ShareMessage] = []
        member.meter.waiting(time.monotonic())  # not busy while it waits here (pacing)
        try:
            while True:
                if self._error is not None:
                    raise self._error
                if self._closed:
                    return out
                for h in member.take(time.monotonic(), limit - len(out)):
                    record = await self._record(h.partition, h.offset)
                    if record is None:  # gone from the stream (retention): give it back
                        member.nack(h.lease, h.offset, 0)
                        continue
                    out.append(
                        ShareMessage(
                            self.stream, h.partition, record, h.delivery_count, h, self._outcomes
                        )
                    )
                if out:
                    return out
                self._wake.set()
                wait = math.inf if deadline is None else deadline - time.monotonic()
                if wait <= 0:
                    return out
                self._ready_event = anyio.Event()
                with anyio.move_on_after(wait):
                    await self._ready_event.wait()
        finally:
            member.meter.done_waiting(time.monotonic(), len(out))

    async def flush(self, timeout: float = 30.0) -> None:
        """Wait until every outcome queued so far is stored in the share log and this
        member's :attr:`member` view has read it back.

        Raises:
            TimeoutError: not within ``timeout`` seconds.
        """
        with anyio.fail_after(timeout):
            await self._flush_now()

    async def _flush_now(self) -> None:
        await self._apply_outcomes()
        self._queue_settles()
        target = self._sent
        while self._done < target:
            self._stored = anyio.Event()
            await self._stored.wait()
        while self._read_end < self._stored_end:
            self._read = anyio.Event()
            await self._read.wait()

    # -- outcomes -----------------------------------------------------------------------

    async def _apply_outcomes(self) -> None:
        """Move the outcomes the application queued (from any thread) into the member."""
        member = self.member
        outcomes = self._outcomes
        reject_hw: int | None = None
        while outcomes:
            kind, h, delay = outcomes.popleft()
            if kind == "ack":
                member.ack(h.lease, h.offset)
            elif kind == "nack":
                later = member.server_now(time.monotonic() + delay) if delay > 0 else 0
                member.nack(h.lease, h.offset, later)
            elif kind == "reject":
                if reject_hw is None:  # before the settle that makes it dead_pending (§6)
                    try:
                        reject_hw = await self._dlq_hw()
                    except JetError:
                        reject_hw = 0  # look from the start: slower, still exactly once
                member.reject(h.lease, h.offset, reject_hw)
            else:
                member.in_progress(h.lease)

    # -- I/O tasks ------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        member = self.member
        offset = 0
        failures = 0
        while True:
            try:
                header, raw = await self.client.fetch(
                    self._log, 0, offset, max_bytes=LOG_FETCH_MAX_BYTES, max_wait=0.5
                )
            except OffsetOutOfRange as exc:
                offset = exc.log_start or 0  # no retention is set; be safe anyway
                continue
            except JetError as exc:
                if not exc.retriable:
                    raise
                failures += 1
                await anyio.sleep(_BACKOFF.delay(failures))
                continue
            failures = 0
            for record in iter_records(raw):
                for won in member.on_record(record.offset, record.timestamp, record.value):
                    if self._tg is not None and won.offsets:
                        low, high = won.offsets[0][0], won.offsets[-1][0] + 1
                        self._tg.start_soon(self._load_range, won.partition, low, high)
                        self._ready_event.set()
                offset = record.offset + 1
            self._caught_up = offset >= header.hw
            self._read_end = offset
            self._read.set()
            self._wake.set()

    async def _fetch_loop(self, partition: int) -> None:
        """Watch the partition's high watermark (records are fetched per lease, so members
        do not all read and decode everything)."""
        member = self.member
        pos = 0
        failures = 0
        while True:
            ps = member.view.partition(self.stream, partition)
            pos = max(pos, ps.speo, self._hws.get(partition, 0))
            try:
                header, _raw = await self.client.fetch(
                    self.stream, partition, pos, max_bytes=1, max_wait=0.5
                )
            except OffsetOutOfRange as exc:
                pos = exc.log_start if exc.log_start is not None and pos < exc.log_start else 0
                self._hws.pop(partition, None)
                await anyio.sleep(0.05)
                continue
            except JetError as exc:
                if not exc.retriable:
                    raise
                failures += 1
                await anyio.sleep(_BACKOFF.delay(failures))
                continue
            failures = 0
            if header.hw != self._hws.get(partition):
                self._hws[partition] = header.hw
                self._wake.set()

    async def _load_range(self, partition: int, start: int, end: int) -> None:
        """Fetch the records of a lease just won into the cache (one request, usually)."""
        key = (partition, start)
        done = self._loading[key] = anyio.Event()
        cache = self._cache[partition]
        offset = start
        try:
            for _ in range(end - start):
                if offset >= end:
                    break
                size = min(FETCH_MAX_BYTES * 4, max(64 * 1024, (end - offset) * 512))
                _, raw = await self.client.fetch(
                    self.stream, partition, offset, max_bytes=size, max_wait=0.0
                )
                last = offset
                for r in iter_records(raw):
                    if r.offset >= end:
                        break
                    cache[r.offset] = r
                    last = r.offset + 1
                if last == offset:
                    break
                offset = last
        except JetError:
            pass  # _record fetches what is missing when it is handed out
        finally:
            del self._loading[key]
            done.set()

    async def _record(self, partition: int, offset: int) -> Record | None:
        cache = self._cache[partition]
        record = cache.pop(offset, None)
        if record is not None:
            return record
        for (p, start), loading in list(self._loading.items()):
            if p == partition and start <= offset:
                await loading.wait()
        record = cache.pop(offset, None)
        if record is not None:
            return record
        try:
            _, raw = await self.client.fetch(
                self.stream, partition, offset, max_bytes=64 * 1024, max_wait=0.0
            )
        except OffsetOutOfRange:
            return None
        for r in iter_records(raw):
            if r.offset == offset:
                return r
        return None

    async def _append_loop(self) -> None:
        member = self.member
        while True:
            while not self._queue:
                self._queue_event = anyio.Event()
                await self._queue_event.wait()
            batch = self._queue[:MAX_APPEND_BATCH]
            del self._queue[: len(batch)]
            request = ProduceRequest(
                stream=self._log,
                partition=0,
                ack_policy=AckPolicy.ALL,
                timeout_ms=10_000,
                messages=tuple(ProduceMessage(encode_share_record(q.record), q.key) for q in batch),
            )
            sent_at = time.monotonic()
            try:
                results = await self.client.produce(request)
            except JetError:
                results = []  # lost appends are part of the protocol (spec §8)
            acked_at = time.monotonic()
            for i, q in enumerate(batch):
                ok = i < len(results) and results[i].error_code == ErrorCode.NONE
                if ok:
                    member.on_appended(sent_at, results[i].timestamp, acked_at)
                    self._stored_end = max(self._stored_end, results[i].offset + 1)
                elif isinstance(q.record, Claim):
                    member.claim_failed(q.record.stream, q.record.partition, q.record.start)
            self._done += len(batch)
            self._stored.set()
            self._wake.set()

    def _enqueue(self, records: Sequence[ShareRecord]) -> None:
        for record in records:
            self._seq += 1
            self._queue.append(_Queued(record, f"{self.member_id}/{self._seq}".encode()))
        self._sent += len(records)
        self._queue_event.set()

    def _queue_settles(self) -> None:
        settles = self.member.settles()
        if settles:
            self._enqueue(settles)

    async def _dlq_hw(self) -> int:
        info = await self.client.list_offsets(self.dead_letter_stream, 0, "latest")
        return info.hw

    async def _drive_loop(self) -> None:
        member = self.member
        next_flush = 0.0
        while True:
            now = time.monotonic()
            member.refresh(now)  # gives back what can no longer be handed out in time
            self._dead.extend(member.take_dead(now))
            if self._dead:
                with contextlib.suppress(JetError):  # what is left is tried again next round
                    await self._write_dead_letters()
            # Claims are sized by the application's measured rate (ShareMember.capacity): a
            # stuck or slow application does not acquire what it could not be handed in time.
            if self._caught_up and not self._closed:
                dlq_hw = None
                wall = time.time_ns()
                if any(member.needs_dlq_hw(self.stream, p, now, wall) for p in self._cache):
                    dlq_hw = await self._dlq_hw()
                claims = member.claims(now, dict(self._hws), dlq_hw=dlq_hw, wall_ns=wall)
                if claims:
                    self._enqueue(claims)
            if self._outcomes:
                await self._apply_outcomes()
            if now >= next_flush and member.pending_outcomes():
                self._queue_settles()
                next_flush = now + self.ack_interval
            self._wake = anyio.Event()
            with anyio.move_on_after(self.ack_interval):
                await self._wake.wait()

    async def _write_dead_letters(self) -> None:
        member = self.member
        while self._dead:
            h = self._dead[0]
            record = await self._record(h.partition, h.offset)
            if record is not None and not await self._dead_letter_exists(h):
                (result,) = await self.client.produce(
                    ProduceRequest(
                        stream=self.dead_letter_stream,
                        partition=0,
                        ack_policy=AckPolicy.ALL,
                        timeout_ms=10_000,
                        messages=(
                            ProduceMessage(
                                record.value,
                                record.key,
                                dead_letter_headers(self.group, h, record.headers),
                            ),
                        ),
                    )
                )
                if result.error_code != ErrorCode.NONE:
                    raise JetError(f"dead letter not stored (error code {result.error_code})")
            member.dead(h.lease, h.offset)
            self._dead.pop(0)

    async def _dead_letter_exists(self, h: Handout) -> bool:
        offset = h.dlq_from
        for _ in range(100_000):
            try:
                header, raw = await self.client.fetch(
                    self.dead_letter_stream, 0, offset, max_bytes=FETCH_MAX_BYTES, max_wait=0.0
                )
            except OffsetOutOfRange as exc:
                if exc.log_start is not None and offset < exc.log_start:
                    offset = exc.log_start
                    continue
                return False
            records = list(iter_records(raw))
            for r in records:
                if is_dead_letter_of(r.headers, self.group, h):
                    return True
            if not records or records[-1].offset + 1 >= header.hw:
                return False
            offset = records[-1].offset + 1
        return False
