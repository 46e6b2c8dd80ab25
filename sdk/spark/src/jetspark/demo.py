"""The README demo's Spark part: orders → a streaming aggregation → a results stream.

    python -m jetspark.demo 127.0.0.1:9292        # or jetspark.demo.run(servers)
    python -m jetspark.demo 127.0.0.1:9292 --master spark://127.0.0.1:7077
    spark-submit --master spark://127.0.0.1:7077 .../jetspark/demo.py 127.0.0.1:9292

1. produces ``orders`` keyed JSON orders (``{"order_id", "customer", "amount_cents"}``) into
   the stream ``orders`` (3 partitions);
2. runs a Spark Structured Streaming query: ``jetstream`` source → parse JSON → per-customer
   count and sum (update mode) → :func:`jetspark.foreach_batch_sink` into the compacted
   stream ``order-totals`` (key = customer), exactly-once, with Trigger.AvailableNow and
   at most 1000 orders per micro-batch; the query's offsets are mirrored under group
   ``demo-order-totals``;
3. reads ``order-totals`` back with jetsdk and prints the latest total per customer, checked
   against the orders actually stored.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

import anyio
import orjson

import jetspark
from jetsdk import AckPolicy, Client, OffsetOutOfRange, Producer, StreamExists
from jetsdk.codec.record import Record, iter_records
from jetspark._compat import ADMISSION_CONTROL

__all__ = ["CUSTOMERS", "JVM_OPTIONS", "UNIX_SOCKETS", "local_spark", "read_committed", "run"]

CUSTOMERS = ("ada", "bob", "cy", "dee", "eve", "fay", "gus", "hal")
"""The demo's customers."""
QUERY_TIMEOUT_S = 600.0
"""Seconds the demo waits for its streaming query."""


JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:MetaspaceSize=256m"
"""The driver's and executors' JVM options of :func:`local_spark` (short jobs on small
machines; a user's Spark sets its own, docs/tutorial/spark.md "Memory"): the C1 compiler
only (no C2 compiler threads), the serial collector (no concurrent GC threads on 2 cores),
and a metaspace that starts at 256 MiB: Spark's generated classes grew it past the default
21 MiB four times in a bench session's first queries, each time a full collection of
0.19-1.38 s stopping every task (bench_spark.py, session 27); none with it. The heap stays
Spark's (spark.driver.memory, 1 GiB), its young generation the JVM's."""

UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"
"""Spark setting: talk to Python workers over Unix sockets instead of TCP. Over TCP on
Linux every Python task waited about 40 ms for its input (delayed ACKs; measured: an
8-task job of 1-row partitions on local[2] took 0.29 s, 0.12 s with Unix sockets), which
is most of a small micro-batch's cost."""


def local_spark(
    app: str = "jetspark-demo", master: str | None = None, *, jvm_reader: bool = False
) -> Any:
    """A SparkSession set up like the tests (UI off, 2 shuffle partitions, a JVM with the
    C1 compiler only and the serial GC, :data:`JVM_OPTIONS`; Python workers over
    Unix sockets, :data:`UNIX_SOCKETS`; on a local master, unless ``PYSPARK_PYTHON`` is
    set, Spark's Python workers are this interpreter importing pyspark compiled,
    :func:`jetspark.worker_python.worker_python`).

    ``master``: a Spark master URL (``spark://host:7077``, ``local-cluster[2,1,1024]``);
    default ``local[2]``, or, under ``spark-submit``, the master it was given.
    ``jvm_reader``: the session gets the ``jetstream-jvm`` reader's jar (:mod:`jetspark.jvm`,
    built at first use).
    """
    local = (master is None and "PYSPARK_GATEWAY_PORT" not in os.environ) or (
        master is not None and master.startswith("local")
    )
    if local and "PYSPARK_PYTHON" not in os.environ:
        from jetspark.worker_python import worker_python

        os.environ["PYSPARK_PYTHON"] = worker_python()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import pyspark
    from pyspark.sql import SparkSession

    # local-cluster starts executor JVMs from SPARK_HOME: pip's pyspark is a distribution.
    os.environ.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__))
    builder = SparkSession.builder
    if master is not None:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        builder = builder.master("local[2]")
    builder = (
        builder.appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
        .config(UNIX_SOCKETS, "true")
    )
    if jvm_reader:
        from jetspark.jvm import with_jvm_reader

        builder = with_jvm_reader(builder)
    if not ADMISSION_CONTROL:
        # PySpark 4.0/4.1: a Python worker had more than the default 15 s to connect back on
        # a loaded 2-core machine (nox -s spark_compat). On 4.3 this setting broke the
        # session's py4j gateway in the tests ("py4j does not exist in the JVM"): not set.
        builder = builder.config("spark.python.authenticate.socketTimeout", "120s")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


