"""What a table write costs in CPU (issue 38): ``python -m bench table_cost [--quick]``.

On a machine shared with other work, rates are noise; CPU per operation and counts are
not (or much less). Each round runs in a child process (client and server code from one
tree) against a one-server ``jet dev`` of its own, and measures per operation the CPU of
the client process, of the jet server and of nats-server (/proc), their wake-ups
(voluntary context switches, all threads: ``*_wakes``), the Produce requests the table
sent (:attr:`TableWriter.requests`: partition batches; ``wire``: requests on the wire, a
ProduceMany of a round's batches counting one) and the Fetch answers its view applied
(``Table.fetches``, where the tree has it):

- ``modify1``: ``Table.modify`` of one counter, one writer (each update waits for the
  previous one's commit);
- ``race4``: 4 tables (own clients) each ``modify`` one counter (the CAS row of
  ``bench table``); lost updates are counted;
- ``put``: ``Table.put`` with ack ALL, 64 in flight over 4 partitions (the put row);
  ``put1`` the same over 1 partition; ``putw`` as ``put`` on a stream of durability
  ``written`` (the ack waits for no fsync: JetStream KV's default store, see
  ``bench table``);
- ``kv_update1``, ``kv_race4``: JetStream KV's side of ``modify1`` and ``race4`` (nats-py
  ``kv.update`` with the revision last seen, a refused writer reads the key with
  ``kv.get``: :func:`bench.bench_table.kv_increments`) against a nats-server with
  JetStream on a file store with ``sync_interval: always``, as ``bench table``: the CPU of
  this process and of that nats-server (``nats``), and ``requests``: gets and updates.

The kv kinds do not depend on the tree (they run in each, as a control of the load).

With ``JET_BENCH_AGAINST=<another jet work tree>`` the rounds alternate between this tree
(A) and that one (B), A first in odd pairs; medians per kind and tree at the end.
``JET_TABLE_COST_ROUNDS`` (default 4; quick 2) pairs per kind; ``JET_TABLE_COST_KINDS``
(comma-separated) runs only those kinds; ``JET_TABLE_COST_LINGER`` (seconds) sets the
tables' reader linger (``Table(linger=)``; default: the tree's default, 5 ms).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import anyio
import orjson

from bench.trees import child_figures, compared_trees

KINDS = {
    "modify1": 500,
    "race4": 1000,
    "kv_update1": 500,
    "kv_race4": 1000,
    "put": 10_000,
    "put1": 10_000,
    "putw": 10_000,
}
"""Operations per round of each kind."""
_VALUE = b"v" * 100


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wakeups(pid: int | str) -> int:
    """Voluntary context switches of a process so far (each a sleep, woken later: a wait
    in epoll, on a lock, for the disk), all its threads."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def _bump(value: bytes | None) -> bytes:
    return b"%d" % (int(value or b"0") + 1)


def _wire(table: object) -> int:
    """Requests the table's writer put on the wire (a ProduceMany counts one; a tree
    without ProduceMany rounds: its partition batches)."""
    writer = getattr(table, "_writer", None)
    return int(getattr(writer, "wire_requests", getattr(writer, "requests", 0)))


