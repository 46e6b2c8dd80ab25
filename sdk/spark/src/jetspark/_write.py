"""Writing rows to streams with a deterministic producer id: the sinks' common core.

Exactly-once into the stream (spec/spark.md, "Exactly-once writes"): a writer task sends
its rows with a producer id derived from what identifies the *data* (sink identity, batch
id, Spark partition id), never from the attempt, sorts the task's rows by their content
(target stream, ``partition`` column, ``offset`` column, encoded message) and numbers the
messages of each target partition 0, 1, 2, ... in that order, whatever order the rows
arrived in. A replayed batch (task retry, query restart) sends the same rows with the same
(producer id, sequence) pairs, and the partition leader answers every message it already
stored with DUPLICATE_SEQUENCE instead of storing it again (server: replication/producers.py).
Keyless rows are spread round-robin, in sorted order, from a start derived from the Spark
partition id, so a replay picks the same partitions too.

Rows come in as Arrow record batches (``mapInArrow`` for foreachBatch, the Arrow writers
for ``df.write`` / ``df.writeStream``); columns ``value`` (required), ``key``, ``headers``,
``partition`` and ``stream`` as in Spark's Kafka sink, string or binary, ``subject`` (the
NATS subject to publish on) and ``offset`` (ordering only, not written). Each batch is
encoded and partitioned in bulk (:mod:`jetspark._bulk`) and kept until the task's last
batch; then the messages of each target partition go into Produce requests of at most
:data:`MAX_CHUNK_MESSAGES` messages and :data:`MAX_CHUNK_BYTES` (estimated) bytes, cut
where a row-at-a-time writer would cut them, whatever the batch boundaries. The requests
are sent round-robin over the target partitions, one in flight per partition (its order)
and every partition at once (at most :data:`MAX_REQUESTS_IN_FLIGHT` per task), as the SDK
Producer sends.
:func:`check_columns` validates a schema on the driver.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from jetsdk.client import Client
from jetsdk.client_requests import decode_produce_answer
from jetsdk.codec.error_codes import ErrorCode, error_name, is_retriable
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import ProduceResult
from jetsdk.connection import RequestBody
from jetsdk.errors import StreamNotFound
from jetspark._arrow import I64, binary_parts
from jetspark._bridge import Bridge, shared_bridge
from jetspark._bulk import Messages, encode_messages, join_messages, murmur2, request_body
from jetspark._worker_heap import freeze_worker_heap
from jetspark.errors import ColumnError, JetSparkError, SinkWriteError
from jetspark.options import SinkOptions

__all__ = [
    "MAX_CHUNK_BYTES",
    "MAX_CHUNK_MESSAGES",
    "MAX_REQUESTS_IN_FLIGHT",
    "WriteStats",
    "check_columns",
    "chunk_bytes_for",
    "producer_id_for",
    "write_batches",
]

MAX_CHUNK_MESSAGES = 2000
"""Most messages in one Produce request."""
MAX_CHUNK_BYTES = 4 << 20
"""Most (estimated) bytes in one Produce request, and at most half the server's frame limit
(:func:`chunk_bytes_for`). 4 MiB, not the Producer's 1 MiB batches: a task sends only once
its last row came (its content order), all of it at once, so fewer, larger requests cost
fewer round trips and wake-ups; at 16 KiB values (2,000 rows, 2 tasks, ack ALL, 6
alternating calls, load 33-35) the server's CPU a foreach_batch_sink call was 0.16 s
against 0.22 s with 1 MiB (the Producer's 0.19 s), the send's wall time alike."""
MAX_REQUESTS_IN_FLIGHT = 64
"""Most Produce requests of one writer task awaiting their answers (one per partition)."""
VIEW_MIN_MESSAGE_BYTES = 4096
"""From this mean size of a task's encoded messages, each target's requests are views of
them, a view of each message's head and one of its value where the batch brought it
(written gathered or joined by the connection): no value is copied, where the messages
below it are joined and then copied out in sorted order (an Arrow take per target). At 16
KiB the take cost about 0.09 s CPU per 80 MiB (1.1 ms/MiB), a view about 0.2 us; and the
join, whose copies a task holds to its end, cost 0.3-0.5 s per 10,000 rows once the
memory allocator had to take fresh memory for them (0.04 s when it reused freed memory).
Below it, per-message Python objects cost more than the copies."""
MAX_RESENDS = 5
"""Times a request whose messages got a retriable per-message error is sent again."""
_SINK_COLUMNS = ("value", "key", "headers", "partition", "stream", "offset", "subject")
_INT_TYPES = (ByteType, ShortType, IntegerType, LongType)


@attrs.frozen
class WriteStats:
    """What one writer task did."""

    task: int
    """Spark partition id of the task."""
    written: int
    """Messages newly stored."""
    duplicates: int
    """Messages the server already had (a replay): not stored again."""


def producer_id_for(*parts: object) -> int:
    """A 63-bit producer id that depends only on ``parts`` (stable across processes)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 63) - 1) or 1


