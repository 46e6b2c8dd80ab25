"""ShareConsumer: queue semantics on streams (spec/share-groups.md), the async driver.

Many members consume the same partitions; each message goes to one member at a time, is
acknowledged one by one, comes back after a nack or when its lease runs out, and goes to a
dead-letter stream after ``max_deliveries``. Coordination is the pure
:class:`~jetsdk.share.member.ShareMember` over the group's share log ``__share.<group>``; this
module only does the I/O, in these tasks:

- the **reader** long-polls the share log and feeds every record to the member;
- one **watcher** per consumed partition long-polls its high watermark, and the records of
  each lease won are loaded at once (:mod:`jetsdk.consumer.share_fetch`);
- the **appender** sends claims, settles and the group's settings in order, batched in one
  Produce request with ack ALL (:mod:`jetsdk.consumer.share_append`);
- the **driver** gives back what can no longer be handed out in time, writes dead letters,
  sends claims sized by the application's measured rate (spec §5, "Pacing"), and flushes
  queued outcomes every ``ack_interval`` as settle records.

``async for msg in consumer`` (or ``await consumer.fetch(n)``) hands messages out;
``msg.ack()`` (``nack``, ``reject``, ``in_progress``, or ``ack(AcknowledgeType...)``) queues
the outcome; ``await consumer.flush()`` waits until every queued outcome is stored.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Literal

import anyio
import anyio.abc
import attrs

from jetsdk.client import Client
from jetsdk.codec.record import iter_records
from jetsdk.consumer.positions import StartPosition, parse_start
from jetsdk.consumer.share_append import ShareAppender
from jetsdk.consumer.share_fetch import Key, ShareRecords, poll_fetch
from jetsdk.consumer.share_message import AcknowledgeType, Outcome, ShareMessage
from jetsdk.consumer.share_streams import (
    LOG_FETCH_MAX_BYTES,
    check_dead_letter_options,
    dead_letter_exists,
    ensure_dead_letter_stream,
    ensure_share_stream,
    read_share_group,
    resolve_starts,
    share_stream_info,
    write_dead_letter,
)
from jetsdk.consumer.values import stream_names
from jetsdk.errors import InvalidArgument, JetError, OffsetOutOfRange
from jetsdk.message import Done
from jetsdk.share.member import Handout, LostOutcome, ShareConfig, ShareMember
from jetsdk.share.records import Settings, share_stream_name
from jetsdk.share.state import ShareState

__all__ = [
    "DEFAULT_ACK_DEADLINE",
    "DEFAULT_MAX_DELIVERIES",
    "LostOutcome",
    "ShareConsumer",
    "ShareSettings",
    "ensure_share_stream",
    "read_share_group",
]

DEFAULT_ACK_DEADLINE = 30.0
"""A new group's lease length, seconds, when its first member does not choose one."""
DEFAULT_MAX_DELIVERIES = 5
"""A new group's delivery limit, when its first member does not choose one."""
CLOSE_TIMEOUT = 10.0
"""Most seconds close() spends flushing, writing dead letters and giving back."""
SETTINGS_RETRY = 5.0
"""Seconds after which a settings record not seen in the log is sent again."""
SETTINGS_TIMEOUT = 30.0
"""Most seconds entering waits to read the group's settings from its share log."""
READ_PAUSE = 0.005
"""Seconds the share-log reader waits, once caught up, after a read that found records (many
members appending: each reader asks at most 200 times a second, fewer Fetch requests)."""
_logger = logging.getLogger("jetsdk.share")

LostCallback = Callable[[list[LostOutcome]], object]
AckMode = Literal["explicit", "implicit"]


@attrs.frozen
class ShareSettings:
    """A share group's settings (stored in its share log, spec §3.3)."""

    ack_deadline: float
    """Lease length, seconds."""
    max_deliveries: int
    """Deliveries before a message is dead-lettered."""