async def _create(client: Client, stream: str, **settings: Any) -> None:
    with suppress(StreamExists):  # made earlier with other settings: use it as it is
        await client.create_stream(stream, **settings)


async def _produce(
    servers: list[str], stream: str, count: int, seed: int, replication_factor: int
) -> None:
    rng = random.Random(seed)
    async with Client(servers) as client:
        await _create(client, stream, partitions=3, replication_factor=replication_factor)
        async with Producer(client, stream, ack=AckPolicy.ALL) as producer:
            handles = []
            for i in range(count):
                customer = rng.choice(CUSTOMERS)
                value = orjson.dumps(
                    {"order_id": i, "customer": customer, "amount_cents": rng.randint(100, 9999)}
                )
                handles.append(await producer.send_soon(value, customer.encode()))
            for handle in handles:
                await handle


async def read_committed(servers: Sequence[str], stream: str) -> dict[int, list[Record]]:
    """Every committed record of ``stream`` by partition, each in offset order (records
    that retention removes meanwhile are skipped, as for every reader)."""
    out: dict[int, list[Record]] = {}
    async with Client(list(servers)) as client:
        info = await client.stream_info(stream, refresh=True)
        for part in info.partitions:
            got = out.setdefault(part.partition, [])
            bounds = await client.list_offsets(stream, part.partition, "earliest")
            offset = bounds.log_start
            while offset < bounds.hw:
                try:
                    _header, raw = await client.fetch(
                        stream, part.partition, offset, max_bytes=1 << 20, max_wait=0.0
                    )
                except OffsetOutOfRange as exc:
                    # retention ran between ListOffsets and this Fetch: read on from the
                    # new log start
                    if exc.log_start is None or exc.log_start <= offset:
                        raise
                    offset = exc.log_start
                    continue
                records = [r for r in iter_records(raw) if r.offset < bounds.hw]
                if not records:
                    break
                got.extend(records)
                offset = records[-1].offset + 1
    return out


async def _read_all(servers: list[str], stream: str) -> list[Record]:
    return [r for records in (await read_committed(servers, stream)).values() for r in records]


