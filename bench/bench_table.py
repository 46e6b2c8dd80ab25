"""Tables (issue 38): ``python -m bench table [--quick]``.

One ``jet dev`` server and, for JetStream KV, a nats-server with JetStream on a file store
with ``sync_interval: always`` (every write fsynced, as an ALL ack of jet's default
durability, ``flushed``), and a second with the default ``sync_interval`` for the
``written`` row. Rows, medians of rounds:

- **reopen**: a table of N keys x 100 B values (N = 1,000,000; 100,000 with --quick) in a
  compacted stream of 4 partitions: open with a full replay (fetch every record) against
  open from a local SQLite snapshot (load it, fetch what came after: nothing here). Target:
  the snapshot reopen of 1,000,000 keys in <= 2 s.
- **get p50**: ``Table.get`` (memory) against JetStream KV's ``kv.get`` (nats-py) on the
  JetStream server, 1,000 keys.
- **CAS under 4 racing writers**: ``Table.modify`` (compare-and-set; a refusal carries the
  value that won, spec/protocol.md §6 "current values", and the writer retries on it at
  once) against ``kv.update`` (a refused writer reads the key with ``kv.get`` and retries),
  4 writers incrementing one counter, each with its own client (and table); lost updates
  counted (must be 0 on both), and round trips per update (requests: each try of ours is
  one Produce request, no read; each of theirs an update and, when refused, a get; the
  first get of each KV writer not counted); beside them the Fetch answers the tables'
  views took per update (each table follows the stream; its readers linger 20 ms after
  an answer, ``Table(linger=)``, 100 ms while its ``modify`` tries are being refused:
  :mod:`jetsdk.table.linger`). Beside it the same with 1 writer: every increment waits
  for the previous one's commit (an fsync and a round trip) on both sides. The clients,
  tables and nats-py's connection are opened before the clock starts (a table's open, a
  few ms, was timed before on jet's side only); :data:`CAS_INCREMENTS` per writer.
- **put, ack ALL**: ``Table.put`` (ack ALL: fsynced) against ``kv.put`` on the
  ``sync_interval: always`` store, :data:`PUT_CONCURRENCY` puts in flight on each side;
  a table of :data:`PARTITIONS` partitions (an append and an fsync per partition batch;
  a round's batches go as one ProduceMany request, their fsyncs run at once), and beside
  it one of 1 partition (one log, one fsync per batch: as a KV bucket's stream).
- **put, durability written** (beside the rows above, no target): the same 4-partition
  put row on a stream created with ``durability="written"`` (an ALL ack waits for the
  write, not its fsync, which follows at once outside the ack path; spec/cluster.md,
  "Durability settings") against ``kv.put`` on a JetStream store with the default
  ``sync_interval`` (2 min: no fsync per write either). The target rows compare fsynced
  writes on both sides (``strace -c`` of 200 puts: nats-server with ``sync_interval:
  always`` 202 fsyncs, the jet server 200 fdatasyncs; with the default ``sync_interval``
  none, a ``written`` stream 10); this row is the comparison a KV user who kept the
  bucket's default makes.
- **watch initial load**: a new ``Table`` and its ``watch()`` of N keys (10,000; 100,000
  without --quick) until the N-th initial change, against ``kv.watchall()`` until its
  end-of-initial-values marker.

The CAS row of racing writers and the fsynced put rows run :data:`ROUNDS` rounds each
(ours, then JetStream's), and print each round and the median ratio with met / NOT met.
The load average is printed: on a shared machine the figures are rough.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import nats
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from jetsdk import AckPolicy, Client, Producer, Table
from jetsdk.client_requests import Durability
from jetserver.testing import NatsServer
from jetserver.testing.devcluster import DevCluster

VALUE = b"v" * 100
PARTITIONS = 4
WRITERS = 4
CAS_INCREMENTS = {True: 100, False: 250}
"""Increments per writer in the CAS rows (quick, full): 25 made a row last ~0.1 s."""
PUT_CONCURRENCY = 64
"""Puts in flight in the put ALL row (each side)."""
ROUNDS = 3
"""Rounds of the CAS row of racing writers and of the fsynced put rows, each printed, then
their median ratio against the target: one quick CAS round is ~0.5 s of ours, and single
rounds of one tree at a quiet moment gave 2.11x, 1.32x and 1.00x one after the other."""


def _load() -> str:
    one, five, _fifteen = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


async def _fill(addresses: list[str], stream: str, n: int) -> float:
    async with Client(addresses) as client:
        await client.create_stream(stream, compact=True, partitions=PARTITIONS)
        started = time.perf_counter()
        async with Producer(client, stream, ack=AckPolicy.LEADER) as producer:
            for i in range(n):
                await producer.send_soon(VALUE, key=b"key-%08d" % i)
            await producer.flush()
        return time.perf_counter() - started


async def _open(
    addresses: list[str], stream: str, snapshot: Path | None, n: int
) -> tuple[float, float, float]:
    """(seconds to open, CPU seconds of this process to open, seconds to close: with a
    snapshot path, writing it)."""
    async with Client(addresses, request_timeout=60.0) as client:
        started, cpu = time.perf_counter(), time.process_time()
        table = Table(client, stream, snapshot=snapshot, timeout=600.0)
        async with table:
            opened, cpu = time.perf_counter(), time.process_time() - cpu
            assert len(table) == n, (len(table), n)
            closing = time.perf_counter()
        return opened - started, cpu, time.perf_counter() - closing


async def _reopen(addresses: list[str], n: int, rounds: int, root: Path) -> None:
    stream = f"tbl-{uuid.uuid4().hex[:8]}"
    filled = await _fill(addresses, stream, n)
    print(f"  filled {n:,} keys x {len(VALUE)} B in {filled:.1f} s ({_load()})", flush=True)
    snapshot = root / "table.sqlite"
    replay: list[tuple[float, float, float]] = []
    from_snapshot: list[tuple[float, float, float]] = []
    _o, _c, write_s = await _open(addresses, stream, snapshot, n)  # writes the snapshot
    print(f"  snapshot of {n:,} keys written in {write_s:.2f} s at close", flush=True)
    for _ in range(rounds):
        replay.append(await _open(addresses, stream, None, n))
        from_snapshot.append(await _open(addresses, stream, snapshot, n))
    full = statistics.median(r[0] for r in replay)
    full_cpu = statistics.median(r[1] for r in replay)
    snap = statistics.median(r[0] for r in from_snapshot)
    snap_cpu = statistics.median(r[1] for r in from_snapshot)
    print(
        f"  reopen {n:,} keys: full replay {full:.2f} s (client CPU {full_cpu:.2f} s), "
        f"from snapshot {snap:.2f} s (client CPU {snap_cpu:.2f} s) ({full / snap:.1f}x; "
        f"target <= 2 s at 1,000,000 keys) [{_load()}]",
        flush=True,
    )


async def _get_p50(addresses: list[str], nats_url: str) -> None:
    keys = [b"g-%04d" % i for i in range(1000)]
    stream = f"get-{uuid.uuid4().hex[:8]}"
    async with Client(addresses) as client:
        await client.create_stream(stream, compact=True)
        async with Table(client, stream) as table:
            for key in keys:
                await table.put(key, VALUE)
            await table.sync()
            lat = []
            for key in keys * 10:
                t0 = time.perf_counter_ns()
                table.get(key)
                lat.append(time.perf_counter_ns() - t0)
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        kv = await js.create_key_value(bucket=f"b{uuid.uuid4().hex[:8]}")
        for key in keys:
            await kv.put(key.decode(), VALUE)
        kv_lat = []
        for key in keys:
            t0 = time.perf_counter_ns()
            await kv.get(key.decode())
            kv_lat.append(time.perf_counter_ns() - t0)
    finally:
        await nc.close()
    ours, theirs = statistics.median(lat) / 1000, statistics.median(kv_lat) / 1000
    print(
        f"  get p50: Table {ours:.2f} us, JetStream kv.get {theirs:.1f} us "
        f"({theirs / ours:.0f}x; target >= 20x) [{_load()}]",
        flush=True,
    )


async def kv_increments(kv: KeyValue, increments: int) -> int:
    """Increment the counter ``n`` of ``kv`` ``increments`` times by ``kv.update`` with
    the revision last seen (a refused writer reads the key with ``kv.get`` and retries, as
    a KV user does); the requests it took (gets and updates)."""
    entry = await kv.get("n")
    value, revision = int(entry.value or b"0"), entry.revision or 0
    done, requests = 0, 1
    while done < increments:
        requests += 1
        try:
            revision = await kv.update("n", b"%d" % (value + 1), revision)
            value, done = value + 1, done + 1
            continue
        except KeyWrongLastSequenceError:
            entry = await kv.get("n")
            requests += 1
        value, revision = int(entry.value or b"0"), entry.revision or 0
    return requests


async def _cas_race(
    addresses: list[str], nats_url: str, increments: int, writers: int = WRITERS
) -> float:
    """One round of the CAS row (printed); its ratio, JetStream's time over ours."""
    stream = f"cas-{uuid.uuid4().hex[:8]}"
    async with Client(addresses) as admin:
        await admin.create_stream(stream, compact=True)
        async with Table(admin, stream) as seed:
            await seed.create(b"n", b"0")

        async def ours(table: Table) -> None:
            for _ in range(increments):
                await table.modify(b"n", lambda v: b"%d" % (int(v or b"0") + 1))

        async with contextlib.AsyncExitStack() as stack:
            tables = []
            for _ in range(writers):  # opened before the clock starts, as nats-py's connection
                client = await stack.enter_async_context(Client(addresses))
                tables.append(await stack.enter_async_context(Table(client, stream)))
            sent = sum(t._writer.requests for t in tables if t._writer is not None)
            fetched = sum(t.fetches for t in tables)
            started = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for table in tables:
                    tg.start_soon(ours, table)
            our_s = time.perf_counter() - started
            our_requests = sum(t._writer.requests for t in tables if t._writer is not None) - sent
            our_fetches = sum(t.fetches for t in tables) - fetched
        async with Table(admin, stream) as table:
            our_lost = writers * increments - int(table.get(b"n") or b"0")
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        kv = await js.create_key_value(bucket=f"c{uuid.uuid4().hex[:8]}")
        await kv.create("n", b"0")

        kv_requests = [0]

        async def theirs() -> None:
            # Awaited first: ``x[0] += await f()`` reads x[0] before the await, so the
            # writers' counts overwrote each other (one writer's was printed, 1.07-1.17
            # round trips per update where they took 3.8).
            took = await kv_increments(kv, increments)
            kv_requests[0] += took - 1  # not the first get

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(writers):
                tg.start_soon(theirs)
        kv_s = time.perf_counter() - started
        kv_lost = writers * increments - int((await kv.get("n")).value or b"0")
    finally:
        await nc.close()
    total = writers * increments
    print(
        f"  CAS, {writers} racing writer(s) x {increments}: Table {total / our_s:.0f}/s "
        f"({our_lost} lost, {our_requests / total:.2f} round trips per update, "
        f"{our_fetches / total:.2f} Fetch answers of the views), "
        f"JetStream kv.update {total / kv_s:.0f}/s ({kv_lost} lost, "
        f"{kv_requests[0] / total:.2f} round trips per update) "
        f"({kv_s / our_s:.2f}x; target >= 2x) [{_load()}]",
        flush=True,
    )
    return kv_s / our_s


