"""A jetspark smoke pipeline for `nox -s spark_compat` (one PySpark version per run).

    python tools/spark_smoke.py

Starts `jet dev` in a temporary directory and a local[2] Spark session, then checks:

1. streaming source with maxRecordsPerTrigger=100 → foreach_batch_sink: 300 records in
   batches of at most 100, every record once in the target;
2. streaming source → ``writeStream.format("jetstream")`` with Trigger.AvailableNow: every
   record once;
3. batch ``spark.read`` of the target → ``df.write.format("jetstream")``: every record once;
4. streaming source with maxBytesPerTrigger (about 60 records' bytes) → foreach_batch_sink:
   every record once, no batch over the limit (Spark's ``ReadMaxBytes`` where PySpark has
   it, the reader's own limit on 4.0 and 4.1).

Prints one line per check and the PySpark version; exits 1 if a check fails.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import anyio

from support.jet_dev import JetDev

TIMEOUT_S = 300.0
ROWS = 300


def _check(name: str, got: Counter[Any], want: Counter[Any], extra: str = "") -> bool:
    ok = got == want
    print(f"  {'OK  ' if ok else 'FAIL'} {name}: {sum(got.values())} records{extra}", flush=True)
    return ok


def _limited(spark: Any, frame: Any, servers: str, target: str, tmp: str) -> list[int]:
    """Run ``frame`` into foreach_batch_sink(``target``) until ROWS records are written;
    the sizes of the non-empty batches."""
    import jetspark

    sink = jetspark.foreach_batch_sink(servers, target)
    query = (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", os.path.join(tmp, f"cp-{target}"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    deadline = time.monotonic() + TIMEOUT_S
    while sum(r.written for r in sink.results) < ROWS and query.exception() is None:
        if time.monotonic() > deadline:
            break
        query.awaitTermination(0.2)
    query.stop()
    return [r.written for r in sink.results if r.written]


async def _bytes_per_offset(servers: list[str]) -> list[float]:
    from jetsdk import Client
    from jetspark._sizes import bytes_per_offset

    async with Client(servers) as client:
        return list((await bytes_per_offset(client, ["src"])).values())


def main() -> int:
    import pyspark

    import jetspark
    from jetspark.demo import local_spark
    from spark.helpers import create, produce, read_all

    print(f"pyspark {pyspark.__version__}, jetspark smoke pipeline", flush=True)
    started = time.perf_counter()
    ok = True
    with tempfile.TemporaryDirectory(prefix="jetspark-smoke-") as tmp:
        dev = JetDev.start(Path(tmp) / "data")
        spark = None
        try:
            servers = dev.servers
            joined = ",".join(servers)
            for name in ("src", "out1", "out2", "out3", "out4"):
                create(servers, name, partitions=2)
            sent = [(f"k{i % 13}".encode(), b"v%d" % i) for i in range(ROWS)]
            produce(servers, "src", sent)
            want = Counter(sent)
            spark = local_spark("jetspark-smoke")
            jetspark.register(spark)

            def source(**options: str) -> Any:
                reader = spark.readStream.format("jetstream").option("servers", joined)
                reader = reader.option("streams", "src").option("startingOffsets", "earliest")
                for key, value in options.items():
                    reader = reader.option(key, value)
                return reader.load().select("key", "value", "offset")

            # 1. admission control (PySpark 4.2) or the reader's own limit (4.0, 4.1)
            sizes = _limited(spark, source(maxRecordsPerTrigger="100"), joined, "out1", tmp)
            got = Counter((r.key, r.value) for r in read_all(servers, "out1"))
            ok &= _check(
                "source (maxRecordsPerTrigger=100) -> foreach_batch_sink",
                got,
                want,
                f", batches {sizes}",
            )
            if max(sizes, default=0) > 100:
                print("  FAIL a batch exceeded maxRecordsPerTrigger", flush=True)
                ok = False

            # 2. the streaming writer (Arrow on 4.1+, rows on 4.0), Trigger.AvailableNow
            query = (
                source()
                .writeStream.format("jetstream")
                .option("servers", joined)
                .option("stream", "out2")
                .option("checkpointLocation", os.path.join(tmp, "cp2"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(TIMEOUT_S)
            got = Counter((r.key, r.value) for r in read_all(servers, "out2"))
            ok &= _check("source (AvailableNow) -> writeStream.format('jetstream')", got, want)

            # 3. batch read and batch write
            frame = (
                spark.read.format("jetstream")
                .option("servers", joined)
                .option("streams", "out2")
                .load()
                .select("key", "value")
            )
            frame.write.format("jetstream").option("servers", joined).option("stream", "out3").mode(
                "append"
            ).save()
            got = Counter((r.key, r.value) for r in read_all(servers, "out3"))
            ok &= _check("spark.read -> df.write.format('jetstream')", got, want)

            # 4. maxBytesPerTrigger: ReadMaxBytes (newer PySpark) or the reader's own limit
            per_offset = anyio.run(_bytes_per_offset, servers)
            limit = int(60 * max(per_offset))
            sizes = _limited(spark, source(maxBytesPerTrigger=str(limit)), joined, "out4", tmp)
            got = Counter((r.key, r.value) for r in read_all(servers, "out4"))
            ok &= _check(
                f"source (maxBytesPerTrigger={limit}) -> foreach_batch_sink",
                got,
                want,
                f", batches {sizes}",
            )
            if max(sizes, default=0) * min(per_offset) > limit or len(sizes) < 3:
                print("  FAIL a batch exceeded maxBytesPerTrigger", flush=True)
                ok = False
        finally:
            if spark is not None:
                spark.stop()
            dev.stop()
    print(f"{'all checks passed' if ok else 'FAILED'} ({time.perf_counter() - started:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