def run(
    servers: str | Sequence[str],
    *,
    orders: int = 5000,
    spark: Any | None = None,
    orders_stream: str = "orders",
    totals_stream: str = "order-totals",
    seed: int = 7,
    replication_factor: int = 1,
    echo: Callable[[str], None] = print,
    master: str | None = None,
) -> dict[str, tuple[int, int]]:
    """Run the demo pipeline against ``servers`` and print the results.

    Args:
        servers: jet servers (``host:port`` list or comma-separated string).
        orders: how many orders to produce.
        spark: a SparkSession to use (default: a new one, stopped at the end).
        orders_stream, totals_stream: stream names.
        seed: seeds the generated orders.
        replication_factor: of the two streams, when the demo creates them (existing streams
            are used as they are).
        echo: where the output lines go.
        master: the Spark master of the session the demo makes (:func:`local_spark`).

    Returns:
        ``{customer: (orders, total_cents)}`` as read back from ``totals_stream``.

    Raises:
        RuntimeError: the query failed or the totals do not match the stored orders.
    """
    from pyspark.sql import functions as F

    server_list = [servers] if isinstance(servers, str) else list(servers)
    server_list = [s.strip() for item in server_list for s in item.split(",") if s.strip()]
    joined = ",".join(server_list)
    started = time.perf_counter()
    anyio.run(_produce, server_list, orders_stream, orders, seed, replication_factor)
    echo(f"produced {orders} orders into {orders_stream!r} ({time.perf_counter() - started:.1f} s)")

    anyio.run(_create_totals, server_list, totals_stream, replication_factor)
    own_spark = spark is None
    if own_spark:
        echo(f"starting a Spark session on {_master_name(master)} (the JVM takes a while) ...")
    session = local_spark(master=master) if spark is None else spark
    try:
        jetspark.register(session)
        parsed = (
            session.readStream.format("jetstream")
            .option("servers", joined)
            .option("streams", orders_stream)
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", "1000")
            .option("group", "demo-order-totals")
            .load()
            .select(
                F.from_json(
                    F.col("value").cast("string"),
                    "order_id long, customer string, amount_cents long",
                ).alias("o")
            )
            .select("o.*")
        )
        totals = parsed.groupBy("customer").agg(
            F.count(F.lit(1)).alias("orders"), F.sum("amount_cents").alias("total_cents")
        )
        results = totals.select(
            F.col("customer").alias("key"),
            F.to_json(F.struct("customer", "orders", "total_cents")).alias("value"),
        )
        sink = jetspark.foreach_batch_sink(joined, totals_stream)
        echo(
            f"query: jetstream source {orders_stream!r} (from the earliest offset, at most 1000 "
            "orders per micro-batch) -> parse JSON -> count and sum per customer (update "
            f"mode) -> foreach_batch_sink into the compacted stream {totals_stream!r} "
            "(exactly-once), Trigger.AvailableNow"
        )
        with tempfile.TemporaryDirectory(prefix="jetspark-demo-") as checkpoint:
            started = time.perf_counter()
            query = (
                results.writeStream.outputMode("update")
                .foreachBatch(sink)
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            if not query.awaitTermination(QUERY_TIMEOUT_S):
                query.stop()
                raise RuntimeError(f"the demo query did not finish in {QUERY_TIMEOUT_S} s")
            if query.exception() is not None:
                raise RuntimeError(f"the demo query failed: {query.exception()}")
        echo(
            f"spark: {len(sink.results)} micro-batches, "
            f"{sum(r.written for r in sink.results)} updates written to {totals_stream!r} "
            f"({time.perf_counter() - started:.1f} s)"
        )
    finally:
        if own_spark:
            session.stop()

    latest: dict[str, tuple[int, int]] = {}
    for record in sorted(anyio.run(_read_all, server_list, totals_stream), key=_order):
        row = orjson.loads(record.value)
        latest[row["customer"]] = (row["orders"], row["total_cents"])
    expected: dict[str, tuple[int, int]] = {}
    for record in anyio.run(_read_all, server_list, orders_stream):
        order = orjson.loads(record.value)
        count, total = expected.get(order["customer"], (0, 0))
        expected[order["customer"]] = (count + 1, total + order["amount_cents"])
    echo(f"{'customer':<10}{'orders':>8}{'total':>14}")
    for customer in sorted(latest):
        count, total = latest[customer]
        echo(f"{customer:<10}{count:>8}{total / 100:>14,.2f}")
    lag = jetspark.group_lag(server_list, "demo-order-totals")
    echo(f"group demo-order-totals lag: {sum(lag.values())} (per partition {sorted(lag.items())})")
    if latest != expected:
        raise RuntimeError(f"totals {latest} do not match the stored orders {expected}")
    echo("totals match the stored orders: OK")
    return latest


def _master_name(master: str | None) -> str:
    if master is not None:
        return master
    return "spark-submit's master" if "PYSPARK_GATEWAY_PORT" in os.environ else "local[2]"


async def _create_totals(servers: list[str], stream: str, replication_factor: int) -> None:
    async with Client(servers) as client:
        await _create(client, stream, compact=True, replication_factor=replication_factor)


def _order(record: Record) -> tuple[int, int]:
    return (record.timestamp, record.offset)


def main(argv: list[str] | None = None) -> None:
    """``python -m jetspark.demo [SERVERS] [--master URL] [--orders N]`` (also under
    ``spark-submit``, which then supplies the master)."""
    parser = argparse.ArgumentParser(prog="python -m jetspark.demo", description=__doc__)
    parser.add_argument(
        "servers", nargs="?", default=os.environ.get("JET_SERVERS", "127.0.0.1:9292")
    )
    parser.add_argument("--master", help="Spark master URL (default local[2])")
    parser.add_argument("--orders", type=int, default=5000, help="orders to produce")
    args = parser.parse_args(argv)
    run(args.servers, orders=args.orders, master=args.master)


if __name__ == "__main__":
    main()
