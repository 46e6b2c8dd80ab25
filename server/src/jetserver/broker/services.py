"""What a server gives every partition replica it runs: one value, shared by all of them.

The NATS link, the ack router, the server's id and control plane, the replication timings,
the followers' fetch sessions, the fsync runner and the end-of-leadership callback are the
same for each replica of a server. :class:`ReplicaServices` carries them together: the
stream manager builds it once, and a replica and its role driver each hold one reference
to it instead of one per service (issue 34: memory per idle partition).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

from jetserver.broker.acks import AckRouter
from jetserver.broker.isr_sweep import IsrSweep
from jetserver.broker.nats_port import NatsPort
from jetserver.infra.log_tally import LogTally
from jetserver.replication import ControlPlane, ReplicationConfig
from jetserver.replication.session_pool import FetchSessions
from jetserver.storage.fsync_runner import FsyncRunner

__all__ = ["ReplicaServices"]


@attrs.frozen(eq=False)
class ReplicaServices:
    """The server's services that every partition replica uses (module docstring)."""

    link: NatsPort
    """NATS link for the leaders' subscriptions."""
    acks: AckRouter
    """Where acks to NATS inboxes go."""
    server_id: str = ""
    """This server's id (cluster mode)."""
    controller: ControlPlane | None = None
    """Where ISR changes and silent leaders go (cluster mode; None on a server alone)."""
    replication: ReplicationConfig = attrs.field(factory=ReplicationConfig)
    """Replication timings."""
    fetch_sessions: FetchSessions | None = None
    """The server's fetch sessions, shared by followers (None: each runs its own)."""
    fsyncs: FsyncRunner = attrs.field(factory=FsyncRunner)
    """Where the partitions' fsyncs run."""
    unconfirmed: LogTally = attrs.field(
        factory=lambda: LogTally(
            logging.getLogger("jetserver.broker.roles"),
            "cannot confirm the subscription",
            level=logging.WARNING,
        )
    )
    """The new leaders' "cannot confirm the subscription" lines: one per interval (they
    share the PING round trip that failed: 2,793 lines on a survivor in a failover)."""
    isr_sweep: IsrSweep = attrs.field(factory=IsrSweep)
    """The server's one ISR check over the leaders it holds (run by the stream manager in
    cluster mode)."""
    on_leadership_end: Callable[[str, int], None] | None = None
    """Called with (stream, partition) when a replica stops leading, after its pending ALL
    acks were failed with NOT_LEADER (the Produce service then answers at once the requests
    still waiting for that partition)."""