class ShareConsumer:
    """A member of share group ``group`` on ``stream`` (or ``streams``); see the module
    docstring.

    Args:
        stream: the stream to consume (or use ``streams``).
        group: the share group (required: unrelated applications must not share one).
        streams: several streams to consume from one group.
        partitions: with one stream, the partitions to consume (default: all).
        ack_deadline: seconds a member holds what it acquired before it goes to another
            member (extend with ``msg.in_progress()``). A group setting: the first member
            stores its value (default 30 s) in the share log; a member that gives another
            value is told (a warning) and uses the group's (see :attr:`settings`).
        max_deliveries: deliveries before a message is dead-lettered; a group setting like
            ``ack_deadline`` (default 5).
        dead_letter_stream: where dead letters go (default ``<group>-dlq``). Created if
            missing, with one partition and the share log's replication factor unless
            ``dead_letter_options`` say otherwise; an existing stream is used with its own
            settings (refused if compacted: ``InvalidArgument`` with ``field`` ``compact``).
        dead_letter_options: :meth:`Client.create_stream` settings for creating the
            dead-letter stream (``replication_factor``, ``retention_max_age``, ...).
        batch: most offsets acquired at once (one range).
        max_held: most ranges acquired ahead of the application (the application's measured
            rate bounds what it acquires too: only what it can be handed before the lease
            runs out, and what it takes in a few claim cycles).
        ack_interval: how long outcomes wait to be batched into settle records.
        on_lost: called (on the consumer's event loop, from its reader task) with the
            outcomes the share log ignored because the lease had moved to another member
            first (a late ``ack`` after the deadline: that message was or will be handed
            to another member).
        start: where a **new** group starts on each partition (stored in its share log by
            its first member; ignored for a group that has settings): ``"earliest"``
            (default: offset 0), ``"latest"``, ``"new-only"``, an offset, a ``datetime`` or
            a :class:`~jetsdk.consumer.positions.StartAt`, as for :class:`Consumer`.
        acks: ``"explicit"`` (default: settle each message) or ``"implicit"`` (as Kafka's
            implicit acknowledgement: the messages of one ``next()``/``fetch()`` not settled
            otherwise are acked when the application asks for more, and on close).
    """

    def __init__(
        self,
        client: Client,
        stream: str | None = None,
        *,
        group: str,
        streams: Sequence[str] | None = None,
        partitions: Iterable[int] | None = None,
        ack_deadline: float | None = None,
        max_deliveries: int | None = None,
        dead_letter_stream: str | None = None,
        dead_letter_options: Mapping[str, Any] | None = None,
        batch: int = 500,
        max_held: int = 16,
        ack_interval: float = 0.02,
        on_lost: LostCallback | None = None,
        acks: AckMode = "explicit",
        start: StartPosition | None = None,
    ) -> None:
        share_stream_name(group)
        names = stream_names(stream, streams, partitions)
        if (ack_deadline is not None and ack_deadline <= 0) or (
            max_deliveries is not None and max_deliveries < 1
        ):
            raise InvalidArgument("ack_deadline and max_deliveries must be positive")
        if batch < 1 or max_held < 1:
            raise InvalidArgument("batch and max_held must be positive")
        if acks not in ("explicit", "implicit"):
            raise InvalidArgument(f"acks must be 'explicit' or 'implicit', not {acks!r}")
        self.client = client
        self.streams = tuple(names)
        self.stream = names[0]
        self.group = group
        self._given = (ack_deadline, max_deliveries)
        self.ack_deadline = DEFAULT_ACK_DEADLINE if ack_deadline is None else ack_deadline
        self.max_deliveries = DEFAULT_MAX_DELIVERIES if max_deliveries is None else max_deliveries
        self.dead_letter_stream = dead_letter_stream or f"{group}-dlq"
        self.dead_letter_options = check_dead_letter_options(dead_letter_options or {})
        self.batch = batch
        self.max_held = max_held
        self.ack_interval = ack_interval
        self.on_lost = on_lost
        self.acks = acks
        self.start = None if start is None else parse_start(start)
        self._last: list[ShareMessage] = []  # the last hand-out (implicit acks)
        self.member_id = "s-" + uuid.uuid4().hex[:16]
        self._partitions = None if partitions is None else list(partitions)
        self._member: ShareMember | None = None
        self._records: ShareRecords | None = None
        self._appender: ShareAppender | None = None
        self._dead: list[Handout] = []
        self._dead_lock = anyio.Lock()
        self._outcomes: deque[Outcome] = deque()
        self._caught_up = False
        self._settings_at = -math.inf  # when this member last checked the group's settings
        self._settings_known = anyio.Event()
        self._wake = anyio.Event()
        self._ready_event = anyio.Event()
        self._read_end = 0  # where the member's view has read the share log to
        self._read = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._error: BaseException | None = None
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def _m(self) -> ShareMember:
        if self._member is None:
            raise RuntimeError("ShareConsumer is not open")
        return self._member

    @property
    def state(self) -> ShareState:
        """The group's state as this member knows it (its view of the share log; read it,
        do not change it)."""
        return self._m.view

    @property
    def settings(self) -> ShareSettings:
        """The group's settings (from its share log once read; this member's before)."""
        m = self._m
        return ShareSettings(m.ack_deadline, m.max_deliveries)

    @property
    def given_back(self) -> int:
        """Messages this member acquired and gave back without handing them out (paced out,
        at a lease's stop point, or on close): their delivery was not counted."""
        return self._m.returned_total

    async def __aenter__(self) -> ShareConsumer:
        keys: list[Key] = []
        for name in self.streams:
            info = await self.client.stream_info(name, refresh=True)
            parts = self._partitions or list(range(info.partition_count))
            keys.extend((name, p) for p in parts)
        log = await share_stream_info(self.client, self.group)
        await ensure_dead_letter_stream(
            self.client, self.dead_letter_stream, self.dead_letter_options, log.replication_factor
        )
        member = self._member = ShareMember(
            ShareConfig(
                group=self.group,
                member=self.member_id,
                partitions=tuple(keys),
                ack_deadline=self.ack_deadline,
                max_deliveries=self.max_deliveries,
                batch=self.batch,
                max_held=self.max_held,
            )
        )
        records = self._records = ShareRecords(self.client, tuple(keys))
        self._appender = ShareAppender(self.client, log.name, member, self._changed)
        tg = self._tg = anyio.create_task_group()
        await tg.__aenter__()
        tg.start_soon(self._guard, partial(self._read_loop, log.name))
        tg.start_soon(self._guard, self._appender.run)
        tg.start_soon(self._guard, self._drive_loop)
        for key in keys:
            speo = partial(self._speo, key)
            tg.start_soon(self._guard, partial(records.watch, key, speo, self._changed))
        try:  # the group's settings, read (or stored by this first member) before use
            with anyio.fail_after(SETTINGS_TIMEOUT):
                await self._settings_known.wait()
        except BaseException:
            await self._abandon()
            raise
        if self._error is not None:  # e.g. PermissionDenied: the task that met it ended
            await self._abandon()
            raise self._error
        return self

    async def _abandon(self) -> None:
        """Stop a consumer that failed to start; the caller raises the error, not a group."""
        tg, self._tg = self._tg, None
        assert tg is not None
        tg.cancel_scope.cancel()
        try:
            await tg.__aexit__(None, None, None)
        except* JetError:
            pass

    def _speo(self, key: Key) -> int:
        return self._m.view.partition(*key).speo

    def _changed(self) -> None:
        self._wake.set()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Flush the outcomes the application gave (and write the dead letters of its
        rejects), give back at once what was acquired but not handed out (its delivery
        count unchanged) and release what was handed out and not settled, so other members
        get them now (spec §5, "Leaving"); stop. Bounded by :data:`CLOSE_TIMEOUT`."""
        if self._closed or self._tg is None:
            return
        self._closed = True  # no new claims
        member = self._m
        if self.acks == "implicit":
            self._ack_last()
        with anyio.move_on_after(CLOSE_TIMEOUT):
            await self._flush_now()  # claims in flight are stored and read back: all wins known
            await self._flush_now()  # ... and the rejects are dead_pending in the view
            now = time.monotonic()
            member.refresh(now)
            self._dead.extend(member.take_dead(now))
            with contextlib.suppress(JetError):  # else the next holder writes them
                await self._write_dead_letters()
            member.release_all()
            await self._flush_now()
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        self._tg = None

    async def _guard(self, fn: Callable[[], Any]) -> None:
        try:
            await fn()
        except JetError as exc:
            self._error = exc
            self._ready_event.set()
            self._settings_known.set()
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
        seconds (None: until there is one; 0: do not wait) for the first; empty after the
        timeout or once closed. Each message counts as a delivery: settle each one."""
        if max_records < 1:
            raise ValueError("max_records must be >= 1")
        return await self._take(max_records, timeout)

    def ack(self, message: ShareMessage, kind: AcknowledgeType | str = "accept") -> Done:
        """Acknowledge ``message`` with ``kind`` (the same as ``message.ack(kind)``)."""
        return message.ack(kind)

    def _ack_last(self) -> None:
        """Implicit acks: what the application got last time and did not settle."""
        for msg in self._last:
            msg.ack()  # does nothing if it was settled already
        self._last = []

    async def _take(self, limit: int, timeout: float | None) -> list[ShareMessage]:
        if self.acks == "implicit":
            self._ack_last()
        deadline = None if timeout is None else time.monotonic() + timeout
        member = self._m
        records = self._records
        assert records is not None
        out: list[ShareMessage] = []
        member.meter.waiting(time.monotonic())  # not busy while it waits here (pacing)
        try:
            while True:
                if self._error is not None:
                    raise self._error
                if self._closed:
                    return out
                for h in member.take(time.monotonic(), limit - len(out)):
                    key = (h.stream, h.partition)
                    record = records.cached(key, h.offset)
                    if record is None:
                        record = await records.record(key, h.offset)
                    if record is None:  # gone from the stream (retention): give it back
                        member.nack(h.lease, h.offset, 0)
                        continue
                    count = h.delivery_count
                    out.append(
                        ShareMessage(h.stream, h.partition, record, count, h, self._outcomes)
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
            if self.acks == "implicit":
                self._last = out

    async def flush(self, timeout: float = 30.0) -> None:
        """Wait until every outcome queued so far is stored in the share log and this
        member's :attr:`state` has read it back.

        Raises:
            TimeoutError: not within ``timeout`` seconds.
        """
        with anyio.fail_after(timeout):
            await self._flush_now()

    async def _flush_now(self) -> None:
        appender = self._appender
        assert appender is not None
        await self._apply_outcomes()
        self._queue_settles()
        await appender.wait_done(appender.sent)
        while self._read_end < appender.stored_end:
            self._read = anyio.Event()
            await self._read.wait()

    # -- outcomes -----------------------------------------------------------------------

    async def _apply_outcomes(self) -> None:
        """Move the outcomes the application queued (from any thread) into the member."""
        member = self._m
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
                member.renew(h.lease, h.offset)

    def _queue_settles(self) -> None:
        settles = self._m.settles()
        if settles and self._appender is not None:
            self._appender.enqueue(settles)

    def _report_lost(self) -> None:
        member = self._m
        if not member.lost:
            return
        lost, member.lost = member.lost, []
        if self.on_lost is None:
            _logger.warning(
                "share group %s: %d outcomes ignored, their lease had moved (first: %s)",
                self.group,
                len(lost),
                lost[0],
            )
            return
        try:
            self.on_lost(lost)
        except Exception:
            _logger.exception("share group %s: on_lost failed", self.group)

    async def _check_settings(self) -> None:
        """Once caught up with the share log: store this member's settings (and start) if
        the group has none, else tell it (a warning) where it disagrees with the group's."""
        member = self._m
        group = member.view.settings
        if group is None:
            lease_ms = max(1, int(self.ack_deadline * 1000))
            keys = () if self._records is None else self._records.keys
            starts = await resolve_starts(self.client, keys, self.start)
            record = Settings(self.group, self.member_id, lease_ms, self.max_deliveries, starts)
            assert self._appender is not None
            self._appender.enqueue([record])
            return
        ack_deadline, max_deliveries = self._given
        wrong = []
        if ack_deadline is not None and round(ack_deadline * 1000) != group.lease_ms:
            wrong.append(f"ack_deadline {ack_deadline} s (the group's: {group.lease_ms / 1000} s)")
        if max_deliveries is not None and max_deliveries != group.max_deliveries:
            wrong.append(f"max_deliveries {max_deliveries} (the group's: {group.max_deliveries})")
        if wrong:
            _logger.warning(
                "share group %s keeps its settings; this member asked for %s",
                self.group,
                ", ".join(wrong),
            )

    # -- I/O tasks ------------------------------------------------------------------------

    async def _read_loop(self, log: str) -> None:
        member = self._m
        records = self._records
        assert records is not None
        assert self._tg is not None
        offset = 0
        while True:
            try:
                header, raw = await poll_fetch(
                    self.client, (log, 0), offset, max_bytes=LOG_FETCH_MAX_BYTES, max_wait=0.5
                )
            except OffsetOutOfRange as exc:
                offset = exc.log_start or 0  # no retention is set; be safe anyway
                continue
            skipped = member.view.skipped
            now = time.monotonic()
            for record in iter_records(raw):
                for won in member.on_record(record.offset, record.timestamp, record.value, now):
                    if won.offsets:
                        low, high = won.offsets[0][0], won.offsets[-1][0] + 1
                        records.load_soon(self._tg, (won.stream, won.partition), low, high)
                        self._ready_event.set()
                offset = record.offset + 1
            if member.view.skipped > skipped:  # invalid, or another group's newer records
                n, log_name = member.view.skipped - skipped, share_stream_name(self.group)
                _logger.warning("skipped %d record(s) of %s (invalid or not ours)", n, log_name)
            self._report_lost()
            if member.view.settings is not None:
                self._settings_known.set()
            self._caught_up = offset >= header.hw
            self._read_end = offset
            self._read.set()
            self._wake.set()
            if self._caught_up and raw:
                await anyio.sleep(READ_PAUSE)

    async def _dlq_hw(self) -> int:
        info = await self.client.list_offsets(self.dead_letter_stream, 0, "latest")
        return info.hw

    async def _drive_loop(self) -> None:
        member = self._m
        records = self._records
        appender = self._appender
        assert records is not None
        assert appender is not None
        next_flush = 0.0
        while True:
            now = time.monotonic()
            member.refresh(now)  # gives back what can no longer be handed out in time
            self._dead.extend(member.take_dead(now))
            if self._dead:
                with contextlib.suppress(JetError):  # what is left is tried again next round
                    await self._write_dead_letters()
            retry = member.view.settings is None and now - self._settings_at > SETTINGS_RETRY
            if self._caught_up and (self._settings_at == -math.inf or retry):
                self._settings_at = now  # a lost settings record is sent again
                await self._check_settings()
            # Claims are sized by the application's measured rate (ShareMember.capacity): a
            # stuck or slow application does not acquire what it could not be handed in time.
            # None before the group's settings (and start) are known.
            if self._caught_up and not self._closed and member.view.settings is not None:
                dlq_hw = None
                wall = time.time_ns()
                if any(member.needs_dlq_hw(s, p, now, wall) for s, p in records.keys):
                    dlq_hw = await self._dlq_hw()
                claims = member.claims(now, dict(records.hws), dlq_hw=dlq_hw, wall_ns=wall)
                if claims:
                    appender.enqueue(claims)
            if self._outcomes:
                await self._apply_outcomes()
            if now >= next_flush and member.pending_outcomes():
                self._queue_settles()
                next_flush = now + self.ack_interval
            self._wake = anyio.Event()
            with anyio.move_on_after(self.ack_interval):
                await self._wake.wait()

    async def _write_dead_letters(self) -> None:
        member = self._m
        records = self._records
        assert records is not None
        dlq, group = self.dead_letter_stream, self.group
        async with self._dead_lock:  # the driver and close() both write
            while self._dead:
                h = self._dead[0]
                record = await records.record((h.stream, h.partition), h.offset)
                exists = await dead_letter_exists(self.client, dlq, group, h)
                if record is not None and not exists:
                    await write_dead_letter(self.client, dlq, group, h, record)
                member.dead(h.lease, h.offset)
                self._dead.pop(0)
