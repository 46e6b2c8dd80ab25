"""``df.writeStream.foreachBatch(jetspark.foreach_batch_sink(...))``: exactly-once writes of
each micro-batch.

    sink = jetspark.foreach_batch_sink(servers="127.0.0.1:9292", stream="totals")
    query = totals.writeStream.foreachBatch(sink).option("checkpointLocation", cp).start()

Each call writes the batch with one Spark job (one task per partition of the batch, fed
Arrow batches by ``mapInArrow``);
every task sends its rows with a producer id derived from (sink name or query id, batch id,
Spark partition id), so when Spark replays a batch id after a failure the server recognises
every message already stored and keeps one copy (:mod:`jetspark._write`). The guarantee holds
when a replayed batch has the same rows in the same Spark partitions, in any order, which
Spark's deterministic replay gives for a deterministic query (spec/spark.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import attrs
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jetspark._bridge import shared_bridge
from jetspark._write import (
    WriteStats,
    check_columns,
    producer_id_for,
    sink_columns,
    write_batches,
)
from jetspark.errors import JetSparkError, OptionError
from jetspark.options import SinkOptions, security_args, sink_options
from jetspark.table_sink import check_table, check_table_columns, keyed_rows
from jetspark.writer import QUERY_ID_PROPERTY

__all__ = [
    "ARROW_BATCH_BYTES",
    "ARROW_BATCH_BYTES_CONF",
    "BatchResult",
    "ForeachBatchSink",
    "foreach_batch_sink",
]

ARROW_BATCH_BYTES_CONF = "spark.sql.execution.arrow.maxBytesPerBatch"
"""Spark's bound on the bytes of one Arrow batch it hands a Python task (default 64 MiB)."""
ARROW_BATCH_BYTES = 4 * 1024 * 1024
"""What the sink sets it to for its own job, unless the session sets it: 256 rows of
16 KiB values a batch (the JVM's CPU for 10,000 such rows, local[2], medians of 3: 0.36 s
against 0.82 s with 64 MiB), while rows of 100 bytes still come 10,000
(``maxRecordsPerBatch``) a batch."""


@attrs.frozen
class BatchResult:
    """What one call of the sink wrote."""

    batch_id: int
    """The micro-batch id."""
    written: int
    """Messages newly stored."""
    duplicates: int
    """Messages already stored by an earlier attempt of this batch (not stored again)."""


def foreach_batch_sink(
    servers: str | list[str] | tuple[str, ...] | None = None,
    stream: str | None = None,
    *,
    table: str | None = None,
    ack: str = "all",
    name: str | None = None,
    ack_timeout: float | None = None,
    request_timeout: float | None = None,
    tls: bool | None = None,
    tls_ca: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    server_hostname: str | None = None,
    token: str | None = None,
    user: str | None = None,
    password: str | None = None,
) -> ForeachBatchSink:
    """A function for ``writeStream.foreachBatch`` that writes each batch to ``stream``.

    Args:
        servers: bootstrap servers (a list or comma-separated string; default $JET_SERVERS).
        stream: target stream; None to route each row by its ``stream`` column.
        table: write into this table (a compacted stream) instead: every row needs a
            ``key``, goes to its key's partition, and a null or empty ``value`` deletes the
            key (:mod:`jetspark.table_sink`). Not with ``stream``.
        ack: ``"all"`` (default), ``"leader"`` or ``"none"`` (no ack: no exactly-once).
        name: the sink's identity for exactly-once (default: the streaming query's id, which
            survives restarts from the same checkpoint). Set it to keep the guarantee across
            a new checkpoint that replays the same batches.
        ack_timeout: seconds the server may take to acknowledge (default 30).
        request_timeout: seconds to wait for one response (default 30).
        tls: use TLS, as option ``tls`` (spec/spark.md, "Connection security").
        tls_ca: CA bundle (PEM), as option ``tlsCa``.
        tls_cert: client certificate (PEM), as option ``tlsCert``.
        tls_key: client key (PEM), as option ``tlsKey``.
        server_hostname: name checked against server certificates, as option
            ``tlsServerHostname``.
        token: a token to authenticate with, as option ``token``.
        user: a user name, as option ``user``.
        password: the user's password, as option ``password``.

    Columns: ``value`` (required), ``key``, ``headers``, ``partition``, ``stream``; string or
    binary like Spark's Kafka sink; ``offset`` (integer, not written) orders each task's
    rows, pass the source's through to keep per-key order; other columns are ignored.

    Large values: Spark hands the rows to the writing tasks in Arrow batches of at most
    ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (default 10,000) and
    ``spark.sql.execution.arrow.maxBytesPerBatch`` bytes (default 64 MiB), one buffer of
    the whole batch's values grown as it fills. Unless the session sets the latter, each
    call runs its job with it at :data:`ARROW_BATCH_BYTES` (4 MiB) and unsets it after:
    at 16 KiB values 256 rows a batch, where 10,000 took the JVM about twice the CPU.

    Raises:
        OptionError: a bad argument (named as the option it stands for).
    """
    if table is not None and stream is not None:
        raise OptionError("table", "give stream or table, not both")
    raw: dict[str, str] = {
        "ack": ack,
        **security_args(
            tls=tls,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            server_hostname=server_hostname,
            token=token,
            user=user,
            password=password,
        ),
    }
    if servers is not None:
        raw["servers"] = servers if isinstance(servers, str) else ",".join(servers)
    if stream is not None:
        raw["stream"] = stream
    if table is not None:
        raw["stream"] = table
    if name is not None:
        raw["sinkName"] = name
    if ack_timeout is not None:
        raw["ackTimeout"] = str(ack_timeout)
    if request_timeout is not None:
        raw["requestTimeout"] = str(request_timeout)
    opts = sink_options(raw)
    return ForeachBatchSink(opts if table is None else attrs.evolve(opts, table=True))


