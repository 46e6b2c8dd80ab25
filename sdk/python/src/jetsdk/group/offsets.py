"""The committed-offset table of a group, with no-regression (spec/groups.md, "Commits").

Fencing (is the committer the partition's owner, in the right owner generation?) is decided by
:class:`~jetsdk.group.state.GroupState`, which knows ownership; this table enforces the other
rule: a committed offset never moves backwards, except by a simple commit from outside the
membership while nobody owns or targets the partition (an offset reset, §7.2: :meth:`reset`).

Not thread-safe: owned by one GroupState.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from jetsdk.group.stream_partition import StreamPartition

__all__ = ["CommitEntry", "OffsetAndMetadata", "OffsetTable"]


@attrs.frozen
class OffsetAndMetadata:
    """A committed (or to-be-committed) position of one partition: the SDK's one offset
    value (public as ``jetsdk.OffsetAndMetadata``)."""

    offset: int
    """Next offset to consume: every record below it was processed."""
    metadata: str = ""
    """Free-form text stored with it."""


@attrs.frozen
class CommitEntry:
    """One row of the :class:`OffsetTable`: a partition's committed position, and who
    committed it when."""

    position: OffsetAndMetadata
    """The committed offset and its metadata."""
    member: str
    """The member that committed it (for a simple commit: the committer's name)."""
    generation: int
    """That member's owner generation for the partition (-1: a simple commit, §7.2)."""
    timestamp: int
    """Log time (ns) of the record that committed it."""


@attrs.define(eq=False)
class OffsetTable:
    """Committed offsets by partition; an offset only ever moves forward."""

    _entries: dict[StreamPartition, CommitEntry] = attrs.field(factory=dict)

    def get(self, partition: StreamPartition) -> CommitEntry | None:
        """The committed offset of ``partition``, or None if nothing was committed."""
        return self._entries.get(partition)

    def offset(self, partition: StreamPartition) -> int | None:
        """Just the committed offset number, or None."""
        entry = self._entries.get(partition)
        return None if entry is None else entry.position.offset

    def would_regress(self, partition: StreamPartition, offset: int) -> bool:
        """True if committing ``offset`` would move ``partition`` backwards."""
        entry = self._entries.get(partition)
        return entry is not None and offset < entry.position.offset

    def put(self, partition: StreamPartition, entry: CommitEntry) -> None:
        """Store ``entry``; the caller has checked fencing and :meth:`would_regress`."""
        if self.would_regress(partition, entry.position.offset):
            raise ValueError(f"offset of {partition} would move backwards")
        self._entries[partition] = entry

    def reset(self, partition: StreamPartition, entry: CommitEntry) -> None:
        """Store ``entry`` even below the committed offset (a simple commit, §7.2); the caller
        has checked that no member owns or targets ``partition``."""
        self._entries[partition] = entry

    def items(self) -> Iterator[tuple[StreamPartition, CommitEntry]]:
        """All entries, sorted by partition."""
        for key in sorted(self._entries):
            yield key, self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)
