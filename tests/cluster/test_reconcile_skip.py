"""A follower whose log holds no records does not ask its leader OffsetForLeaderEpoch
(spec/cluster.md, "Reconciliation by leader epoch", step 1).

A replica that led a partition without appending anything keeps an epoch entry on its
empty log (the leader records ``(epoch, LEO)`` when it takes an epoch). When it follows
again, reconciliation could not cut anything (no record is held), only drop that entry,
which it now does locally. Before, it asked the leader over the network: after a kill -9,
a restart and the preferred leaders' return, every partition the survivors had led while
the server was down cost one OffsetForLeaderEpoch (about 500 per survivor at 3,000
partitions in ``bench scale_cluster``). This test failed on the old code (the returned
leader answered one per partition it took back).

Real processes: 3 servers with metrics, one killed by PID and restarted; every wait is
bounded.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy

from .control_kit import eventually
from .metered import metered_cluster, scrape
from .test_preferred_leaders import (
    RETURN_TIMEOUT_S,
    _rebalance_by_hand,
    all_preferred,
    kill_and_restart,
    live_view,
)

ACK_TIMEOUT_S = 30.0
"""Bound on each ALL ack (both followers fetched in the new epoch)."""


def _epoch_requests(port: int) -> int:
    """OffsetForLeaderEpoch requests the server on metrics ``port`` answered."""
    found = re.findall(
        r'^jet_requests_total\{api="offset_for_leader_epoch",code="[^"]+"\} (\d+)$',
        scrape(port),
        re.M,
    )
    return sum(int(n) for n in found)


@pytest.mark.anyio
async def test_followers_with_empty_logs_do_not_reconcile_over_the_network(
    tmp_path: Path,
) -> None:
    settings = {"cluster": {"auto_leader_rebalance": False}}
    with metered_cluster(tmp_path, settings) as (cluster, ports):
        victim, preferred = await kill_and_restart(cluster, "empty")  # type: ignore[arg-type]
        # The survivors led the victim's partitions at epoch 1 on empty logs; the victim
        # (metrics reset at its restart) leads nothing yet, so nobody asked it anything.
        moved = 0
        with anyio.fail_after(RETURN_TIMEOUT_S):
            while moved < preferred:
                report = await _rebalance_by_hand(cluster.server(victim).address)
                moved += report["moved"]
                if moved < preferred:
                    await anyio.sleep(0.5)  # the next liveness probe (no event to wait on)

        async def back() -> list[dict[str, Any]] | None:
            parts = await live_view(cluster, "empty")  # type: ignore[arg-type]
            return parts if parts is not None and all_preferred(parts) else None

        parts = await eventually(back, "leadership back on every preferred replica")
        taken = [p["partition"] for p in parts if p["leader"] == victim]
        assert len(taken) == preferred > 0
        # An ALL ack needs both followers to have fetched in the new epoch: each started
        # following the victim, so reconciled (or skipped it) before.
        address = cluster.server(victim).address
        async with Client([address]) as c, Producer(c, "empty", ack=AckPolicy.ALL) as producer:
            for partition in taken:
                with anyio.fail_after(ACK_TIMEOUT_S):
                    await producer.send(b"after", partition=partition)
        asked = await anyio.to_thread.run_sync(_epoch_requests, ports[victim])
        assert asked == 0, f"{asked} OffsetForLeaderEpoch for {preferred} partitions taken back"