def check_columns(schema: StructType, opts: SinkOptions) -> None:
    """Validate a DataFrame schema for writing (driver side).

    Raises:
        ColumnError: ``value`` missing, a sink column of the wrong type, or no ``stream``
            column while option ``stream`` is not set.
    """
    fields = {f.name.lower(): f for f in schema.fields}
    if "value" not in fields:
        raise ColumnError("value", "required (string or binary)")
    for name in ("key", "value"):
        field = fields.get(name)
        if field is not None and not isinstance(field.dataType, StringType | BinaryType):
            raise ColumnError(
                name, f"must be string or binary, not {field.dataType.simpleString()}"
            )
    field = fields.get("partition")
    if field is not None and not isinstance(field.dataType, _INT_TYPES):
        raise ColumnError("partition", f"must be an integer, not {field.dataType.simpleString()}")
    field = fields.get("offset")
    if field is not None and not isinstance(field.dataType, _INT_TYPES):
        raise ColumnError("offset", f"must be an integer, not {field.dataType.simpleString()}")
    for name in ("stream", "subject"):
        field = fields.get(name)
        if field is not None and not isinstance(field.dataType, StringType):
            raise ColumnError(name, f"must be a string, not {field.dataType.simpleString()}")
    field = fields.get("stream")
    if field is None and opts.stream is None:
        raise ColumnError("stream", "no 'stream' column and no 'stream' option: name the target")
    field = fields.get("headers")
    if field is not None and not _headers_type_ok(field.dataType):
        raise ColumnError(
            "headers",
            "must be array<struct<key:string,value:binary or string>>, not "
            + field.dataType.simpleString(),
        )


def _headers_type_ok(dtype: DataType) -> bool:
    if not isinstance(dtype, ArrayType) or not isinstance(dtype.elementType, StructType):
        return False
    inner = {f.name: f.dataType for f in dtype.elementType.fields}
    return (
        set(inner) == {"key", "value"}
        and isinstance(inner["key"], StringType)
        and isinstance(inner["value"], BinaryType | StringType)
    )


def sink_columns(schema: StructType) -> list[str | None]:
    """The DataFrame's names of the sink columns in the order (value, key,
    headers, partition, stream, offset, subject), None for a missing one."""
    names = {f.name.lower(): f.name for f in schema.fields}
    return [names.get(c) for c in _SINK_COLUMNS]


_Piece = bytes | memoryview
"""Encoded messages of a run of rows (a view of the task's encoded messages, no copy)."""


@attrs.define(eq=False)
class _Target:
    chunk: list[_Piece] = attrs.field(factory=list)
    """Encoded messages of the open request (runs of rows)."""
    chunk_count: int = 0
    chunk_bytes: int = 0
    ready: deque[tuple[list[_Piece], int]] = attrs.field(factory=deque)
    """Closed requests (pieces, message count) not sent yet, in sequence order."""
    next_seq: int = 0
    in_flight: concurrent.futures.Future[list[ProduceResult]] | None = None


@attrs.frozen
class _Rows:
    """One Arrow batch's rows, encoded and partly placed (see :meth:`_TaskWriter.add_batch`)."""

    stream: I64
    """Index of the row's target stream in :attr:`_TaskWriter.stream_names`."""
    partition: I64
    """The ``partition`` column, or the key's hash partition; -1 for keyless rows without one."""
    explicit: pa.Array
    """int64: the ``partition`` column (nulls kept), for the sort."""
    offset: pa.Array
    """int64: the ``offset`` column (all null without one), for the sort."""
    heads: pa.Array
    """binary: the encoded messages up to their values (:class:`~jetspark._bulk.Messages`)."""
    value: pa.Array
    """binary: the values, as the batch brought them (not copied)."""
    sizes: I64


