"""The README demo: ``nox -s demo`` (or ``python -m jetserver.cli.demo``).

Starts a private nats-server and a cluster of jet servers (default 3) in a temporary
directory (the embedded default), then shows the real flow and prints what happened:

1. the cluster: where nats-server and each jet server run (address, PID, data, logs);
2. create the stream ``orders`` (3 partitions, replication factor 3: leaders spread over the
   servers) and produce keyed orders with the SDK Producer (ack ALL: fsynced on every
   in-sync replica before the ack); each customer's orders land on one partition;
3. publish plain NATS messages with nats-py to the same subject (cross-talk): stored too,
   and a request gets an ack on its NATS reply subject;
4. consume everything with a consumer group of 2 members, print each member's partitions
   and counts, commit;
5. kill -9 the leader of ``orders`` partition 0 while a producer sends more orders: a new
   leader takes over, every send is acked, the group resumes from its committed offsets and
   reads every acked order; the killed server restarts and catches up (``jet cluster
   status``);
6. a Spark Structured Streaming pipeline (jetspark): orders -> aggregation per customer ->
   a compacted totals stream, printed and checked;
7. a summary.

Everything started is stopped at the end (also on an error or Ctrl-C), by PID; the
temporary directory is removed. ``--servers 1`` (or 2) runs the same flow with
replication factor 1 (2) and without the failover step (which needs a majority of 3 servers
alive); ``--no-spark`` skips step 6; ``--spark-master URL`` runs it on that Spark master
(a standalone ``spark://host:port``, ``local-cluster[2,1,1024]``) instead of ``local[2]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import attrs
import orjson

from jetsdk import AckPolicy, Client, Consumer, JetError, Producer, StreamInfo
from jetsdk.envelope import parse_ack
from jetsdk.group.records import GROUPS_STREAM
from jetsdk.partitioner import partition_for_key
from jetserver.errors import JetServerError
from jetserver.testing.devcluster import MAX_DEV_SERVERS, DevCluster

STREAM = "orders"
SUBJECT = "orders"
PARTITIONS = 3
GROUP = "billing"
MEMBERS = 2
CUSTOMERS = ("alice", "bob", "carol", "dave", "erin")
PLAIN_MESSAGES = 4
"""Messages of the cross-talk step (3 publishes and 1 request)."""
FAILOVER_ORDERS = 600
"""Orders sent while the leader is killed."""
FAILOVER_RATE = 300.0
"""Orders per second of the failover producer (so that sending spans the kill)."""
KILL_AFTER = 150
"""Failover orders sent before the kill."""
WAIT_S = 60.0
"""Bound on every wait of the demo (a loaded 2-core machine can be slow)."""
POLL_S = 0.1
"""Pause between two polls of a wait."""
STABLE_S = 1.0
"""A group's assignment counts as settled once unchanged this long."""


def _say(text: str = "") -> None:
    print(text, flush=True)


def _section(title: str) -> None:
    _say(f"\n== {title}")


class DemoError(JetServerError, RuntimeError):
    """A check of the demo failed."""


@attrs.define
class Tally:
    """What the demo did, for the summary."""

    produced: int = 0
    """Keyed orders acked (ack ALL)."""
    plain: int = 0
    """Plain NATS messages stored."""
    consumed: int = 0
    """Distinct messages the group processed."""
    failover: str = ""
    """One line about the failover step."""
    spark: str = ""
    """One line about the Spark step."""


def _order(i: int) -> tuple[bytes, bytes]:
    customer = CUSTOMERS[i % len(CUSTOMERS)]
    value = orjson.dumps({"order": i, "customer": customer, "amount": 10 + i % 7})
    return customer.encode(), value


def _partition_lines(info: StreamInfo) -> list[str]:
    return [
        f"  {info.name}/{p.partition}: leader {p.leader or '-'} (epoch {p.leader_epoch}), "
        f"replicas {','.join(p.replicas)}, in sync {','.join(p.isr) or '-'}"
        for p in info.partitions
    ]


