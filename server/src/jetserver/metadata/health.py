"""Partition health as the cluster sees it: offline, under-replicated, under min ISR.

Pure: takes the metadata and a liveness view (``is_down(server_id)``), no I/O. The same
rules serve the Metadata and DescribeStream answers (each partition's ``offline``), the
cluster counts the metadata leader exports as metrics, and (through the SDK's metadata)
``jet top``, ``jet console``, ``jet stream info`` and ``jet cluster status``
(spec/protocol.md, "Metadata"; spec/cluster.md, "Partition health").

A partition is

- **offline** when it has no live leader: no leader at all, or its leader's server does
  not answer in the answering server's liveness view (nothing can produce to it or read
  from it until that server comes back or another replica is elected);
- **under-replicated** when it is offline or has fewer in-sync replicas than replicas;
- **under min ISR** when it is offline or has fewer in-sync replicas than its ``min_isr``
  (ALL acks are refused with NOT_ENOUGH_REPLICAS).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from jetserver.metadata.model import PartitionAssignment, StreamMeta

IsDown = Callable[[str], bool]
"""``server_id -> True`` if that server does not answer (a liveness view)."""

NO_LEADER = "no leader"
"""The offline reason of a partition without a leader."""


def never_down(server_id: str) -> bool:
    """The liveness view of a server alone: nothing is down."""
    return False


def offline_reason(a: PartitionAssignment, is_down: IsDown) -> str | None:
    """Why the partition has no live leader, or None if it has one."""
    if not a.leader:
        return NO_LEADER
    if is_down(a.leader):
        return f"leader {a.leader} does not answer"
    return None


@attrs.frozen
class ClusterHealth:
    """Partition counts over every stream (internal ones included, also counted apart)."""

    partitions: int = 0
    offline: int = 0
    under_replicated: int = 0
    under_min_isr: int = 0
    internal_partitions: int = 0
    """Of ``partitions``, those of internal streams (``__groups``, ``__share.*``)."""
    internal_offline: int = 0
    internal_under_replicated: int = 0
    internal_under_min_isr: int = 0


def cluster_health(metas: Iterable[StreamMeta], is_down: IsDown) -> ClusterHealth:
    """Count the partitions of ``metas`` by state (see the module doc)."""
    counts = dict.fromkeys(attrs.fields_dict(ClusterHealth), 0)
    for meta in metas:
        internal = meta.spec.internal or meta.name.startswith("__")
        for a in meta.partitions:
            offline = offline_reason(a, is_down) is not None
            states = {
                "partitions": True,
                "offline": offline,
                "under_replicated": offline or len(a.isr) < len(a.replicas),
                "under_min_isr": offline or len(a.isr) < meta.spec.min_isr,
            }
            for state, hit in states.items():
                if hit:
                    counts[state] += 1
                    if internal:
                        counts["internal_" + state] += 1
    return ClusterHealth(**counts)
