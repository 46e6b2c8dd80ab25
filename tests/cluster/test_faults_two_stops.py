"""Issue 10: two followers SIGTERMed within 10 ms of each other, then the leader killed -9.

Both followers stop cleanly at the same moment, so both plan their ISR exits from the same
metadata state; then the leader dies without a clean stop and everything restarts. Every
ALL-acked record must survive, stored once, at its acked offset (full checker).

Before the fix each follower proposed a whole ISR computed from its own view, so the exit
applied second put the first follower back into the ISR; the leader's unclean
registration then made that follower, which had stopped fetching, the leader, and the
records acked after it stopped were truncated everywhere (tests/cluster/test_isr_safety.py
has the same scenario on the state machine alone).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster, wait_until_async
from cluster.scenario import Scenario, elapsed
from cluster.views import wait_full_isr

pytestmark = [pytest.mark.fault, pytest.mark.anyio, needs_cluster]

BOUND_S = 45.0


async def test_two_followers_stop_at_once_then_the_leader_is_killed(tmp_path: Path) -> None:
    with Cluster(root=tmp_path / "cluster", size=3) as cluster:
        async with Scenario.open(cluster, "orders", partitions=1, rf=3) as sc:
            sc.start_producer(count=100_000, time_limit_s=120.0, rate=500.0)
            await sc.producer.wait_acked(300, BOUND_S)
            info, leader = await wait_full_isr(cluster, "orders", 0, 3, BOUND_S)
            followers = [cluster.server(r) for r in info.replicas if r != leader]
            procs = [f.proc for f in followers]
            assert all(p is not None for p in procs)
            t0 = time.monotonic()
            for p in procs:
                assert p is not None
                p.send_signal(signal.SIGTERM)
            gap_ms = (time.monotonic() - t0) * 1000
            # Two kill(2) calls in a row are microseconds apart unless this process was
            # preempted between them; a wider gap is still a valid fault (it is reported,
            # and the durability check below runs all the same).
            if gap_ms >= 10.0:
                sc.note(f"the two SIGTERMs were {gap_ms:.1f} ms apart (preempted)")
            await wait_until_async(
                lambda: not any(f.alive for f in followers), BOUND_S, "both followers stopped"
            )
            acked_before_kill = len(sc.producer.acked)
            cluster.server(leader).kill9()
            sc.note(
                f"followers stopped {elapsed(t0):.1f} s after SIGTERM ({gap_ms:.2f} ms apart); "
                f"leader {leader} killed with {acked_before_kill} acked"
            )
            await anyio.to_thread.run_sync(cluster.start_all)
            await wait_full_isr(cluster, "orders", 0, 3, BOUND_S)
            await sc.producer.wait_acked(acked_before_kill + 200, BOUND_S)
            await sc.verify()
