"""A group's committed offsets from outside the group: read them, compute lag, commit.

Lag tools and "simple consumers" (Kafka's consumer with a group id and a manual assignment)
use these without joining the group:

- :func:`read_group` replays the group's partition of ``__groups`` up to its high watermark
  (from a checkpoint when the log is long, spec/groups.md §9) and returns the group state;
- :func:`group_offsets` / :func:`group_lag` read the committed offsets, and the lag of each
  partition (high watermark - committed offset);
- :func:`commit_offsets` appends **simple commits** (generation -1, spec/groups.md §7.2): they
  apply only to partitions no member owns or targets, like Kafka's commits for a group with no
  active members, and may move an offset back (an offset reset).

Every call reads the log afresh (one pass to its high watermark): cheap for a lag tool polling
every few seconds, not meant per message. Safe to run from several tasks at once (no shared
state).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping

import attrs

from jetsdk.client import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.codec.record import iter_records
from jetsdk.consumer.group_runtime import REPLAY_LIMIT, ensure_groups_stream
from jetsdk.consumer.values import OffsetAndMetadata
from jetsdk.errors import JetError, OffsetOutOfRange, StreamNotFound
from jetsdk.group.changes import Change, CommitAccepted, CommitRejected
from jetsdk.group.errors import CommitFailed
from jetsdk.group.member import DEFAULT_CHECKPOINT_INTERVAL
from jetsdk.group.reader import GroupLogReader
from jetsdk.group.records import (
    GROUPS_STREAM,
    SIMPLE_GENERATION,
    Checkpoint,
    OffsetCommit,
    encode_record,
)
from jetsdk.group.state import GroupState
from jetsdk.group.stream_partition import StreamPartition
from jetsdk.partitioner import partition_for_key

__all__ = [
    "DEFAULT_COMMITTER",
    "PartitionLag",
    "commit_offsets",
    "group_lag",
    "group_offsets",
    "read_group",
]

DEFAULT_COMMITTER = "simple"
"""The ``member`` field of simple commits unless told otherwise."""
_FETCH_MAX_BYTES = 1024 * 1024
_MAX_FETCHES = 1_000_000
"""Bound on the Fetch requests of one replay (each returns at least one record)."""


@attrs.frozen
class PartitionLag:
    """How far a group is behind on one partition."""

    committed: int | None
    """The group's committed offset (None: nothing committed)."""
    high_watermark: int
    """The partition's high watermark."""
    lag: int
    """Records not yet processed: HW - committed (HW - log start without a commit), >= 0."""


async def _groups_partition(client: Client, group: str) -> int | None:
    try:
        info = await client.stream_info(GROUPS_STREAM, refresh=True)
    except StreamNotFound:
        return None
    return partition_for_key(group.encode(), info.partition_count)


async def _replay(
    client: Client, group: str, partition: int, until: int | None = None
) -> tuple[GroupState, dict[int, list[Change]]]:
    """Replay the group log to its HW (or at least past ``until``); the state and the changes
    of each record at or after ``until``."""
    earliest = await client.list_offsets(GROUPS_STREAM, partition, "earliest")
    start = earliest.log_start
    if earliest.hw - earliest.log_start > REPLAY_LIMIT:
        since = time.time_ns() - int(2 * DEFAULT_CHECKPOINT_INTERVAL * 1e9)
        found = await client.list_offsets(GROUPS_STREAM, partition, since)
        start = max(earliest.log_start, min(found.offset, earliest.hw))
    reader = GroupLogReader(group, earliest.log_start, start)
    changes: dict[int, list[Change]] = {}
    for _ in range(_MAX_FETCHES):
        try:
            header, raw = await client.fetch(
                GROUPS_STREAM, partition, reader.next_offset, max_bytes=_FETCH_MAX_BYTES, max_wait=0
            )
        except OffsetOutOfRange as exc:
            reader.reset(exc.log_start or 0)
            continue
        for record in iter_records(raw):
            got = reader.feed(record.offset, record.timestamp, record.value)
            if until is not None and record.offset >= until:
                changes[record.offset] = got
        if reader.next_offset >= header.hw:
            reader.caught_up(header.hw)
            if reader.state is not None and (until is None or reader.next_offset > until):
                return reader.state, changes
    raise JetError(f"replaying group {group!r} did not reach the end of {GROUPS_STREAM}")


async def _append_checkpoint(
    client: Client, state: GroupState, committer: str, partition: int, timeout: float
) -> None:
    record = Checkpoint(
        group=state.group, member=committer, as_of=state.last_offset, state=state.snapshot()
    )
    request = ProduceRequest(
        stream=GROUPS_STREAM,
        partition=partition,
        ack_policy=AckPolicy.ALL,
        timeout_ms=max(1, int(timeout * 1000)),
        messages=(ProduceMessage(encode_record(record), state.group.encode()),),
    )
    with contextlib.suppress(JetError):  # best effort: the next commit tries again
        await client.produce(request)


