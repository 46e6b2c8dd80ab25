"""Issue 5 on a cluster: a consumer group survives kill -9 of its group log's leader.

Three servers, a data stream with RF=3 and six partitions, ``__groups`` with RF=3. Three
group members (in-process tasks, one client each, per-message acks, auto-commit every
0.5 s) consume while a producer (ack ALL) publishes. Mid-consumption the leader of the
group's ``__groups`` partition is killed with SIGKILL (it also leads some data partitions).
Checked: a new leader takes over, every produced message is processed at least once, the
committed offset each member sees never goes back, no commit a member saw applied is missing
from the group log after the failover (replayed from offset 0 at the end), and the group goes
on working after the failover (messages produced after the kill are consumed, a commit
after the kill is accepted). Runs ~30-60 s on a loaded machine (a 3-server cluster, a leader
election, session timeouts).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.views import partition_info, wait_full_isr, wait_leader
from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.record import iter_records
from jetsdk.consumer import Consumer
from jetsdk.consumer.group_runtime import ensure_groups_stream
from jetsdk.group.changes import CommitAccepted
from jetsdk.group.member import MemberConfig
from jetsdk.group.reader import GroupLogReader
from jetsdk.group.records import GROUPS_STREAM
from jetsdk.group.stream_partition import StreamPartition
from jetsdk.partitioner import partition_for_key

pytestmark = [pytest.mark.fault, pytest.mark.anyio, needs_cluster]

PARTITIONS = 6
MEMBERS = 3
TOTAL = 2400
RATE = 300.0
"""Messages per second produced: production spans the kill."""
KILL_AFTER = 400
"""Processed messages before the kill."""
CFG = MemberConfig(session_timeout=8.0, heartbeat_interval=0.5, release_timeout=8.0)
"""Session timeout above a leader election's usual length (members may still expire: fine)."""
AUTO_COMMIT = 0.5
WAIT_S = 90.0
"""Bound on every wait for consumption (generous: loaded 2-core CI)."""


async def _produce(servers: list[str], stream: str, count: int, rate: float) -> None:
    """``count`` messages at about ``rate`` per second (ack ALL, idempotent retries)."""
    async with (
        Client(servers) as client,
        Producer(client, stream, ack=AckPolicy.ALL, idempotent=True) as producer,
    ):
        t0 = time.monotonic()
        for i in range(count):
            await producer.send_soon(b"m%d" % i, key=b"k%d" % i)
            ahead = t0 + i / rate - time.monotonic()
            if ahead > 0:
                await anyio.sleep(ahead)


async def _high_watermarks(servers: list[str], stream: str) -> dict[int, int]:
    async with Client(servers) as client:
        return {p: (await client.list_offsets(stream, p, "latest")).hw for p in range(PARTITIONS)}


async def _replay_commits(
    servers: list[str], group: str, partition: int
) -> dict[StreamPartition, list[int]]:
    """Every accepted commit of ``group`` in log order, replayed from offset 0."""
    commits: dict[StreamPartition, list[int]] = {}
    reader = GroupLogReader(group)
    async with Client(servers) as client:
        hw = (await client.list_offsets(GROUPS_STREAM, partition, "latest")).hw
        while reader.next_offset < hw:
            _, raw = await client.fetch(
                GROUPS_STREAM, partition, reader.next_offset, max_bytes=1 << 20, max_wait=0.0
            )
            for record in iter_records(raw):
                for change in reader.feed(record.offset, record.timestamp, record.value):
                    if isinstance(change, CommitAccepted):
                        commits.setdefault(change.partition, []).append(change.offset)
    return commits


