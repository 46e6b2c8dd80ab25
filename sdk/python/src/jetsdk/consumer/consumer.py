"""The Consumer: reads partitions (its own choice, or its share in a consumer group).

Usage::

    async with Client(servers) as client, Consumer(client, "orders", start="earliest") as c:
        async for msg in c:                       # one message at a time, forever
            print(msg.partition, msg.offset, msg.key, msg.value)
        batch = await c.fetch(max_records=500, timeout=1.0)  # or in batches

    # a member of a consumer group (spec/groups.md): partitions are shared among members,
    # offsets are committed to the group log, and a restart resumes where it left off
    async with Consumer(client, group="billing", streams=["orders"]) as c:
        async for msg in c:
            ...                                   # processed when the next one is asked for

    # per-message acks, out of order; the committed offset is the first un-acked one
    async with Consumer(client, group="billing", streams=["orders"], manual_ack=True) as c:
        async for msg in c:
            tg.start_soon(handle_then_ack, msg)   # msg.ack() when done

How it works: each partition read has a fetcher task (:mod:`jetsdk.consumer.fetcher`) that
long-polls its leader and appends decoded batches to the consumer's buffer (at most two per
partition, so the next response is on its way while the application reads the current one).
Messages are handed out in fetch order per partition (:mod:`jetsdk.consumer.delivery`:
backpressure, leases, acks from any thread). Every partition run keeps a
:class:`~jetsdk.consumer.processed.ProcessedOffsets`: the position, the acks, what to commit.

With a ``group``, a :class:`~jetsdk.consumer.group_runtime.GroupRuntime` drives the group member
(:mod:`jetsdk.consumer.group_side` reacts to it): partitions start from the group's committed
offset, are revoked (in-flight work finished, offsets committed in the release record), lost,
and committed periodically (``auto_commit``), on revoke and on close. Before any message of a
group partition is handed out, the member's lease on it is checked (``may_process``).

Acks: in the default mode a message counts as processed when the application asks for the
next one (``__anext__``/``fetch``), or when the consumer is closed without an exception. With
``manual_ack=True`` each message needs ``msg.ack()`` (any order, any thread); at most
``max_unacked`` messages may be un-acked at once, beyond that iteration waits
(backpressure). Un-acked messages are delivered again after a restart or a rebalance
(at-least-once), with ``msg.delivery_count`` (see :mod:`jetsdk.consumer.progress`).

Errors: retriable ones are retried without surfacing. Others (the stream was deleted,
corrupt records, OffsetOutOfRange with ``reset="raise"``, NoCommittedOffset, MemberFenced,
an exception raised by a callback) are raised from the next ``__anext__``/``fetch`` call.

Task safety: one event loop; iterate from one task at a time. ``msg.ack()`` is thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel

from jetsdk.background import BackgroundTasks
from jetsdk.client import Client
from jetsdk.consumer.delivery import Delivery
from jetsdk.consumer.fetcher import PartitionRun, fetch_loop
from jetsdk.consumer.group_host import ConsumerParts
from jetsdk.consumer.group_side import DEFAULT_AUTO_COMMIT_INTERVAL, GroupSide
from jetsdk.consumer.positions import (
    ResetPolicy,
    StartPosition,
    parse_reset,
    parse_start,
    start_offset,
)
from jetsdk.consumer.processed import ProcessedOffsets
from jetsdk.consumer.progress import Progress
from jetsdk.consumer.simple import SimpleCommits
from jetsdk.consumer.values import (
    OffsetAndMetadata,
    PartitionRef,
    PartitionsCallback,
    stream_names,
)
from jetsdk.errors import ClientClosed, InvalidArgument, PartitionNotFound
from jetsdk.group.assignors import Assignor
from jetsdk.group.errors import NoCommittedOffset
from jetsdk.group.member import MemberConfig
from jetsdk.group.stream_partition import StreamPartition
from jetsdk.message import Message

__all__ = [
    "DEFAULT_FETCH_MAX_BYTES",
    "DEFAULT_FETCH_MAX_WAIT",
    "DEFAULT_MAX_UNACKED",
    "Consumer",
]

DEFAULT_FETCH_MAX_BYTES = 1024 * 1024
"""Soft bound on the record bytes of one Fetch response."""
DEFAULT_FETCH_MAX_WAIT = 0.5
"""Seconds a Fetch long poll waits for new records before answering empty."""
DEFAULT_MAX_UNACKED = 1000
"""Manual acks: most messages handed out and not acknowledged before iteration waits."""
_PREFETCH_BATCHES = 2


class Consumer:
    """Reads partitions in offset order, alone or in a group: ``async with Consumer(...)``."""

    def __init__(
        self,
        client: Client,
        stream: str | None = None,
        *,
        streams: Sequence[str] | None = None,
        group: str | None = None,
        partitions: Iterable[int] | None = None,
        start: StartPosition | None = None,
        reset: ResetPolicy = "earliest",
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_wait: float = DEFAULT_FETCH_MAX_WAIT,
        manual_ack: bool = False,
        max_unacked: int = DEFAULT_MAX_UNACKED,
        auto_commit: float | None = DEFAULT_AUTO_COMMIT_INTERVAL,
        member_id: str | None = None,
        instance_id: str | None = None,
        assignors: Sequence[str | Assignor] | None = None,
        group_config: MemberConfig | None = None,
        on_assigned: PartitionsCallback | None = None,
        on_revoked: PartitionsCallback | None = None,
        on_lost: PartitionsCallback | None = None,
        read_replicas: bool = False,
    ) -> None:
        """Configure a consumer; it resolves positions (or joins its group) in ``__aenter__``.

        Args:
            client: an entered :class:`~jetsdk.client.Client`.
            stream: the stream to read (or use ``streams``).
            streams: several streams (with a group: the group subscription).
            group: a consumer group name: share the streams' partitions with the group's
                other members and commit offsets to the group log (spec/groups.md).
            partitions: the partition numbers of ``stream`` to read (default: all). With
                ``group``: a *simple consumer* (manual assignment, no membership) that starts
                from the group's committed offsets and whose :meth:`commit` writes simple
                commits (spec/groups.md §7.2: refused while a group member owns or targets
                the partition); no auto-commit in this mode.
            start: without a group, where to start: ``"earliest"`` (default), ``"latest"``,
                ``"new-only"``, an offset, a datetime or a
                :class:`~jetsdk.consumer.positions.StartAt`. With a group, where to start a
                partition the group has no committed offset for (default: per ``reset``).
            reset: ``"earliest"``, ``"latest"`` or ``"raise"``: what to do with an offset out
                of range, and, in a group, with a partition that has no committed offset
                (``raise`` raises NoCommittedOffset; seek the partition to go on).
            max_bytes: soft bound on one Fetch response's record bytes.
            max_wait: long-poll wait of one Fetch, seconds.
            manual_ack: every message must be acknowledged (``msg.ack()``, any order, any
                thread); the committed offset is the first un-acked one. Default: a
                message counts as processed when the next one is asked for.
            max_unacked: manual acks: most un-acked messages before iteration waits.
            auto_commit: group: seconds between automatic commits; commits also happen on
                revoke and on close. None: only :meth:`commit` commits.
            member_id: group: this process incarnation's member id (default: random).
            instance_id: group: static membership; a stable name for this consumer across
                restarts (a restart within the session timeout moves no partition).
            assignors: group: assignor names (``"sticky"``, ``"range"``,
                ``"roundrobin"``) or :class:`~jetsdk.group.assignors.Assignor` objects, most
                preferred first (default: sticky, range, roundrobin).
            group_config: group: timing (session timeout, heartbeat interval, release
                timeout, checkpoint interval, lease margin) and client metadata.
            on_assigned: group: called with the partitions this member starts consuming,
                before they are fetched (a plain or async callable; :meth:`seek` works).
            on_revoked: group: called with the partitions being handed to another member,
                after in-flight work finished and before the final offsets are committed (a
                :meth:`commit` here is accepted).
            on_lost: group: called with partitions taken away without a hand-over (session
                expired, lease ran out): their in-flight work may be processed twice.
            read_replicas: fetch from an in-sync follower of each partition instead of its
                leader (read scaling): committed records only, up to that follower's high
                watermark, which trails the leader's by about one replication round trip.

        Raises:
            InvalidArgument: a bad combination or value.
        """
        if max_bytes < 1 or max_wait < 0:
            raise ValueError("max_bytes must be >= 1 and max_wait >= 0")
        if max_unacked < 1:
            raise ValueError("max_unacked must be >= 1")
        names = stream_names(stream, streams, partitions)
        self.client = client
        self.streams: tuple[str, ...] = tuple(names)
        """The streams read (in a group: the subscription)."""
        self._single = names[0] if len(names) == 1 else None
        self._wanted = None if partitions is None else sorted(set(partitions))
        self._start = parse_start(start) if start is not None else None
        self.reset: ResetPolicy = parse_reset(reset)
        self.max_bytes = max_bytes
        self.max_wait = max_wait
        self.read_replicas = read_replicas
        self.manual_ack = manual_ack
        self.max_unacked = max_unacked
        self._delivery = Delivery(manual_ack=manual_ack, max_unacked=max_unacked)
        self._group: GroupSide | None = None
        self._simple: SimpleCommits | None = None
        if group is not None and partitions is not None:
            self._simple = SimpleCommits(client, group)
        elif group is not None:
            host = ConsumerParts(
                client,
                self._delivery,
                self._start,
                self._initial_offset,
                self._begin_run,
                self._fail,
            )
            self._group = GroupSide(
                host,
                group,
                member_id=member_id,
                instance_id=instance_id,
                assignors=assignors,
                config=group_config,
                auto_commit=auto_commit,
                on_assigned=on_assigned,
                on_revoked=on_revoked,
                on_lost=on_lost,
            )
        self._tg: anyio.abc.TaskGroup | None = None
        self._background = BackgroundTasks()
        self._closed = False
        self._delivery.leases = self._group

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Consumer:
        if self._tg is not None or self._closed:
            raise ClientClosed("a Consumer can be entered once")
        self._delivery.start()
        counts = {}
        for name in self.streams:
            counts[name] = (await self.client.stream_info(name, refresh=True)).partition_count
        positions: dict[StreamPartition, int] = {}
        if self._simple is not None:
            await self._simple.load()
        if self._group is None:
            for name in self.streams:
                wanted = self._wanted if self._wanted is not None else range(counts[name])
                for p in wanted:
                    if not 0 <= p < counts[name]:
                        raise PartitionNotFound(
                            f"stream {name!r} has no partition {p}",
                            details={"stream": name, "partition": p},
                        )
                    key = StreamPartition(name, p)
                    done = None if self._simple is None else self._simple.committed.get(key)
                    if done is not None:
                        positions[key] = done.offset
                    else:
                        positions[key] = await self._initial_offset(key, self._start)
        tg = self._tg = await self._background.open()
        try:
            for key, offset in positions.items():
                self._begin_run(key, offset)
            if self._group is not None:
                await self._group.open(tg, counts)
        except BaseException:
            self._closed = True
            await self._background.close()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        assert self._tg is not None
        try:
            if self._group is not None and not self._closed:
                with anyio.CancelScope(shield=True):
                    await self._group.close(clean=exc_type is None)
        finally:
            self._closed = True
            self._delivery.close()
            for run in list(self._delivery.runs.values()):
                run.end()
            await self._background.close()

    async def _initial_offset(self, key: StreamPartition, start: object) -> int:
        """Where a partition with no committed offset starts (``start``, else ``reset``)."""
        client = self.client
        if start is None:
            if self.reset == "raise":
                raise NoCommittedOffset(key.stream, key.partition)
            start = parse_start("earliest" if self.reset == "earliest" else "new-only")
        start = parse_start(start)  # type: ignore[arg-type]
        if start.kind == "offset":
            return start.value
        if start.kind == "timestamp":
            found = await client.list_offsets(key.stream, key.partition, start.value)
            return start_offset(start, log_start=found.log_start, hw=found.hw, at_time=found.offset)
        found = await client.list_offsets(key.stream, key.partition, "earliest")
        return start_offset(start, log_start=found.log_start, hw=found.hw)

    # -- partition runs -------------------------------------------------------------------

    def _begin_run(
        self,
        key: StreamPartition,
        offset: int,
        generation: int | None = None,
        inherited: Progress | None = None,
    ) -> PartitionRun:
        """Start reading ``key`` from ``offset`` (ends the partition's previous run)."""
        assert self._tg is not None
        old = self._delivery.runs.get(key)
        if old is not None:
            self._delivery.end_run(old)
        processed = ProcessedOffsets(offset, self.manual_ack, inherited)
        run = PartitionRun(
            key, processed, generation, credit=anyio.Semaphore(_PREFETCH_BATCHES, fast_acquire=True)
        )
        run.scope = anyio.CancelScope()
        self._delivery.runs[key] = run
        self._tg.start_soon(self._fetch, run, offset)
        return run

    async def _fetch(self, run: PartitionRun, offset: int) -> None:
        assert run.scope is not None
        with run.scope:
            await fetch_loop(
                self.client,
                run,
                offset,
                max_bytes=self.max_bytes,
                max_wait=self.max_wait,
                read_replicas=self.read_replicas,
                reset=self.reset,
                deliver=self._delivery.deliver,
            )

    # -- partitions and positions ----------------------------------------------------------

    def _key(self, partition: PartitionRef) -> StreamPartition:
        if isinstance(partition, int):
            if self._single is None:
                raise InvalidArgument(
                    "this consumer reads several streams: name the partition as "
                    "StreamPartition(stream, partition)",
                    details={"field": "partition"},
                )
            return StreamPartition(self._single, partition)
        stream, number = partition
        return StreamPartition(stream, number)

    def _run(self, partition: PartitionRef) -> PartitionRun:
        key = self._key(partition)
        run = self._delivery.runs.get(key)
        if run is None:
            raise PartitionNotFound(
                f"partition {key} is not assigned to this consumer",
                details={"stream": key.stream, "partition": key.partition},
            )
        if run.reset_to is not None and not self._delivery.has_buffered(run):
            run.processed.position, run.reset_to = run.reset_to, None
        return run

    def assignment(self) -> list[StreamPartition]:
        """The partitions this consumer reads now, sorted."""
        return sorted(self._delivery.runs)

    def position(self, partition: PartitionRef) -> int:
        """The next offset the application will receive from ``partition`` (an int for a
        single-stream consumer, else a :class:`StreamPartition`).

        Raises:
            PartitionNotFound: the partition is not assigned.
        """
        return self._run(partition).position

    def high_watermark(self, partition: PartitionRef) -> int | None:
        """The partition's high watermark as of the last fetch (None before any)."""
        hw = self._run(partition).hw
        return None if hw < 0 else hw

    def lag(self, partition: PartitionRef | None = None) -> int | None:
        """Committed messages not yet received: HW minus position, for one partition or
        summed over the assignment (None until every partition has been fetched once)."""
        if partition is None:
            runs = list(self._delivery.runs.values())
        else:
            runs = [self._run(partition)]
        if any(r.hw < 0 for r in runs):
            return None
        return sum(max(0, r.hw - r.position) for r in runs)

    def seek(self, partition: PartitionRef, offset: int) -> None:
        """Continue ``partition`` from ``offset``; prefetched and un-acked messages of it are
        forgotten (their acks are ignored).

        In a group, a commit below the group's committed offset is refused by the log, so
        after a seek backwards the committed offset stays until the position passes it.

        Raises:
            PartitionNotFound: the partition is not assigned.
            ValueError: a negative offset.
        """
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self._check_open()
        key = self._key(partition)
        if self._group is not None and self._group.seek_starting(key, offset):
            return
        run = self._run(key)
        self._begin_run(key, offset, run.generation)

    async def seek_to(self, partition: PartitionRef, start: StartPosition) -> int:
        """Resolve a start position (as in the constructor) and :meth:`seek` there;
        return the offset."""
        self._check_open()
        key = self._key(partition)
        offset = await self._initial_offset(key, start)
        self.seek(key, offset)
        return offset

    async def seek_to_beginning(self, partitions: Iterable[PartitionRef] | None = None) -> None:
        """Seek partitions (default: all assigned) to their first stored offset."""
        for key in self._keys(partitions):
            await self.seek_to(key, "earliest")

    async def seek_to_end(self, partitions: Iterable[PartitionRef] | None = None) -> None:
        """Seek partitions (default: all assigned) to their high watermark (only messages
        stored from now on)."""
        for key in self._keys(partitions):
            await self.seek_to(key, "new-only")

    def pause(self, *partitions: PartitionRef) -> None:
        """Hold back ``partitions``' messages until :meth:`resume`: no message of them is
        handed out, and their fetchers stop once a batch or two is buffered. Positions,
        commits and a group's assignment are not changed; a pause outlives seeks.

        Raises:
            PartitionNotFound: a partition is not assigned.
        """
        self._delivery.pause([self._key(p) for p in partitions])

    def resume(self, *partitions: PartitionRef) -> None:
        """Hand out ``partitions``' messages again (see :meth:`pause`)."""
        self._delivery.resume([self._key(p) for p in partitions])

    def paused(self) -> set[StreamPartition]:
        """The assigned partitions paused now."""
        return {k for k in self._delivery.paused if k in self._delivery.runs}

    def _keys(self, partitions: Iterable[PartitionRef] | None) -> list[StreamPartition]:
        if partitions is None:
            return sorted(self._delivery.runs)
        return [self._key(p) for p in partitions]

    # -- groups, commits, acks ---------------------------------------------------------------

    @property
    def group(self) -> str | None:
        """The consumer group (also of a simple consumer), or None."""
        if self._simple is not None:
            return self._simple.group
        return None if self._group is None else self._group.name

    @property
    def member_id(self) -> str | None:
        """This member's id in its group (None without a group)."""
        return None if self._group is None else self._group.member_id

    @property
    def generation(self) -> int | None:
        """The group generation in this member's view (None without a group or view)."""
        return None if self._group is None else self._group.generation

    def committed(self, partition: PartitionRef) -> OffsetAndMetadata | None:
        """The group's committed offset of any partition of its streams (not only assigned
        ones), from this member's view of the group log; None if nothing is committed.

        A simple consumer (``group`` with ``partitions``) answers from the offsets it read
        when entered and those it committed since.

        Raises:
            InvalidArgument: the consumer has no group.
        """
        if self._simple is not None:
            self._check_open()
            return self._simple.committed.get(self._key(partition))
        return self._require_group().committed(self._key(partition))

    async def commit(
        self,
        offsets: Mapping[PartitionRef, int | OffsetAndMetadata] | None = None,
        *,
        metadata: str = "",
    ) -> None:
        """Commit offsets to the group log and wait until the log has accepted them.

        Args:
            offsets: partition -> next offset to consume (or an OffsetAndMetadata); default:
                every assigned partition after the last message handed out (with manual
                acks: at the first un-acked message).
            metadata: text stored with each offset (at most 1024 bytes).

        Raises:
            CommitFailed: the log refused a commit (the partition moved to another member, a
                stale ownership, an offset below the committed one) or did not answer in time.
            InvalidArgument: the consumer has no group; metadata too long.
        """
        if self._simple is not None:
            # A simple consumer (spec/groups.md §7.2): CommitFailed "group_active" while a
            # member of the group owns or targets a partition.
            self._check_open()
            if offsets is None:
                self._delivery.settle()
            wanted = None if offsets is None else {self._key(k): v for k, v in offsets.items()}
            await self._simple.commit(self._delivery.runs, wanted, metadata)
            return
        group = self._require_group()
        if offsets is None:
            self._delivery.settle()  # what the application got so far is done with
        await group.commit(
            None if offsets is None else {self._key(k): v for k, v in offsets.items()},
            metadata,
        )

    def ack(self, message: Message) -> None:
        """Acknowledge ``message`` (the same as ``message.ack()``)."""
        message.ack()

    def _require_group(self) -> GroupSide:
        self._check_open()
        if self._group is None:
            raise InvalidArgument("this needs a consumer group (group=...)")
        return self._group

    # -- iteration ----------------------------------------------------------------------

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        """The next message (waits as long as needed).

        Raises:
            JetError: a non-retriable error (see the module doc).
            StopAsyncIteration: the consumer is closed.
        """
        if self._tg is None:
            self._check_open()
        try:
            return await self._delivery.next_message()
        except ClientClosed:
            raise StopAsyncIteration from None

    async def fetch(self, max_records: int = 500, timeout: float | None = None) -> list[Message]:
        """Up to ``max_records`` messages: what is already here, or the first batch to
        arrive within ``timeout`` seconds (None: wait as long as needed; 0: do not wait).

        Returns an empty list if nothing arrived in time.

        Raises:
            JetError: a non-retriable error (see the module doc).
            ClientClosed: the consumer is closed.
        """
        if max_records < 1:
            raise ValueError("max_records must be >= 1")
        self._check_open()
        return await self._delivery.next_batch(max_records, timeout)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the consumer is closed")
        if self._tg is None:
            raise ClientClosed("use the consumer inside `async with Consumer(...) as c:`")

    def _fail(self, error: BaseException) -> None:
        """Raise ``error`` from the next ``__anext__``/``fetch`` call."""
        self._delivery.fail(error)