async def _in_flight(count: int, put: Callable[[int], Awaitable[object]]) -> float:
    """Seconds for ``count`` calls of ``put(i)``, :data:`PUT_CONCURRENCY` in flight."""
    numbers = iter(range(count))

    async def lane() -> None:
        for i in numbers:
            await put(i)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(PUT_CONCURRENCY):
            tg.start_soon(lane)
    return time.perf_counter() - started


async def _put_all(
    addresses: list[str],
    nats_url: str,
    count: int,
    partitions: int = PARTITIONS,
    durability: Durability | None = None,
) -> float:
    """One round of the put row (printed), its ratio returned; ``durability``: the
    stream's (None: the default, ``flushed``), and ``nats_url`` a JetStream store whose
    fsyncs match it."""
    stream = f"put-{uuid.uuid4().hex[:8]}"
    async with Client(addresses) as client:
        await client.create_stream(
            stream, compact=True, partitions=partitions, durability=durability
        )
        async with Table(client, stream) as table:
            ours = await _in_flight(count, lambda i: table.put(b"p-%08d" % i, VALUE))
    nc = await nats.connect(nats_url)
    try:
        kv = await nc.jetstream().create_key_value(bucket=f"p{uuid.uuid4().hex[:8]}")
        theirs = await _in_flight(count, lambda i: kv.put(f"p-{i:08d}", VALUE))
    finally:
        await nc.close()
    if durability is None:
        sides, target = "fsynced: flushed / sync always", "target >= 5x"
    else:
        sides, target = f"not fsynced: {durability} / default sync_interval", "no target"
    print(
        f"  put ack ALL ({sides}), {PUT_CONCURRENCY} in flight x {count:,}, "
        f"{partitions} partition(s): Table {count / ours:,.0f}/s, "
        f"JetStream kv.put {count / theirs:,.0f}/s ({theirs / ours:.2f}x; "
        f"{target}) [{_load()}]",
        flush=True,
    )
    return theirs / ours


