"""Per-key TTL of ``jetsdk.Table`` on a real `jet dev` process (issue 38 item 5,
spec/storage.md §11.2): a key written with ``ttl`` stops being returned at its expiry, the
watch reports the expiry, the server's compare-and-set counts the key as absent from then
on, a table that reads the record later applies it as a delete, and a snapshot keeps the
expiries. Expiry needs time to pass: each wait is bounded and ends on the watch's event."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from jetsdk import Client, InvalidArgument, Table, WrongExpectedKeyOffset
from jetsdk.table import Change
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio
TTL_S = 1.0
WAIT_S = 20.0


async def next_expiry(changes: AsyncIterator[Change]) -> Change:
    """The first change with ``expired`` set from a watch iterator (bounded)."""
    with anyio.fail_after(WAIT_S):
        async for change in changes:
            if change.expired:
                return change
    raise AssertionError("the watch ended before an expiry")


async def test_ttl_expires_for_reads_watch_and_the_servers_cas(jet_dev: JetDev) -> None:
    stream = unique("ttl")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True, partitions=2)
        async with Table(client, stream) as table:
            changes = table.watch(initial=False)
            rev = await table.put(b"t", b"1", ttl=TTL_S)
            await table.put(b"keep", b"1")
            await table.sync()
            assert table.get(b"t") == b"1"
            with pytest.raises(WrongExpectedKeyOffset) as live:
                await table.create(b"t", b"early")
            assert live.value.current_revision == rev
            expired = await next_expiry(changes)
            assert (expired.key, expired.value, expired.revision) == (b"t", None, rev)
            assert expired.deleted
            assert table.get(b"t") is None
            assert b"t" not in table
            assert sorted(table.items()) == [(b"keep", b"1")]
            # The server agrees: the key is absent for compare-and-set.
            with pytest.raises(WrongExpectedKeyOffset) as gone:
                await table.update(b"t", b"late", rev)
            assert gone.value.current_revision == -1
            again = await table.create(b"t", b"2")  # no TTL this time
            await table.sync()
            assert table.get(b"t") == b"2"
            assert table.revision(b"t") == again
        # A table that reads the expired record afterwards applies it as a delete (its
        # replay also sees the put without TTL that followed).
        async with Table(client, stream) as later:
            assert sorted(later.items()) == [(b"keep", b"1"), (b"t", b"2")]
            await later.put(b"u", b"1", ttl=TTL_S)
            watch = later.watch(initial=False)
            await next_expiry(watch)
        async with Table(client, stream) as replay:
            assert b"u" not in replay
            assert len(replay) == 2
            assert sorted(replay.items()) == [(b"keep", b"1"), (b"t", b"2")]


async def test_snapshot_keeps_expiries(jet_dev: JetDev, tmp_path: Path) -> None:
    stream = unique("ttlsnap")
    path = tmp_path / "t.sqlite"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        async with Table(client, stream, snapshot=path) as table:
            short = await table.put(b"short", b"1", ttl=TTL_S)
            await table.put(b"long", b"1", ttl=3600.0)
            await table.put(b"plain", b"1")
            await table.sync()
        async with Table(client, stream, snapshot=path) as table:
            assert table.records_read == 0  # all from the snapshot
            if b"short" in table:  # not expired yet: the snapshot's expiry removes it
                expired = await next_expiry(table.watch(initial=False))
                assert (expired.key, expired.revision) == (b"short", short)
            assert table.get(b"short") is None
            assert sorted(table.items()) == [(b"long", b"1"), (b"plain", b"1")]


async def test_bad_ttl_is_refused(jet_dev: JetDev) -> None:
    stream = unique("ttlbad")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        async with Table(client, stream) as table:
            for bad in (0, -1.0, math.nan, math.inf, 4e9):
                with pytest.raises(InvalidArgument, match="ttl"):
                    await table.put(b"k", b"v", ttl=bad)
            with pytest.raises(InvalidArgument, match="ttl"):
                await table.create(b"k", b"v", ttl=0)
            assert await table.put(b"k", b"v", ttl=0.0001) >= 0  # rounded up to 1 ms
