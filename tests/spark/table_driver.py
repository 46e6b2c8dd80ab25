"""A Spark driver for tests/spark/test_table_local_cluster.py, run as its own process on
``local-cluster[2,1,1024]`` (two executor JVMs with their own Python workers):

    python tests/spark/table_driver.py SERVERS PRICES ORDERS TOTALS CHECKPOINT

1. Reads table PRICES (``option("table", ...)``) and prints its rows:
   ``{"event": "table", "rows": [[key, value, partition, offset], ...]}``.
2. Joins stream ORDERS (stream-static) with that table on ``key`` and writes
   ``value@price`` per order into table TOTALS with ``foreach_batch_sink(table=...)``.
   The first run writes only Spark partition 0 of batch 0, prints
   ``{"event": "partial", "batch": 0, "written": W}`` and fails the batch; the query stops
   with that error (``{"event": "failed"}``). A second run from the same checkpoint replays
   batch 0 and goes on (Trigger.AvailableNow), printing
   ``{"event": "done", "batch": N, "written": W, "duplicates": D}`` per batch, then
   ``{"event": "end"}``.

Keys and values are ASCII in this test and printed as strings.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import orjson

MAX_RECORDS_PER_TRIGGER = 120
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _say(event: str, **fields: Any) -> None:
    line = {"event": event, "t": round(time.time(), 3), **fields}
    sys.stdout.write(orjson.dumps(line).decode() + "\n")
    sys.stdout.flush()


def main(servers: str, prices: str, orders: str, totals: str, checkpoint: str) -> None:
    import pyspark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # local-cluster starts executors from SPARK_HOME's jars: pip's pyspark is one.
    os.environ.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__))
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import jetspark

    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("jetspark-table-local-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
        .config("spark.python.unix.domain.socket.enabled", "true")
        .config("spark.sql.shuffle.partitions", "2")
        # Keep the join's two shuffle partitions (adaptive execution would coalesce them
        # into one): batch 0 fails after writing one of them.
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jetspark.register(spark)

    table = spark.read.format("jetstream").option("servers", servers).option("table", prices)
    rows = table.load().select("key", "value", "partition", "offset").collect()
    _say("table", rows=[[r.key.decode(), r.value.decode(), r.partition, r.offset] for r in rows])

    price = table.load().select("key", F.col("value").alias("price"))
    joined = (
        spark.readStream.format("jetstream")
        .option("servers", servers)
        .option("streams", orders)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", str(MAX_RECORDS_PER_TRIGGER))
        .load()
        .join(price, "key")
        .select("key", F.concat("value", F.lit(b"@"), "price").alias("value"), "offset")
    )
    sink = jetspark.foreach_batch_sink(servers, table=totals)

    def fail_half_way(batch: Any, batch_id: int) -> None:
        sink(batch.filter(F.spark_partition_id() == 0), batch_id)
        _say("partial", batch=batch_id, written=sink.results[-1].written)
        raise RuntimeError("fails batch 0 after part of it was written")

    def write(batch: Any, batch_id: int) -> None:
        sink(batch, batch_id)
        result = sink.results[-1]
        _say("done", batch=batch_id, written=result.written, duplicates=result.duplicates)

    first = joined.writeStream.foreachBatch(fail_half_way).option("checkpointLocation", checkpoint)
    query = first.trigger(availableNow=True).start()
    try:
        query.awaitTermination()
    except Exception as exc:
        _say("failed", error=type(exc).__name__)
    second = joined.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
    second.trigger(availableNow=True).start().awaitTermination()
    _say("end")
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