async def _wait_full_isr(client: Client, stream: str, rf: int) -> StreamInfo:
    """The stream's metadata once every partition has a leader and ``rf`` in-sync replicas."""
    deadline = time.monotonic() + WAIT_S
    while True:
        info = await client.stream_info(stream, refresh=True)
        if all(p.leader is not None and len(p.isr) >= rf for p in info.partitions):
            return info
        if time.monotonic() > deadline:
            raise DemoError(f"{stream}: no full ISR within {WAIT_S:.0f} s: {info.partitions}")
        await anyio.sleep(POLL_S)


# ------------------------------------------------------------------ 2. create, produce


async def _create_and_produce(servers: list[str], rf: int, count: int, tally: Tally) -> None:
    async with Client(servers) as client:
        await client.create_stream(STREAM, SUBJECT, partitions=PARTITIONS, replication_factor=rf)
        info = await _wait_full_isr(client, STREAM, rf)
        _say(
            f"created stream {STREAM!r} on subject {SUBJECT!r}: {PARTITIONS} partitions, "
            f"replication factor {rf}"
        )
        for line in _partition_lines(info):
            _say(line)
        started = time.perf_counter()
        per_partition: Counter[int] = Counter()
        placement: dict[str, set[int]] = {}
        async with Producer(client, STREAM, ack=AckPolicy.ALL) as producer:
            handles = []
            for i in range(count):
                key, value = _order(i)
                handles.append(
                    (key, await producer.send_soon(value, key=key, headers={"source": b"demo"}))
                )
            for key, handle in handles:
                ack = await handle.wait()
                per_partition[ack.partition] += 1
                placement.setdefault(key.decode(), set()).add(ack.partition)
        elapsed = time.perf_counter() - started
        tally.produced += count
        _say(
            f"produced {count} keyed orders with ack ALL (fsynced on every in-sync replica) "
            f"in {elapsed:.2f} s; per partition: {dict(sorted(per_partition.items()))}"
        )
        for customer in CUSTOMERS:
            parts = placement.get(customer, set())
            expected = partition_for_key(customer.encode(), PARTITIONS)
            if parts != {expected}:
                raise DemoError(f"key {customer!r} landed on {parts}, expected {expected}")
        _say(
            "  key -> partition (murmur2, stable): "
            + ", ".join(f"{c} -> {next(iter(placement[c]))}" for c in CUSTOMERS)
        )


# ------------------------------------------------------------------ 3. cross-talk


async def _cross_talk(nats_url: str, tally: Tally) -> None:
    import nats  # the server's NATS client; the SDK itself needs none

    nc = await nats.connect(nats_url)
    try:
        for i in range(PLAIN_MESSAGES - 1):
            await nc.publish(SUBJECT, f"plain message {i} from nats-py".encode())
        reply = await nc.request(SUBJECT, b"plain request with a reply subject", timeout=10)
        acks = parse_ack(reply.data)
        tally.plain += PLAIN_MESSAGES
        _say(
            f"published {PLAIN_MESSAGES} plain NATS messages with nats-py (no SDK, no envelope, "
            f"no key: spread over the partitions); the request got an ack on its reply subject: "
            f"stream={acks[0].stream} partition={acks[0].partition} offset={acks[0].offset}"
        )
    finally:
        await nc.close()


# ------------------------------------------------------------------ 4. consumer group


@attrs.define
class _Member:
    """One group member's view, filled while it runs."""

    index: int
    """1-based member number."""
    member_id: str = ""
    """Its id in the group."""
    assignment: list[int] = attrs.field(factory=list)
    """Partitions of ``orders`` it owns."""
    processed: int = 0
    """Messages it processed."""
    committed: dict[int, int] = attrs.field(factory=dict)
    """Partition -> committed offset after its commit."""


