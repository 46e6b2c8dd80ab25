"""A Spark driver for tests/spark/test_local_cluster.py, run as its own process on
``local-cluster[2,1,1024]`` (two executor JVMs with their own Python workers):

    python tests/spark/cluster_driver.py SERVERS SRC OUT CHECKPOINT (run|available-now) [HANG]

jetstream source → ``value`` with ``!`` appended → :func:`jetspark.foreach_batch_sink`.
It prints JSON lines on stdout: ``{"event": "jvm", "pid": P}`` (the driver JVM, whose
children are the executor JVMs), ``{"event": "start", "batch": N}`` before writing a
batch and ``{"event": "done", "batch": N, "written": W, "duplicates": D}`` after, and
``{"event": "end"}`` when the query stopped (``available-now``). ``run`` never stops by
itself: the test kills it. With ``HANG`` = N, batch N writes only its Spark partition 0,
prints ``{"event": "hang", "batch": N, "written": W}`` and waits to be killed.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import orjson

MAX_RECORDS_PER_TRIGGER = 1500
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _say(event: str, **fields: Any) -> None:
    line = {"event": event, "t": round(time.time(), 3), **fields}
    sys.stdout.write(orjson.dumps(line).decode() + "\n")
    sys.stdout.flush()


def main(servers: str, src: str, out: str, checkpoint: str, mode: str, hang: str = "-1") -> None:
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
        .appName("jetspark-local-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
        .config("spark.python.unix.domain.socket.enabled", "true")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jetspark.register(spark)
    _say("jvm", pid=spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]

    df = (
        spark.readStream.format("jetstream")
        .option("servers", servers)
        .option("streams", src)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", str(MAX_RECORDS_PER_TRIGGER))
        .load()
        .select("key", F.concat("value", F.lit(b"!")).alias("value"), "offset")
    )
    sink = jetspark.foreach_batch_sink(servers, out)

    def write(batch: Any, batch_id: int) -> None:
        _say("start", batch=batch_id)
        if batch_id == int(hang):
            sink(batch.filter(F.spark_partition_id() == 0), batch_id)
            _say("hang", batch=batch_id, written=sink.results[-1].written)
            threading.Event().wait(600)  # bounded; the test kills this process first
            raise RuntimeError("not killed")
        sink(batch, batch_id)
        result = sink.results[-1]
        _say("done", batch=batch_id, written=result.written, duplicates=result.duplicates)

    writer = df.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
    if mode == "available-now":
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        _say("end")
        spark.stop()
    else:
        writer.trigger(processingTime="0 seconds").start().awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:7])
