# generated — do not edit: made by tools/gen_sync.py from jetsdk/consumer/consumer.py

"""Blocking :class:`Consumer` (generated from :mod:`jetsdk.consumer.consumer`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from jetsdk._sync_support import Forwarded, SyncWrapper, thread_callback
from jetsdk.consumer.consumer import (
    DEFAULT_FETCH_MAX_BYTES,
    DEFAULT_FETCH_MAX_WAIT,
    DEFAULT_MAX_UNACKED,
)
from jetsdk.consumer.consumer import Consumer as _AsyncConsumer
from jetsdk.consumer.group_side import DEFAULT_AUTO_COMMIT_INTERVAL
from jetsdk.consumer.positions import ResetPolicy, StartPosition
from jetsdk.consumer.values import OffsetAndMetadata, PartitionRef, PartitionsCallback
from jetsdk.group.assignors import Assignor
from jetsdk.group.member import MemberConfig
from jetsdk.group.stream_partition import StreamPartition
from jetsdk.message import Message
from jetsdk.sync.client import Client


class Consumer(SyncWrapper[_AsyncConsumer]):
    """Reads partitions in offset order, alone or in a group: ``with Consumer(...)``.

    Blocking version of :class:`jetsdk.consumer.consumer.Consumer`
    (generated); every call runs in the client's private event-loop thread. Thread-safe.
    """

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
        """Configure a consumer; it resolves positions (or joins its group) in ``__enter__``.

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

        Callbacks run in a worker thread (not the loop thread): they may block and
        may call this object's methods.
        """
        self._factory = lambda: _AsyncConsumer(
            client._obj,
            stream,
            streams=streams,
            group=group,
            partitions=partitions,
            start=start,
            reset=reset,
            max_bytes=max_bytes,
            max_wait=max_wait,
            manual_ack=manual_ack,
            max_unacked=max_unacked,
            auto_commit=auto_commit,
            member_id=member_id,
            instance_id=instance_id,
            assignors=assignors,
            group_config=group_config,
            on_assigned=thread_callback(on_assigned),
            on_revoked=thread_callback(on_revoked),
            on_lost=thread_callback(on_lost),
            read_replicas=read_replicas,
        )
        self._owner = client

    def assignment(self) -> list[StreamPartition]:
        """The partitions this consumer reads now, sorted."""
        return self._run_sync(self._obj.assignment)

    def position(self, partition: PartitionRef) -> int:
        """The next offset the application will receive from ``partition`` (an int for a
        single-stream consumer, else a :class:`StreamPartition`).

        Raises:
            PartitionNotFound: the partition is not assigned.
        """
        self._give_back_buffer(self._obj)
        return self._run_sync(self._obj.position, partition)

    def high_watermark(self, partition: PartitionRef) -> int | None:
        """The partition's high watermark as of the last fetch (None before any)."""
        return self._run_sync(self._obj.high_watermark, partition)

    def lag(self, partition: PartitionRef | None = None) -> int | None:
        """Committed messages not yet received: HW minus position, for one partition or
        summed over the assignment (None until every partition has been fetched once).
        """
        self._give_back_buffer(self._obj)
        return self._run_sync(self._obj.lag, partition)

    def seek(self, partition: PartitionRef, offset: int) -> None:
        """Continue ``partition`` from ``offset``; prefetched and un-acked messages of it are
        forgotten (their acks are ignored).

        In a group, a commit below the group's committed offset is refused by the log, so
        after a seek backwards the committed offset stays until the position passes it.

        Raises:
            PartitionNotFound: the partition is not assigned.
            ValueError: a negative offset.
        """
        self._run_sync(self._obj.seek, partition, offset)

    def seek_to(self, partition: PartitionRef, start: StartPosition) -> int:
        """Resolve a start position (as in the constructor) and :meth:`seek` there;
        return the offset.
        """
        return self._run(self._obj.seek_to, partition, start)

    def seek_to_beginning(self, partitions: Iterable[PartitionRef] | None = None) -> None:
        """Seek partitions (default: all assigned) to their first stored offset."""
        self._run(self._obj.seek_to_beginning, partitions)

    def seek_to_end(self, partitions: Iterable[PartitionRef] | None = None) -> None:
        """Seek partitions (default: all assigned) to their high watermark (only messages
        stored from now on).
        """
        self._run(self._obj.seek_to_end, partitions)

    def pause(self, *partitions: PartitionRef) -> None:
        """Hold back ``partitions``' messages until :meth:`resume`: no message of them is
        handed out, and their fetchers stop once a batch or two is buffered. Positions,
        commits and a group's assignment are not changed; a pause outlives seeks.

        Raises:
            PartitionNotFound: a partition is not assigned.
        """
        self._give_back_buffer(self._obj)
        self._run_sync(self._obj.pause, *partitions)

    def resume(self, *partitions: PartitionRef) -> None:
        """Hand out ``partitions``' messages again (see :meth:`pause`)."""
        self._run_sync(self._obj.resume, *partitions)

    def paused(self) -> set[StreamPartition]:
        """The assigned partitions paused now."""
        return self._run_sync(self._obj.paused)

    group = Forwarded(_AsyncConsumer.group)
    """The consumer group (also of a simple consumer), or None."""

    member_id = Forwarded(_AsyncConsumer.member_id)
    """This member's id in its group (None without a group)."""

    generation = Forwarded(_AsyncConsumer.generation)
    """The group generation in this member's view (None without a group or view)."""

    def committed(self, partition: PartitionRef) -> OffsetAndMetadata | None:
        """The group's committed offset of any partition of its streams (not only assigned
        ones), from this member's view of the group log; None if nothing is committed.

        A simple consumer (``group`` with ``partitions``) answers from the offsets it read
        when entered and those it committed since.

        Raises:
            InvalidArgument: the consumer has no group.
        """
        return self._run_sync(self._obj.committed, partition)

    def commit(
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
        self._give_back_buffer(self._obj)
        self._run(self._obj.commit, offsets, metadata=metadata)

    def ack(self, message: Message) -> None:
        """Acknowledge ``message`` (the same as ``message.ack()``)."""
        self._run_sync(self._obj.ack, message)

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> Message:
        """The next message (waits as long as needed).

        Raises:
            JetError: a non-retriable error (see the module doc).
            StopIteration: the consumer is closed.
        """
        return self._read_next()

    def fetch(self, max_records: int = 500, timeout: float | None = None) -> list[Message]:
        """Up to ``max_records`` messages: what is already here, or the first batch to
        arrive within ``timeout`` seconds (None: wait as long as needed; 0: do not wait).

        Returns an empty list if nothing arrived in time.

        Raises:
            JetError: a non-retriable error (see the module doc).
            ClientClosed: the consumer is closed.
        """
        return self._buffered_fetch(self._obj, max_records, timeout)