async def test_group_survives_kill_9_of_its_group_log_leader(tmp_path: Path) -> None:
    stream, group = f"gc-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    processed: Counter[tuple[int, int]] = Counter()
    seen_committed: dict[tuple[int, StreamPartition], int] = {}
    regressions: list[str] = []
    stop = anyio.Event()
    with Cluster(root=tmp_path, size=3) as cluster:
        servers = cluster.addresses
        async with Client(servers) as admin:
            await admin.create_stream(stream, stream, partitions=PARTITIONS, replication_factor=3)
            info = await ensure_groups_stream(admin)
        gp = partition_for_key(group.encode(), info.partition_count)

        async def member(index: int) -> None:
            async with (
                Client(servers) as client,
                Consumer(
                    client,
                    stream,
                    group=group,
                    manual_ack=True,
                    auto_commit=AUTO_COMMIT,
                    group_config=CFG,
                ) as consumer,
            ):
                while not stop.is_set():
                    batch = await consumer.fetch(max_records=50, timeout=0.2)
                    for msg in batch:
                        processed[(msg.partition, msg.offset)] += 1
                    for msg in reversed(batch):  # out-of-order acks
                        msg.ack()
                    for p in range(PARTITIONS):
                        key = StreamPartition(stream, p)
                        got = consumer.committed(key)
                        if got is None:
                            continue
                        before = seen_committed.get((index, key), -1)
                        if got.offset < before:
                            regressions.append(f"member {index} {key}: {before} -> {got.offset}")
                        seen_committed[(index, key)] = max(before, got.offset)

        def all_processed(hws: dict[int, int]) -> bool:
            return all((p, o) in processed for p, hw in hws.items() for o in range(hw))

        async def wait_processed(hws: dict[int, int], what: str) -> None:
            deadline = time.monotonic() + WAIT_S
            while not all_processed(hws):
                missing = sum(
                    1 for p, hw in hws.items() for o in range(hw) if (p, o) not in processed
                )
                assert time.monotonic() < deadline, f"{what}: {missing} messages never processed"
                await anyio.sleep(0.2)

        before, leader = await wait_full_isr(cluster, GROUPS_STREAM, gp, 3, 30.0)
        victim = cluster.server(leader)
        async with anyio.create_task_group() as tg:
            for i in range(MEMBERS):
                tg.start_soon(member, i)
            producing = anyio.Event()

            async def producer() -> None:
                await _produce(servers, stream, TOTAL, RATE)
                producing.set()

            tg.start_soon(producer)
            deadline = time.monotonic() + WAIT_S
            while len(processed) < KILL_AFTER:
                assert time.monotonic() < deadline, "the group never started consuming"
                await anyio.sleep(0.02)
            t0 = time.monotonic()
            led = []
            for p in range(PARTITIONS):
                data = await partition_info(cluster, stream, p)
                if data is not None and data.leader == leader:
                    led.append(p)
            victim.kill9()
            after = await wait_leader(
                cluster, GROUPS_STREAM, gp, 30.0, not_on=leader, min_epoch=before.leader_epoch + 1
            )
            print(
                f"killed {leader} (leader of {GROUPS_STREAM}/{gp}) with {len(processed)} "
                f"processed, also leader of {stream} partitions {led}; new leader "
                f"{after.leader} after {time.monotonic() - t0:.2f} s"
            )
            with anyio.fail_after(WAIT_S):
                await producing.wait()
            hws = await _high_watermarks(servers, stream)
            assert sum(hws.values()) == TOTAL
            await wait_processed(hws, "after the failover")
            print(f"everything processed {time.monotonic() - t0:.2f} s after the kill")
            # Commits keep working after the failover: every partition's committed offset
            # reaches its high watermark (auto-commit of the acked messages).
            deadline = time.monotonic() + WAIT_S
            while True:
                best: dict[int, int] = {}
                for (_, key), off in seen_committed.items():
                    best[key.partition] = max(best.get(key.partition, -1), off)
                if all(best.get(p, -1) >= hw for p, hw in hws.items()):
                    break
                assert time.monotonic() < deadline, f"commits stalled: {best} < {hws}"
                await anyio.sleep(0.2)
            stop.set()

        assert not regressions, regressions
        duplicates = sum(n - 1 for n in processed.values())
        print(f"processed {len(processed)} messages, {duplicates} duplicate deliveries")
        commits = await _replay_commits(servers, group, gp)
        for key, offsets in commits.items():
            assert offsets == sorted(offsets), f"{key}: committed offsets regress: {offsets}"
        for (_, key), off in seen_committed.items():
            final = commits.get(key, [-1])[-1]
            assert final >= off, f"{key}: a member saw {off} committed, the log ends at {final}"