async def _group_consume(
    servers: list[str], members: int, until: int, seen: dict[tuple[int, int], int | None]
) -> list[_Member]:
    """Run ``members`` group members until ``seen`` holds ``until`` (partition, offset)
    pairs (each mapped to its order number, None for a plain message); each member commits,
    then leaves. Waits for the partitions to be shared out
    before processing (otherwise the first member to join would take everything)."""
    views = [_Member(i + 1) for i in range(members)]
    consumers: list[Consumer | None] = [None] * members
    shared = anyio.Event()
    done = anyio.Event()
    committed = [anyio.Event() for _ in range(members)]

    async def member(view: _Member) -> None:
        async with (
            Client(servers) as client,
            Consumer(client, group=GROUP, streams=[STREAM], auto_commit=None) as consumer,
        ):
            consumers[view.index - 1] = consumer
            view.member_id = consumer.member_id or ""
            await shared.wait()
            while not done.is_set():
                for msg in await consumer.fetch(max_records=200, timeout=0.2):
                    if (msg.partition, msg.offset) not in seen:
                        order = None
                        if msg.key is not None:
                            order = int(orjson.loads(msg.value)["order"])
                        seen[(msg.partition, msg.offset)] = order
                        view.processed += 1
                if len(seen) >= until:
                    done.set()
            view.assignment = sorted(k.partition for k in consumer.assignment())
            await consumer.commit()
            for p in view.assignment:
                got = consumer.committed(p)
                if got is not None:
                    view.committed[p] = got.offset
            committed[view.index - 1].set()
            for event in committed:  # leave together: a leaver's partitions would move
                await event.wait()

    def owners() -> list[list[int]]:
        return [[] if c is None else sorted(k.partition for k in c.assignment()) for c in consumers]

    with anyio.fail_after(WAIT_S * 2):
        async with anyio.create_task_group() as tg:
            for view in views:
                tg.start_soon(member, view)
            # Shared out: every member owns partitions, none twice, all covered, and the
            # same for STABLE_S (a member joining later moves partitions again).
            deadline = time.monotonic() + WAIT_S
            last: list[list[int]] = []
            since = time.monotonic()
            while True:
                got = owners()
                flat = [p for parts in got for p in parts]
                if got != last:
                    last, since = got, time.monotonic()
                elif (
                    all(got)
                    and sorted(flat) == list(range(PARTITIONS))
                    and time.monotonic() - since >= STABLE_S
                ):
                    break
                if time.monotonic() > deadline:
                    _say(f"  (the partitions were not shared out in time: {got}; going on)")
                    break
                await anyio.sleep(POLL_S)
            shared.set()
    return views


async def _group_step(servers: list[str], tally: Tally) -> None:
    expected = tally.produced + tally.plain
    seen: dict[tuple[int, int], int | None] = {}
    started = time.perf_counter()
    views = await _group_consume(servers, MEMBERS, expected, seen)
    tally.consumed = len(seen)
    _say(
        f"consumer group {GROUP!r} with {MEMBERS} members processed {len(seen)} messages "
        f"({expected} expected) in {time.perf_counter() - started:.2f} s:"
    )
    for v in views:
        _say(
            f"  member {v.index} ({v.member_id[:8]}): partitions {v.assignment}, "
            f"processed {v.processed}, committed {dict(sorted(v.committed.items()))}"
        )
    if len(seen) != expected:
        raise DemoError(f"the group processed {len(seen)} messages, expected {expected}")


# ------------------------------------------------------------------ 5. failover


