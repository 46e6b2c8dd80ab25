"""The sinks' Arrow path end to end: what foreach_batch_sink and df.write store equals the
rows (keys, null keys, headers, partitions), in `offset` order per partition when the rows
have that column, and a foreachBatch batch replayed with its rows in another order stores
nothing twice."""

from __future__ import annotations

from typing import Any

import pytest

from jetsdk.partitioner import partition_for_key
from support.jet_dev import JetDev

from .helpers import create, read_partitions, unique

pytestmark = pytest.mark.spark

ROWS = 3000
PARTITIONS = 3


def _frame(spark: Any) -> Any:
    from pyspark.sql import functions as F

    n = F.col("id")
    return spark.range(ROWS, numPartitions=2).select(
        F.when(n % 5 == 0, F.lit(None))
        .otherwise(F.concat(F.lit("k"), n.cast("string")))
        .alias("key"),
        F.when(n % 7 == 0, F.lit(None))
        .otherwise(F.concat(F.lit("v"), n.cast("string")))
        .cast("binary")
        .alias("VALUE"),  # names match ignoring case
        F.when(n % 11 == 0, (n % PARTITIONS).cast("int")).alias("partition"),
        F.when(
            n % 3 == 0,
            F.array(F.struct(F.lit("n").alias("key"), n.cast("string").alias("value"))),
        ).alias("headers"),
        n.alias("offset"),  # orders the rows (spec/spark.md "Row order"), not written
    )


def test_foreach_batch_sink_replay_in_another_row_order_stores_nothing(
    spark: Any, spark_jet: JetDev
) -> None:
    """No ``offset`` column: the sink numbers each task's rows by their content, so the
    same rows in the same Spark partitions in reverse order are all recognised."""
    from pyspark.sql import functions as F

    import jetspark

    servers = spark_jet.servers
    name = unique("arrow-fb")
    create(servers, name, partitions=PARTITIONS)
    frame = _frame(spark).cache()
    ascending = frame.sortWithinPartitions("offset").drop("offset")
    descending = frame.sortWithinPartitions(F.desc("offset")).drop("offset")
    sink = jetspark.foreach_batch_sink(",".join(servers), name, name="arrow-fb")
    sink(ascending, 4)
    assert (sink.results[-1].written, sink.results[-1].duplicates) == (ROWS, 0)
    sink(descending, 4)  # the same batch again, rows reversed in each Spark partition
    assert (sink.results[-1].written, sink.results[-1].duplicates) == (0, ROWS)
    _check_layout(read_partitions(servers, name), frame, ordered=False)


def test_df_write_stores_the_rows(spark: Any, spark_jet: JetDev) -> None:
    servers = spark_jet.servers
    name = unique("arrow-ds")
    create(servers, name, partitions=PARTITIONS)
    frame = _frame(spark).cache()
    frame.write.format("jetstream").option("servers", ",".join(servers)).option(
        "stream", name
    ).mode("append").save()
    _check_layout(read_partitions(servers, name), frame)


def _check_layout(stored: dict[int, list[Any]], frame: Any, *, ordered: bool = True) -> None:
    """Every row stored once with its key, value and headers, in the partition the rules
    give, and (``ordered``) each Spark partition's rows in offset order within a stream
    partition."""
    rows = {r["offset"]: r for r in frame.collect()}
    assert sum(map(len, stored.values())) == ROWS
    seen: dict[int, list[int]] = {}
    for part, record in ((p, r) for p, records in stored.items() for r in records):
        ident = int(record.headers[0][1]) if record.headers else None
        if ident is None and record.value:
            ident = int(record.value[1:])
        if ident is None:
            continue  # neither a value nor a header to tell the row by
        row = rows[ident]
        assert record.key == (None if row["key"] is None else row["key"].encode())
        assert record.value == (b"" if row["VALUE"] is None else bytes(row["VALUE"]))
        assert record.headers == ((("n", str(ident).encode()),) if ident % 3 == 0 else ())
        if row["partition"] is not None:
            assert part == row["partition"]
        elif row["key"] is not None:
            assert part == partition_for_key(row["key"].encode(), PARTITIONS)
        seen.setdefault(part, []).append(ident)
    if not ordered:
        return
    for idents in seen.values():  # ids 0..1499 in one Spark partition, 1500.. in the other
        for half in ([i for i in idents if i < ROWS // 2], [i for i in idents if i >= ROWS // 2]):
            assert half == sorted(half)