async def _round(kind: str, n: int, addresses: list[str], pids: dict[str, int]) -> dict[str, float]:
    from jetsdk import Client, Table
    from jetsdk.table.table import DEFAULT_LINGER_S

    stream = f"tc{uuid.uuid4().hex[:8]}"
    async with contextlib.AsyncExitStack() as stack:
        admin = await stack.enter_async_context(Client(addresses))
        await admin.create_stream(
            stream,
            compact=True,
            partitions=4 if kind in ("put", "putw") else 1,
            durability="written" if kind == "putw" else None,
        )
        count = 4 if kind == "race4" else 1
        linger = float(os.environ.get("JET_TABLE_COST_LINGER", DEFAULT_LINGER_S))
        tables = []
        for _ in range(count):
            client = await stack.enter_async_context(Client(addresses))
            tables.append(await stack.enter_async_context(Table(client, stream, linger=linger)))
        work: Callable[[int], Awaitable[None]]
        updates = [0]
        if kind.startswith("put"):
            table = tables[0]

            async def work(ops: int) -> None:
                numbers = iter(range(ops))

                async def lane() -> None:
                    for i in numbers:
                        await table.put(b"p-%08d" % i, _VALUE)

                async with anyio.create_task_group() as tg:
                    for _ in range(64):
                        tg.start_soon(lane)

        else:

            async def work(ops: int) -> None:
                async def writer(table: Table, each: int) -> None:
                    for _ in range(each):
                        await table.modify(b"n", _bump)
                        updates[0] += 1

                async with anyio.create_task_group() as tg:
                    for table in tables:
                        tg.start_soon(writer, table, ops // len(tables))

        await work(max(n // 20, 20))  # warm-up (and the counter's first value)
        requests = [t._writer.requests for t in tables if t._writer is not None]
        fetches = [getattr(t, "fetches", 0) for t in tables]
        wire = sum(_wire(t) for t in tables)
        cpu = {name: _cpu_s(pid) for name, pid in pids.items()}
        procs: dict[str, int | str] = {"client": "self", **pids}
        wakes = {name: _wakeups(pid) for name, pid in procs.items()}
        client_cpu = time.process_time()
        await work(n)
        out = {"client_us": (time.process_time() - client_cpu) / n * 1e6}
        for name, pid in pids.items():
            out[f"{name}_us"] = (_cpu_s(pid) - cpu[name]) / n * 1e6
        for name, proc in procs.items():
            out[f"{name}_wakes"] = (_wakeups(proc) - wakes[name]) / n
        done = [t._writer.requests for t in tables if t._writer is not None]
        out["requests"] = (sum(done) - sum(requests)) / n
        out["wire"] = (sum(_wire(t) for t in tables) - wire) / n
        out["fetches"] = (sum(getattr(t, "fetches", 0) for t in tables) - sum(fetches)) / n
        if not kind.startswith("put"):
            await tables[0].sync()
            out["lost"] = updates[0] - int(tables[0].get(b"n") or b"0")
        return out


async def _kv_round(kind: str, n: int, url: str, pid: int) -> dict[str, float]:
    """A kv kind's round: ``n`` increments of one counter by 1 or 4 writers."""
    import nats

    from bench.bench_table import kv_increments

    writers = 4 if kind == "kv_race4" else 1
    nc = await nats.connect(url)
    try:
        kv = await nc.jetstream().create_key_value(bucket=f"c{uuid.uuid4().hex[:8]}")
        await kv.create("n", b"0")
        requests = [0]

        async def work(ops: int) -> None:
            async def writer() -> None:
                took = await kv_increments(kv, ops // writers)
                requests[0] += took

            async with anyio.create_task_group() as tg:
                for _ in range(writers):
                    tg.start_soon(writer)

        await work(max(n // 20, 20))  # warm-up
        warm = requests[0]
        cpu, wakes = _cpu_s(pid), {"client": _wakeups("self"), "nats": _wakeups(pid)}
        client_cpu = time.process_time()
        await work(n)
        out = {
            "client_us": (time.process_time() - client_cpu) / n * 1e6,
            "nats_us": (_cpu_s(pid) - cpu) / n * 1e6,
            "client_wakes": (_wakeups("self") - wakes["client"]) / n,
            "nats_wakes": (_wakeups(pid) - wakes["nats"]) / n,
            "requests": (requests[0] - warm) / n,
        }
        entry = await kv.get("n")
        made = writers * (max(n // 20, 20) // writers + n // writers)
        out["lost"] = made - int(entry.value or b"0")
        return out
    finally:
        await nc.close()


def _kv_child(kind: str) -> None:
    """A kv kind's round against a nats-server of its own (JetStream, fsync always)."""
    import tempfile
    from pathlib import Path

    from jetserver.testing import NatsServer

    with tempfile.TemporaryDirectory() as root:
        store = Path(root) / "js"
        extra = f'jetstream {{\n  store_dir: "{store}"\n  sync_interval: always\n}}\n'
        js = NatsServer(work_dir=Path(root) / "nats", extra_config=extra)
        js.start()
        try:
            result = anyio.run(_kv_round, kind, KINDS[kind], js.url, js.pid, backend="asyncio")
        finally:
            js.stop()
    print(orjson.dumps(result).decode(), flush=True)


def _child(kind: str) -> None:
    """One round in this process (its code is the tree on its PYTHONPATH)."""
    from jetserver.testing.devcluster import DevCluster

    if kind.startswith("kv_"):
        _kv_child(kind)
        return
    with open(os.devnull, "wb") as devnull, DevCluster(size=1, log_file=devnull) as dev:
        assert dev.nats is not None
        pids = {"server": dev.servers[0].pid, "nats": dev.nats.pid}
        result = anyio.run(_round, kind, KINDS[kind], dev.addresses, pids, backend="asyncio")
    print(orjson.dumps(result).decode(), flush=True)


def run(quick: bool) -> None:
    trees = compared_trees()
    pairs = int(os.environ.get("JET_TABLE_COST_ROUNDS", "2" if quick else "4"))
    print(
        "table CPU per operation (client, jet server, nats-server, us), Produce requests and"
        " Fetch answers per operation"
        + "".join(f"; {tag} = {tree}" for tag, tree in trees.items()),
        flush=True,
    )
    chosen = os.environ.get("JET_TABLE_COST_KINDS")
    kinds = list(KINDS) if not chosen else [k.strip() for k in chosen.split(",")]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise SystemExit(f"JET_TABLE_COST_KINDS: unknown {unknown}; known: {list(KINDS)}")
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for kind in kinds:
        for r in range(pairs):
            tags = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for tag in tags:
                # The tree's SDK and server; this module (bench) from this tree.
                got = child_figures("bench.bench_table_cost", [kind], trees[tag])
                results.setdefault((kind, tag), []).append(got)
                load = os.getloadavg()[0]
                print(
                    f"  {kind:<7} r{r} {tag}: "
                    + ", ".join(f"{k} {v:.3g}" for k, v in got.items())
                    + f" (load {load:.1f})",
                    flush=True,
                )
    print(f"  medians over {pairs} rounds:")
    for (kind, tag), rounds in results.items():
        keys = list(rounds[0])
        medians = {k: statistics.median(r[k] for r in rounds) for k in keys}
        print(f"    {kind:<7} {tag}: " + ", ".join(f"{k} {v:.3g}" for k, v in medians.items()))


if __name__ == "__main__":
    _child(sys.argv[1])
