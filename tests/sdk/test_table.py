"""``jetsdk.Table`` on a real `jet dev` process (issue 38 item 1): reads from memory,
put/delete/create/update with revisions, the typed CAS refusal, watch (initial state and
from now, by prefix), history, sync across two tables (read-your-writes across processes
goes through the same server path), and a stream that is not compacted."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import anyio
import pytest

from jetsdk import Client, InvalidArgument, Table, WrongExpectedKeyOffset
from jetsdk.table import Change
from support.jet_dev import JetDev
from support.names import unique

from .helpers import lost_increments

pytestmark = pytest.mark.anyio


async def test_put_get_delete_create_update(jet_dev: JetDev) -> None:
    stream = unique("tbl")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True, partitions=3)
        async with Table(client, stream) as table:
            assert len(table) == 0
            rev = await table.put(b"a", b"1")
            await table.put(b"b", b"2")
            await table.sync()
            assert table.get(b"a") == b"1"
            assert table.revision(b"a") == rev
            assert sorted(table.items()) == [(b"a", b"1"), (b"b", b"2")]
            assert len(table) == 2
            with pytest.raises(WrongExpectedKeyOffset) as refused:
                await table.create(b"a", b"again")
            assert refused.value.current_revision == rev
            new = await table.update(b"a", b"3", rev)
            with pytest.raises(WrongExpectedKeyOffset) as stale:
                await table.update(b"a", b"4", rev)  # the revision moved on
            assert stale.value.current_revision == new
            await table.delete(b"b")
            with pytest.raises(WrongExpectedKeyOffset) as gone:
                await table.update(b"b", b"x", 0)
            assert gone.value.current_revision == -1
            created = await table.create(b"b", b"reborn")
            await table.sync()
            assert table.get(b"a") == b"3"
            assert table.get(b"b") == b"reborn"
            assert table.revision(b"b") == created
            history = await table.history(b"a")
            assert [(c.value, c.revision) for c in history] == [(b"1", rev), (b"3", new)]
            hist_b = await table.history(b"b")
            assert [c.deleted for c in hist_b] == [False, True, False]
            with pytest.raises(InvalidArgument):
                await table.put(b"a", b"")


async def test_sync_reads_writes_of_another_table(jet_dev: JetDev) -> None:
    stream = unique("sync")
    async with Client(jet_dev.servers) as c1, Client(jet_dev.servers) as c2:
        await c1.create_stream(stream, compact=True, partitions=2)
        async with Table(c1, stream) as writer, Table(c2, stream) as reader:
            for i in range(50):
                await writer.put(b"k%d" % i, b"v%d" % i)
            await reader.sync()  # everything acknowledged before the call is in view
            assert len(reader) == 50
            assert reader.get(b"k49") == b"v49"


async def test_watch_initial_and_from_now(jet_dev: JetDev) -> None:
    stream = unique("watch")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        async with Table(client, stream) as table:
            await table.put(b"user.1", b"a")
            await table.put(b"order.1", b"x")
            await table.sync()
            seen: list[Change] = []
            live: list[Change] = []
            ready, users_ready = anyio.Event(), anyio.Event()

            async def watch_users() -> None:
                it = table.watch(b"user.")
                users_ready.set()  # registered at its first step, before this task yields
                async for change in it:
                    seen.append(change)
                    if len(seen) == 3:
                        return

            async def watch_new() -> None:
                it = table.watch(initial=False)
                ready.set()
                async for change in it:
                    live.append(change)
                    if len(live) == 3:
                        return

            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(watch_users)
                    tg.start_soon(watch_new)
                    await ready.wait()
                    await users_ready.wait()
                    await table.put(b"user.2", b"b")
                    await table.put(b"order.2", b"y")
                    await table.delete(b"user.1")
        assert [(c.key, c.value, c.initial) for c in seen] == [
            (b"user.1", b"a", True),
            (b"user.2", b"b", False),
            (b"user.1", None, False),
        ]
        assert [c.key for c in live] == [b"user.2", b"order.2", b"user.1"]
        assert live[2].deleted


async def test_watch_initial_state_larger_than_the_change_buffer(
    jet_dev: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The initial state is not queued: a table of more keys than a watcher may have
    changes waiting (MAX_WATCH_BUFFER) is watched whole, then its live changes."""
    import jetsdk.table.view

    monkeypatch.setattr(jetsdk.table.view, "MAX_WATCH_BUFFER", 10)
    stream = unique("bigwatch")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True, partitions=2)
        async with Table(client, stream) as table:
            for i in range(25):
                await table.put(b"k%02d" % i, b"v%d" % i)
            await table.sync()
            seen: list[Change] = []
            with anyio.fail_after(20):
                async for change in table.watch():
                    seen.append(change)
                    if len(seen) == 25:
                        await table.put(b"k00", b"new")
                    if len(seen) == 26:
                        break
        assert sorted(c.key for c in seen[:25]) == [b"k%02d" % i for i in range(25)]
        assert all(c.initial for c in seen[:25])
        assert (seen[25].key, seen[25].value, seen[25].initial) == (b"k00", b"new", False)


