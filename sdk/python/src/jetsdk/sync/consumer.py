# generated — do not edit: made by tools/gen_sync.py from jetsdk/consumer/consumer.py

"""Blocking :class:`Consumer` (generated from :mod:`jetsdk.consumer.consumer`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from jetsdk._sync_support import SyncWrapper, thread_callback
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

    Blocking version of :class:`jetsdk.consumer.consumer.Consumer` (generated): each
    method runs the async one it names, documented there, in the client's private
    event-loop thread. Thread-safe.
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
        """Arguments as for :class:`jetsdk.consumer.consumer.Consumer`.

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
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.assignment`."""
        return self._run_sync(self._obj.assignment)

    def position(self, partition: PartitionRef) -> int:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.position`."""
        self._give_back_buffer(self._obj)
        return self._run_sync(self._obj.position, partition)

    def high_watermark(self, partition: PartitionRef) -> int | None:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.high_watermark`."""
        return self._run_sync(self._obj.high_watermark, partition)

    def lag(self, partition: PartitionRef | None = None) -> int | None:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.lag`."""
        self._give_back_buffer(self._obj)
        return self._run_sync(self._obj.lag, partition)

    def seek(self, partition: PartitionRef, offset: int) -> None:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.seek`."""
        self._run_sync(self._obj.seek, partition, offset)

    def seek_to(self, partition: PartitionRef, start: StartPosition) -> int:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.seek_to`."""
        return self._run(self._obj.seek_to, partition, start)

    def seek_to_beginning(self, partitions: Iterable[PartitionRef] | None = None) -> None:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.seek_to_beginning`."""
        self._run(self._obj.seek_to_beginning, partitions)

    def seek_to_end(self, partitions: Iterable[PartitionRef] | None = None) -> None:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.seek_to_end`."""
        self._run(self._obj.seek_to_end, partitions)

    def pause(self, *partitions: PartitionRef) -> None:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.pause`."""
        self._give_back_buffer(self._obj)
        self._run_sync(self._obj.pause, *partitions)

    def resume(self, *partitions: PartitionRef) -> None:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.resume`."""
        self._run_sync(self._obj.resume, *partitions)

    def paused(self) -> set[StreamPartition]:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.paused`."""
        return self._run_sync(self._obj.paused)

    @property
    def group(self) -> str | None:
        """As :attr:`jetsdk.consumer.consumer.Consumer.group`."""
        return self._obj.group

    @property
    def member_id(self) -> str | None:
        """As :attr:`jetsdk.consumer.consumer.Consumer.member_id`."""
        return self._obj.member_id

    @property
    def generation(self) -> int | None:
        """As :attr:`jetsdk.consumer.consumer.Consumer.generation`."""
        return self._obj.generation

    def committed(self, partition: PartitionRef) -> OffsetAndMetadata | None:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.committed`."""
        return self._run_sync(self._obj.committed, partition)

    def commit(
        self,
        offsets: Mapping[PartitionRef, int | OffsetAndMetadata] | None = None,
        *,
        metadata: str = "",
    ) -> None:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.commit`."""
        self._give_back_buffer(self._obj)
        self._run(self._obj.commit, offsets, metadata=metadata)

    def ack(self, message: Message) -> None:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.ack`."""
        self._run_sync(self._obj.ack, message)

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> Message:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.__next__`."""
        return self._read_next()

    def fetch(self, max_records: int = 500, timeout: float | None = None) -> list[Message]:
        """Blocking :meth:`jetsdk.consumer.consumer.Consumer.fetch`."""
        return self._buffered_fetch(self._obj, max_records, timeout)
