"""The cost of one cluster reconcile: ``python -m bench reconcile [--quick]``.

A :class:`~jetserver.broker.streams.StreamManager` of server ``s1`` holds a replica of
every partition of streams of 100 partitions at RF 3 on 3 servers (10,000 partitions;
``--quick``: 3,000), all running with their targets handed (running partitions without
logs: what reconcile reads of them). Then, timed (thread CPU, median of the repeats):

- ``one``: reconcile after one election in one stream;
- ``third``: reconcile after one batched election moving a third of the leaderships
  (what a failover applies), which wakes those partitions' appliers.

With ``JET_BENCH_AGAINST=<another jet work tree>`` the rounds alternate between this tree
(A) and that one (B), each in a process of its own.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any, cast

import anyio
import orjson

from bench.trees import child_figures, compared_trees

PER_STREAM = 100
REPEATS = 21


def _state(partitions: int) -> Any:
    from jetserver.metadata import ops
    from jetserver.metadata.model import MetadataState, StreamSpec

    servers = ("s1", "s2", "s3")
    state = MetadataState()
    for s in servers:
        state, _ = ops.apply(state, ops.RegisterServer(s, f"127.0.0.1:{4222 + int(s[1])}", s))
    for i in range(partitions // PER_STREAM):
        spec = StreamSpec(name=f"s{i}", subject=f"s{i}", partitions=PER_STREAM)
        replicas = tuple(tuple(servers[(p + k) % 3] for k in range(3)) for p in range(PER_STREAM))
        state, _ = ops.apply(state, ops.CreateStream(spec, f"id{i}", 1, replicas))
    return state


def _elect(state: Any, third: bool) -> Any:
    from jetserver.metadata import ops

    elections: list[Any] = []
    for meta in state.streams.values():
        for a in meta.partitions:
            if a.leader == "s1" and (third or not elections):
                elections.append(ops.ElectLeader(meta.name, a.partition, a.isr[1], 1))
    return ops.apply(state, ops.ElectLeaders(tuple(elections)))[0]


async def _child_async(partitions: int) -> dict[str, float]:
    from jetserver.broker.running import RunningPartition
    from jetserver.broker.streams import StreamManager
    from jetserver.config.server import ServerConfig, ServerSection
    from jetserver.metadata.store import MetadataStore

    config = ServerConfig(server=ServerSection(id="s1", data_dir="/nonexistent"))
    manager = StreamManager(config, MetadataStore(cast(Any, None)), cast(Any, None))
    base = _state(partitions)
    running = manager._running  # what start/open would have made: the targets are handed
    for meta in base.streams.values():
        for a in meta.partitions:
            running[(meta.name, a.partition)] = RunningPartition(
                cast(Any, None), stream_id=meta.stream_id
            )
    out: dict[str, float] = {}
    for kind, changed in (("one", _elect(base, False)), ("third", _elect(base, True))):
        times = []
        for _ in range(REPEATS):
            await manager.reconcile(base, collect=False)  # every target as in base
            started = time.thread_time()
            await manager.reconcile(changed, collect=False)
            times.append(time.thread_time() - started)
        woken = sum(1 for r in running.values() if r.wanted and r.wanted[0].leader_epoch)
        out[f"{kind}_ms"] = statistics.median(times) * 1000
        out[f"{kind}_moved"] = woken
    return out


def run(quick: bool) -> None:
    partitions = int(os.environ.get("JET_BENCH_PARTITIONS", 3000 if quick else 10_000))
    trees = compared_trees()
    pairs = 2 if quick else 3
    print(
        f"reconcile of {partitions:,} RF 3 partitions, all held here, thread CPU ms (median"
        f" of {REPEATS})" + "".join(f"; {tag} = {tree}" for tag, tree in trees.items()),
        flush=True,
    )
    results: dict[str, list[dict[str, float]]] = {}
    for r in range(pairs):
        for tag in list(trees) if r % 2 == 0 else list(trees)[::-1]:
            got = child_figures("bench.bench_reconcile", [str(partitions)], trees[tag])
            results.setdefault(tag, []).append(got)
            load = [f"{x:.2f}" for x in os.getloadavg()]
            print(
                f"  r{r} {tag}: one election {got['one_ms']:.2f} ms, a third"
                f" ({got['third_moved']:.0f}) {got['third_ms']:.2f} ms (load {' '.join(load)})",
                flush=True,
            )
    for tag, rounds in results.items():
        one = statistics.median(x["one_ms"] for x in rounds)
        third = statistics.median(x["third_ms"] for x in rounds)
        print(f"  median {tag}: one election {one:.2f} ms, a third {third:.2f} ms")


if __name__ == "__main__":
    print(orjson.dumps(anyio.run(_child_async, int(sys.argv[1]), backend="asyncio")).decode())
