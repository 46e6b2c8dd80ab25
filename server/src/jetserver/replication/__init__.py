"""ISR replication of partition logs (spec/cluster.md, "Replication").

Pure, sans-I/O parts (driven by the server and by the seeded simulation alike):

- :mod:`~jetserver.replication.leader` — :class:`LeaderState`: follower progress, ISR
  shrink/expand decisions, the high watermark, the min-ISR check;
- :mod:`~jetserver.replication.follower` — the follower's HW rule and
  :class:`SilenceDetector`;
- :mod:`~jetserver.replication.epochs` — reconciliation by leader epoch (KIP-101);
- :mod:`~jetserver.replication.ids` — replica ids on the wire.

I/O: :mod:`~jetserver.replication.fetcher` (the follower's fetch loop over the client
protocol) and :mod:`~jetserver.replication.reconcile` (its reconciliation exchange).
:class:`ControlPlane` is what replicas need from the controller.
"""

from jetserver.replication.config import ReplicationConfig
from jetserver.replication.control import ControlPlane
from jetserver.replication.epochs import Truncation, truncation_point
from jetserver.replication.follower import SilenceDetector, follower_hw
from jetserver.replication.ids import replica_at, replica_index
from jetserver.replication.leader import FollowerProgress, LeaderPolicy, LeaderState

__all__ = [
    "ControlPlane",
    "FollowerProgress",
    "LeaderPolicy",
    "LeaderState",
    "ReplicationConfig",
    "SilenceDetector",
    "Truncation",
    "follower_hw",
    "replica_at",
    "replica_index",
    "truncation_point",
]
