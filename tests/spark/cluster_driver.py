"""A Spark driver for tests/spark/test_local_cluster.py, run as its own process on
``local-cluster[2,1,1024]`` (two executor JVMs with their own Python workers; in mode
``available-now``, the resuming driver's, ``local[2]``: no executor is killed then, and
the driver's JVM runs the tasks, in Python workers of their own):

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

import sys
import threading
from typing import Any

from driver_kit import local_cluster_session, read_from_earliest, say

MAX_RECORDS_PER_TRIGGER = 1500


def main(servers: str, src: str, out: str, checkpoint: str, mode: str, hang: str = "-1") -> None:
    from pyspark.sql import functions as F

    import jetspark

    spark = local_cluster_session("jetspark-local-cluster", executors=2 if mode == "run" else 0)
    say("jvm", pid=spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]

    # minPartitions 2: a Spark partition per stream partition (small ranges would share one),
    # so batch 3 has two tasks and one of them hangs.
    df = read_from_earliest(spark, servers, src, MAX_RECORDS_PER_TRIGGER, minPartitions="2")
    df = df.select("key", F.concat("value", F.lit(b"!")).alias("value"), "offset")
    sink = jetspark.foreach_batch_sink(servers, out)

    def write(batch: Any, batch_id: int) -> None:
        say("start", batch=batch_id)
        if batch_id == int(hang):
            sink(batch.filter(F.spark_partition_id() == 0), batch_id)
            say("hang", batch=batch_id, written=sink.results[-1].written)
            threading.Event().wait(600)  # bounded; the test kills this process first
            raise RuntimeError("not killed")
        sink(batch, batch_id)
        result = sink.results[-1]
        say("done", batch=batch_id, written=result.written, duplicates=result.duplicates)

    writer = df.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
    if mode == "available-now":
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        say("end")
        spark.stop()
    else:
        writer.trigger(processingTime="0 seconds").start().awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:7])
