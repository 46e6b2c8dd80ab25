"""The Spark driver program of the local-cluster tests (this package), run as its own
process with this directory first on sys.path. It prints JSON event lines on stdout
(``{"event": E, "t": wall time, ...}``).

    python driver.py serve
    python driver.py available-now SERVERS SRC OUT CHECKPOINT

``serve`` starts one SparkSession on ``local-cluster[2,1,1024]`` (two executor JVMs, one
task slot each, with their own Python workers: the tasks run in other processes than the
driver's) and then runs the scenarios it reads from stdin, one JSON line each
(``{"do": "table" | "run", ...}``), one after another, so that the tests of this package
pay for one driver JVM and its executors instead of one set each (a start of a driver and
an executor JVM costs about as much CPU as the rest of a test's work). A scenario that
fails prints ``{"event": "error", "error": ...}`` and the driver serves the next one; at the
end of stdin it stops Spark and exits.

- ``table`` (servers, prices, orders, totals, checkpoint): reads table PRICES
  (``option("table", ...)``) and prints its rows: ``{"event": "table", "rows": [[key,
  value, partition, offset], ...]}``. Then joins stream ORDERS (stream-static) with that
  table on ``key`` and writes ``value@price`` per order into table TOTALS with
  ``foreach_batch_sink(table=...)``. The first query writes only Spark partition 0 of batch
  0, prints ``{"event": "partial", "batch": 0, "written": W}`` and fails the batch; the
  query stops with that error (``{"event": "failed"}``). A second query from the same
  checkpoint replays batch 0 and goes on (Trigger.AvailableNow), printing ``{"event":
  "done", "batch": N, "written": W, "duplicates": D}`` per batch, then ``{"event":
  "end"}``. Keys and values are ASCII there and printed as strings.
- ``run`` (servers, src, out, checkpoint, hang): prints ``{"event": "jvm", "pid": P}`` (the
  driver JVM, whose children are the executor JVMs), then runs jetstream source →
  ``value`` with ``!`` appended → :func:`jetspark.foreach_batch_sink`, printing
  ``{"event": "start", "batch": N}`` before writing a batch and ``{"event": "done",
  "batch": N, "written": W, "duplicates": D}`` after. Batch ``hang`` writes only its Spark
  partition 0, prints ``{"event": "hang", "batch": N, "written": W}`` and waits to be
  killed; the query never stops by itself (the test kills the driver: nothing follows).

- ``jvm`` (servers, src, checkpoint): reads SRC with the JVM reader (format
  ``jetstream-jvm``, :mod:`jetspark.jvm`), whose tasks run in the executor JVMs: a batch
  read prints ``{"event": "jvm-batch", "rows": [[partition, offset, value], ...]}``, then a
  stream from earliest at RUN_RECORDS_PER_TRIGGER records a batch (Trigger.AvailableNow)
  prints ``{"event": "jvm-stream", "batch": N, "rows": [...]}`` per batch and ``{"event":
  "end"}``.

``available-now`` is the same query as ``run`` on ``local[2]`` (the driver's JVM runs the
two task slots; the Python workers are still processes of their own), a resuming driver's:
it ends when the stream's records are written, printing ``done`` per batch and ``end``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for support
from support.spark_jvm import JVM_OPTIONS, use_worker_python

RUN_RECORDS_PER_TRIGGER = 1500
"""Micro-batch size of ``run`` and ``available-now``."""
TABLE_RECORDS_PER_TRIGGER = 120
"""Micro-batch size of ``table``'s stream of orders."""
HANG_BOUND_S = 600
"""How long batch ``hang`` of ``run`` waits to be killed (the test kills it long before)."""


def say(event: str, **fields: Any) -> None:
    """Print one JSON event line (``event``, wall time ``t``, ``fields``) and flush."""
    line = {"event": event, "t": round(time.time(), 3), **fields}
    sys.stdout.write(orjson.dumps(line).decode() + "\n")
    sys.stdout.flush()


def session(app_name: str, executors: int) -> Any:
    """A SparkSession on ``local-cluster[E,C,1024]`` named ``app_name``, with the jetstream
    format registered: ``executors`` executor JVMs, two task slots in all; with
    ``executors=0``, ``local[2]``."""
    import pyspark

    use_worker_python()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # local-cluster starts executors from SPARK_HOME's jars: pip's pyspark is one.
    os.environ.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__))
    from pyspark.sql import SparkSession

    import jetspark
    from jetspark.jvm import with_jvm_reader

    master = f"local-cluster[{executors},{2 // executors},1024]" if executors else "local[2]"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
        .config("spark.python.unix.domain.socket.enabled", "true")
        .config("spark.sql.shuffle.partitions", "2")
    )
    spark = with_jvm_reader(builder).getOrCreate()  # the jetstream-jvm reader's jar too
    spark.sparkContext.setLogLevel("ERROR")
    jetspark.register(spark)
    return spark