async def _failover(cluster: DevCluster, rf: int, tally: Tally) -> str:
    """Kill -9 the leader of orders/0 while producing; returns the killed server's id."""
    servers = cluster.addresses
    async with Client(servers) as client:
        before = await _wait_full_isr(client, STREAM, rf)
        victim = before.partitions[0].leader
        assert victim is not None
        led = [p.partition for p in before.partitions if p.leader == victim]
        start_hw = {
            p: (await client.list_offsets(STREAM, p, "latest")).hw for p in range(PARTITIONS)
        }
        acked: set[int] = set()
        failed: list[str] = []
        sent_enough = anyio.Event()

        async def produce() -> None:
            async with Producer(client, STREAM, ack=AckPolicy.ALL, idempotent=True) as producer:
                handles = []
                t0 = time.monotonic()
                for n in range(FAILOVER_ORDERS):
                    i = tally.produced + n
                    key, value = _order(i)
                    handles.append((i, await producer.send_soon(value, key=key)))
                    if n + 1 == KILL_AFTER:
                        sent_enough.set()
                    ahead = t0 + n / FAILOVER_RATE - time.monotonic()
                    if ahead > 0:
                        await anyio.sleep(ahead)
                for i, handle in handles:
                    try:
                        await handle.wait()
                        acked.add(i)
                    except JetError as exc:
                        failed.append(f"order {i}: {exc!r}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            with anyio.fail_after(WAIT_S):
                await sent_enough.wait()
            pid = cluster.server(victim).pid
            t_kill = time.monotonic()
            cluster.kill(victim)
            _say(
                f"kill -9 {victim} (PID {pid}), leader of {STREAM} partitions {led}, "
                f"with {KILL_AFTER} of {FAILOVER_ORDERS} more orders sent (ack ALL, "
                "idempotent producer)"
            )
            deadline = time.monotonic() + WAIT_S
            while True:
                info = await client.stream_info(STREAM, refresh=True)
                p0 = info.partitions[0]
                if p0.leader not in (None, victim):
                    break
                if time.monotonic() > deadline:
                    raise DemoError(f"no new leader for {STREAM}/0 within {WAIT_S:.0f} s")
                await anyio.sleep(POLL_S)
            took = time.monotonic() - t_kill
            _say(f"new leader after {took:.1f} s:")
            for line in _partition_lines(info):
                _say(line)
        _say(
            f"producer: {len(acked)} of {FAILOVER_ORDERS} orders acked, {len(failed)} failed "
            "(retried on the new leader with the same sequences: no duplicates)"
        )
        for line in failed[:5]:
            _say(f"  {line}")
        end_hw = {p: (await client.list_offsets(STREAM, p, "latest")).hw for p in range(PARTITIONS)}
    tally.produced += len(acked)

    # The group resumes from its committed offsets (one member now; the other left).
    seen: dict[tuple[int, int], int | None] = {}
    new = sum(end_hw.values()) - sum(start_hw.values())
    views = await _group_consume(servers, 1, new, seen)
    orders = {o for o in seen.values() if o is not None}
    lost = sorted(acked - orders)
    tally.consumed += len(seen)
    _say(
        f"group {GROUP!r} resumed from its committed offsets: {views[0].processed} new messages "
        f"(high watermarks {sum(start_hw.values())} -> {sum(end_hw.values())}); "
        f"acked orders read back: {len(acked) - len(lost)}/{len(acked)}"
    )
    if lost or failed:
        raise DemoError(f"acked orders missing: {lost[:10]}; failed sends: {failed[:3]}")
    tally.failover = (
        f"kill -9 of {victim} (leader of {len(led)} partition(s)): new leader in {took:.1f} s, "
        f"{len(acked)}/{FAILOVER_ORDERS} sends acked, none lost"
    )
    return victim


def _restart(cluster: DevCluster, victim: str, rf: int) -> None:
    started = time.perf_counter()
    cluster.start_server(victim, timeout_s=WAIT_S)

    async def caught_up() -> None:
        async with Client(cluster.addresses) as client:
            await _wait_full_isr(client, STREAM, rf)

    anyio.run(caught_up)
    _say(
        f"restarted {victim} (PID {cluster.server(victim).pid}); it caught up and is back in "
        f"every ISR after {time.perf_counter() - started:.1f} s. `jet cluster status` "
        f"(the rows of the group log {GROUPS_STREAM} left out):"
    )
    from jetserver.cli.main import main as jet

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = jet(["cluster", "status", "--servers", ",".join(cluster.addresses)])
    for line in out.getvalue().splitlines():
        if not line.startswith(GROUPS_STREAM):  # the group log's 16 partitions: left out
            _say(f"  {line}".rstrip())
    if code != 0:
        _say(f"  (jet cluster status exited with {code})")


# ------------------------------------------------------------------ 6. Spark


def _spark_pipeline(servers: list[str], rf: int, tally: Tally, master: str | None) -> None:
    try:
        import jetspark.demo
    except ImportError as exc:  # jetspark (and pyspark) not installed
        _say(f"  skipped: {exc}")
        tally.spark = f"skipped ({exc})"
        return
    started = time.perf_counter()
    totals = jetspark.demo.run(
        servers,
        orders=2000,
        orders_stream="shop-orders",
        totals_stream="shop-totals",
        replication_factor=rf,
        echo=_say,
        master=master,
    )
    tally.spark = (
        f"2000 orders -> totals of {len(totals)} customers on {master or 'local[2]'}, "
        f"checked ({time.perf_counter() - started:.1f} s incl. Spark start)"
    )


# ------------------------------------------------------------------ the flow


def run(
    count: int,
    data_dir: Path,
    *,
    servers: int = 3,
    spark: bool = True,
    spark_master: str | None = None,
) -> None:
    """Run the demo with ``count`` keyed orders on ``servers`` jet servers, data under
    ``data_dir``.

    Raises:
        DemoError: a check failed (acked messages missing, keys on the wrong partition).
        DevClusterError: the cluster did not start.
    """
    t0 = time.perf_counter()
    rf = min(3, servers)
    tally = Tally()
    log_path = data_dir / "servers.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    _section(f"1. cluster: nats-server and {servers} jet server(s)")
    with (
        log_path.open("ab") as log,
        DevCluster(size=servers, root=data_dir, new_session=True, log_file=log) as cluster,
    ):
        assert cluster.nats is not None
        _say(f"data in {data_dir}, server logs in {log_path}")
        _say(f"  nats-server  {cluster.nats_url}  PID {cluster.nats.pid}")
        for p in cluster.servers:
            _say(f"  jet server {p.server_id}  {p.address}  PID {p.pid}  data {p.data_dir}")
        addresses = cluster.addresses
        _section("2. create a replicated stream, produce keyed orders")
        anyio.run(_create_and_produce, addresses, rf, count, tally)
        _section("3. cross-talk: plain NATS publishers are stored too")
        anyio.run(_cross_talk, cluster.nats_url, tally)
        _section(f"4. consume with a consumer group of {MEMBERS} members")
        anyio.run(_group_step, addresses, tally)
        _section("5. kill -9 a partition leader while producing")
        if servers < 3:
            # With 2 servers the metadata Raft has no majority once one is killed: no new
            # leader could be elected.
            _say(
                "  skipped: needs 3 or more servers (a new leader is elected by a majority "
                "of the metadata Raft)"
            )
            tally.failover = f"skipped ({servers} server(s))"
        else:
            victim = anyio.run(_failover, cluster, rf, tally)
            _restart(cluster, victim, rf)
        _section("6. Spark: orders -> streaming aggregation per customer -> a totals stream")
        if spark:
            _spark_pipeline(addresses, rf, tally, spark_master)
        else:
            _say("  skipped (--no-spark)")
            tally.spark = "skipped (--no-spark)"
        _section("7. summary")
        _say(f"  cluster: nats-server + {servers} jet server(s), replication factor {rf}")
        _say(
            f"  {tally.produced} keyed orders acked (ack ALL) + {tally.plain} plain NATS "
            f"messages; the group processed {tally.consumed}"
        )
        _say(f"  failover: {tally.failover}")
        _say(f"  spark: {tally.spark}")
        _say(f"  total {time.perf_counter() - t0:.1f} s; stopping everything (by PID) ...")
    _say("stopped nats-server and the jet servers.")


def _interrupt(signum: int, frame: FrameType | None) -> Any:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jetserver.cli.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--count", type=int, default=1000, help="keyed orders to produce")
    parser.add_argument("--servers", type=int, default=3, help="jet servers (default 3)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="keep the data here, a new or empty directory (default: a temp dir)",
    )
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark pipeline")
    parser.add_argument(
        "--spark-master",
        help="run the Spark pipeline on this master (spark://HOST:PORT; default local[2])",
    )
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    if not 1 <= args.servers <= MAX_DEV_SERVERS:
        parser.error(f"--servers must be 1 to {MAX_DEV_SERVERS}")
    if args.data_dir is not None and args.data_dir.exists() and any(args.data_dir.iterdir()):
        parser.error(f"--data-dir {args.data_dir}: not empty (the demo counts on new streams)")
    signal.signal(signal.SIGTERM, _interrupt)  # stop the children on SIGTERM too
    options: dict[str, Any] = {
        "servers": args.servers,
        "spark": not args.no_spark,
        "spark_master": args.spark_master,
    }
    try:
        if args.data_dir is not None:
            run(args.count, args.data_dir, **options)
            return 0
        with tempfile.TemporaryDirectory(prefix="jet-demo-") as tmp:
            run(args.count, Path(tmp), **options)
    except KeyboardInterrupt:
        _say("\ninterrupted: stopped everything the demo started.")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
