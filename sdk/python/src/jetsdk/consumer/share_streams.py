"""The streams a share group uses besides the one it consumes (spec/share-groups.md §2, §6).

- the share log ``__share.<group>``: internal, one partition, replication factor
  ``min(3, servers)``, created by the first member (:func:`ensure_share_stream`);
- the dead-letter stream, a first-class stream: created if missing with the share log's
  replication factor (any other :meth:`Client.create_stream` setting may be chosen), and a
  pre-created one is used with whatever settings it has, unless one makes dead-lettering
  unsafe (:func:`ensure_dead_letter_stream`);
- :func:`read_share_group`: the group's state from its share log, read-only;
- :func:`write_dead_letter` and :func:`dead_letter_exists`: a dead letter, exactly once.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from jetsdk.client import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.codec.record import Record, iter_records
from jetsdk.consumer.internal_streams import ensure_internal_stream
from jetsdk.consumer.positions import StartAt, start_offset
from jetsdk.consumer.share_message import dead_letter_headers, is_dead_letter_of
from jetsdk.errors import (
    InvalidArgument,
    JetError,
    OffsetOutOfRange,
    StreamExists,
    StreamNotFound,
)
from jetsdk.metadata import StreamInfo
from jetsdk.share.member import Handout
from jetsdk.share.records import share_stream_name, share_subject
from jetsdk.share.state import ShareState

__all__ = [
    "DEAD_LETTER_OPTIONS",
    "LOG_FETCH_MAX_BYTES",
    "check_dead_letter_options",
    "dead_letter_exists",
    "ensure_dead_letter_stream",
    "ensure_share_stream",
    "read_share_group",
    "resolve_starts",
    "share_stream_info",
    "write_dead_letter",
]

LOG_FETCH_MAX_BYTES = 4 << 20
DLQ_FETCH_MAX_BYTES = 1 << 20
DEAD_LETTER_OPTIONS = frozenset(
    name
    for name, p in inspect.signature(Client.create_stream).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in ("exist_ok",)
)
"""The :meth:`Client.create_stream` settings a dead-letter stream may be created with."""


async def ensure_share_stream(client: Client, group: str) -> str:
    """The share log's stream name, creating the stream first if needed."""
    return (await share_stream_info(client, group)).name


async def share_stream_info(client: Client, group: str) -> StreamInfo:
    """The share log's stream (created first if needed: a creation race is harmless)."""
    return await ensure_internal_stream(client, share_stream_name(group), share_subject(group), 1)


def check_dead_letter_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the settings a dead-letter stream is to be created with.

    Raises:
        InvalidArgument: an unknown setting, or ``compact`` (``field`` names it).
    """
    for key in options:
        if key not in DEAD_LETTER_OPTIONS:
            known = ", ".join(sorted(DEAD_LETTER_OPTIONS))
            raise InvalidArgument(
                f"dead_letter_options: unknown setting {key!r} (known: {known})",
                details={"field": key},
            )
    if options.get("compact"):
        raise _compacted("dead_letter_options")
    return dict(options)


def _compacted(where: str) -> InvalidArgument:
    return InvalidArgument(
        f"{where}: a dead-letter stream must not be compacted (compact=true would keep only "
        "the latest dead letter per key, losing others and breaking the exactly-once lookup "
        "of spec/share-groups.md §6)",
        details={"field": "compact"},
    )


async def ensure_dead_letter_stream(
    client: Client, name: str, options: Mapping[str, Any], replication_factor: int
) -> StreamInfo:
    """The dead-letter stream ``name``: used as it is if it exists (any partition count,
    replication, retention, durability); else created with ``options`` and, unless they say
    otherwise, one partition and ``replication_factor`` (the share log's).

    Raises:
        InvalidArgument: the stream is compacted (``field`` ``compact``); dead letters go to
            partition 0, are looked up there by their headers, and must all be kept.
    """
    try:
        info = await client.stream_info(name, refresh=True)
    except StreamNotFound:
        kwargs: dict[str, Any] = {"replication_factor": replication_factor}
        kwargs.update(check_dead_letter_options(options))
        try:
            info = await client.create_stream(name, **kwargs)
        except StreamExists:  # another member created it first, maybe with other settings
            info = await client.stream_info(name, refresh=True)
    if info.compact:
        raise _compacted(f"dead-letter stream {name!r}")
    return info


async def read_share_group(client: Client, group: str) -> ShareState | None:
    """The share group's state as of the current end of its share log (None if the group
    has no share log). Read-only: it joins nothing."""
    name = share_stream_name(group)
    try:
        end = (await client.list_offsets(name, 0, "latest")).hw
    except StreamNotFound:
        return None
    state = ShareState(group)
    offset = 0
    for _ in range(end + 1):
        if offset >= end:
            break
        _, raw = await client.fetch(name, 0, offset, max_bytes=LOG_FETCH_MAX_BYTES, max_wait=0.0)
        records = list(iter_records(raw))
        if not records:
            break
        for record in records:
            state.apply_bytes(record.offset, record.timestamp, record.value)
        offset = records[-1].offset + 1
    return state


async def dead_letter_exists(client: Client, dlq: str, group: str, handout: Handout) -> bool:
    """Whether partition 0 of ``dlq`` holds the dead letter of ``handout`` at or after its
    ``dlq_from`` (a previous holder wrote it and died before its settle, spec §6 step 1)."""
    offset = handout.dlq_from
    for _ in range(100_000):
        try:
            header, raw = await client.fetch(
                dlq, 0, offset, max_bytes=DLQ_FETCH_MAX_BYTES, max_wait=0.0
            )
        except OffsetOutOfRange as exc:
            if exc.log_start is not None and offset < exc.log_start:
                offset = exc.log_start
                continue
            return False
        records = list(iter_records(raw))
        for r in records:
            if is_dead_letter_of(r.headers, group, handout):
                return True
        if not records or records[-1].offset + 1 >= header.hw:
            return False
        offset = records[-1].offset + 1
    return False


async def write_dead_letter(
    client: Client, dlq: str, group: str, handout: Handout, record: Record
) -> None:
    """Append the dead letter of ``handout`` (the original record plus the spec §6 headers)
    to partition 0 of ``dlq`` with ack ALL.

    Raises:
        JetError: it was not stored.
    """
    (result,) = await client.produce(
        ProduceRequest(
            stream=dlq,
            partition=0,
            ack_policy=AckPolicy.ALL,
            timeout_ms=10_000,
            messages=(
                ProduceMessage(
                    record.value, record.key, dead_letter_headers(group, handout, record.headers)
                ),
            ),
        )
    )
    if result.error_code != ErrorCode.NONE:
        raise JetError(f"dead letter not stored (error code {result.error_code})")


async def resolve_starts(
    client: Client, keys: Iterable[tuple[str, int]], start: StartAt | None
) -> tuple[tuple[str, int, int], ...]:
    """Where a new group starts on each (stream, partition): ``start`` resolved now, for
    the settings record's ``starts`` (empty for None: offset 0)."""
    if start is None:
        return ()
    out: list[tuple[str, int, int]] = []
    for stream, partition in keys:
        if start.kind == "offset":
            offset = start.value
        elif start.kind == "timestamp":
            found = await client.list_offsets(stream, partition, start.value)
            offset = start_offset(
                start, log_start=found.log_start, hw=found.hw, at_time=found.offset
            )
        else:
            found = await client.list_offsets(stream, partition, "earliest")
            offset = start_offset(start, log_start=found.log_start, hw=found.hw)
        out.append((stream, partition, offset))
    return tuple(out)