class _TaskWriter:
    def __init__(self, opts: SinkOptions, producer_id: int, task: int) -> None:
        self.opts = opts
        self.producer_id = producer_id
        self.task = task
        self.bridge: Bridge = shared_bridge(
            opts.servers, request_timeout=opts.request_timeout, security=opts.security
        )
        self.partition_counts: dict[str, int] = {}
        self.targets: dict[tuple[str, int], _Target] = {}
        self.request_bytes = chunk_bytes_for(self.bridge.client.max_frame_bytes)
        self.init_rows()
        self.written = 0
        self.duplicates = 0

    def init_rows(self) -> None:
        self.stream_names: list[str] = []
        self.rows: list[_Rows] = []
        self.keyless = 0

    def partitions_of(self, stream: str) -> int:
        count = self.partition_counts.get(stream)
        if count is None:
            try:
                info = self.bridge.call(_stream_info, self.bridge.client, stream)
            except StreamNotFound:
                raise JetSparkError(f"jetstream sink: stream {stream!r} does not exist") from None
            count = self.partition_counts[stream] = info
        return count

    def add_batch(self, batch: pa.RecordBatch) -> None:
        """Encode the rows of ``batch``, check and place them where their content decides
        (``partition`` column, key hash); they are numbered and sent by :meth:`finish`."""
        n = batch.num_rows
        if n == 0:
            return
        cols = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        streams, stream_of = self._streams(cols.get("stream"), n)
        counts = np.array([self.partitions_of(s) for s in streams], dtype=np.int64)[stream_of]
        msgs = encode_messages(
            cols["value"], cols.get("key"), cols.get("headers"), cols.get("subject")
        )
        explicit = cols.get("partition")
        partition = self._partitions(explicit, msgs, counts, streams, stream_of)
        index = {name: i for i, name in enumerate(self.stream_names)}
        for name in streams:
            if name not in index:
                index[name] = len(self.stream_names)
                self.stream_names.append(name)
        global_of = np.array([index[name] for name in streams], dtype=np.int64)[stream_of]
        offset = cols.get("offset")
        self.rows.append(
            _Rows(
                stream=global_of,
                partition=partition,
                explicit=pa.nulls(n, pa.int64()) if explicit is None else explicit.cast(pa.int64()),
                offset=pa.nulls(n, pa.int64()) if offset is None else offset.cast(pa.int64()),
                heads=msgs.heads,
                value=msgs.value,
                sizes=msgs.sizes,
            )
        )

    def _streams(self, column: pa.Array | None, n: int) -> tuple[list[str], I64]:
        """The target streams, and each row's index among them (option 'stream' wins)."""
        if self.opts.stream is not None:
            return [self.opts.stream], np.zeros(n, dtype=np.int64)
        if column is None or column.null_count:
            raise ColumnError("stream", "a row has a null stream and option 'stream' is unset")
        names = pc.unique(column)
        index = pc.index_in(column, value_set=names).to_numpy(zero_copy_only=False)
        return [str(s) for s in names.to_pylist()], index.astype(np.int64)

    def _partitions(
        self,
        column: pa.Array | None,
        msgs: Messages,
        counts: I64,
        streams: list[str],
        stream_of: I64,
    ) -> I64:
        """Each row's partition: the ``partition`` column, else the key's hash, else -1
        (keyless: placed round-robin once the task's rows are sorted)."""
        n = len(counts)
        explicit = np.zeros(n, dtype=np.bool_)
        partition = np.full(n, -1, dtype=np.int64)
        if column is not None:
            explicit = column.is_valid().to_numpy(zero_copy_only=False)
            values = pc.fill_null(column.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
            bad = np.flatnonzero(explicit & ((values < 0) | (values >= counts)))
            if len(bad):
                i = int(bad[0])
                stream = streams[int(stream_of[i])]
                raise ColumnError(
                    "partition",
                    f"stream {stream!r} has no partition {int(values[i])} "
                    f"(it has {int(counts[i])})",
                )
            partition = np.where(explicit, values, -1)
        keyed = np.flatnonzero(~explicit & msgs.has_key)
        if len(keyed):
            hashes = murmur2(msgs.key_data, msgs.key_starts[keyed], msgs.key_lengths[keyed])
            partition[keyed] = (hashes & 0x7FFFFFFF) % counts[keyed]
        return partition

    def send_rows(self) -> None:
        """Sort the task's rows by content (spec/spark.md, "Row order"), place the keyless
        ones round-robin in that order, and queue each target's rows in that order."""
        if not self.rows:
            return
        rows, self.rows = self.rows, []
        names = sorted(self.stream_names)
        rank = np.array([names.index(name) for name in self.stream_names], dtype=np.int64)
        stream = rank[np.concatenate([r.stream for r in rows])]
        heads = pa.chunked_array([r.heads for r in rows], pa.binary())
        values = pa.chunked_array([r.value for r in rows], pa.binary())
        explicit = pa.chunked_array([r.explicit for r in rows], pa.int64())
        offset = pa.chunked_array([r.offset for r in rows], pa.int64())
        # Large messages stay in two parts, head and value, sorted as the pair (the same
        # order as their joined bytes: a head is never a proper prefix of another head)
        # and sent as views of both, so that no value is copied; small ones are joined.
        large = heads.nbytes + values.nbytes >= VIEW_MIN_MESSAGE_BYTES * len(heads)
        data = None if large else join_messages(heads, values)
        content = pa.table({"h": heads, "v": values} if data is None else {"m": data})
        order_np = _content_order(stream, offset, explicit, content)
        partition = np.concatenate([r.partition for r in rows])[order_np]
        stream = stream[order_np]
        counts = np.array([self.partitions_of(name) for name in names], dtype=np.int64)
        keyless = np.flatnonzero(partition < 0)
        if len(keyless):
            turn = self.task + self.keyless + np.arange(len(keyless), dtype=np.int64)
            partition[keyless] = turn % counts[stream[keyless]]
            self.keyless += len(keyless)
        sizes = np.concatenate([r.sizes for r in rows])[order_np]
        # Group the sorted rows by target, each group in sorted order. Small messages are
        # copied out of the joined ones once, in that order (one Arrow take per target);
        # large ones are not copied: their requests are views of them (_message_views).
        views = _message_views(heads, values) if data is None else None
        target = stream * (int(counts.max()) + 1) + partition
        grouped = np.argsort(target, kind="stable")
        cuts = np.flatnonzero(np.diff(target[grouped])) + 1
        for picks in np.split(grouped, cuts):
            first = int(picks[0])
            name, part = names[int(stream[first])], int(partition[first])
            if views is not None:
                chosen = [views[i] for i in order_np[picks].tolist()]
                self._queue(name, part, partial(_flat, chosen), sizes[picks])
                continue
            assert data is not None
            start = 0
            for chunk in take(data, order_np[picks]).chunks:
                end = start + len(chunk)
                self._queue(name, part, _runs_of(chunk), sizes[picks[start:end]])
                start = end

    def _queue(
        self, stream: str, partition: int, pieces: Callable[[slice], list[_Piece]], sizes: I64
    ) -> None:
        """Add one target's encoded messages (``pieces(slice(i, j))``: messages i..j-1,
        ``sizes`` theirs) to its requests (sent by :meth:`finish`): a request closes
        before a message when it holds MAX_CHUNK_MESSAGES, or when the message would take
        its estimated bytes (sizes + 16 per message) over :attr:`request_bytes`."""
        limit = self.request_bytes
        target = self.targets.get((stream, partition))
        if target is None:
            target = self.targets[(stream, partition)] = _Target()
        cum = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes + 16, out=cum[1:])
        i, m = 0, len(sizes)
        while i < m:
            if target.chunk_count and (
                target.chunk_count >= MAX_CHUNK_MESSAGES
                or target.chunk_bytes + int(sizes[i]) > limit
            ):
                _close(target)
            # rows i..e-1 fit: each with chunk bytes so far + its size <= limit
            bound = limit + 16 - target.chunk_bytes + int(cum[i])
            end = int(np.searchsorted(cum, bound, side="right")) - 1
            end = max(i + 1, min(end, i + MAX_CHUNK_MESSAGES - target.chunk_count, m))
            target.chunk += pieces(slice(i, end))
            target.chunk_count += end - i
            target.chunk_bytes += int(cum[end] - cum[i])
            i = end

    def ship(self, stream: str, partition: int, target: _Target) -> None:
        # One request in flight per partition keeps the partition's rows in order.
        self.settle(stream, partition, target)
        body = request_body(
            stream,
            partition,
            self.opts.ack,
            int(self.opts.ack_timeout * 1000),
            self.producer_id,
            target.next_seq,
            target.chunk_count,
            target.chunk,
        )
        wait = self.opts.ack_timeout + self.opts.request_timeout
        target.in_flight = self.bridge.submit(
            _produce, self.bridge.client, stream, partition, body, target.chunk_count, wait
        )
        target.next_seq += target.chunk_count
        target.chunk = []
        target.chunk_count = 0
        target.chunk_bytes = 0

    def settle(self, stream: str, partition: int, target: _Target) -> None:
        future, target.in_flight = target.in_flight, None
        if future is None:
            return
        for result in future.result():
            if result.error_code == ErrorCode.NONE:
                self.written += 1
            elif result.error_code == ErrorCode.DUPLICATE_SEQUENCE:
                self.duplicates += 1
            else:
                raise SinkWriteError(stream, partition, error_name(result.error_code))

    def send_ready(self) -> None:
        """Send the closed requests round-robin over the targets: each target's in its
        order, one in flight per target, at most MAX_REQUESTS_IN_FLIGHT at once (the
        oldest is waited for first)."""
        flying: deque[tuple[str, int, _Target]] = deque()
        pending = [(key, target) for key, target in self.targets.items() if target.ready]
        while pending:
            for (stream, partition), target in pending:
                while len(flying) >= MAX_REQUESTS_IN_FLIGHT:
                    self.settle(*flying.popleft())
                target.chunk, target.chunk_count = target.ready.popleft()
                self.ship(stream, partition, target)  # waits for the target's previous one
                flying = deque(f for f in flying if f[2] is not target)
                flying.append((stream, partition, target))
            pending = [(key, target) for key, target in pending if target.ready]

    def finish(self) -> WriteStats:
        self.send_rows()
        for target in self.targets.values():
            if target.chunk_count:
                _close(target)
        self.send_ready()
        for (stream, partition), target in self.targets.items():
            self.settle(stream, partition, target)
        return WriteStats(self.task, self.written, self.duplicates)