async def _watch_load(addresses: list[str], nats_url: str, n: int) -> None:
    stream = f"wat-{uuid.uuid4().hex[:8]}"
    await _fill(addresses, stream, n)
    async with Client(addresses) as client:
        started = time.perf_counter()
        async with Table(client, stream) as table:
            seen = 0
            async for _change in table.watch():
                seen += 1
                if seen == n:
                    break
            ours = time.perf_counter() - started
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        bucket = f"w{uuid.uuid4().hex[:8]}"
        kv = await js.create_key_value(bucket=bucket)
        await _in_flight(n, lambda i: kv.put(f"key-{i:08d}", VALUE))
        started = time.perf_counter()
        watcher = await kv.watchall()
        got = 0
        async for entry in watcher:
            if entry is None:  # the end of the initial values
                break
            got += 1
        theirs = time.perf_counter() - started
        await watcher.stop()
        assert got == n, (got, n)
    finally:
        await nc.close()
    print(
        f"  watch initial load of {n:,} keys: Table open + watch {ours:.2f} s, JetStream "
        f"kv.watchall {theirs:.2f} s ({theirs / ours:.2f}x; target >= 3x) [{_load()}]",
        flush=True,
    )


def _median(row: str, ratios: list[float], target: float) -> None:
    """The median of a row's rounds against its target."""
    median = statistics.median(ratios)
    met = "met" if median >= target else "NOT met"
    rounds = ", ".join(f"{r:.2f}x" for r in ratios)
    print(
        f"  {row}: median {median:.2f}x of {len(ratios)} rounds ({rounds}); target >= "
        f"{target:g}x: {met} [{_load()}]",
        flush=True,
    )


