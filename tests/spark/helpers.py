"""Helpers for the Spark tests: write and read streams with jetsdk directly."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from jetsdk import AckPolicy, Client, Producer, Table
from jetsdk.codec.record import Record
from jetspark.demo import read_committed

QUERY_TIMEOUT_S = 180
"""Seconds a streaming query may take to end (local Spark on a loaded machine)."""


def unique(prefix: str) -> str:
    """A stream name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_streams(servers: Sequence[str], *specs: tuple[str, int]) -> list[str]:
    """Create a stream of a unique name per ``(prefix, partitions)``: the names, in order."""
    names = [unique(prefix) for prefix, _partitions in specs]
    for name, (_prefix, partitions) in zip(names, specs, strict=True):
        create(servers, name, partitions=partitions)
    return names


def create(servers: Sequence[str], name: str, **settings: object) -> None:
    """Create a stream (settings as :meth:`jetsdk.Client.create_stream`)."""

    async def main() -> None:
        async with Client(list(servers)) as client:
            await client.create_stream(name, **settings)  # type: ignore[arg-type]

    anyio.run(main)


def produce(
    servers: Sequence[str],
    stream: str,
    messages: Sequence[tuple[bytes | None, bytes]],
    *,
    headers: Sequence[tuple[str, bytes]] = (),
    chunk: int = 0,
) -> None:
    """Send ``(key, value)`` messages with ack ALL and wait for every ack.

    ``chunk`` > 0 sends that many at a time (waiting for their acks in between), so the
    server appends them in separate batches and small segments can roll between them.
    """

    async def main() -> None:
        async with (
            Client(list(servers)) as client,
            Producer(client, stream, ack=AckPolicy.ALL) as producer,
        ):
            step = chunk or len(messages) or 1
            for i in range(0, len(messages), step):
                handles = [
                    await producer.send_soon(value, key, headers or None)
                    for key, value in messages[i : i + step]
                ]
                for handle in handles:
                    await handle

    anyio.run(main)


def read_all(servers: Sequence[str], stream: str) -> list[Record]:
    """Every committed record of ``stream`` (all partitions, each in offset order)."""
    return [r for records in read_partitions(servers, stream).values() for r in records]


def read_partitions(servers: Sequence[str], stream: str) -> dict[int, list[Record]]:
    """Every committed record of ``stream`` by partition, each in offset order."""
    return anyio.run(read_committed, servers, stream)


def bounds(servers: Sequence[str], stream: str, partition: int = 0) -> tuple[int, int]:
    """``(log_start, hw)`` of one partition."""

    async def main() -> tuple[int, int]:
        async with Client(list(servers)) as client:
            info = await client.list_offsets(stream, partition, "earliest")
            return info.log_start, info.hw

    return anyio.run(main)


EXPIRY_TIMEOUT_S = 10.0


async def until_expired(table: Table, key: bytes) -> None:
    """Return once ``key``'s TTL ran out in ``table`` (its view drops it then)."""
    with anyio.fail_after(EXPIRY_TIMEOUT_S):
        if key in table:  # no await between this check and the watch's start
            async for change in table.watch(key, initial=False):
                if change.key == key and change.expired:
                    return


def read_stream(spark: Any, servers: Sequence[str], streams: str, **options: str) -> Any:
    """A streaming DataFrame of ``streams`` from their earliest offsets; ``options``: more
    source options (spec/spark.md)."""
    reader = (
        spark.readStream.format("jetstream")
        .option("servers", ",".join(servers))
        .option("streams", streams)
        .option("startingOffsets", "earliest")
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def start_foreach_batch(
    df: Any, sink: Any, checkpoint: Path, *, output_mode: str | None = None
) -> Any:
    """Start a query writing ``df`` with ``foreachBatch(sink)`` over what is there now
    (``availableNow``), checkpointed in ``checkpoint``."""
    writer = df.writeStream
    if output_mode is not None:
        writer = writer.outputMode(output_mode)
    return (
        writer.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def finish(query: Any) -> None:
    """Wait (bounded) for ``query`` to end and check it ended without an error."""
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None


WORKER_CONNECT_BACK = "Python worker failed to connect back"
"""Spark 4.3 waits a fixed 10 s for a Python worker it starts to connect back
(``PythonWorkerFactory.createSimpleWorker``, no setting): on the 2-core CI machine running
the suite's 4 workers a query sometimes fails so before its first batch (once in about
five fresh-clone runs)."""


def run_foreach_batch(df: Any, sink: Any, checkpoint: Path) -> None:
    """:func:`start_foreach_batch`, then :func:`finish`; a query that failed because a
    Python worker missed Spark's fixed connect-back wait (:data:`WORKER_CONNECT_BACK`) is
    started once more from its checkpoint, as a user's orchestrator restarts a failed
    query: what the caller then checks (exactly-once output, offsets) covers the restart."""
    query = start_foreach_batch(df, sink, checkpoint)
    try:
        finish(query)
    except Exception as exc:  # pyspark's StreamingQueryException
        if WORKER_CONNECT_BACK not in str(exc):
            raise
        print(f"the query failed on a Python worker's start ({WORKER_CONNECT_BACK}): again")
        finish(start_foreach_batch(df, sink, checkpoint))


def source_struct(include_headers: bool = False) -> Any:
    """The source's row schema (spec/spark.md) as a ``StructType``, built without a JVM, for
    the tests that call the readers directly."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("stream", StringType()),
        StructField("subject", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)
