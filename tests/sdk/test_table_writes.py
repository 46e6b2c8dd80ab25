"""A table's writes on a real `jet dev` process (``jetsdk.table.writes``): concurrent writes
to a partition share Produce requests (issue 38, put with ack ALL), keep their own
revisions and compare-and-set checks (each message of a request is checked against the ones
before it), and a caller cancelled while its write waits does not stall the others."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from jetsdk import Client, Table, WrongExpectedKeyOffset
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio


async def test_concurrent_puts_share_requests(jet_dev: JetDev) -> None:
    stream = unique("wbatch")
    n = 200
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True, partitions=2)
        async with Table(client, stream) as table:
            revisions: dict[bytes, int] = {}

            async def put(i: int) -> None:
                key = b"k%03d" % i
                revisions[key] = await table.put(key, b"v%d" % i)

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for i in range(n):
                        tg.start_soon(put, i)
            writer = table._writer
            assert writer is not None
            assert writer.requests < n / 4, writer.requests  # coalesced
            await table.sync()
            assert len(table) == n
            for key, rev in revisions.items():
                assert table.revision(key) == rev
            per_partition: dict[int, set[int]] = {}
            for key, rev in revisions.items():
                per_partition.setdefault(writer.partition_of(key), set()).add(rev)
            assert sum(len(r) for r in per_partition.values()) == n  # distinct offsets


async def test_concurrent_updates_of_one_revision_one_wins(jet_dev: JetDev) -> None:
    stream = unique("wcas")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        async with Table(client, stream) as table:
            rev = await table.put(b"n", b"0")
            won: list[int] = []
            refused: list[int] = []

            async def update(i: int) -> None:
                try:
                    won.append(await table.update(b"n", b"%d" % i, rev))
                except WrongExpectedKeyOffset as exc:
                    refused.append(exc.current_revision)

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for i in range(8):
                        tg.start_soon(update, i)
            assert len(won) == 1
            assert refused == [won[0]] * 7
            assert table._writer is not None
            assert table._writer.requests <= 4  # the put, then the updates batched


async def test_cancelled_waiting_writes_do_not_stall_the_rest(jet_dev: JetDev) -> None:
    stream = unique("wcancel")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        async with Table(client, stream) as table:
            for _ in range(5):
                async with anyio.create_task_group() as tg:
                    for i in range(6):
                        tg.start_soon(table.put, b"c%d" % i, b"v")
                    for _ in range(3):
                        await anyio.lowlevel.checkpoint()
                    tg.cancel_scope.cancel()
                with anyio.fail_after(20):
                    rev = await table.put(b"after", b"x")
                await table.sync()
                assert table.revision(b"after") == rev
            assert table._writer is not None
            assert table._writer._queues == {}
