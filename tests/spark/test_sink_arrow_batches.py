"""foreach_batch_sink runs its job with Arrow batches of at most 4 MiB (Spark's
``spark.sql.execution.arrow.maxBytesPerBatch``, 64 MiB by default: 10,000 rows of 16 KiB
values in one batch) unless the session sets that itself, and leaves the session's
setting as it was. Before, the sink used the session's batches as they were (the helper
did not exist: the first test failed)."""

from __future__ import annotations

from typing import Any

import pytest

from support.jet_dev import JetDev

from .helpers import create, read_partitions, unique

pytestmark = pytest.mark.spark

VALUE_BYTES = 16 * 1024
ROWS = 600


def test_the_sinks_job_gets_4_mib_arrow_batches_and_the_session_its_setting_back(
    spark: Any,
) -> None:
    from jetspark.foreach_batch import (
        ARROW_BATCH_BYTES,
        ARROW_BATCH_BYTES_CONF,
        _arrow_batch_bytes,
    )

    assert ARROW_BATCH_BYTES_CONF not in spark.conf.getAll
    with _arrow_batch_bytes(spark, ARROW_BATCH_BYTES):
        assert spark.conf.getAll[ARROW_BATCH_BYTES_CONF] == str(ARROW_BATCH_BYTES)
    assert ARROW_BATCH_BYTES_CONF not in spark.conf.getAll
    spark.conf.set(ARROW_BATCH_BYTES_CONF, "1m")  # the user's own setting wins
    try:
        with _arrow_batch_bytes(spark, ARROW_BATCH_BYTES):
            assert spark.conf.getAll[ARROW_BATCH_BYTES_CONF] == "1m"
        assert spark.conf.getAll[ARROW_BATCH_BYTES_CONF] == "1m"
    finally:
        spark.conf.unset(ARROW_BATCH_BYTES_CONF)


def test_large_values_are_written_and_the_conf_left_unset(spark: Any, spark_jet: JetDev) -> None:
    from pyspark.sql import functions as F

    import jetspark
    from jetspark.foreach_batch import ARROW_BATCH_BYTES_CONF

    servers = spark_jet.servers
    name = unique("arrow-big")
    create(servers, name, partitions=2)
    n = F.col("id")
    frame = spark.range(ROWS, numPartitions=2).select(
        F.concat(F.lit("k"), n.cast("string")).alias("key"),
        F.concat(n.cast("string"), F.lit(":"), F.expr(f"repeat('x', {VALUE_BYTES})"))
        .cast("binary")
        .alias("value"),
    )
    sink = jetspark.foreach_batch_sink(",".join(servers), name, name="arrow-big")
    sink(frame, 0)
    assert (sink.results[-1].written, sink.results[-1].duplicates) == (ROWS, 0)
    assert ARROW_BATCH_BYTES_CONF not in spark.conf.getAll
    stored = [r for records in read_partitions(servers, name).values() for r in records]
    assert len(stored) == ROWS
    assert sorted(int(r.value.split(b":")[0]) for r in stored) == list(range(ROWS))