async def test_needs_a_compacted_stream(jet_dev: JetDev) -> None:
    stream = unique("plain")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream)
        with pytest.raises(InvalidArgument, match="not compacted"):
            async with Table(client, stream):
                pass


def test_blocking_table(jet_dev: JetDev) -> None:
    """The generated blocking API: the same calls without await, ``len`` and ``in``."""
    from jetsdk.sync import Client as SyncClient
    from jetsdk.sync import Table as SyncTable

    stream = unique("blocking")
    with SyncClient(jet_dev.servers) as client:
        client.create_stream(stream, compact=True)
        with SyncTable(client, stream) as table:
            rev = table.put(b"k", b"1")
            with pytest.raises(WrongExpectedKeyOffset) as refused:
                table.create(b"k", b"2")
            assert refused.value.current_revision == rev
            table.update(b"k", b"2", rev)
            table.sync()
            assert table.get(b"k") == b"2"
            assert len(table) == 1
            assert b"k" in table


async def test_snapshot_reopen_fetches_only_what_came_after(
    jet_dev: JetDev, tmp_path: Path
) -> None:
    """Issue 38 item 3: a table closed with a snapshot reopens from it and fetches only the
    records written after; revisions from the snapshot still work for compare-and-set, and
    a stale one is refused (this part fails without the server's check)."""
    stream = unique("snap")
    path = tmp_path / "snap.sqlite"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True, partitions=2)
        async with Table(client, stream, snapshot=path) as table:
            revs = {}
            for i in range(100):
                revs[i] = await table.put(b"k%d" % i, b"v%d" % i)
            await table.delete(b"k0")
            await table.sync()
            assert table.loaded_from_snapshot == 0
        assert path.exists()
        old95 = revs[95]
        async with Table(client, stream) as other:  # written while the first is closed
            for i in range(90, 100):
                revs[i] = await other.put(b"k%d" % i, b"new%d" % i)
            await other.put(b"k100", b"v100")
        async with Table(client, stream, snapshot=path) as table:
            assert table.loaded_from_snapshot == 99
            assert table.records_read == 11  # the 11 records after the snapshot only
            assert len(table) == 100
            assert table.get(b"k0") is None
            assert table.get(b"k95") == b"new95"
            assert table.revision(b"k5") == revs[5]
            await table.update(b"k5", b"cas", table.revision(b"k5"))
            with pytest.raises(WrongExpectedKeyOffset):
                await table.update(b"k95", b"stale", old95)
            with pytest.raises(WrongExpectedKeyOffset):
                await table.update(b"k6", b"stale", revs[5])
        # Another stream's snapshot, or a snapshot older than delete_retention: not used.
        other_stream = unique("snapother")
        await client.create_stream(other_stream, compact=True, partitions=2)
        copy = tmp_path / "copy.sqlite"
        shutil.copy(path, copy)
        async with Table(client, other_stream, snapshot=copy) as table:
            assert table.loaded_from_snapshot == 0
            assert len(table) == 0
        db = sqlite3.connect(path)
        with db:
            db.execute("UPDATE meta SET value = '0' WHERE name = 'saved_ns'")
        db.close()
        async with Table(client, stream, snapshot=path) as table:
            assert table.loaded_from_snapshot == 0
            assert len(table) == 100  # replayed in full


async def test_four_racing_tables_lose_no_update(jet_dev: JetDev) -> None:
    """4 tables (own clients) each increment a counter 10 times with update(); a refused
    one syncs its view and tries again. 0 lost updates (fails without the server check)."""
    stream = unique("race")
    writers, increments = 4, 10
    async with Client(jet_dev.servers) as admin:
        await admin.create_stream(stream, compact=True)
        async with Table(admin, stream) as seed:
            await seed.create(b"n", b"0")
        refusals = 0
        moved: list[bool] = []  # each refusal names a later revision than the one tried

        async def writer() -> None:
            nonlocal refusals
            async with Client(jet_dev.servers) as client, Table(client, stream) as table:
                done = 0
                for _ in range(increments * writers * 4):
                    if done == increments:
                        return
                    entry = table.entry(b"n")
                    assert entry is not None
                    try:
                        await table.update(b"n", b"%d" % (int(entry.value) + 1), entry.revision)
                        done += 1
                        await table.sync()
                    except WrongExpectedKeyOffset as exc:
                        refusals += 1
                        moved.append(exc.current_revision > entry.revision)
                        seen = await table.wait_for(b"n", exc.current_revision)
                        assert seen is not None
                        moved.append(seen.revision >= exc.current_revision)
                raise AssertionError("a writer could not make its increments")

        lost = await lost_increments(admin, stream, writer, writers, increments)
    assert lost == 0, f"{lost} lost updates"
    assert refusals > 0
    assert all(moved)
