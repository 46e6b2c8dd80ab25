"""The README demo: ``nox -s demo`` (or ``python -m jetserver.demo``).

Starts a private nats-server and a jet server in a temporary directory (the embedded
default), then shows the real flow and prints what happened:

1. create a stream with three partitions on subject ``orders``;
2. produce keyed orders with the SDK Producer (ack ALL: fsynced before the ack);
3. publish plain NATS messages with nats-py to the same subject (cross-talk) and get a
   LEADER ack back on the NATS reply subject;
4. consume everything back with the SDK Consumer;
   then a Spark Structured Streaming pipeline (jetspark): orders -> aggregation per
   customer -> a compacted totals stream, printed and checked;
5. restart the server and read the stream again from disk;
6. describe the stream (high watermark, log end offset, sizes).

Everything started is stopped at the end, by PID; the temporary directory is removed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import anyio

from jetsdk import AckPolicy, Client, Consumer, Producer
from jetsdk.envelope import parse_ack
from jetserver.devcluster import DevCluster

STREAM = "orders"
SUBJECT = "orders"
PARTITIONS = 3
CUSTOMERS = ("alice", "bob", "carol", "dave", "erin")


def _say(text: str = "") -> None:
    print(text, flush=True)


async def _produce(servers: list[str], count: int) -> None:
    async with Client(servers) as client:
        info = await client.create_stream(STREAM, SUBJECT, partitions=PARTITIONS)
        _say(
            f"created stream {info.name!r} on subject {info.subject!r} with "
            f"{len(info.partitions)} partitions"
        )
        started = time.perf_counter()
        per_partition: Counter[int] = Counter()
        async with Producer(client, STREAM, ack=AckPolicy.ALL) as producer:
            handles = []
            for i in range(count):
                customer = CUSTOMERS[i % len(CUSTOMERS)]
                value = f'{{"order": {i}, "customer": "{customer}", "amount": {10 + i % 7}}}'
                handles.append(
                    await producer.send_soon(
                        value.encode(), key=customer.encode(), headers={"source": b"demo"}
                    )
                )
            for handle in handles:
                ack = await handle.wait()
                per_partition[ack.partition] += 1
        elapsed = time.perf_counter() - started
        _say(
            f"produced {count} keyed orders with ack ALL (fsynced) in {elapsed:.2f} s; "
            f"per partition: {dict(sorted(per_partition.items()))}"
        )
        _say("  keys are hashed with murmur2, so each customer always lands on one partition")


async def _cross_talk(nats_url: str) -> None:
    import nats  # the server's NATS client; the SDK itself needs none

    nc = await nats.connect(nats_url)
    try:
        for i in range(3):
            await nc.publish(SUBJECT, f"plain message {i} from nats-py".encode())
        reply = await nc.request(SUBJECT, b"plain request with a reply subject", timeout=5)
        acks = parse_ack(reply.data)
        _say(
            "published 4 plain NATS messages with nats-py (no SDK, no envelope); "
            f"the request got an ack on its reply subject: stream={acks[0].stream} "
            f"partition={acks[0].partition} offset={acks[0].offset}"
        )
    finally:
        await nc.close()


async def _consume(servers: list[str], expected: int, label: str) -> None:
    async with Client(servers) as client, Consumer(client, STREAM, start="earliest") as consumer:
        seen = 0
        plain = 0
        by_customer: Counter[str] = Counter()
        with anyio.fail_after(30):
            async for msg in consumer:
                seen += 1
                if msg.key is None:
                    plain += 1
                else:
                    by_customer[msg.key.decode()] += 1
                if seen == expected:
                    break
        _say(
            f"{label}: consumed {seen} messages ({plain} plain, "
            f"{seen - plain} keyed; per customer {dict(sorted(by_customer.items()))})"
        )
        first = await client.describe_stream(STREAM)
        for p in first.partitions:
            _say(
                f"  partition {p.partition}: high watermark {p.hw}, log end offset {p.leo}, "
                f"{p.size_bytes} bytes on disk"
            )


def _spark_pipeline(servers: list[str]) -> None:
    _say("\nSpark: orders -> streaming aggregation per customer -> a compacted totals stream")
    try:
        import jetspark.demo
    except ImportError as exc:  # jetspark (and pyspark) not installed
        _say(f"  skipped: {exc}")
        return
    jetspark.demo.run(
        servers, orders=2000, orders_stream="shop-orders", totals_stream="shop-totals", echo=_say
    )


def run(count: int, data_dir: Path, *, spark: bool = True) -> None:
    """Run the demo with ``count`` keyed orders, data under ``data_dir``."""
    log_path = data_dir / "servers.log"
    _say(f"starting nats-server and one jet server (data in {data_dir}, logs in {log_path})")
    data_dir.mkdir(parents=True, exist_ok=True)
    with (
        log_path.open("ab") as log,
        DevCluster(servers=1, data_dir=data_dir, new_session=True, log_file=log) as cluster,
    ):
        servers = cluster.addresses
        _say(f"nats: {cluster.nats_url}\nservers: {','.join(servers)}\n")
        anyio.run(_produce, servers, count)
        anyio.run(_cross_talk, cluster.nats_url)
        anyio.run(_consume, servers, count + 4, "first read")
        if spark:
            _spark_pipeline(servers)
    _say(
        "\nstopped everything (SIGTERM: the server flushed and checkpointed); "
        "starting again on the same data directory ..."
    )
    with (
        log_path.open("ab") as log,
        DevCluster(servers=1, data_dir=data_dir, new_session=True, log_file=log) as cluster,
    ):
        anyio.run(_consume, cluster.addresses, count + 4, "after restart")
    _say("\ndone: every acknowledged message was read back after a restart.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jetserver.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--count", type=int, default=1000, help="keyed orders to produce")
    parser.add_argument("--data-dir", type=Path, help="keep data here (default: a temp dir)")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark pipeline")
    args = parser.parse_args(argv)
    if args.data_dir is not None:
        run(args.count, args.data_dir, spark=not args.no_spark)
        return 0
    with tempfile.TemporaryDirectory(prefix="jet-demo-") as tmp:
        run(args.count, Path(tmp), spark=not args.no_spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
