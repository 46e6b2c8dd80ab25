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

from typing import Any

from jetspark._version import __version__
from jetspark.errors import ColumnError, DataLossError, JetSparkError, OptionError, SinkWriteError
from jetspark.foreach_batch import BatchResult, ForeachBatchSink, foreach_batch_sink
from jetspark.offsets_mirror import committed_offsets, group_lag
from jetspark.source import FORMAT, JetStreamDataSource

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
    spark.dataSource.register(JetStreamDataSource)
