"""jetspark: Spark Structured Streaming source and sinks for jet streams (PySpark 4.0+;
4.2+ for Spark's admission control: spec/spark.md, "PySpark versions").

    import jetspark
    jetspark.register(spark)                       # the "jetstream" format

    orders = (spark.readStream.format("jetstream")
              .option("servers", "127.0.0.1:9292")
              .option("streams", "orders")
              .option("startingOffsets", "earliest")
              .load())                              # key, value, stream, subject, partition,
                                                    # offset, timestamp[, headers]
    sink = jetspark.foreach_batch_sink(servers="127.0.0.1:9292", stream="totals")
    query = totals.writeStream.foreachBatch(sink).option("checkpointLocation", cp).start()

Also ``spark.read.format("jetstream")`` (batch, startingOffsets/endingOffsets),
``df.write.format("jetstream")`` and ``df.writeStream.format("jetstream")``. Tables
(compacted streams): ``spark.read.format("jetstream").option("table", "prices")`` is the
latest value per key as a static DataFrame (:mod:`jetspark.table`), and
``foreach_batch_sink(servers, table="totals")`` writes into one (:mod:`jetspark.table_sink`).
Options,
schema and guarantees: spec/spark.md. Errors: :mod:`jetspark.errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jetsdk.lazy_names import lazy_names
from jetspark._version import __version__
from jetspark.errors import ColumnError, DataLossError, JetSparkError, OptionError, SinkWriteError

if TYPE_CHECKING:
    from jetspark.foreach_batch import BatchResult, ForeachBatchSink, foreach_batch_sink
    from jetspark.offsets_mirror import committed_offsets, group_lag
    from jetspark.source import FORMAT, JetStreamDataSource

_LAZY = {
    "BatchResult": "jetspark.foreach_batch",
    "ForeachBatchSink": "jetspark.foreach_batch",
    "foreach_batch_sink": "jetspark.foreach_batch",
    "committed_offsets": "jetspark.offsets_mirror",
    "group_lag": "jetspark.offsets_mirror",
    "FORMAT": "jetspark.source",
    "JetStreamDataSource": "jetspark.source",
}
"""Where each public name lives: imported on first use. Spark's Python workers import
``jetspark.source`` (the pickled data source, by reference) or ``jetspark.foreach_batch``
(the sink's functions): each then imports what it needs, not the whole package (the sinks'
writer and the SDK's consumer for a worker that only plans a read)."""

__getattr__, __dir__ = lazy_names(globals(), _LAZY)


__all__ = [
    "FORMAT",
    "BatchResult",
    "ColumnError",
    "DataLossError",
    "ForeachBatchSink",
    "JetSparkError",
    "JetStreamDataSource",
    "OptionError",
    "SinkWriteError",
    "__version__",
    "committed_offsets",
    "foreach_batch_sink",
    "group_lag",
    "register",
]


def register(spark: Any) -> None:
    """Register the ``jetstream`` format with a SparkSession (idempotent)."""
    from jetspark.source import JetStreamDataSource

    spark.dataSource.register(JetStreamDataSource)
