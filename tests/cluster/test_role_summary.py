"""Issue 34: a server logs one "assignments applied" line per burst of role changes, not one
line per partition (a failover of 1,000 leaderships logged 1,000 lines on each survivor).

Three servers, one RF 3 stream of ``PARTITIONS``. After the create every server's log
holds no per-partition "assignment applied" INFO line, and its summary lines count every
replica it holds; the ``led=`` lists name each partition's leadership once (one server per
partition and epoch). After a kill -9 of one server, the survivors' summary lines name the
leaderships they took over, in the epochs the metadata shows, and their followers of the
killed server's partitions log no "replication interrupted" line each (the session logs
its lost connection once); the killed server leaving every ISR is not a line per partition
either.
"""

from __future__ import annotations

import re

import pytest

from cluster.checkers import leaderships
from cluster.harness import Cluster, needs_cluster
from cluster.views import partition_info, wait_leader
from cluster.workload import client
from jetserver.testing.waiting import wait_until_async

pytestmark = [pytest.mark.anyio, needs_cluster]

PARTITIONS = 24
BOUND_S = 45.0
"""Bound on every wait."""
SETTINGS = {"replication": {"replica_lag_max_s": 2.0}}
"""The killed server leaves every ISR soon."""
_SUMMARY = re.compile(r" INFO +jetserver\.broker\.role_summary assignments applied count=(\d+)")
_PER_PARTITION = re.compile(r" INFO +\S+ assignment applied stream=")
_ISR_LINES = re.compile(r" INFO +\S+ (ISR changed|proposing an ISR change) ")
_INTERRUPTED = re.compile(r" INFO +\S+ replication interrupted ")


def _applied(text: str) -> int:
    return sum(int(m[1]) for m in _SUMMARY.finditer(text))


async def test_role_changes_are_logged_once_per_burst() -> None:
    with Cluster(size=3, settings=SETTINGS) as cluster:
        async with client(cluster.addresses) as jet:
            await jet.create_stream("orders", partitions=PARTITIONS, replication_factor=3)
            infos = {}
            for p in range(PARTITIONS):
                infos[p] = await wait_leader(cluster, "orders", p, BOUND_S)
            await wait_until_async(
                lambda: all(_applied(t) >= PARTITIONS for t in cluster.all_logs().values()),
                BOUND_S,
                "every server's summary lines count its replicas",
            )
            logs = cluster.all_logs()
            for sid, text in logs.items():
                assert not _PER_PARTITION.search(text), sid
                lines = len(_SUMMARY.findall(text))
                assert 1 <= lines <= PARTITIONS // 4, (sid, lines)  # bursts, not partitions
            led = leaderships(logs)
            for p, info in infos.items():
                assert led.get(("orders", p, info.leader_epoch)) == {info.leader}, (p, led)

            counts = [i.leader for i in infos.values()]
            victim = max(set(counts), key=counts.count)
            moved = [p for p, i in infos.items() if i.leader == victim]
            at_kill = {sid: len(t) for sid, t in logs.items() if sid != victim}
            cluster.kill(victim)
            after = {}
            for p in moved:
                after[p] = await wait_leader(cluster, "orders", p, BOUND_S, not_on=victim)

            def named() -> bool:
                led = leaderships({s: t for s, t in cluster.all_logs().items() if s != victim})
                return all(
                    led.get(("orders", p, i.leader_epoch)) == {i.leader} for p, i in after.items()
                )

            await wait_until_async(
                named, BOUND_S, "the survivors' summary lines name the moved leaderships"
            )
            # The followers of the killed server's partitions lose their session (logged
            # once by the session) and may ask a new leader before it took its role
            # (NOT_LEADER): neither is a line per partition unless it lasts.
            since = {s: t[at_kill[s] :] for s, t in cluster.all_logs().items() if s in at_kill}
            interrupted = sum(len(_INTERRUPTED.findall(t)) for t in since.values())
            lines = [ln for t in since.values() for ln in t.splitlines() if "interrupted" in ln]
            assert interrupted < len(moved), lines
            for p in moved:  # the metadata still shows them (no later election)
                info = await partition_info(cluster, "orders", p)
                assert info is not None
                assert info.leader_epoch == after[p].leader_epoch

            async def shrunk() -> bool:
                infos = [await partition_info(cluster, "orders", p) for p in range(PARTITIONS)]
                return all(i is not None and victim not in i.isr for i in infos)

            await wait_until_async(shrunk, BOUND_S, "the killed server out of every ISR")
            # Its removal from 24 ISRs: one "ISR changes proposed in one entry" line per
            # batch, each change at DEBUG (a failover's thousands were a line each).
            since = {s: t[at_kill[s] :] for s, t in cluster.all_logs().items() if s in at_kill}
            isr_lines = sum(len(_ISR_LINES.findall(t)) for t in since.values())
            assert isr_lines < PARTITIONS // 2, isr_lines
