"""Reading for the source: partition discovery, start offsets, and one offset range.

The async functions run in a :class:`~jetspark._bridge.Bridge`'s loop; :func:`read_range`
is the synchronous generator an executor's ``read()`` returns. It reads exactly the
records with offsets in ``[start, end)``, so reading the same range twice yields the same
rows (as long as retention or compaction has not removed records in between).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import anyio
import attrs
import pyarrow as pa

from jetsdk.client import Client
from jetsdk.codec.record import HEADER_SIZE, peek_header
from jetsdk.errors import OffsetOutOfRange
from jetsdk.metadata import OffsetInfo
from jetspark._bridge import shared_bridge
from jetspark._records import records_batch, scan
from jetspark._worker_heap import freeze_worker_heap
from jetspark.errors import DataLossError, OptionError
from jetspark.offsets import OffsetRange, Offsets
from jetspark.options import EARLIEST, LATEST, SourceOptions

__all__ = ["Snapshot", "read_range", "resolve_ends", "resolve_start", "snapshot"]

log = logging.getLogger("jetspark")

Snapshot = dict[str, dict[int, OffsetInfo]]
"""``{stream: {partition: OffsetInfo}}``: each partition's log start and high watermark."""


async def snapshot(client: Client, opts: SourceOptions, *, require: bool) -> Snapshot:
    """The log start and high watermark of every partition of the source's streams.

    Args:
        require: raise if a stream named in option ``streams`` does not exist (else it is
            left out).

    Raises:
        OptionError: ``require`` and a listed stream does not exist.
    """
    meta = await client.metadata(refresh=True)
    if opts.pattern is None:
        names = list(opts.streams)
        missing = [n for n in names if n not in meta.streams]
        if missing and require:
            raise OptionError("streams", f"stream(s) {', '.join(missing)} do not exist")
        names = [n for n in names if n in meta.streams]
    else:
        names = sorted(n for n in meta.streams if opts.matches(n))
    out: Snapshot = {name: {} for name in names}

    async def one(stream: str, partition: int) -> None:
        out[stream][partition] = await client.list_offsets(stream, partition, "latest")

    async with anyio.create_task_group() as tg:
        for name in names:
            for part in meta.streams[name].partitions:
                tg.start_soon(one, name, part.partition)
    return out


async def resolve_start(client: Client, opts: SourceOptions, snap: Snapshot) -> Offsets:
    """Where a new query (or a batch read) starts, per option startingTimestamp, else
    startingOffsetsByTimestamp, else startingOffsets (Spark's Kafka source's precedence).

    A start by time puts each partition at its first record stored at or after the time.
    Where there is none, startingOffsetsByTimestampStrategy ``error`` fails and ``latest``
    starts the partition at its high watermark.

    Raises:
        OptionError: JSON that misses or invents a partition, an offset past the high
            watermark, or (strategy ``error``) a time after a partition's last record.
    """
    option, times = "startingTimestamp", None
    if opts.starting_timestamp_ms is not None:
        times = {s: dict.fromkeys(parts, opts.starting_timestamp_ms) for s, parts in snap.items()}
    elif opts.starting_by_timestamp is not None:
        option = "startingOffsetsByTimestamp"
        times = _listed(opts.starting_by_timestamp, option, snap, "a time in ms")
    if times is None:
        return _resolve_spec(opts.starting, "startingOffsets", snap)
    found = await _offsets_at(client, times)
    out: Offsets = {}
    for stream, parts in found.items():
        out[stream] = {}
        for part, info in parts.items():
            if info.offset < info.hw:
                out[stream][part] = info.offset
            elif opts.starting_timestamp_strategy == "latest":
                out[stream][part] = info.hw
            else:
                raise OptionError(
                    option,
                    f"{stream}/{part} has no record stored at or after {times[stream][part]} "
                    "ms (startingOffsetsByTimestampStrategy=latest starts such a partition "
                    "at its high watermark)",
                )
    return out


async def resolve_ends(client: Client, opts: SourceOptions, snap: Snapshot) -> Offsets:
    """Where a batch read ends, per option endingTimestamp, else endingOffsetsByTimestamp,
    else endingOffsets. By time: before the first record stored at or after the time, the
    high watermark if there is none."""
    times = None
    if opts.ending_timestamp_ms is not None:
        times = {s: dict.fromkeys(parts, opts.ending_timestamp_ms) for s, parts in snap.items()}
    elif opts.ending_by_timestamp is not None:
        times = _listed(opts.ending_by_timestamp, "endingOffsetsByTimestamp", snap, "a time")
    if times is None:
        return _resolve_spec(opts.ending, "endingOffsets", snap)
    found = await _offsets_at(client, times)
    return {
        s: {p: min(info.offset, info.hw) for p, info in parts.items()} for s, parts in found.items()
    }


async def _offsets_at(
    client: Client, times: Mapping[str, Mapping[int, int]]
) -> dict[str, dict[int, OffsetInfo]]:
    """Per partition, ListOffsets at its time (ms): ``offset`` is the first offset stored
    at or after it, the high watermark if none."""
    out: dict[str, dict[int, OffsetInfo]] = {stream: {} for stream in times}

    async def at_time(stream: str, partition: int, ms: int) -> None:
        out[stream][partition] = await client.list_offsets(stream, partition, ms * 1_000_000)

    async with anyio.create_task_group() as tg:
        for stream, parts in times.items():
            for part, ms in parts.items():
                tg.start_soon(at_time, stream, part, ms)
    return out