async def read_group(client: Client, group: str) -> GroupState | None:
    """The group's state as of the current end of its log (None if ``__groups`` does not
    exist yet).

    Raises:
        JetError: the cluster could not be reached; UnsupportedGroupVersion.
    """
    partition = await _groups_partition(client, group)
    if partition is None:
        return None
    state, _ = await _replay(client, group, partition)
    return state


async def group_offsets(client: Client, group: str) -> dict[StreamPartition, OffsetAndMetadata]:
    """The group's committed offsets (from members or simple commits), by partition.

    Raises:
        JetError: as :func:`read_group`.
    """
    state = await read_group(client, group)
    if state is None:
        return {}
    return {p: c.position for p, c in state.committed_offsets().items()}


async def group_lag(
    client: Client, group: str, streams: Iterable[str] | None = None
) -> dict[StreamPartition, PartitionLag]:
    """Lag per partition: every partition of ``streams`` (default: the streams the group has
    committed offsets for).

    Raises:
        JetError: as :func:`read_group`; StreamNotFound for a stream in ``streams``.
    """
    committed = await group_offsets(client, group)
    names = sorted(set(streams) if streams is not None else {p.stream for p in committed})
    out: dict[StreamPartition, PartitionLag] = {}
    for name in names:
        info = await client.stream_info(name, refresh=True)
        for p in range(info.partition_count):
            key = StreamPartition(name, p)
            offsets = await client.list_offsets(name, p, "earliest")
            entry = committed.get(key)
            base = offsets.log_start if entry is None else entry.offset
            lag = max(0, offsets.hw - base)
            out[key] = PartitionLag(None if entry is None else entry.offset, offsets.hw, lag)
    return out


async def commit_offsets(
    client: Client,
    group: str,
    offsets: Mapping[StreamPartition, int | OffsetAndMetadata],
    *,
    committer: str = DEFAULT_COMMITTER,
    timeout: float = 30.0,
    checkpoint_interval: float = DEFAULT_CHECKPOINT_INTERVAL,
) -> None:
    """Commit offsets for ``group`` from outside its membership (simple commits, §7.2).

    Each commit applies only if no member of the group owns or targets the partition (so a
    live group's offsets are never moved from outside); an applied simple commit may move an
    offset back. Waits until the commits are stored (ack ALL) and read back.

    Args:
        client: an entered client.
        group: the group name.
        offsets: next offset to consume per partition (with optional metadata).
        committer: stored as the commits' ``member`` (a name for whoever commits).
        timeout: seconds the server may take to store the commits.
        checkpoint_interval: a group without members has no leader to write checkpoints
            (spec/groups.md §8.8), so new readers would replay its whole log: when the
            group has no active member and its last checkpoint is older than this (log
            time, seconds), a checkpoint of the state read back is appended too (best
            effort; duplicates are harmless).

    Raises:
        CommitFailed: a commit was refused (reason ``group_active``) or not stored.
        JetError: the cluster could not be reached.
    """
    if not offsets:
        return
    records = []
    for key, value in sorted(offsets.items()):
        entry = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
        rec = OffsetCommit.of(
            group, committer, key, SIMPLE_GENERATION, entry.offset, entry.metadata
        )
        records.append((key, entry.offset, encode_record(rec)))
    info = await ensure_groups_stream(client)
    partition = partition_for_key(group.encode(), info.partition_count)
    request = ProduceRequest(
        stream=GROUPS_STREAM,
        partition=partition,
        ack_policy=AckPolicy.ALL,
        timeout_ms=max(1, int(timeout * 1000)),
        messages=tuple(ProduceMessage(value, group.encode()) for _, _, value in records),
    )
    results = await client.produce(request)
    stored: dict[int, tuple[StreamPartition, int]] = {}
    for (key, offset, _), result in zip(records, results, strict=True):
        if result.error_code not in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE):
            raise CommitFailed(
                key.stream, key.partition, offset, f"not stored (error code {result.error_code})"
            )
        stored[result.offset] = (key, offset)
    state, changes = await _replay(client, group, partition, until=min(stored))
    if (
        state.leader() is None
        and state.last_checkpoint_at is not None
        and state.clock - state.last_checkpoint_at >= checkpoint_interval * 1e9
    ):
        await _append_checkpoint(client, state, committer, partition, timeout)
    for at, (key, offset) in sorted(stored.items()):
        got = [c for c in changes.get(at, []) if isinstance(c, CommitAccepted | CommitRejected)]
        if not got:
            # Applied while the reader restored a checkpoint (no changes reported): judge by
            # the final state (a later commit may have replaced ours: then we cannot tell).
            now = state.committed(key)
            if now is None or (now.member, now.position.offset) != (committer, offset):
                raise CommitFailed(key.stream, key.partition, offset, "unknown")
        elif isinstance(got[0], CommitRejected):
            raise CommitFailed(key.stream, key.partition, offset, got[0].reason)
