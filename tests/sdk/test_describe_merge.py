"""merge_described: a stream's partitions with the figures their leaders described."""

from __future__ import annotations

from jetsdk.describe import merge_described
from jetsdk.metadata import PartitionInfo, StreamInfo


def part(number: int, leader: str | None, hw: int | None) -> PartitionInfo:
    return PartitionInfo(
        partition=number,
        subject=f"s.{number}",
        leader=leader,
        replicas=("a", "b"),
        isr=("a", "b"),
        leader_epoch=1,
        hw=hw,
        leo=hw,
        log_start=0 if hw is not None else None,
        size_bytes=10 if hw is not None else None,
        segments=1 if hw is not None else None,
    )


def stream(*parts: PartitionInfo) -> StreamInfo:
    return StreamInfo(
        name="s", subject="s", group=None, partitions=parts, replication_factor=2, compact=False
    )


INFO = stream(part(0, "a", 5), part(1, "b", None), part(2, None, None), part(3, "a", None))
DESCRIBED = {"a": stream(part(0, "a", 9), part(3, "a", 7)), "b": stream(part(0, "b", 1))}


def test_each_partition_takes_its_leader_s_figures() -> None:
    merged = merge_described(INFO, DESCRIBED)
    assert [p.hw for p in merged.partitions] == [9, None, None, 7]
    assert merged.partitions[3].segments == 1
    assert merged.partitions[3].size_bytes == 10
    # b's answer left partition 1 out; partition 2 has no leader: both keep what they had.
    assert merged.partitions[1] == INFO.partitions[1]
    assert merged.partitions[2] == INFO.partitions[2]


def test_missing_only_keeps_the_figures_already_there() -> None:
    merged = merge_described(INFO, DESCRIBED, missing_only=True)
    assert [p.hw for p in merged.partitions] == [5, None, None, 7]
    assert merged.partitions[0] == INFO.partitions[0]
