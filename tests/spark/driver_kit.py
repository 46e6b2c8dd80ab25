"""What the Spark driver programs of the local-cluster tests share (cluster_driver.py,
table_driver.py; each runs as its own process, with this directory first on sys.path):
their JSON event lines on stdout and a ``local-cluster`` session (executor JVMs with their
own Python workers) with the tests' JVM options."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for support
from support.spark_jvm import JVM_OPTIONS, use_worker_python


def say(event: str, **fields: Any) -> None:
    """Print one JSON event line (``event``, wall time ``t``, ``fields``) and flush."""
    line = {"event": event, "t": round(time.time(), 3), **fields}
    sys.stdout.write(orjson.dumps(line).decode() + "\n")
    sys.stdout.flush()


def local_cluster_session(app_name: str, executors: int = 2, **conf: str) -> Any:
    """A SparkSession on ``local-cluster[E,C,1024]`` named ``app_name``, with the
    jetstream format registered: ``executors`` executor JVMs, two task slots in all (one
    core each of two, or two cores of one); with ``executors=0``, ``local[2]`` (the
    driver's JVM runs the two task slots; the Python workers are still processes of their
    own). ``conf``: more settings (dots written as ``__``). Each executor JVM and its
    Python workers cost CPU to start, the scarce thing on a loaded 2-core machine: one,
    or none, where the test is not about several."""
    import pyspark

    use_worker_python()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # local-cluster starts executors from SPARK_HOME's jars: pip's pyspark is one.
    os.environ.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__))
    from pyspark.sql import SparkSession

    import jetspark

    builder = (
        SparkSession.builder.master(
            f"local-cluster[{executors},{2 // executors},1024]" if executors else "local[2]"
        )
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
        .config("spark.python.unix.domain.socket.enabled", "true")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for name, value in conf.items():
        builder = builder.config(name.replace("__", "."), value)
    spark = builder.getOrCreate()
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
