"""``df.write.format("jetstream")`` and ``df.writeStream.format("jetstream")``: the Data
Source writer API on top of :mod:`jetspark._write`.

- Batch writes (:class:`JetBatchWriter`): each write job draws a random id on the driver;
  a task's producer id is derived from (job id, Spark partition id), so a retried task
  attempt does not store its rows twice. Rows written by tasks that succeeded stay written if
  the job is aborted (streams are append-only).
- Streaming writes (:class:`JetStreamWriter`): a task's producer id is derived from (sink
  name or query id, batch id, Spark partition id), read from the task's local properties,
  so a micro-batch replayed after a failure or a restart stores nothing twice.

Options and guarantees: spec/spark.md.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence

import attrs
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from jetspark._bridge import shared_bridge
from jetspark._compat import StreamWriterBase
from jetspark._write import WriteStats, check_columns, producer_id_for, write_batches
from jetspark.errors import JetSparkError, OptionError
from jetspark.options import SinkOptions

__all__ = ["JetBatchWriter", "JetCommitMessage", "JetStreamWriter"]

log = logging.getLogger("jetspark")

BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""Task local property holding the micro-batch id (set by Spark's micro-batch engine)."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Task local property holding the streaming query id (stable across restarts)."""


@attrs.frozen
class JetCommitMessage(WriterCommitMessage):
    """A writer task's report to the driver."""

    stats: WriteStats
    """What the task wrote."""


def _check_target(opts: SinkOptions, schema: StructType) -> None:
    check_columns(schema, opts)
    if opts.stream is not None:
        bridge = shared_bridge(
            opts.servers, request_timeout=opts.request_timeout, security=opts.security
        )
        try:
            bridge.call(bridge.client.stream_info, opts.stream, refresh=True)
        except Exception as exc:
            raise OptionError("stream", f"stream {opts.stream!r}: {exc}") from exc


def _task_id() -> int:
    context = TaskContext.get()
    if context is None:
        raise JetSparkError("jetstream writer: not running in a Spark task")
    return context.partitionId()


def _totals(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int]:
    stats = [m.stats for m in messages if isinstance(m, JetCommitMessage)]
    return sum(s.written for s in stats), sum(s.duplicates for s in stats)


class JetBatchWriter(DataSourceArrowWriter):
    """Batch writer; see the module doc."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        """Validate the columns and the target stream (driver side).

        Raises:
            ColumnError, OptionError.
        """
        _check_target(opts, schema)
        self.opts = opts
        self.job_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Write one task's rows (executor side)."""
        task = _task_id()
        producer_id = producer_id_for("write", self.job_id, task)
        stats = write_batches(self.opts, producer_id, task, iterator)
        return JetCommitMessage(stats)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task succeeded."""
        written, duplicates = _totals(messages)
        log.info("jetstream write %s: %d stored, %d duplicates", self.job_id, written, duplicates)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Some task failed: what the others wrote stays (streams are append-only)."""
        written, _ = _totals(messages)
        log.warning(
            "jetstream write %s aborted; %d records already stored stay", self.job_id, written
        )


ROWS_PER_BATCH = 4096
"""PySpark 4.0 (rows, not Arrow, in the streaming writer): rows per Arrow batch made."""


def _arrow_batches(
    items: Iterator[pa.RecordBatch] | Iterator[Row], schema: StructType
) -> Iterator[pa.RecordBatch]:
    """The writer's input as Arrow batches: as they come (PySpark 4.1+), or made from the
    rows (4.0), ``ROWS_PER_BATCH`` at a time."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema: pa.Schema | None = None
    rows: list[dict[str, object]] = []
    for item in items:
        if isinstance(item, pa.RecordBatch):
            yield item
            continue
        if arrow_schema is None:
            arrow_schema = to_arrow_schema(schema)
        rows.append(item.asDict(recursive=True))
        if len(rows) >= ROWS_PER_BATCH:
            yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)
            rows = []
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)


class JetStreamWriter(StreamWriterBase):  # type: ignore[misc]
    """Streaming writer, exactly-once per micro-batch; see the module doc."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        """Validate the columns and the target stream (driver side).

        Raises:
            ColumnError, OptionError.
        """
        _check_target(opts, schema)
        self.opts = opts
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Write one task's rows of a micro-batch (executor side; Arrow batches, or rows
        on PySpark 4.0).

        Raises:
            JetSparkError: the task has no batch or query id (not a micro-batch query).
        """
        context = TaskContext.get()
        if context is None:
            raise JetSparkError("jetstream writer: not running in a Spark task")
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        sink = self.opts.sink_name or context.getLocalProperty(QUERY_ID_PROPERTY)
        if batch_id is None or sink is None:
            raise JetSparkError(
                "jetstream streaming writer: no micro-batch id in the task (continuous "
                "processing is not supported)"
            )
        task = context.partitionId()
        producer_id = producer_id_for("stream", sink, batch_id, task)
        stats = write_batches(self.opts, producer_id, task, _arrow_batches(iterator, self.schema))
        return JetCommitMessage(stats)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The micro-batch is written."""
        written, duplicates = _totals(messages)
        log.info("jetstream batch %d: %d stored, %d duplicates", batchId, written, duplicates)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The micro-batch failed; its replay will not duplicate what was stored."""
        log.warning("jetstream batch %d aborted; its replay stores only what is missing", batchId)
