"""The fault tests' cluster: :class:`jetserver.testing.Cluster` (the public test kit).

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

import pytest

from jetserver.testing import Cluster, JetServer, WaitTimeout, wait_until, wait_until_async

__all__ = [
    "Cluster",
    "JetServer",
    "WaitTimeout",
    "needs_cluster",
    "wait_until",
    "wait_until_async",
]

needs_cluster = pytest.mark.cluster
"""Marks a test that runs a multi-server cluster (select with ``-m cluster``)."""