def chunk_bytes_for(max_frame_bytes: int) -> int:
    """The most (estimated) bytes of one Produce request to a server whose frames may hold
    ``max_frame_bytes`` (its Hello): :data:`MAX_CHUNK_BYTES`, or half the frame limit where
    that is lower (a request's estimate leaves out its header and the messages' framing)."""
    return max(1, min(MAX_CHUNK_BYTES, max_frame_bytes // 2))


def take(data: pa.ChunkedArray, rows: I64) -> pa.ChunkedArray:
    """The encoded messages at ``rows``, copied out in that order (one Arrow take)."""
    return data.take(pa.array(rows))


def _runs_of(chunk: pa.Array) -> Callable[[slice], list[_Piece]]:
    """``pieces`` for :meth:`_TaskWriter._queue` over one binary array: a run of messages
    is one view of its bytes."""
    buffers = chunk.buffers()
    offsets = np.frombuffer(
        buffers[1], dtype=np.int32, count=len(chunk) + 1, offset=4 * chunk.offset
    )
    payload = memoryview(buffers[2])

    def pieces(run: slice) -> list[_Piece]:
        return [payload[int(offsets[run.start]) : int(offsets[run.stop])]]

    return pieces


def _message_views(
    heads: pa.ChunkedArray, values: pa.ChunkedArray
) -> list[tuple[memoryview, memoryview]]:
    """Views of each message's head and value, in row order (no copy)."""
    return list(zip(_views(heads), _views(values), strict=True))


def _views(array: pa.ChunkedArray) -> list[memoryview]:
    """A view of each element's bytes (empty for a null), in row order."""
    views: list[memoryview] = []
    for chunk in array.chunks:
        data, offsets, valid = binary_parts(chunk)
        payload = data.data
        ends = np.where(valid, offsets[1:], offsets[:-1]).tolist()
        views += [payload[lo:hi] for lo, hi in zip(offsets[:-1].tolist(), ends, strict=True)]
    return views


def _flat(chosen: list[tuple[memoryview, memoryview]], run: slice) -> list[_Piece]:
    """``pieces`` of views: the head and the value of each message of ``run``."""
    return [part for pair in chosen[run] for part in pair]


def _close(target: _Target) -> None:
    """The open request of ``target`` is complete: queue it to be sent."""
    target.ready.append((target.chunk, target.chunk_count))
    target.chunk, target.chunk_count, target.chunk_bytes = [], 0, 0


def _content_order(
    stream: I64, offset: pa.ChunkedArray, explicit: pa.ChunkedArray, content: pa.Table
) -> I64:
    """Row indices sorted by (stream, offset null first, partition null first, message
    bytes): numpy sorts the integer keys; only rows that tie on all of them (every row when
    there is no ``offset`` column) are then sorted by their bytes, in one Arrow sort.
    ``content``: the messages (column ``m``), or their heads and values (``h``, ``v``),
    which sort as the pair as their joined bytes do."""
    has_offset = offset.is_valid().to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = pc.fill_null(offset, 0).to_numpy().astype(np.int64)
    partitions = pc.fill_null(explicit, -1).to_numpy().astype(np.int64)  # partitions >= 0
    order: I64 = np.lexsort((partitions, offsets, has_offset, stream))
    keys = np.stack([stream, has_offset, offsets, partitions])[:, order]
    change = np.ones(len(order), dtype=np.bool_)
    change[1:] = np.any(keys[:, 1:] != keys[:, :-1], axis=0)
    group = np.cumsum(change) - 1
    size = np.bincount(group)
    tied = size[group] > 1
    if not tied.any():
        return order
    names = content.column_names
    if len(size) == 1:
        # One group, every row tied: sort the bytes alone, where they are (no copy; one
        # column much faster than a table sort). Rows of equal bytes may come in another
        # order than through ``order``, which sends the same bytes.
        if len(names) == 1:
            indices = pc.sort_indices(content.column(0))
        else:
            indices = pc.sort_indices(content, sort_keys=[(name, "ascending") for name in names])
        whole: I64 = indices.to_numpy().astype(np.int64)
        return whole
    rows = order[tied]
    picked = content.take(pa.array(rows))
    table = pa.table({"g": group[tied], **{name: picked.column(name) for name in names}})
    by = [("g", "ascending"), *((name, "ascending") for name in names)]
    within = pc.sort_indices(table, sort_keys=by).to_numpy()
    # The tied rows keep their groups' places; inside each group, byte order.
    order[np.flatnonzero(tied)] = rows[within]
    return order


async def _stream_info(client: Client, stream: str) -> int:
    return (await client.stream_info(stream, refresh=True)).partition_count


async def _produce(
    client: Client, stream: str, partition: int, body: RequestBody, count: int, wait: float
) -> list[ProduceResult]:
    """Send (as :meth:`jetsdk.Client.produce` does), and send again (same sequences) while
    some messages got a retriable error; the ones already stored then come back
    DUPLICATE_SEQUENCE."""

    async def once() -> list[ProduceResult]:
        answer = await client.request_leader(stream, partition, Api.PRODUCE, body, timeout=wait)
        return decode_produce_answer(answer, count)

    results = await once()
    for _ in range(MAX_RESENDS):
        if not any(is_retriable(r.error_code) for r in results):
            break
        results = await once()
    return results


def write_batches(
    opts: SinkOptions, producer_id: int, task: int, batches: Iterable[pa.RecordBatch]
) -> WriteStats:
    """Write ``batches`` (one Spark task's rows, in any order) and wait for every ack.

    Raises:
        ColumnError: a row with a bad partition, header or stream.
        SinkWriteError: the server refused messages; JetError: other SDK errors.
    """
    writer = _TaskWriter(opts, producer_id, task)
    for batch in batches:
        writer.add_batch(batch)
    stats = writer.finish()
    freeze_worker_heap("write")
    return stats
