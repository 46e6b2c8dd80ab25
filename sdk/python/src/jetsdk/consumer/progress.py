"""What a group consumer knows about a partition beyond its committed offset (pure).

A committed offset says "every record below it was processed". With per-message acks that
complete out of order, more is known at commit time: some records above the committed offset
are processed too, and some were handed out but not acknowledged yet. jetsdk keeps that in
the commit's ``metadata`` string (spec/groups.md §7.1, a client convention; the group state
machine never reads it), so the next owner of the partition

- skips the records above the committed offset that were already processed, and
- knows how many times each record it hands out was handed out before
  (:attr:`jetsdk.message.Message.delivery_count`).

A :class:`Progress` says: every offset in ``[committed, frontier)`` is processed, except those
in ``pending`` ranges, which were handed out ``count`` times without being acknowledged.
Offsets at or above ``frontier`` are unknown (never handed out as far as the log knows).

Honesty about ``delivery_count``: it counts the deliveries recorded in commits. A hand-over
(revocation, close, a static restart) records everything, so counts stay exact across them. A
crash loses what was handed out after the last commit: those records come back with a count
one lower than the truth (a lower bound, never an over-count).

Encoding: ``"jet.p1 " + JSON`` with short keys; plain user metadata (no extra knowledge) is
stored as it is. Metadata that does not start with the prefix is user metadata from any
client. Pure code; values are immutable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs
import orjson

from jetsdk.errors import InvalidArgument
from jetsdk.group.offsets import OffsetAndMetadata
from jetsdk.group.records import MAX_METADATA_BYTES
from jetsdk.group.stream_partition import StreamPartition

__all__ = [
    "MAX_USER_METADATA_BYTES",
    "PROGRESS_PREFIX",
    "Progress",
    "commit_entries",
    "decode_progress",
    "encode_progress",
    "ranges_with_counts",
]

PROGRESS_PREFIX = "jet.p1 "
"""Marks commit metadata that carries a :class:`Progress` (version 1)."""
MAX_USER_METADATA_BYTES = 1024
"""Longest metadata an application may commit (the rest of the group record's limit is left
for the progress bookkeeping)."""


def commit_entries(
    offsets: Mapping[StreamPartition, int | OffsetAndMetadata] | None, metadata: str
) -> dict[StreamPartition, OffsetAndMetadata] | None:
    """What an application's ``commit(offsets, metadata)`` asks for, checked: each partition's
    offset with its own metadata or ``metadata`` (None: no ``offsets``, commit what was
    processed).

    Raises:
        InvalidArgument: ``metadata`` over :data:`MAX_USER_METADATA_BYTES`, or an entry with a
            negative offset or metadata over it.
    """
    if len(metadata.encode()) > MAX_USER_METADATA_BYTES:
        raise InvalidArgument(
            f"commit metadata is over {MAX_USER_METADATA_BYTES} bytes",
            details={"field": "metadata"},
        )
    if offsets is None:
        return None
    entries: dict[StreamPartition, OffsetAndMetadata] = {}
    for key, value in offsets.items():
        entry = (
            value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value, metadata)
        )
        if entry.offset < 0 or len(entry.metadata.encode()) > MAX_USER_METADATA_BYTES:
            raise InvalidArgument("bad offset or metadata", details={"field": "offsets"})
        entries[key] = entry
    return entries


PendingRange = tuple[int, int, int]
"""(start, end exclusive, times handed out before)."""


@attrs.frozen
class Progress:
    """A partition's processing state as committed (see the module docstring)."""

    committed: int
    """Next offset to consume: everything below was processed."""
    frontier: int
    """Offsets in ``[committed, frontier)`` are processed unless listed in ``pending``."""
    pending: tuple[PendingRange, ...] = ()
    """Sorted, disjoint ranges in ``[committed, frontier)`` handed out but not acknowledged."""
    metadata: str = ""
    """The application's own commit metadata."""

    def prior_deliveries(self, offset: int) -> int | None:
        """Times ``offset`` was handed out before, or None if it was processed (skip it)."""
        if offset >= self.frontier:
            return 0
        if offset < self.committed:
            return None
        for start, end, count in self.pending:
            if start <= offset < end:
                return count
            if offset < start:
                break
        return None

    def next_unprocessed(self, offset: int) -> int:
        """The smallest offset >= ``offset`` not known to be processed."""
        if offset >= self.frontier:
            return offset
        for start, end, _ in self.pending:
            if end > offset:
                return max(start, offset)
        return max(self.frontier, offset)

    def pending_from(self, offset: int) -> list[PendingRange]:
        """The pending ranges clipped to offsets >= ``offset``."""
        return [(max(s, offset), e, n) for s, e, n in self.pending if e > offset]