class ForeachBatchSink:
    """The callable :func:`foreach_batch_sink` returns; keeps the last results for
    inspection (``results``, most recent last, bounded)."""

    MAX_RESULTS = 100
    """Batch results kept in :attr:`results`."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.results: list[BatchResult] = []
        self._lock = threading.Lock()
        self._table_checked = False

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Write micro-batch ``batch_id`` (called by Spark on the driver).

        Raises:
            ColumnError: missing or mistyped columns.
            JetSparkError: no query id to derive producer ids from (pass ``name``).
            SinkWriteError, JetError: the write failed (Spark fails the batch; its replay
                stores only what is missing).
        """
        check_columns(df.schema, self.opts)
        if self.opts.table:
            self._check_table(df)
        sink = self.opts.sink_name
        if sink is None:
            sink = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not sink:
            raise JetSparkError(
                "foreach_batch_sink: no streaming query id in this call; pass name=..."
            )
        columns = [F.col(name) for name in sink_columns(df.schema) if name is not None]
        task = partial(_write_task, self.opts, sink, batch_id)
        with _arrow_batch_bytes(df.sparkSession, ARROW_BATCH_BYTES):
            rows = df.select(*columns).mapInArrow(task, _STATS_SCHEMA).collect()
        stats = [WriteStats(r["task"], r["written"], r["duplicates"]) for r in rows]
        result = BatchResult(
            batch_id, sum(s.written for s in stats), sum(s.duplicates for s in stats)
        )
        with self._lock:
            self.results.append(result)
            del self.results[: -self.MAX_RESULTS]

    def _check_table(self, df: DataFrame) -> None:
        """A table sink's driver-side checks: columns every call, the stream once."""
        check_table_columns(df.schema)
        if self._table_checked:
            return
        opts = self.opts
        assert opts.stream is not None
        bridge = shared_bridge(
            opts.servers, request_timeout=opts.request_timeout, security=opts.security
        )
        bridge.call(check_table, bridge.client, opts.stream)
        self._table_checked = True


@contextmanager
def _arrow_batch_bytes(spark: SparkSession, limit: int) -> Iterator[None]:
    """The block's jobs get Arrow batches of at most ``limit`` bytes, unless the session
    sets :data:`ARROW_BATCH_BYTES_CONF` itself (then as it says); unset again after (the
    sink's callback runs one batch at a time on the query's own session).

    One py4j call asks whether the session sets it (``conf.get(key, None)``: None when
    unset); ``conf.getAll`` cost a round trip per set option, then a Java
    NoSuchElementException converted at the end: 30-60 ms of each call's driver time."""
    conf = spark.conf
    if conf.get(ARROW_BATCH_BYTES_CONF, None) is not None:
        yield
        return
    conf.set(ARROW_BATCH_BYTES_CONF, str(limit))
    try:
        yield
    finally:
        conf.unset(ARROW_BATCH_BYTES_CONF)


_STATS_SCHEMA = "task int, written long, duplicates long"
_STATS_ARROW = pa.schema(
    [("task", pa.int32()), ("written", pa.int64()), ("duplicates", pa.int64())]
)


def _write_task(
    opts: SinkOptions, sink: str, batch_id: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    # The task's partition id is the index of the batch DataFrame's partition: it and the
    # rows in it are what a replay reproduces, so they seed the producer id.
    context = TaskContext.get()
    if context is None:
        raise JetSparkError("foreach_batch_sink: not running in a Spark task")
    task = context.partitionId()
    producer_id = producer_id_for("foreachBatch", sink, batch_id, task)
    stats = write_batches(opts, producer_id, task, keyed_rows(batches) if opts.table else batches)
    yield pa.RecordBatch.from_pydict(
        {"task": [stats.task], "written": [stats.written], "duplicates": [stats.duplicates]},
        schema=_STATS_ARROW,
    )
