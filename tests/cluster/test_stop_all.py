"""A whole cluster stopped at once (SIGTERM to every server, then SIGINT to each, as
:meth:`jetserver.testing.Cluster.stop` does): the second signal hurries each server's
stop (spec/cluster.md, "Graceful shutdown"). The waits on the rest of the cluster, which can
only time out when every server stops (handing leaderships over, leaving the ISRs: up to
half of ``shutdown_timeout_s`` each), are skipped; each log is still flushed and closed and
``clean_stop`` written, so the next start keeps the server's ISR places."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.scenario import LEADER_TIMEOUT_S
from cluster.views import wait_full_isr
from cluster.workload import client
from jetsdk import AckPolicy, Producer
from jetserver.cluster.handoff import HANDOFF_TIMEOUT_FRACTION
from jetserver.config.server import DEFAULT_SHUTDOWN_TIMEOUT_S
from jetserver.server import CLEAN_STOP_FILE

pytestmark = [pytest.mark.anyio, needs_cluster]

PARTITIONS = 3
"""RF 3: every server leads one partition and follows two (it is in others' ISRs)."""
WAIT_BOUND_S = DEFAULT_SHUTDOWN_TIMEOUT_S * HANDOFF_TIMEOUT_FRACTION
"""What one of the skipped waits may take (5 s): a hurried stop of all ends well before."""


async def test_a_cluster_stopped_at_once_hurries_and_every_server_stops_cleanly(
    tmp_path: Path,
) -> None:
    cluster = Cluster(root=tmp_path, size=3)
    cluster.start()
    try:
        async with client(cluster.addresses) as jet:
            await jet.create_stream("all", partitions=PARTITIONS, replication_factor=3)
            for p in range(PARTITIONS):
                await wait_full_isr(cluster, "all", p, 3, LEADER_TIMEOUT_S)
            async with Producer(jet, "all", ack=AckPolicy.ALL) as producer:
                for i in range(30):
                    await producer.send_soon(b"v%d" % i, key=b"k%d" % i)
                await producer.flush()
    except BaseException:
        cluster.stop()
        raise
    started = time.monotonic()
    await anyio.to_thread.run_sync(cluster.stop)
    took = time.monotonic() - started
    logs = "\n".join(f"==== {sid}\n{log[-3000:]}" for sid, log in cluster.all_logs().items())
    assert took < WAIT_BOUND_S, f"the cluster took {took:.2f} s to stop\n{logs}"
    for s in cluster.servers:
        assert s.proc is not None
        assert s.proc.returncode == 0, logs
        assert (s.data_dir / CLEAN_STOP_FILE).exists(), f"{s.server_id}: no clean_stop\n{logs}"