def read_from_earliest(
    spark: Any, servers: str, stream: str, max_records_per_trigger: int, **options: str
) -> Any:
    """A streaming DataFrame of the jetstream source over ``stream`` from its earliest
    offsets, at most ``max_records_per_trigger`` records a micro-batch; ``options``: more
    source options."""
    return (
        spark.readStream.format("jetstream")
        .option("servers", servers)
        .option("streams", stream)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", str(max_records_per_trigger))
        .options(**options)
        .load()
    )


def table(spark: Any, servers: str, prices: str, orders: str, totals: str, checkpoint: str) -> None:
    """The ``table`` scenario (module docstring)."""
    from pyspark.sql import functions as F

    import jetspark

    # Keep the join's two shuffle partitions (adaptive execution would coalesce them into
    # one): batch 0 fails after writing one of them.
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        source = spark.read.format("jetstream").option("servers", servers).option("table", prices)
        rows = source.load().select("key", "value", "partition", "offset").collect()
        say("table", rows=[[r.key.decode(), r.value.decode(), r.partition, r.offset] for r in rows])

        price = source.load().select("key", F.col("value").alias("price"))
        joined = (
            read_from_earliest(spark, servers, orders, TABLE_RECORDS_PER_TRIGGER)
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

        first = joined.writeStream.foreachBatch(fail_half_way)
        query = first.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        try:
            query.awaitTermination()
        except Exception as exc:
            say("failed", error=type(exc).__name__)
        second = joined.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
        second.trigger(availableNow=True).start().awaitTermination()
        say("end")
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")


def run(spark: Any, servers: str, src: str, out: str, checkpoint: str, hang: int = -1) -> None:
    """The ``run`` scenario (module docstring; with ``hang`` -1, ``available-now``'s
    query, which ends when the records are written)."""
    from pyspark.sql import functions as F

    import jetspark

    # minPartitions 2: a Spark partition per stream partition (small ranges would share one),
    # so batch ``hang`` has two tasks and one of them hangs.
    df = read_from_earliest(spark, servers, src, RUN_RECORDS_PER_TRIGGER, minPartitions="2")
    df = df.select("key", F.concat("value", F.lit(b"!")).alias("value"), "offset")
    sink = jetspark.foreach_batch_sink(servers, out)

    def write(batch: Any, batch_id: int) -> None:
        say("start", batch=batch_id)
        if batch_id == hang:
            sink(batch.filter(F.spark_partition_id() == 0), batch_id)
            say("hang", batch=batch_id, written=sink.results[-1].written)
            threading.Event().wait(HANG_BOUND_S)  # bounded; the test kills this process first
            raise RuntimeError("not killed")
        sink(batch, batch_id)
        result = sink.results[-1]
        say("done", batch=batch_id, written=result.written, duplicates=result.duplicates)

    writer = df.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
    if hang < 0:
        writer.trigger(availableNow=True).start().awaitTermination()
        say("end")
    else:
        say("jvm", pid=spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        writer.trigger(processingTime="0 seconds").start().awaitTermination()


def jvm(spark: Any, servers: str, src: str, checkpoint: str) -> None:
    """The ``jvm`` scenario (module docstring)."""
    from jetspark.jvm import JVM_FORMAT

    def rows(df: Any) -> list[list[Any]]:
        got = df.select("partition", "offset", "value").collect()
        return sorted([r.partition, r.offset, r.value.decode()] for r in got)

    reader = spark.read.format(JVM_FORMAT).option("servers", servers).option("streams", src)
    say("jvm-batch", rows=rows(reader.load()))
    stream = (
        spark.readStream.format(JVM_FORMAT)
        .option("servers", servers)
        .option("streams", src)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", str(RUN_RECORDS_PER_TRIGGER))
        .load()
    )

    def write(batch: Any, batch_id: int) -> None:
        say("jvm-stream", batch=batch_id, rows=rows(batch))

    writer = stream.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
    writer.trigger(availableNow=True).start().awaitTermination()
    say("end")


SCENARIOS = {"table": table, "run": run, "jvm": jvm}


def serve() -> None:
    """Run the scenarios read from stdin on one local-cluster session (module docstring)."""
    spark = session("jetspark-local-cluster", executors=2)
    for line in sys.stdin:
        command = orjson.loads(line)
        scenario = SCENARIOS[command.pop("do")]
        try:
            scenario(spark, **command)
        except Exception as exc:
            traceback.print_exc()
            say("error", error=f"{type(exc).__name__}: {exc}")
    spark.stop()


def available_now(servers: str, src: str, out: str, checkpoint: str) -> None:
    """The resuming driver's query on ``local[2]`` (module docstring)."""
    spark = session("jetspark-local-cluster-resumed", executors=0)
    run(spark, servers, src, out, checkpoint)
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        available_now(*sys.argv[2:6])
