"""The fault tests' cluster: :class:`jetserver.testing.Cluster` (the public test kit) with
the fault tests' replication timing (:data:`REPLICA_LAG_MAX_S`).

    with Cluster(root=tmp_path, size=3) as cluster:     # starts everything, bounded
        s = cluster.servers[0]
        s.kill9()                # SIGKILL by PID; the data directory stays
        s.pause(); s.resume()    # SIGSTOP / SIGCONT
        s.start()                # restart on the same data directory, ports and id
        cluster.simulate_power_loss()   # with power_loss=True: kill -9 every server, cut
                                        # every file back to its last fsync; start_all()

Waits: :func:`wait_until_async` (bounded polling, raises :class:`WaitTimeout`).
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from jetserver.testing import Cluster as KitCluster
from jetserver.testing import JetServer, WaitTimeout, wait_until, wait_until_async

__all__ = [
    "REPLICA_LAG_MAX_S",
    "Cluster",
    "JetServer",
    "WaitTimeout",
    "needs_cluster",
    "wait_until",
    "wait_until_async",
]

REPLICA_LAG_MAX_S = 4.0
"""``[replication] replica_lag_max_s`` of every test cluster that sets none (the default is
10 s): a killed or stopped follower leaves the ISR, and ALL acks go on, 4 s after it stopped
copying instead of 10 (test_stop_after_kill ran with 4 s before; test_replication_cluster and
test_disk_full_cluster set 2 s). What the tests check is the same; they wait less for it."""

needs_cluster = pytest.mark.cluster
"""Marks a test that runs a multi-server cluster (select with ``-m cluster``)."""


@attrs.define(eq=False)
class Cluster(KitCluster):
    """:class:`jetserver.testing.Cluster` with ``replica_lag_max_s`` =
    :data:`REPLICA_LAG_MAX_S` unless the test's ``settings`` give one."""

    def __attrs_post_init__(self) -> None:
        settings: dict[str, Any] = {k: dict(v) for k, v in self.settings.items()}
        settings.setdefault("replication", {}).setdefault("replica_lag_max_s", REPLICA_LAG_MAX_S)
        self.settings = settings
