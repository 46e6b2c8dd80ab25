"""The control plane of a cluster: membership, placement, forwarding, partition leadership.

- :mod:`.node` — :class:`ClusterNode`: this server's metadata Raft member and background
  tasks (registration, reconciliation of local replicas, liveness probes);
- :mod:`.forwarding` — CreateStream / DeleteStream on any server, proposed by the metadata
  leader (placement, op ids, retries);
- :mod:`.placement` — where replicas and partition leaders go (pure);
- :mod:`.controller` — :class:`Controller`, what replicas call: ISR changes, silent-leader
  reports, leaving an ISR with a damaged log;
- :mod:`.elections` — the metadata leader's partition leader elections (pure rules + state);
- :mod:`.takeover` — the metadata leader elects a gone server's partitions without reports;
  :mod:`.report_hold` — the other servers' followers hold their reports meanwhile;
- :mod:`.liveness` — which servers answer; :mod:`.peers` — server-to-server connections;
- :mod:`.bootstrap` — ``[cluster]`` configuration to Raft configuration.

spec/cluster.md documents the behaviour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetsdk.lazy_names import lazy_names

if TYPE_CHECKING:
    from jetserver.cluster.controller import Controller
    from jetserver.cluster.node import ClusterNode
    from jetserver.cluster.placement import place_replicas, server_load

_LAZY = {
    "Controller": "jetserver.cluster.controller",
    "ClusterNode": "jetserver.cluster.node",
    "place_replicas": "jetserver.cluster.placement",
    "server_load": "jetserver.cluster.placement",
}
"""Imported on first use: a server alone imports ``report_parse`` (its request handlers), not
the control plane and its Raft (PySyncObj)."""

__getattr__, __dir__ = lazy_names(globals(), _LAZY)


__all__ = ["ClusterNode", "Controller", "place_replicas", "server_load"]
