"""The I/O side of a group member: drives :class:`~jetsdk.group.member.GroupMember`.

spec/groups.md decides everything in pure code (:mod:`jetsdk.group`); this module only moves
bytes and time for it. A :class:`GroupRuntime` runs three tasks in its owner's task group:

- the **reader** long-polls the group's partition of ``__groups`` from
  ``member.next_fetch_offset`` and feeds every record to the member (the member's view is the
  cache every lookup of membership, ownership and committed offsets reads; nothing scans the
  log per lookup);
- the **appender** sends the records the member wants appended, in order, in one Produce
  request per batch (ack ALL), and reports each stored record's server timestamp with the
  local send time (``member.on_appended``: the member's leases depend on it);
- the **driver** calls ``member.poll(now)`` whenever the view or local state changed, or a
  timer (heartbeat, lease, the handler's own tick) is due, and hands the resulting actions to
  the :class:`GroupHandler` (the consumer): start, revoke, lose a partition, fenced.

``__groups`` is created on first use (an internal stream: ``"internal": true``), with
:data:`DEFAULT_GROUPS_PARTITIONS` partitions, 7 days' retention, small segments and a
replication factor of up to 3.

Not thread-safe: everything runs in one event loop; the member is only touched between two
awaits (so each call on it is atomic).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Protocol

import anyio
import anyio.abc
import attrs

from jetsdk.client import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.codec.record import HEADER_SIZE, iter_records, peek_header
from jetsdk.consumer.append_queue import AppendQueue
from jetsdk.consumer.internal_streams import ensure_internal_stream
from jetsdk.errors import (
    JetError,
    OffsetOutOfRange,
    PermissionDenied,
    Unauthenticated,
)
from jetsdk.group.assignors import Assignor
from jetsdk.group.changes import CommitRejected
from jetsdk.group.member import (
    Action,
    AppendRecord,
    Fenced,
    GroupMember,
    LosePartition,
    MemberConfig,
    RevokePartition,
    StartPartition,
)
from jetsdk.group.records import GROUPS_STREAM
from jetsdk.group.stream_partition import StreamPartition
from jetsdk.metadata import StreamInfo
from jetsdk.partitioner import partition_for_key
from jetsdk.retry import RetryPolicy

__all__ = [
    "DEFAULT_GROUPS_PARTITIONS",
    "GROUPS_RETENTION",
    "GROUPS_SEGMENT_BYTES",
    "GROUPS_SUBJECT",
    "GroupHandler",
    "GroupRuntime",
    "ensure_groups_stream",
    "new_member_id",
]

_log = logging.getLogger(__name__)

DEFAULT_GROUPS_PARTITIONS = 16
"""Partitions of ``__groups`` when this SDK creates it (fixed afterwards: groups map to one)."""
GROUPS_SUBJECT = "_jet.groups"
"""NATS subject of ``__groups`` (partition p > 0 listens on ``_jet.groups.p``)."""
GROUPS_RETENTION = 7 * 86_400.0
"""Seconds of group-log history kept (like Kafka's offsets retention)."""
GROUPS_SEGMENT_BYTES = 16 * 1024 * 1024
"""Segment size of ``__groups``, so retention works in small steps."""
GROUPS_FETCH_MAX_BYTES = 1024 * 1024
"""Soft bound on one group-log Fetch response."""
MAX_APPEND_BATCH = 256
"""Most group records sent in one Produce request."""
REPLAY_LIMIT = 10_000
"""A group-log partition shorter than this is replayed from its start; a longer one is read
from about two checkpoint intervals back (spec/groups.md §9)."""
_BACKOFF = RetryPolicy(attempts=1_000_000, backoff=0.05, backoff_max=1.0)


class GroupHandler(Protocol):
    """What the runtime tells its consumer (called in the event loop, never awaited)."""

    def group_start(self, partition: StreamPartition, offset: int | None, generation: int) -> None:
        """Start consuming ``partition`` from ``offset`` (None: no committed offset)."""

    def group_revoke(self, partition: StreamPartition, deadline: float) -> None:
        """Stop fetching, finish in-flight work, then release before local time ``deadline``."""

    def group_lose(self, partition: StreamPartition, reason: str) -> None:
        """Stop at once; another member may own the partition already."""

    def group_fenced(self, by: str) -> None:
        """Another incarnation with our instance id took over."""

    def group_failed(self, error: JetError) -> None:
        """The member cannot go on (e.g. a newer protocol version in the log)."""

    def group_tick(self, now: float) -> float | None:
        """A chance to act (auto-commit); returns the next local time to be called at."""


def new_member_id() -> str:
    """A fresh member id (unique per process incarnation)."""
    return "c-" + uuid.uuid4().hex[:16]


async def ensure_groups_stream(client: Client) -> StreamInfo:
    """``__groups``'s metadata, creating the stream first if it does not exist."""
    return await ensure_internal_stream(
        client,
        GROUPS_STREAM,
        GROUPS_SUBJECT,
        DEFAULT_GROUPS_PARTITIONS,
        retention_max_age_s=GROUPS_RETENTION,
        segment_max_bytes=GROUPS_SEGMENT_BYTES,
    )


@attrs.define(eq=False)
class GroupRuntime:
    """Runs one :class:`GroupMember` against the group log (see the module docstring).

    Build with :meth:`open`, then ``await tg.start(runtime.run)``.
    """

    client: Client
    member: GroupMember
    partition: int
    """The ``__groups`` partition of this group."""
    handler: GroupHandler
    ack_timeout: float = 10.0
    """Seconds the server may take to store an append."""
    error: JetError | None = attrs.field(default=None, init=False)
    """Why the runtime stopped, if it did."""
    rejected: dict[StreamPartition, CommitRejected] = attrs.field(factory=dict, init=False)
    """The last rejected commit of this member, per partition."""
    _wake: anyio.Event = attrs.field(factory=anyio.Event, init=False)
    _queue: AppendQueue[AppendRecord] = attrs.field(
        factory=lambda: AppendQueue(MAX_APPEND_BATCH), init=False
    )
    _queued: int = attrs.field(default=0, init=False)
    _stored: int = attrs.field(default=0, init=False)
    _stored_offset: int = attrs.field(default=-1, init=False)
    _progress: anyio.Event = attrs.field(factory=anyio.Event, init=False)
    _scope: anyio.CancelScope | None = attrs.field(default=None, init=False)
    _stopping: bool = attrs.field(default=False, init=False)
    _skipped_seen: int = attrs.field(default=0, init=False)

    @classmethod
    async def open(
        cls,
        client: Client,
        group: str,
        subscriptions: Mapping[str, int],
        handler: GroupHandler,
        *,
        member_id: str,
        config: MemberConfig,
        assignors: Mapping[str, Assignor],
    ) -> GroupRuntime:
        """Find (or create) the group's log partition and where to start reading it.

        Raises:
            JetError: the cluster could not be reached; InvalidGroupConfig.
        """
        info = await ensure_groups_stream(client)
        partition = partition_for_key(group.encode(), info.partition_count)
        earliest = await client.list_offsets(GROUPS_STREAM, partition, "earliest")
        start = earliest.log_start
        if earliest.hw - earliest.log_start > REPLAY_LIMIT:
            since = time.time_ns() - int(2 * config.checkpoint_interval * 1e9)
            found = await client.list_offsets(GROUPS_STREAM, partition, since)
            start = max(earliest.log_start, min(found.offset, earliest.hw))
        member = GroupMember(
            group,
            member_id,
            dict(subscriptions),
            config,
            assignors=assignors,
            log_start=earliest.log_start,
            start=start,
        )
        return cls(client, member, partition, handler, ack_timeout=config.session_timeout)

    # -- tasks ---------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Join the group and run the reader, appender and driver until :meth:`stop`."""
        with anyio.CancelScope() as scope:
            self._scope = scope
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read_loop)
                tg.start_soon(self._append_loop)
                self.member.join(time.monotonic())
                tg.start_soon(self._drive_loop)
                task_status.started()

    def stop(self) -> None:
        """Stop the tasks (after :meth:`leave`, or at once)."""
        self._stopping = True
        if self._scope is not None:
            self._scope.cancel()

    def kick(self) -> None:
        """Something local changed (a release, a commit): run the driver soon."""
        self._wake.set()

    def _progressed(self) -> None:
        """Wake the callers waiting for stored appends or read records, and the driver."""
        self._progress.set()
        self._progress = anyio.Event()
        self._wake.set()

    def _fail(self, error: JetError) -> None:
        if self.error is None:
            self.error = error
            self.handler.group_failed(error)
        self._progress.set()

    async def _read_loop(self) -> None:
        member, client = self.member, self.client
        failures = 0
        limit = GROUPS_FETCH_MAX_BYTES
        wait = max(0.05, min(self.member.config.heartbeat_interval, 1.0))
        while True:
            offset = member.next_fetch_offset
            try:
                header, raw = await client.fetch(
                    GROUPS_STREAM,
                    self.partition,
                    offset,
                    max_bytes=limit,
                    max_wait=wait if member.view is not None else 0.0,
                )
            except OffsetOutOfRange as exc:
                # Retention passed our position: rebuild the view from the log start.
                member.reset_log(exc.log_start or 0)
                continue
            except JetError as exc:
                if not exc.retriable:
                    self._fail(exc)
                    return
                failures += 1
                await anyio.sleep(_BACKOFF.delay(failures))
                continue
            failures = 0
            try:
                records = list(iter_records(raw))
                for record in records:
                    for change in member.on_record(record.offset, record.timestamp, record.value):
                        if isinstance(change, CommitRejected) and change.member == member.member_id:
                            self.rejected[change.partition] = change
            except CodecError as exc:
                self._fail(JetError(f"corrupt records in {GROUPS_STREAM}: {exc}"))
                return
            except JetError as exc:  # UnsupportedGroupVersion, UnknownAssignor
                self._fail(exc)
                return
            if member.skipped > self._skipped_seen:
                _log.warning(
                    "skipped %d record(s) of %s partition %d: invalid, or another group's of "
                    "a newer version (%d in all)",
                    member.skipped - self._skipped_seen,
                    GROUPS_STREAM,
                    self.partition,
                    member.skipped,
                )
                self._skipped_seen = member.skipped
            limit = GROUPS_FETCH_MAX_BYTES
            if not records and len(raw) >= HEADER_SIZE:
                limit = max(limit, peek_header(raw)[3])
            if member.next_fetch_offset >= header.hw:
                member.caught_up(header.hw)
            if records or member.next_fetch_offset != offset:
                self._progressed()

    async def _append_loop(self) -> None:
        member = self.member
        while True:
            batch = await self._queue.next_batch()
            request = ProduceRequest(
                stream=GROUPS_STREAM,
                partition=self.partition,
                ack_policy=AckPolicy.ALL,
                timeout_ms=max(1, int(self.ack_timeout * 1000)),
                messages=tuple(ProduceMessage(a.value, a.key) for a in batch),
            )
            sent_at = time.monotonic()
            try:
                results = await self.client.produce(request)
            except (PermissionDenied, Unauthenticated) as exc:
                self._fail(exc)  # no rights on this group: sending again will not help
                return
            except JetError:
                # Lost appends are part of the protocol (heartbeats and releases are sent
                # again, commits at the next auto-commit); a waiting commit() times out.
                results = []
            for result in results:
                if result.error_code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE):
                    member.on_appended(sent_at, result.timestamp)
                    self._stored_offset = max(self._stored_offset, result.offset)
            self._stored += len(batch)
            self._progressed()

    async def _drive_loop(self) -> None:
        member = self.member
        while True:
            self._wake = anyio.Event()
            now = time.monotonic()
            self.perform(member.poll(now))
            wake = member.next_wakeup()
            tick = self.handler.group_tick(now)
            times = [t for t in (wake, tick) if t is not None]
            delay = max(0.0, min(times) - time.monotonic()) if times else None
            with anyio.move_on_after(delay if delay is not None else float("inf")):
                await self._wake.wait()

    def perform(self, actions: list[Action]) -> None:
        """Carry out actions from ``member.poll``: queue appends, tell the handler the rest."""
        handler = self.handler
        for action in actions:
            if isinstance(action, AppendRecord):
                self._queue.put(action)
                self._queued += 1
            elif isinstance(action, StartPartition):
                handler.group_start(action.partition, action.offset, action.generation)
            elif isinstance(action, RevokePartition):
                handler.group_revoke(action.partition, action.deadline)
            elif isinstance(action, LosePartition):
                handler.group_lose(action.partition, action.reason)
            elif isinstance(action, Fenced):
                handler.group_fenced(action.by)

    # -- waiting for the log --------------------------------------------------------------

    def flush_actions(self) -> int:
        """Queue what the member wants appended now; the append count to wait for."""
        self.perform(self.member.poll(time.monotonic()))
        return self._queued

    async def wait_stored(self, count: int, timeout: float) -> int | None:
        """Wait until the first ``count`` appends were answered; the highest stored offset, or
        None on timeout."""
        with anyio.move_on_after(timeout):
            while self._stored < count and self.error is None:
                await self._progress.wait()
            return self._stored_offset
        return None

    async def wait_joined(self, timeout: float) -> bool:
        """Wait until the member's view shows it as a member (not parked)."""
        member = self.member
        with anyio.move_on_after(timeout):
            while self.error is None:
                view = member.view
                info = None if view is None else view.member(member.member_id)
                if info is not None and not info.parked:
                    return True
                await self._progress.wait()
        return False

    async def wait_view(self, offset: int, timeout: float) -> bool:
        """Wait until the member's view has applied the log up to ``offset``."""
        with anyio.move_on_after(timeout):
            while self.error is None:
                view = self.member.view
                if view is not None and self.member.next_fetch_offset > offset:
                    return True
                await self._progress.wait()
        return False

    async def leave(
        self,
        final_offsets: Mapping[StreamPartition, int],
        metadata: Mapping[StreamPartition, str],
        timeout: float,
    ) -> None:
        """Append the member's leave (with final offsets) and wait until it is stored."""
        self.member.leave(final_offsets, metadata=metadata)
        count = self.flush_actions()
        await self.wait_stored(count, timeout)
