"""The metadata leader's partition counts as metrics (spec/cluster.md, "Partition health").

Only the server leading the metadata Raft exports ``jet_partitions``,
``jet_partitions_offline``, ``jet_partitions_under_replicated`` and
``jet_partitions_under_min_isr`` (label ``internal``), judged by its own liveness view, so
that a partition whose servers are all down is still counted by a server that lives, and a
sum over the cluster's servers counts each partition once. Every server exports
``jet_metadata_leader`` (1 on the leader, else 0). A server alone is its own metadata
leader: it exports 1 and the counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from jetserver.metadata.health import ClusterHealth, IsDown, cluster_health
from jetserver.metadata.model import StreamMeta

_COUNTS = (
    ("jet_partitions", "partitions", "Partitions of the cluster (metadata leader only)."),
    (
        "jet_partitions_offline",
        "offline",
        "Partitions with no live leader (metadata leader's view; exported by it only).",
    ),
    (
        "jet_partitions_under_replicated",
        "under_replicated",
        "Partitions offline or with fewer in-sync replicas than replicas (metadata leader only).",
    ),
    (
        "jet_partitions_under_min_isr",
        "under_min_isr",
        "Partitions offline or with fewer in-sync replicas than min_isr (metadata leader only).",
    ),
)


@attrs.frozen
class ClusterCounts:
    """What the exposition reads at scrape time."""

    streams: Callable[[], Iterable[StreamMeta]]
    """The metadata's streams."""
    is_down: IsDown
    """This server's liveness view."""
    is_leader: Callable[[], bool]
    """True while this server leads the metadata (always, for a server alone)."""

    def lines(self) -> list[str]:
        """Exposition lines (HELP, TYPE and samples)."""
        leader = self.is_leader()
        out = [
            "# HELP jet_metadata_leader 1 on the server leading the metadata (Raft), else 0.",
            "# TYPE jet_metadata_leader gauge",
            f"jet_metadata_leader {1 if leader else 0}",
        ]
        if not leader:
            return out
        out += render_counts(cluster_health(self.streams(), self.is_down))
        return out


def render_counts(health: ClusterHealth) -> list[str]:
    """The four gauges, one series per ``internal`` value."""
    out = []
    for name, field, text in _COUNTS:
        total = getattr(health, field)
        internal = getattr(health, "internal_" + field)
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} gauge")
        out.append(f'{name}{{internal="false"}} {total - internal}')
        out.append(f'{name}{{internal="true"}} {internal}')
    return out
