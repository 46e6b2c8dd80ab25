"""Partitioned tables in consumer groups (issue 38 item 4) on a real `jet dev`: a table
that holds only some partitions, ``hold``/``release``, and ``co_partitioned``: each group
member's table holds exactly the partitions of its assignment, moved on rebalance, so a
stream-table join finds every message's key."""

from __future__ import annotations

import anyio
import pytest

from jetsdk import Client, InvalidArgument, Producer, Table
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.consumer import Consumer
from jetsdk.group.member import MemberConfig
from jetsdk.partitioner import partition_for_key
from jetsdk.table import co_partitioned
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio
CFG = MemberConfig(session_timeout=5.0, heartbeat_interval=0.25, release_timeout=5.0)
WAIT_S = 60.0
KEYS = [b"k%d" % i for i in range(12)]


async def test_hold_and_release_partitions(jet_dev: JetDev) -> None:
    stream = unique("tpart")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True, partitions=3)
        async with Table(client, stream) as writer:
            for key in KEYS:
                await writer.put(key, b"v-" + key)
        with pytest.raises(InvalidArgument, match="out of range"):
            async with Table(client, stream, partitions=[3]):
                pass
        with pytest.raises(InvalidArgument, match="snapshot"):
            Table(client, stream, partitions=[0], snapshot="x.sqlite")
        of = {key: partition_for_key(key, 3) for key in KEYS}
        async with Table(client, stream, partitions=[1]) as table:
            assert table.held == [1]
            assert sorted(k for k, _ in table.items()) == sorted(k for k in KEYS if of[k] == 1)
            await table.hold([0, 2])
            assert len(table) == len(KEYS)
            table.release([1])
            assert table.held == [0, 2]
            assert sorted(k for k, _ in table.items()) == sorted(k for k in KEYS if of[k] != 1)
            key1 = next(k for k in KEYS if of[k] == 1)
            assert table.get(key1) is None
            with pytest.raises(InvalidArgument, match="does not hold"):
                await table.wait_for(key1, 0)
            await table.put(key1, b"written")  # writes go anywhere
            await table.hold([1])
            assert table.get(key1) == b"written"
            await table.sync()


async def test_group_members_hold_their_partitions_of_a_co_partitioned_table(
    jet_dev: JetDev,
) -> None:
    orders, prices, group = unique("orders"), unique("prices"), unique("g")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(orders, orders, partitions=2)
        await client.create_stream(prices, compact=True, partitions=2)
        async with Table(client, prices) as admin:
            for key in KEYS:
                await admin.put(key, b"price-" + key)
        async with Producer(client, orders, ack=AckPolicy.ALL) as producer:
            for key in KEYS:
                await producer.send(b"order", key=key)

        joined: dict[bytes, bytes | None] = {}
        table_a = Table(client, prices, partitions=[])
        async with (
            table_a,
            Consumer(
                client, orders, group=group, group_config=CFG, **co_partitioned(table_a, orders)
            ) as a,
        ):
            with anyio.fail_after(WAIT_S):
                while len(joined) < len(KEYS):
                    for msg in await a.fetch(timeout=0.5):
                        assert msg.key is not None
                        joined[msg.key] = table_a.get(msg.key)  # the stream-table join
            assert joined == {key: b"price-" + key for key in KEYS}
            assert table_a.held == [0, 1]
            # A second member: the partitions (and the table's) are split between them.
            async with Client(jet_dev.servers) as client_b:
                table_b = Table(client_b, prices, partitions=[])
                async with (
                    table_b,
                    Consumer(
                        client_b,
                        orders,
                        group=group,
                        group_config=CFG,
                        **co_partitioned(table_b, orders),
                    ) as b,
                ):
                    with anyio.fail_after(WAIT_S):
                        while not (
                            len(table_a.held) == 1
                            and len(table_b.held) == 1
                            and {a_p.partition for a_p in a.assignment()} == set(table_a.held)
                            and {b_p.partition for b_p in b.assignment()} == set(table_b.held)
                        ):
                            await a.fetch(timeout=0.2)
                            await b.fetch(timeout=0.2)
                    assert set(table_a.held) | set(table_b.held) == {0, 1}
                    for table in (table_a, table_b):
                        (held,) = table.held
                        expected = {k for k in KEYS if partition_for_key(k, 2) == held}
                        assert {k for k, _ in table.items()} == expected