def _listed(
    spec: Mapping[str, Mapping[int, int]], option: str, snap: Snapshot, what: str
) -> dict[str, dict[int, int]]:
    """``spec``'s value of every partition of ``snap``.

    Raises:
        OptionError: a stream or partition read is not in ``spec``, or ``spec`` names a
            partition the stream does not have.
    """
    out: dict[str, dict[int, int]] = {}
    for stream, parts in snap.items():
        given = spec.get(stream)
        if given is None:
            raise OptionError(
                option,
                f"stream {stream!r} is not listed (list every stream read, {what} per partition)",
            )
        extra = sorted(set(given) - set(parts))
        if extra:
            raise OptionError(option, f"stream {stream!r} has no partition {extra[0]}")
        missing = sorted(set(parts) - set(given))
        if missing:
            raise OptionError(option, f"{stream}/{missing[0]} is not listed (list every partition)")
        out[stream] = {part: given[part] for part in sorted(parts)}
    return out


def _resolve_spec(spec: object, option: str, snap: Snapshot) -> Offsets:
    given_all = None
    if isinstance(spec, dict):
        given_all = _listed(spec, option, snap, "-2 for earliest or -1 for latest")
    out: Offsets = {}
    for stream, parts in snap.items():
        out[stream] = {}
        for part, info in sorted(parts.items()):
            if given_all is None:
                out[stream][part] = info.log_start if spec == "earliest" else info.hw
                continue
            offset = given_all[stream][part]
            if offset == EARLIEST:
                offset = info.log_start
            elif offset == LATEST:
                offset = info.hw
            elif offset > info.hw:
                raise OptionError(
                    option, f"{stream}/{part}: offset {offset} is past the high watermark {info.hw}"
                )
            out[stream][part] = offset
    return out


@attrs.frozen
class _Fetched:
    raw: memoryview
    """Record bytes of the response (whole records, maybe a trailing partial one)."""
    hw: int
    log_start: int
    leo: int
    out_of_range: bool = False


async def _fetch(
    client: Client, stream: str, partition: int, offset: int, max_bytes: int
) -> _Fetched:
    try:
        header, raw = await client.fetch(
            stream, partition, offset, max_bytes=max_bytes, max_wait=0.0
        )
    except OffsetOutOfRange as exc:
        hw = exc.hw if exc.hw is not None else -1
        log_start = exc.log_start if exc.log_start is not None else 0
        return _Fetched(memoryview(b""), hw, log_start, hw, out_of_range=True)
    if len(raw) >= HEADER_SIZE:
        size = peek_header(raw)[3]
        if size > len(raw):
            # Only a partial record came back: ask again for at least its size.
            header, raw = await client.fetch(
                stream, partition, offset, max_bytes=max(max_bytes, size), max_wait=0.0
            )
    return _Fetched(raw, header.hw, header.log_start, header.leo)


def read_range(
    opts: SourceOptions, rng: OffsetRange, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches (one per Fetch response).

    The next Fetch is in flight while the current response is converted (by
    :mod:`jetspark._records`, straight from the record bytes). With option ``subjects``,
    only the records whose subject matches are yielded.

    Raises:
        DataLossError: with ``failOnDataLoss``, records of the range are gone (removed by
            retention, or the log was truncated or recreated below the range's end).
            Compaction gaps are skipped silently.
        JetError: the SDK's errors (after its retries).
    """
    bridge = shared_bridge(
        opts.servers, request_timeout=opts.request_timeout, security=opts.security
    )
    client = bridge.client
    subjects = opts.subject_regex()
    offset = rng.start
    future = bridge.submit(_fetch, client, rng.stream, rng.partition, offset, opts.fetch_max_bytes)
    while offset < rng.end:
        got = future.result()
        if got.out_of_range:
            if offset < got.log_start:
                gone_to = min(got.log_start, rng.end)
                if opts.fail_on_data_loss and not rng.new_partition:
                    raise DataLossError(
                        rng.stream,
                        rng.partition,
                        f"offsets {offset}..{gone_to - 1} were removed (retention) before "
                        "the query read them",
                    )
                if not rng.new_partition:
                    log.warning(
                        "jetstream %s/%s: offsets %d..%d are gone, skipping",
                        rng.stream,
                        rng.partition,
                        offset,
                        gone_to - 1,
                    )
                offset = got.log_start
                if offset < rng.end:
                    future = bridge.submit(
                        _fetch, client, rng.stream, rng.partition, offset, opts.fetch_max_bytes
                    )
                continue
            _truncated(opts, rng, offset, got.leo)
            return
        starts, nxt = scan(got.raw, rng.end)
        if nxt is None:
            if got.hw <= offset:
                _truncated(opts, rng, offset, got.hw)
            # offset < hw and nothing came back: a compaction gap reaching the HW.
            return
        if nxt < rng.end:
            future = bridge.submit(
                _fetch, client, rng.stream, rng.partition, nxt, opts.fetch_max_bytes
            )
        if starts:
            batch = records_batch(got.raw, starts, rng.stream, rng.partition, schema)
            freeze_worker_heap("read")
            if subjects is not None:
                # Here, not at the top: a Spark worker that reads without subjectPattern
                # does not import pyarrow.compute.
                import pyarrow.compute as pc

                column = batch.column(batch.schema.get_field_index("subject"))
                batch = batch.filter(pc.match_substring_regex(column, subjects))
            if batch.num_rows:
                yield batch
        offset = nxt


def _truncated(opts: SourceOptions, rng: OffsetRange, offset: int, log_end: int) -> None:
    message = (
        f"the log ends at offset {log_end}, below offset {offset} the query reads up to "
        f"{rng.end} (truncated, or the stream was recreated)"
    )
    if opts.fail_on_data_loss:
        raise DataLossError(rng.stream, rng.partition, message)
    log.warning("jetstream %s/%s: %s; skipping", rng.stream, rng.partition, message)
