"""A table's reader lingers after an answer that caught its partition up (``Table(linger=)``):
changes that come within the linger are fetched together, one Fetch answer for many records
instead of one per commit; ``sync()`` and ``wait_for()`` end the linger at once."""

from __future__ import annotations

import time

import anyio
import pytest

from jetsdk import Client, Table
from jetsdk.table.linger import RACING_FACTOR, Linger
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


async def test_a_linger_lasts_longer_while_compare_and_sets_race() -> None:
    """After :meth:`Linger.raced` a wait of 0.2 s lasts RACING_FACTOR times as long (still
    waiting at 0.5 s), and hurry() still ends it; without it the same wait returns."""
    assert RACING_FACTOR * 0.2 > 0.5
    linger = Linger(0.2)
    with anyio.fail_after(10):
        await linger.wait()
    linger.raced()
    with anyio.move_on_after(0.5) as scope:
        await linger.wait()
    assert scope.cancelled_caught
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(linger.wait)
            await anyio.wait_all_tasks_blocked()
            linger.hurry()


async def test_a_refused_modify_marks_the_table_racing(jet_dev: JetDev) -> None:
    """A modify by a table that holds none of the stream's partitions starts from no value,
    is refused once and stores on the value the refusal carried; that table's readers now
    linger as racing (jetsdk.table.linger). A modify that was not refused does not."""
    stream = unique("tlingr")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        async with (
            Table(client, stream) as table,
            Table(client, stream, partitions=[]) as blind,
        ):
            await table.put(b"n", b"1")
            with anyio.fail_after(10):
                await table.sync()
                await table.modify(b"n", lambda v: b"%d" % (int(v or b"0") + 1))
            assert table._lingers is not None
            assert not table._lingers._racing_until  # its view had the value: not refused
            assert blind._writer is not None
            assert blind._lingers is not None
            sent = blind._writer.requests
            with anyio.fail_after(10):
                await blind.modify(b"n", lambda v: b"%d" % (int(v or b"0") + 1))
            assert blind._writer.requests - sent == 2  # refused once, then stored
            assert blind._lingers._racing_until > time.monotonic()
            await table.sync()
            assert table.get(b"n") == b"3"


async def test_a_hurry_during_a_readers_fetch_ends_its_next_wait() -> None:
    """A reader reads ``hurries`` before its Fetch: a hurry() meanwhile (someone began to wait
    for the view; the answer may predate it) makes its next wait return at once, while a
    wait with no hurry since still waits."""
    linger = Linger(3600.0)
    since = linger.hurries
    linger.hurry()  # no wait under way: only the counter moves
    with anyio.fail_after(10):
        await linger.wait(since)
    with anyio.move_on_after(0.2) as scope:
        await linger.wait(linger.hurries)
    assert scope.cancelled_caught
