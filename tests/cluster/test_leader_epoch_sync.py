"""Issue 34: replicas taking the lead write their leader-epoch checkpoints without fsyncs
and share a sync of the file system (``RoleDriver.fs_sync``); each used to fsync its
checkpoint and its directory (two fsyncs per partition, most of a failover's wait on a busy
disk). The entries are durable before the replica leads: after a simulated power loss
(every server's durability trace, kill -9 of all) each leader's checkpoint holds its epoch.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import orjson
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.views import wait_leader
from cluster.workload import client
from jetserver.storage.checkpoint import LEADER_EPOCH_FILE

pytestmark = [pytest.mark.anyio, needs_cluster]

PARTITIONS = 12
BOUND_S = 45.0


def _epoch_fsyncs(trace: Path) -> int:
    """fsyncs of a leader-epoch checkpoint (its ``.tmp`` before the rename)."""
    n = 0
    for line in trace.read_bytes().splitlines():
        try:
            ev = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if ev.get("ev") == "sync" and str(ev.get("path", "")).endswith(f"{LEADER_EPOCH_FILE}.tmp"):
            n += 1
    return n


async def test_new_leaders_share_a_file_system_sync(tmp_path: Path) -> None:
    with Cluster(root=tmp_path, size=3, power_loss=True) as cluster:
        async with client(cluster.addresses) as jet:
            await jet.create_stream("orders", partitions=PARTITIONS, replication_factor=3)
            infos = {p: await wait_leader(cluster, "orders", p, BOUND_S) for p in range(PARTITIONS)}
        for s in cluster.servers:
            assert _epoch_fsyncs(s.trace_path) == 0, s.server_id
        await anyio.to_thread.run_sync(cluster.simulate_power_loss)
        for p, info in infos.items():
            server = cluster.server(info.leader or "")
            [directory] = (server.data_dir / "streams").glob(f"orders-*/{p}")
            text = (directory / LEADER_EPOCH_FILE).read_text()
            assert text.split("\n")[2:3] == [f"{info.leader_epoch} 0"], (p, text)
