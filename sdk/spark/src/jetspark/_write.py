"""Writing rows to streams with a deterministic producer id: the sinks' common core.

Exactly-once into the stream (spec/spark.md, "Exactly-once writes"): a writer task sends
its rows with a producer id derived from what identifies the *data* (sink identity, batch
id, Spark partition id), never from the attempt, and numbers the messages of each target
partition 0, 1, 2, ... in row order. A replayed batch (task retry, query restart) sends the
same rows with the same (producer id, sequence) pairs, and the partition leader answers
every message it already stored with DUPLICATE_SEQUENCE instead of storing it again
(server: broker/producers.py). Keyless rows are spread round-robin from a start derived
from the Spark partition id, so a replay picks the same partitions too.

Rows come in as tuples (:data:`RowTuple`: from an RDD of rows, or from Arrow record batches
of the Arrow writers through :func:`arrow_rows`); columns ``value`` (required), ``key``,
``headers``, ``partition`` and ``stream`` as in Spark's Kafka sink, string or binary.
:func:`check_columns` validates a schema on the driver.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs
import pyarrow as pa
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
from jetsdk.codec.error_codes import ErrorCode, error_name, is_retriable
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, ProduceResult
from jetsdk.errors import StreamNotFound
from jetsdk.partitioner import partition_for_key
from jetspark._bridge import Bridge, shared_bridge
from jetspark.errors import ColumnError, JetSparkError, SinkWriteError
from jetspark.options import SinkOptions

__all__ = [
    "MAX_CHUNK_BYTES",
    "MAX_CHUNK_MESSAGES",
    "WriteStats",
    "arrow_rows",
    "check_columns",
    "producer_id_for",
    "write_rows",
]

MAX_CHUNK_MESSAGES = 2000
"""Most messages in one Produce request."""
MAX_CHUNK_BYTES = 1 << 20
"""Most (estimated) bytes in one Produce request."""
MAX_RESENDS = 5
"""Times a request whose messages got a retriable per-message error is sent again."""
_SINK_COLUMNS = ("value", "key", "headers", "partition", "stream")
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
    field = fields.get("stream")
    if field is not None and not isinstance(field.dataType, StringType):
        raise ColumnError("stream", f"must be a string, not {field.dataType.simpleString()}")
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
    """The DataFrame's names of the sink columns in :data:`RowTuple` order (value, key,
    headers, partition, stream), None for a missing one."""
    names = {f.name.lower(): f.name for f in schema.fields}
    return [names.get(c) for c in _SINK_COLUMNS]


def _as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


@attrs.define(eq=False)
class _Target:
    chunk: list[ProduceMessage] = attrs.field(factory=list)
    chunk_bytes: int = 0
    next_seq: int = 0
    in_flight: concurrent.futures.Future[list[ProduceResult]] | None = None
    in_flight_count: int = 0


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
        self.keyless = 0
        self.written = 0
        self.duplicates = 0

    def partitions_of(self, stream: str) -> int:
        count = self.partition_counts.get(stream)
        if count is None:
            try:
                info = self.bridge.call(_stream_info, self.bridge.client, stream)
            except StreamNotFound:
                raise JetSparkError(f"jetstream sink: stream {stream!r} does not exist") from None
            count = self.partition_counts[stream] = info
        return count

    def add(
        self,
        stream: str,
        value: bytes,
        key: bytes | None,
        headers: tuple[tuple[str, bytes], ...],
        partition: int | None,
    ) -> None:
        count = self.partitions_of(stream)
        if partition is None:
            if key is None:
                partition = (self.task + self.keyless) % count
                self.keyless += 1
            else:
                partition = partition_for_key(key, count)
        elif not 0 <= partition < count:
            raise ColumnError(
                "partition", f"stream {stream!r} has no partition {partition} (it has {count})"
            )
        target = self.targets.get((stream, partition))
        if target is None:
            target = self.targets[(stream, partition)] = _Target()
        size = len(value) + (len(key) if key else 0) + sum(len(n) + len(v) for n, v in headers)
        if target.chunk and (
            len(target.chunk) >= MAX_CHUNK_MESSAGES or target.chunk_bytes + size > MAX_CHUNK_BYTES
        ):
            self.ship(stream, partition, target)
        target.chunk.append(ProduceMessage(value, key, headers))
        target.chunk_bytes += size + 16

    def ship(self, stream: str, partition: int, target: _Target) -> None:
        # One request in flight per partition keeps the partition's rows in order.
        self.settle(stream, partition, target)
        request = ProduceRequest(
            stream=stream,
            partition=partition,
            ack_policy=self.opts.ack,
            timeout_ms=int(self.opts.ack_timeout * 1000),
            messages=tuple(target.chunk),
            producer_id=self.producer_id,
            base_seq=target.next_seq,
        )
        target.next_seq += len(target.chunk)
        target.in_flight = self.bridge.submit(_produce, self.bridge.client, request)
        target.in_flight_count = len(target.chunk)
        target.chunk = []
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

    def finish(self) -> WriteStats:
        for (stream, partition), target in self.targets.items():
            if target.chunk:
                self.ship(stream, partition, target)
        for (stream, partition), target in self.targets.items():
            self.settle(stream, partition, target)
        return WriteStats(self.task, self.written, self.duplicates)


async def _stream_info(client: Client, stream: str) -> int:
    return (await client.stream_info(stream, refresh=True)).partition_count


async def _produce(client: Client, request: ProduceRequest) -> list[ProduceResult]:
    """Send, and send again (same sequences) while some messages got a retriable error;
    the ones already stored then come back DUPLICATE_SEQUENCE."""
    results = await client.produce(request)
    for _ in range(MAX_RESENDS):
        if not any(is_retriable(r.error_code) for r in results):
            break
        results = await client.produce(request)
    return results


RowTuple = tuple[Any, Any, Any, Any, Any]
"""``(value, key, headers, partition, stream)`` as Spark hands them over (str or bytes;
headers a list of (key, value) pairs or dicts; None where missing)."""


def write_rows(
    opts: SinkOptions, producer_id: int, task: int, rows: Iterable[RowTuple]
) -> WriteStats:
    """Write ``rows`` (one Spark task's data, in order) and wait for every ack.

    Raises:
        ColumnError: a row with a bad partition, header or stream.
        SinkWriteError: the server refused messages; JetError: other SDK errors.
    """
    writer = _TaskWriter(opts, producer_id, task)
    default_stream = opts.stream
    for value, key, headers, partition, row_stream in rows:
        # As in Spark's Kafka sink, option 'stream' overrides the column.
        stream = default_stream or row_stream
        if stream is None:
            raise ColumnError("stream", "a row has a null stream and option 'stream' is unset")
        writer.add(
            stream,
            b"" if value is None else _as_bytes(value),
            None if key is None else _as_bytes(key),
            _headers(headers) if headers else (),
            partition,
        )
    return writer.finish()


def _headers(headers: Iterable[Any]) -> tuple[tuple[str, bytes], ...]:
    out = []
    for header in headers:
        if isinstance(header, dict):
            name, value = header.get("key"), header.get("value")
        else:
            name, value = header[0], header[1]
        if not isinstance(name, str):
            raise ColumnError("headers", "a header has a null key")
        out.append((name, b"" if value is None else _as_bytes(value)))
    return tuple(out)


def arrow_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[RowTuple]:
    """The rows of Arrow ``batches`` as :data:`RowTuple` (columns matched by name)."""
    for batch in batches:
        names = {name.lower(): i for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows

        columns: list[Sequence[Any]] = []
        for name in _SINK_COLUMNS:
            i = names.get(name)
            columns.append([None] * n if i is None else batch.column(i).to_pylist())
        yield from zip(*columns)