def _check(progress: Progress) -> None:
    if not 0 <= progress.committed <= progress.frontier:
        raise ValueError("need 0 <= committed <= frontier")
    last = progress.committed
    for start, end, count in progress.pending:
        if not last <= start < end <= progress.frontier or count < 1:
            raise ValueError("pending ranges must be sorted, disjoint, inside the window")
        last = end


def encode_progress(progress: Progress) -> str:
    """The commit metadata for ``progress`` (plain user metadata when there is nothing else).

    Pending ranges that do not fit the record's metadata limit are dropped from the end, and
    the frontier moves down to the first dropped one (the records there will be redelivered
    with a lower count: never skipped wrongly).

    Raises:
        ValueError: user metadata over :data:`MAX_USER_METADATA_BYTES`, or bad ranges.
    """
    _check(progress)
    if len(progress.metadata.encode()) > MAX_USER_METADATA_BYTES:
        raise ValueError(f"commit metadata is over {MAX_USER_METADATA_BYTES} bytes")
    if progress.frontier == progress.committed and not progress.metadata.startswith(
        PROGRESS_PREFIX
    ):
        return progress.metadata
    pending = list(progress.pending)
    frontier = progress.frontier
    while True:
        obj: dict[str, object] = {
            "c": progress.committed,
            "f": frontier,
            "p": [list(r) for r in pending],
        }
        if progress.metadata:
            obj["m"] = progress.metadata
        text = PROGRESS_PREFIX + orjson.dumps(obj).decode()
        if len(text.encode()) <= MAX_METADATA_BYTES:
            return text
        # Drop half the ranges at a time: a few rounds at most.
        keep = len(pending) // 2
        frontier = pending[keep][0]
        pending = pending[:keep]


def decode_progress(committed: int, metadata: str) -> Progress:
    """The progress stored with a commit of ``committed`` (bookkeeping that does not match
    ``committed`` or does not parse counts as none)."""
    if not metadata.startswith(PROGRESS_PREFIX):
        return Progress(committed, committed, (), metadata)
    try:
        obj = orjson.loads(metadata[len(PROGRESS_PREFIX) :])
        user = obj.get("m", "")
        if obj["c"] != committed or not isinstance(user, str):
            raise ValueError("stale progress")
        pending = tuple((int(s), int(e), int(n)) for s, e, n in obj["p"])
        progress = Progress(committed, int(obj["f"]), pending, user)
        _check(progress)
    except (ValueError, TypeError, KeyError, AttributeError, orjson.JSONDecodeError):
        return Progress(committed, committed, (), "")
    return progress


def ranges_with_counts(items: Iterable[tuple[int, int]]) -> list[PendingRange]:
    """Merge sorted ``(offset, count)`` pairs into ranges of consecutive offsets with one count."""
    out: list[PendingRange] = []
    for offset, count in items:
        if out and out[-1][1] == offset and out[-1][2] == count:
            start, _, _ = out[-1]
            out[-1] = (start, offset + 1, count)
        else:
            out.append((offset, offset + 1, count))
    return out
