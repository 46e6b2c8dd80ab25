"""A table's writes on a real `jet dev` process (``jetsdk.table.writes``): concurrent writes
to a partition share Produce requests (issue 38, put with ack ALL), keep their own
revisions and compare-and-set checks (each message of a request is checked against the ones
before it), and a caller cancelled while its write waits does not stall the others."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
import sniffio

from jetsdk import Client, Table, WrongExpectedKeyOffset
from jetsdk.table.view import Entry
from jetsdk.table.writes import TableWriter
from support.fsync_fault import FsyncFault
from support.jet_dev import JetDev
from support.jet_server import start_server_process
from support.names import unique
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

FSYNC_ATTEMPTS = 3
"""Runs of the fsync-failure scenario until its failure strikes a waiting put."""


async def _put_in_lanes(table: Table, prefix: bytes, lanes: int, each: int) -> dict[bytes, int]:
    """``lanes`` callers each putting ``each`` keys one after the other; key -> revision."""
    revisions: dict[bytes, int] = {}

    async def lane(i: int) -> None:
        for j in range(each):
            key = prefix + b"%02d-%02d" % (i, j)
            revisions[key] = await table.put(key, b"v")

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(lanes):
                tg.start_soon(lane, i)
    return revisions


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


async def test_callers_woken_by_an_answer_share_the_next_request(jet_dev: JetDev) -> None:
    """64 callers putting to one partition: when an answer wakes the callers of its
    batch, their next puts go together in the next request (its sender lets the rest of
    the loop turn run first), about 64 per request. (Before, the first caller to put
    again found the partition idle and sent its put alone, the others went in the request
    after: batches of 1 and 63 by turns, 20 requests for these 640 puts; 11 now on
    asyncio.)"""
    stream = unique("wround")
    lanes, each = 64, 10
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        async with Table(client, stream) as table:
            writer = table._writer
            assert writer is not None
            await table.put(b"warm", b"up")
            before = writer.requests
            await _put_in_lanes(table, b"r", lanes, each)
            puts = lanes * each
            requests = writer.requests - before
            if sniffio.current_async_library() == "asyncio":
                assert requests <= puts / 40, requests  # ~one per round of all 64 callers
            else:  # trio runs the woken tasks in an order of its own: less regular
                assert requests <= puts / 10, requests
            await table.sync()
            assert len(table) == puts + 1


@contextlib.asynccontextmanager
async def _warm_table(
    jet_dev: JetDev, stream: str, partitions: int
) -> AsyncIterator[tuple[Table, TableWriter]]:
    """A table of a new compacted stream of ``partitions``, and its writer after one put
    (alone: one Produce request)."""
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True, partitions=partitions)
        async with Table(client, stream) as table:
            writer = table._writer
            assert writer is not None
            await table.put(b"warm", b"up")
            yield table, writer


async def test_a_round_over_partitions_goes_as_one_produce_many(jet_dev: JetDev) -> None:
    """64 callers putting over 4 partitions: a round's batches, one per partition, go to
    the server as one ProduceMany on asyncio (one round trip and one pass of the server
    for all); each put still gets its own revision. (Before, each batch was a Produce
    request of its own: as many requests on the wire as batches.) On trio each batch is a
    Produce request of its own."""
    lanes, each = 64, 10
    async with _warm_table(jet_dev, unique("wmany"), 4) as (table, writer):
        before, wire_before = writer.requests, writer.wire_requests
        revisions = await _put_in_lanes(table, b"m", lanes, each)
        puts = lanes * each
        batches = writer.requests - before
        wire = writer.wire_requests - wire_before
        assert batches < puts / 4, batches  # coalesced per partition
        if sniffio.current_async_library() == "asyncio":
            # Before: one request per batch. Now 2-4 batches per request on a quiet
            # machine; under CI's parallel load some rounds split over loop turns
            # (32 requests for 58 batches seen).
            assert wire <= batches * 3 / 4, (wire, batches)
        else:
            assert wire == batches
        await table.sync()
        assert len(table) == puts + 1
        assert {k: table.revision(k) for k in revisions} == revisions


async def test_puts_to_one_partition_go_as_a_produce_many_of_one_section(
    jet_dev: JetDev,
) -> None:
    """64 callers putting to a table of one partition: on asyncio each round's batch of
    several puts goes as a ProduceMany of one section (which the server appends in the
    request's step, as a round over several partitions), not as a Produce request of
    many (the server's general path); each put still gets its own revision. On trio each
    batch is a Produce request."""
    lanes, each = 64, 10
    async with _warm_table(jet_dev, unique("wone"), 1) as (table, writer):
        fan_in = writer._fan_in
        before, many_before = writer.requests, fan_in.requests
        revisions = await _put_in_lanes(table, b"o", lanes, each)
        batches = writer.requests - before
        many = fan_in.requests - many_before
        assert batches < lanes * each / 10, batches
        if sniffio.current_async_library() == "asyncio":
            assert many >= batches - 2, (many, batches)  # (a batch of one goes alone)
            assert fan_in.sections == fan_in.requests
        else:
            assert many == 0
        await table.sync()
        assert {k: table.revision(k) for k in revisions} == revisions


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
            for turns in (0, 1, 2, 3, 3, 4, 6):  # cancelled waiting, gathering, in flight
                async with anyio.create_task_group() as tg:
                    for i in range(6):
                        tg.start_soon(table.put, b"c%d" % i, b"v")
                    for _ in range(turns):
                        await anyio.lowlevel.checkpoint()
                    tg.cancel_scope.cancel()
                with anyio.fail_after(20):
                    rev = await table.put(b"after", b"x")
                await table.sync()
                assert table.revision(b"after") == rev
            writer = table._writer
            assert writer is not None
            assert writer._queues == {}
            assert writer._gatherer is None
            assert not writer._busy


async def test_a_partition_retried_after_a_failed_fsync_holds_back_no_other(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    """Puts to two partitions go in rounds (one request per partition of a round); a
    real fsync of partition 1 fails (its ALL acks fail, the
    server cuts the log back): that partition's writes are tried again and stored, while
    partition 0 goes on in the next rounds. Every put returns the revision the view then
    holds. On a loaded machine the injected failure can strike an fsync no put waits for
    (nothing to retry: seen once in 12 runs, six at a time): the scenario is then run
    again on a fresh server, at most FSYNC_ATTEMPTS times, and one run must retry."""
    retried = []
    for attempt in range(FSYNC_ATTEMPTS):
        retried.append(await _fsync_failure_round(nats_server, tmp_path / f"a{attempt}"))
        if retried[-1]:
            break
    assert retried[-1] >= 1, retried  # partition 1's failed batch, tried again


async def test_a_lone_write_is_retried_after_a_failed_fsync(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    """As above with one writer: each put is a lone write (written by its caller, no
    round); the one whose fsync fails is tried again with its sequence and stored once."""
    retried = []
    for attempt in range(FSYNC_ATTEMPTS):
        retried.append(await _fsync_failure_round(nats_server, tmp_path / f"a{attempt}", 1))
        if retried[-1]:
            break
    assert retried[-1] >= 1, retried


async def _fsync_failure_round(nats_server: NatsServer, tmp_path: Path, lanes: int = 8) -> int:
    """One run of the scenario above (``lanes`` writers); the writer's retries."""
    stream = "wfsync"
    await anyio.Path(tmp_path).mkdir()
    marker = tmp_path / "fault-fired"
    fault = FsyncFault(match="/1/00000000000000000000.log", at=3, marker=marker)  # partition 1
    proc = start_server_process(nats_server.url, tmp_path / "data", env=fault.env())
    try:
        with anyio.fail_after(60):
            async with Client([proc.address]) as client:
                await client.create_stream(stream, compact=True, partitions=2)
                async with Table(client, stream) as table:
                    writer = table._writer
                    assert writer is not None
                    keys = [b"f%03d" % i for i in range(120)]
                    by_partition = {writer.partition_of(k) for k in keys}
                    assert by_partition == {0, 1}
                    revisions: dict[bytes, int] = {}

                    async def lane(lane_keys: list[bytes]) -> None:
                        for key in lane_keys:
                            revisions[key] = await table.put(key, key * 2)

                    async with anyio.create_task_group() as tg:
                        for i in range(lanes):
                            tg.start_soon(lane, keys[i::lanes])
                    assert marker.exists(), "the injected fsync failure never fired"
                    await table.sync()
                    assert {k: table.entry(k) for k in keys} == {
                        k: Entry(k, k * 2, revisions[k], writer.partition_of(k)) for k in keys
                    }
                    assert not writer._busy
                    assert not writer._queues
                    retries = writer.retries
    finally:
        assert proc.stop() == 0
    return retries


async def test_a_lone_write_goes_on_the_leaders_connection_from_its_caller(
    jet_dev: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On asyncio a write alone in its round is written on the open leader connection by
    its caller (no :meth:`Client.produce`), a refusal still names the current revision and
    value; with no leader connection at hand (stale metadata) it goes through
    ``Client.produce``, as every write does on trio."""
    stream = unique("wlone")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        async with Table(client, stream) as table:
            await table.put(b"warm", b"0")  # the leader's connection is open
            produced: list[int] = []
            produce = client.produce

            async def counted(request, **kwargs):  # type: ignore[no-untyped-def]
                produced.append(request.partition)
                return await produce(request, **kwargs)

            monkeypatch.setattr(client, "produce", counted)
            with anyio.fail_after(30):
                rev = await table.put(b"k", b"1")
                rev2 = await table.update(b"k", b"2", rev)
                with pytest.raises(WrongExpectedKeyOffset) as refused:
                    await table.update(b"k", b"3", rev)
            assert refused.value.current_revision == rev2
            assert refused.value.details["current_value"] == b"2"
            direct = sniffio.current_async_library() == "asyncio"
            assert produced == ([] if direct else [0, 0, 0])
            client.metadata_cache.mark_stale()  # no leader connection without a lookup
            with anyio.fail_after(30):
                rev3 = await table.update(b"k", b"4", rev2)
            assert produced[-1:] == [0]
            await table.sync()
            assert table.entry(b"k") == Entry(b"k", b"4", rev3, 0)


async def test_a_lone_write_cancelled_in_flight_frees_its_partition(jet_dev: JetDev) -> None:
    """A round of the caller's write alone is not shielded: cancelled before, while or
    after its request goes, the caller gets the cancellation, and the next write goes
    and is what the view then holds; the writer is left with nothing queued or busy."""
    stream = unique("wlone")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        async with Table(client, stream) as table:

            async def refused(turns: int) -> None:
                with contextlib.suppress(WrongExpectedKeyOffset):  # if it ends first
                    await table.update(b"k", b"v%d" % turns, 10**9)

            for turns in (0, 1, 2, 3, 5, 8):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(refused, turns)
                    for _ in range(turns):
                        await anyio.lowlevel.checkpoint()
                    tg.cancel_scope.cancel()
                with anyio.fail_after(20):
                    rev = await table.put(b"after", b"%d" % turns)
                await table.sync()
                assert (table.revision(b"after"), table.get(b"after")) == (rev, b"%d" % turns)
                writer = table._writer
                assert writer is not None
                assert (writer._queues, writer._gatherer, writer._busy) == ({}, None, set())