def run(quick: bool) -> None:
    n = 100_000 if quick else 1_000_000
    rounds = 1 if quick else 3
    with (
        tempfile.TemporaryDirectory() as root,
        open(os.devnull, "wb") as devnull,
        DevCluster(size=1, log_file=devnull) as dev,
    ):
        store = Path(root) / "js"
        extra = f'jetstream {{\n  store_dir: "{store}"\n  sync_interval: always\n}}\n'
        js = NatsServer(work_dir=Path(root) / "nats", extra_config=extra)
        js.start()
        default_store = f'jetstream {{\n  store_dir: "{Path(root) / "js-default"}"\n}}\n'
        js_default = NatsServer(work_dir=Path(root) / "nats-default", extra_config=default_store)
        js_default.start()
        try:
            anyio.run(_get_p50, dev.addresses, js.url)
            increments = CAS_INCREMENTS[quick]
            race = [anyio.run(_cas_race, dev.addresses, js.url, increments) for _ in range(ROUNDS)]
            _median("CAS, 4 racing writers", race, 2.0)
            anyio.run(_cas_race, dev.addresses, js.url, increments * WRITERS, 1)
            puts = 5_000 if quick else 20_000
            for partitions in (PARTITIONS, 1):
                ratios = [
                    anyio.run(_put_all, dev.addresses, js.url, puts, partitions)
                    for _ in range(ROUNDS)
                ]
                _median(f"put ack ALL, {partitions} partition(s)", ratios, 5.0)
            anyio.run(_put_all, dev.addresses, js_default.url, puts, PARTITIONS, "written")
            anyio.run(_watch_load, dev.addresses, js.url, 10_000 if quick else 100_000)
        finally:
            js.stop()
            js_default.stop()
        anyio.run(_reopen, dev.addresses, n, rounds, Path(root))
