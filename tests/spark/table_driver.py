"""A Spark driver for tests/spark/test_table_local_cluster.py, run as its own process on
``local-cluster[1,2,1024]`` (an executor JVM with two task slots and its own Python
workers: the table's reads and writes run in another process than the driver's; how many
executors share them is not what the test is about):

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

import sys
from typing import Any

from driver_kit import local_cluster_session, read_from_earliest, say

MAX_RECORDS_PER_TRIGGER = 120


def main(servers: str, prices: str, orders: str, totals: str, checkpoint: str) -> None:
    from pyspark.sql import functions as F

    import jetspark

    # Keep the join's two shuffle partitions (adaptive execution would coalesce them into
    # one): batch 0 fails after writing one of them.
    spark = local_cluster_session(
        "jetspark-table-local-cluster", executors=1, spark__sql__adaptive__enabled="false"
    )

    table = spark.read.format("jetstream").option("servers", servers).option("table", prices)
    rows = table.load().select("key", "value", "partition", "offset").collect()
    say("table", rows=[[r.key.decode(), r.value.decode(), r.partition, r.offset] for r in rows])

    price = table.load().select("key", F.col("value").alias("price"))
    joined = (
        read_from_earliest(spark, servers, orders, MAX_RECORDS_PER_TRIGGER)
        .join(price, "key")
        .select("key", F.concat("value", F.lit(b"@"), "price").alias("value"), "offset")
    )
    sink = jetspark.foreach_batch_sink(servers, table=totals)

    def fail_half_way(batch: Any, batch_id: int) -> None:
        sink(batch.filter(F.spark_partition_id() == 0), batch_id)
        say("partial", batch=batch_id, written=sink.results[-1].written)
        raise RuntimeError("fails batch 0 after part of it was written")

    def write(batch: Any, batch_id: int) -> None:
        sink(batch, batch_id)
        result = sink.results[-1]
        say("done", batch=batch_id, written=result.written, duplicates=result.duplicates)

    first = joined.writeStream.foreachBatch(fail_half_way).option("checkpointLocation", checkpoint)
    query = first.trigger(availableNow=True).start()
    try:
        query.awaitTermination()
    except Exception as exc:
        say("failed", error=type(exc).__name__)
    second = joined.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
    second.trigger(availableNow=True).start().awaitTermination()
    say("end")
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
