"""Table reads: ``spark.read.format("jetstream").option("table", "prices")``, a compacted
stream's latest value per key as a static DataFrame (issue 38, spec/spark.md "Table reads").

    prices = (spark.read.format("jetstream").option("servers", "127.0.0.1:9292")
              .option("table", "prices").load())
    enriched = orders.join(prices.select("key", F.col("value").alias("price")), "key")

The driver takes every partition's log start and high watermark once, when Spark plans the
read (:meth:`JetTableReader.partitions`); each Spark partition is one whole stream
partition, read up to that high watermark by an executor and reduced to its latest record
per key (:class:`LatestPerKey`), as :class:`jetsdk.Table` applies them: a key whose latest
record is a tombstone (empty value), or carries a ``Jet-TTL`` that has run out by the
executor's clock, has no row; keyless records have none. Rows have the source's schema
(``offset`` is the key's revision).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from jetsdk.client import Client
from jetsdk.codec.ttl import ttl_ms
from jetsdk.errors import StreamNotFound
from jetspark._bridge import shared_bridge
from jetspark._read import read_range
from jetspark.errors import OptionError
from jetspark.offsets import OffsetRange
from jetspark.options import SourceOptions
from jetspark.schema import arrow_schema

__all__ = ["JetTableReader", "LatestPerKey", "TablePartition", "table_ranges"]

COMPACT_EVERY_ROWS = 262_144
"""Rows gathered before they are reduced to the latest per key (the buffer holds at most
about this many plus the distinct keys seen so far)."""
OUTPUT_BATCH_ROWS = 65_536
"""Rows per Arrow batch handed to Spark."""
_INDEX = "__jet_row"


class TablePartition(InputPartition):
    """One Spark partition of a table read: a whole stream partition (``.range``)."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng
        """The partition's offsets, log start to the high watermark at planning."""


async def table_ranges(client: Client, table: str) -> list[OffsetRange]:
    """Every partition of ``table`` that holds records, from its log start to its high
    watermark now.

    Raises:
        OptionError: (option ``table``) the stream does not exist or is not compacted.
    """
    try:
        info = await client.stream_info(table, refresh=True)
    except StreamNotFound:
        raise OptionError("table", f"stream {table!r} does not exist") from None
    if not info.compact:
        raise OptionError(
            "table",
            f"stream {table!r} is not compacted: a table is a compacted stream "
            "(read a plain stream with option 'streams')",
        )
    out = []
    for part in sorted(info.partitions, key=lambda p: p.partition):
        bounds = await client.list_offsets(table, part.partition, "latest")
        if bounds.log_start < bounds.hw:
            out.append(OffsetRange(table, part.partition, bounds.log_start, bounds.hw))
    return out


class LatestPerKey:
    """The latest record per key of one partition's rows, fed in offset order
    (:meth:`add`), as Arrow tables; :meth:`rows` drops the keys whose latest record is a
    delete (a tombstone, or a TTL run out by ``now_ns``)."""

    def __init__(self) -> None:
        self._done: pa.Table | None = None
        """Rows already reduced to one per key (tombstones kept: they hide older rows)."""
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        """Take a batch of rows (later offsets than every row before)."""
        keyed = batch.filter(pc.is_valid(batch.column("key")))
        if keyed.num_rows == 0:
            return
        self._pending.append(keyed)
        self._pending_rows += keyed.num_rows
        if self._pending_rows >= COMPACT_EVERY_ROWS:
            self._reduce()

    def _reduce(self) -> None:
        parts = [] if self._done is None else [self._done]
        parts += [pa.Table.from_batches([b]) for b in self._pending]
        self._pending, self._pending_rows = [], 0
        if not parts:
            return
        rows = pa.concat_tables(parts).combine_chunks()
        rows = rows.append_column(_INDEX, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        last = rows.group_by("key", use_threads=False).aggregate([(_INDEX, "max")])
        keep = np.sort(last.column(f"{_INDEX}_max").to_numpy())
        self._done = rows.take(pa.array(keep)).drop_columns([_INDEX])

    def rows(self, now_ns: int) -> pa.Table | None:
        """The live rows, in offset order; None if there are none."""
        self._reduce()
        done = self._done
        if done is None:
            return None
        live = done.filter(pc.greater(pc.binary_length(done.column("value")), 0))
        if "headers" in live.column_names and live.num_rows:
            live = live.filter(pa.array(_not_expired(live, now_ns)))
        return live if live.num_rows else None


def _not_expired(rows: pa.Table, now_ns: int) -> np.ndarray:
    """Per row, False if its ``Jet-TTL`` header ran out by ``now_ns`` (storage.md §11.2)."""
    keep = np.ones(rows.num_rows, dtype=np.bool_)
    counts = pc.fill_null(pc.list_value_length(rows.column("headers")), 0).to_numpy()
    with_headers = np.flatnonzero(counts > 0)
    if not len(with_headers):
        return keep
    picked = rows.select(["headers", "timestamp"]).take(pa.array(with_headers))
    micros = picked.column("timestamp").cast(pa.int64()).to_pylist()
    for i, headers, us in zip(
        with_headers, picked.column("headers").to_pylist(), micros, strict=True
    ):
        ms = ttl_ms(tuple((h["key"], h["value"]) for h in headers))
        if ms is not None and us * 1000 + ms * 1_000_000 <= now_ns:
            keep[i] = False
    return keep


def read_table_partition(
    opts: SourceOptions, rng: OffsetRange, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """The live rows of one partition of a table read (executor side), in batches of at
    most :data:`OUTPUT_BATCH_ROWS`, with the columns of ``schema``."""
    latest = LatestPerKey()
    # Headers are read whatever the schema: a Jet-TTL decides whether a row is live.
    for batch in read_range(opts, rng, arrow_schema(with_headers(schema))):
        latest.add(batch)
    rows = latest.rows(time.time_ns())
    if rows is None:
        return
    out = arrow_schema(schema)
    rows = rows.select(out.names).cast(out)
    yield from rows.to_batches(max_chunksize=OUTPUT_BATCH_ROWS)


def with_headers(schema: StructType) -> StructType:
    """``schema`` with the source's ``headers`` column (no JVM needed: executors call it)."""
    if "headers" in schema.names:
        return schema
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType([*schema.fields, StructField("headers", ArrayType(header))])


class JetTableReader(DataSourceReader):
    """``spark.read.format("jetstream").option("table", ...)`` (module docstring)."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        """One Spark partition per stream partition that holds records (driver side).

        Raises:
            OptionError: the table does not exist or is not a compacted stream.
        """
        opts = self.opts
        bridge = shared_bridge(
            opts.servers, request_timeout=opts.request_timeout, security=opts.security
        )
        ranges = bridge.call(table_ranges, bridge.client, opts.streams[0])
        return [TablePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The latest live row per key of one stream partition (executor side)."""
        rng = getattr(partition, "range", None)
        if not isinstance(rng, OffsetRange):
            return iter(())  # Spark's placeholder partition when there is nothing to read
        return read_table_partition(self.opts, rng, self.schema)
