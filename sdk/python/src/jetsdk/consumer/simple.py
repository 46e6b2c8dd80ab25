"""A "simple consumer": a manual assignment that commits for a consumer group without joining
it (Kafka's consumer with a group id and ``assign()``), spec/groups.md §7.2.

``Consumer(client, "orders", group="etl", partitions=[0, 1])`` reads those partitions from
the group's committed offsets (or ``start``/``reset`` without one) and :meth:`commit` writes
simple commits: accepted only while no member of the group owns or targets the partition.
There is no auto-commit in this mode; commit explicitly (and before closing).

Not thread-safe: used by one Consumer in its event loop.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from jetsdk.client import Client
from jetsdk.consumer.fetcher import PartitionRun
from jetsdk.consumer.group_admin import commit_offsets, group_offsets
from jetsdk.consumer.progress import commit_entries
from jetsdk.consumer.values import OffsetAndMetadata
from jetsdk.group.stream_partition import StreamPartition

__all__ = ["SimpleCommits"]


@attrs.define(eq=False)
class SimpleCommits:
    """The group side of a simple consumer: the committed offsets it read and wrote."""

    client: Client
    group: str
    """The consumer group committed for."""
    committed: dict[StreamPartition, OffsetAndMetadata] = attrs.field(factory=dict)
    """The group's committed offsets as last read or written by this consumer."""

    async def load(self) -> None:
        """Read the group's committed offsets (one pass over its log)."""
        self.committed = await group_offsets(self.client, self.group)

    async def commit(
        self,
        runs: Mapping[StreamPartition, PartitionRun],
        offsets: Mapping[StreamPartition, int | OffsetAndMetadata] | None,
        metadata: str,
    ) -> None:
        """Commit ``offsets`` (default: every run's processed position) as simple commits.

        Raises:
            CommitFailed: refused (``group_active``) or not stored; InvalidArgument.
        """
        wanted = commit_entries(offsets, metadata)
        if wanted is None:
            wanted = {
                key: OffsetAndMetadata(run.processed.committable(), metadata)
                for key, run in runs.items()
            }
        wanted = {k: v for k, v in wanted.items() if self.committed.get(k) != v}
        if wanted:
            await commit_offsets(self.client, self.group, wanted)
            self.committed.update(wanted)
