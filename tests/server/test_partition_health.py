"""Partition health (jetserver.metadata.health, jetserver.metrics.cluster): offline means no live
leader, and the counts the metadata leader exports follow from it; the SDK reads the
Metadata answer's ``offline`` and ``live``."""

from __future__ import annotations

import pytest

from jetsdk.errors import MalformedFrame
from jetsdk.metadata import ClusterMetadata
from jetserver.broker.stream_info import StreamInfoCache, stream_info
from jetserver.metadata.health import NO_LEADER, cluster_health, offline_reason
from jetserver.metadata.model import PartitionAssignment, StreamMeta, StreamSpec
from jetserver.metrics.cluster import ClusterCounts


def assignment(
    p: int, leader: str, replicas: tuple[str, ...], isr: tuple[str, ...]
) -> PartitionAssignment:
    return PartitionAssignment(partition=p, leader=leader, replicas=replicas, isr=isr)


def stream(name: str, rf: int, min_isr: int, *parts: PartitionAssignment) -> StreamMeta:
    spec = StreamSpec(
        name=name,
        subject=name,
        partitions=len(parts),
        replication_factor=rf,
        min_isr=min_isr,
        internal=name.startswith("__"),
    )
    return StreamMeta(spec=spec, stream_id=name, created_ns=0, partitions=tuple(parts))


DOWN = {"s3"}
R3 = ("s1", "s2", "s3")


def is_down(server: str) -> bool:
    return server in DOWN


S123 = ("s1", "s2", "s3")
METAS = [
    # rf1: partition 0 led by the dead s3 (offline), 1 and 2 fine.
    stream(
        "rf1",
        1,
        1,
        assignment(0, "s3", ("s3",), ("s3",)),
        assignment(1, "s1", ("s1",), ("s1",)),
        assignment(2, "s2", ("s2",), ("s2",)),
    ),
    # rf3: one ISR shrunk to 2 (under-replicated, not under min ISR 2), one to 1 (both).
    stream(
        "rf3",
        3,
        2,
        assignment(0, "s1", S123, ("s1", "s2")),
        assignment(1, "s2", S123, ("s2",)),
    ),
    stream("__groups", 3, 2, assignment(0, "s3", S123, S123), assignment(1, "s1", S123, S123)),
]


def test_offline_means_no_live_leader() -> None:
    assert offline_reason(assignment(0, "s3", ("s3",), ("s3",)), is_down) == (
        "leader s3 does not answer"
    )
    assert offline_reason(assignment(0, "", ("s3",), ()), is_down) == NO_LEADER
    assert offline_reason(assignment(0, "s1", ("s1",), ("s1",)), is_down) is None


def test_counts_by_state_with_internal_apart() -> None:
    h = cluster_health(METAS, is_down)
    assert (h.partitions, h.offline, h.under_replicated, h.under_min_isr) == (7, 2, 4, 3)
    assert (h.internal_partitions, h.internal_offline) == (2, 1)
    assert (h.internal_under_replicated, h.internal_under_min_isr) == (1, 1)


def test_only_the_metadata_leader_exports_the_counts() -> None:
    leader = ClusterCounts(lambda: METAS, is_down, lambda: True).lines()
    assert "jet_metadata_leader 1" in leader
    assert 'jet_partitions_offline{internal="false"} 1' in leader
    assert 'jet_partitions_offline{internal="true"} 1' in leader
    assert 'jet_partitions_under_replicated{internal="false"} 3' in leader
    assert 'jet_partitions_under_min_isr{internal="false"} 2' in leader
    assert 'jet_partitions{internal="false"} 5' in leader
    follower = ClusterCounts(lambda: METAS, is_down, lambda: False).lines()
    assert follower[-1] == "jet_metadata_leader 0"
    assert not any(line.startswith("jet_partitions") for line in follower)


def test_the_sdk_reads_offline_and_live() -> None:
    raw = {
        "servers": [
            {"id": "s1", "address": "a:1", "live": True},
            {"id": "s3", "address": "a:3", "live": False},
            {"id": "s9", "address": "a:9"},  # an older server: live
        ],
        "streams": [
            {
                "name": "rf1",
                "subject": "rf1",
                "partitions": [
                    {
                        "partition": 0,
                        "subject": "rf1",
                        "leader": "s3",
                        "replicas": ["s3"],
                        "isr": ["s3"],
                        "leader_epoch": 0,
                        "offline": "leader s3 does not answer",
                    },
                    {
                        "partition": 1,
                        "subject": "rf1.1",
                        "leader": "s1",
                        "replicas": ["s1", "s3"],
                        "isr": ["s1"],
                        "leader_epoch": 0,
                        "offline": None,
                    },
                ],
            }
        ],
    }
    meta = ClusterMetadata.from_json(raw)
    assert meta.servers["s1"].live is True
    assert meta.servers["s3"].live is False
    assert meta.servers["s9"].live is True
    p0, p1 = meta.streams["rf1"].partitions
    assert (p0.is_offline, p0.state, p0.under_replicated) == (True, "offline", True)
    assert (p1.is_offline, p1.state, p1.under_replicated) == (False, "under-replicated", True)
    raw["servers"][0]["live"] = "yes"
    with pytest.raises(MalformedFrame):
        ClusterMetadata.from_json(raw)


def test_stream_infos_are_reused_until_the_stream_or_the_liveness_view_changes() -> None:
    """Metadata answers of thousands of partitions polled during a failover: a stream's
    answer is built again only when its metadata or the set of down servers changed,
    and it is always the answer stream_info gives."""
    cache = StreamInfoCache()
    meta = stream("a", 3, 2, assignment(0, "s1", R3, R3), assignment(1, "s3", R3, R3))
    first = cache.info(meta, frozenset(), lambda _s: False)
    assert first == stream_info(meta)
    assert cache.info(meta, frozenset(), lambda _s: False) is first  # reused
    down = cache.info(meta, frozenset({"s3"}), is_down)  # s3 stopped answering
    assert down is not first
    assert [p["offline"] for p in down["partitions"]] == [None, "leader s3 does not answer"]
    moved = stream("a", 3, 2, assignment(0, "s1", R3, R3), assignment(1, "s2", R3, ("s1", "s2")))
    after = cache.info(moved, frozenset({"s3"}), is_down)  # a new leader elected
    assert after == stream_info(moved, is_down=is_down)
    assert after["partitions"][1]["leader"] == "s2"
    cache.keep_only(["b"])  # "a" deleted
    assert cache.info(moved, frozenset({"s3"}), is_down) is not after
