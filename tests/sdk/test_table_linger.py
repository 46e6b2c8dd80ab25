"""A table's reader lingers after an answer that caught its partition up (``Table(linger=)``):
changes that come within the linger are fetched together, one Fetch answer for many records
instead of one per commit; ``sync()`` and ``wait_for()`` end the linger at once."""

from __future__ import annotations

import time

import anyio
import pytest

from jetsdk import Client, Table
from jetsdk.table.linger import Linger
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio


async def _puts_seen(client: Client, stream: str, reader: Table, n: int) -> tuple[int, int]:
    """``n`` puts by another table, one at a time; (the reader's Fetch answers meanwhile,
    the records they brought)."""
    answers, records = reader.fetches, reader.records_read
    async with Table(client, stream, partitions=[]) as writer:
        for i in range(n):
            await writer.put(b"k%d" % i, b"v")
    await reader.sync()
    return reader.fetches - answers, reader.records_read - records


async def test_changes_within_the_linger_share_one_fetch(jet_dev: JetDev) -> None:
    """30 commits within a 10 s linger: the reader got them in at most a few answers (the
    first after its park, then the rest when sync() ended the linger); without a linger,
    about one answer per commit."""
    stream = unique("tlinger")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        async with Table(client, stream, linger=10.0) as reader:
            answers, records = await _puts_seen(client, stream, reader, 30)
            assert records == 30
            assert answers <= 3
        async with Table(client, stream, linger=0) as reader:
            answers, records = await _puts_seen(client, stream, reader, 30)
            assert records == 30
            assert answers >= 15  # one per commit, unless the machine is very busy


async def test_sync_and_wait_for_end_the_linger(jet_dev: JetDev) -> None:
    """A table lingering 60 s after each answer still syncs and waits for a revision in well
    under a second: both wake its readers."""
    stream = unique("tlingw")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        async with Table(client, stream, linger=60.0) as table:
            await table.put(b"a", b"1")
            started = time.monotonic()
            with anyio.fail_after(10):
                await table.sync()  # the first answer: the reader then lingers
            rev = await table.put(b"a", b"2")
            with anyio.fail_after(10):
                await table.sync()
            assert table.get(b"a") == b"2"
            rev = await table.put(b"a", b"3")
            with anyio.fail_after(10):
                entry = await table.wait_for(b"a", rev)
            assert entry is not None
            assert entry.value == b"3"
            assert time.monotonic() - started < 5


async def test_a_linger_ends_by_its_time_or_by_hurry() -> None:
    """The readers' wait (jetsdk.table.linger): one of 50 ms returns by itself; ten of an
    hour all return once hurried; a cancelled one leaves nothing waiting behind."""
    short = Linger(0.05)
    with anyio.fail_after(10):
        await short.wait()
    long = Linger(3600.0)
    ended: list[int] = []

    async def waiter(i: int) -> None:
        await long.wait()
        ended.append(i)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(waiter, i)
            await anyio.wait_all_tasks_blocked()  # all ten wait
            long.hurry()
    assert sorted(ended) == list(range(10))
    with anyio.move_on_after(0.05):
        await long.wait()
    assert not long._waiting
