"""Source offsets as Spark checkpoints them, and the pure planning arithmetic.

A source offset is ``{stream: {partition: next_offset}}``: for every partition, the first
offset *not* included (Kafka's convention). Spark stores it as JSON in the checkpoint's
offset log, so partition numbers are strings there; :func:`to_json` and :func:`from_json`
convert, always in one canonical order (streams by name, partitions by number) so two equal
offsets serialize identically.

Also here: admission control (:func:`limit_offsets`, :func:`limit_bytes`), splitting a
micro-batch into ranges (:func:`plan_ranges`) and packing ranges into Spark partitions
(:func:`pack_ranges`). Pure code: no I/O.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence

import attrs

__all__ = [
    "OffsetRange",
    "Offsets",
    "from_json",
    "limit_bytes",
    "limit_offsets",
    "pack_ranges",
    "plan_ranges",
    "to_json",
]

Offsets = dict[str, dict[int, int]]
"""``{stream: {partition: next offset}}``."""


@attrs.frozen
class OffsetRange:
    """Offsets ``[start, end)`` of one stream partition."""

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    start: int
    """First offset to read."""
    end: int
    """First offset not to read."""
    new_partition: bool = False
    """True for a partition that appeared after the query started: it is read from its log
    start, and records gone before the query ever saw them are not data loss."""

    @property
    def size(self) -> int:
        """Offsets in the range (an upper bound on records: compaction leaves gaps)."""
        return max(0, self.end - self.start)


def to_json(offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    """The checkpoint form: canonical order, partitions as strings."""
    return {
        stream: {str(p): offsets[stream][p] for p in sorted(offsets[stream])}
        for stream in sorted(offsets)
    }


def from_json(obj: object) -> Offsets:
    """Parse the checkpoint form.

    Raises:
        ValueError: not ``{stream: {partition: offset >= 0}}``.
    """
    if not isinstance(obj, dict):
        raise ValueError(f"a jetstream offset must be a JSON object, got {obj!r}")
    out: Offsets = {}
    for stream, parts in obj.items():
        if not isinstance(stream, str) or not isinstance(parts, dict):
            raise ValueError(f"bad jetstream offset entry {stream!r}: {parts!r}")
        out[stream] = {}
        for part, offset in parts.items():
            if not (isinstance(part, str) and part.isdigit()) or not isinstance(offset, int):
                raise ValueError(f"bad jetstream offset {stream}/{part}: {offset!r}")
            if offset < 0:
                raise ValueError(f"negative jetstream offset {stream}/{part}: {offset}")
            out[stream][int(part)] = offset
    return out


def limit_offsets(start: Offsets, latest: Offsets, max_records: int) -> Offsets:
    """Admission control: end offsets at most ``max_records`` past ``start`` in total.

    Each partition gets a share of the limit proportional to what it has available (like
    Spark's Kafka source), the remainder going to the partitions with the most left, so the
    total is exactly ``min(max_records, available)`` and every batch makes progress.
    Partitions of ``latest`` missing from ``start`` start at 0.
    """
    avail: dict[tuple[str, int], int] = {}
    for stream, parts in latest.items():
        for part, end in parts.items():
            begin = start.get(stream, {}).get(part, 0)
            avail[(stream, part)] = max(0, end - begin)
    total = sum(avail.values())
    if total <= max_records:
        return {s: dict(p) for s, p in latest.items()}
    take = {tp: n * max_records // total for tp, n in avail.items()}
    left = max_records - sum(take.values())
    for tp in sorted(avail, key=lambda tp: (-(avail[tp] - take[tp]), tp)):
        if left <= 0:
            break
        if take[tp] < avail[tp]:
            take[tp] += 1
            left -= 1
    out: Offsets = {}
    for (stream, part), n in take.items():
        out.setdefault(stream, {})[part] = start.get(stream, {}).get(part, 0) + n
    return out


_BYTES_SLACK = 1e-9
"""Relative tolerance of :func:`limit_bytes`' byte sums."""


def limit_bytes(
    start: Offsets,
    latest: Offsets,
    max_bytes: int,
    bytes_per_offset: Mapping[tuple[str, int], float],
) -> Offsets:
    """Admission control by size: end offsets whose estimated bytes past ``start`` total at
    most ``max_bytes`` (``bytes_per_offset`` per partition; 1.0 where missing).

    The bytes are shared in proportion to what each partition has available, as
    :func:`limit_offsets` shares offsets; what is left goes to the partitions with the most
    bytes left, as many offsets as fit. A batch always makes progress: when
    not even one offset fits, the partition with the most bytes available gets one (a soft
    limit, like Delta's maxBytesPerTrigger). Partitions of ``latest`` missing from ``start``
    start at 0.
    """
    avail: dict[tuple[str, int], int] = {}
    size: dict[tuple[str, int], float] = {}
    for stream, parts in latest.items():
        for part, end in parts.items():
            tp = (stream, part)
            avail[tp] = max(0, end - start.get(stream, {}).get(part, 0))
            size[tp] = max(bytes_per_offset.get(tp, 1.0), 1e-9)
    total = sum(avail[tp] * size[tp] for tp in avail)
    if total <= max_bytes:
        return {s: dict(p) for s, p in latest.items()}
    take = {tp: min(n, int(n * max_bytes // total)) for tp, n in avail.items()}
    left = max_bytes - sum(take[tp] * size[tp] for tp in take)
    order = sorted(avail, key=lambda tp: (-(avail[tp] - take[tp]) * size[tp], tp))
    slack = max_bytes * _BYTES_SLACK  # float sums: an offset that fits exactly still fits
    for tp in order:
        more = min(avail[tp] - take[tp], int((left + slack) // size[tp]))
        if more > 0:
            take[tp] += more
            left -= more * size[tp]
    if not any(take.values()):
        biggest = min(avail, key=lambda tp: (-avail[tp] * size[tp], tp))
        take[biggest] = 1
    out: Offsets = {}
    for (stream, part), n in take.items():
        out.setdefault(stream, {})[part] = start.get(stream, {}).get(part, 0) + n
    return out


def plan_ranges(
    start: Offsets, end: Offsets, *, min_partitions: int | None = None
) -> list[OffsetRange]:
    """The non-empty ranges of a micro-batch, one per stream partition, split further when
    ``min_partitions`` asks for more (large ranges are cut into near-equal pieces in
    proportion to their size). Ordered by stream, partition, start.

    A partition in ``end`` but not in ``start`` is new: it is read from offset 0 (the log
    start) and marked :attr:`OffsetRange.new_partition`.
    """
    ranges = []
    for stream in sorted(end):
        for part in sorted(end[stream]):
            stop = end[stream][part]
            known = start.get(stream, {}).get(part)
            begin = 0 if known is None else known
            if stop > begin:
                ranges.append(OffsetRange(stream, part, begin, stop, known is None))
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out = []
    for r in ranges:
        # Pieces in proportion to the range's share of all offsets, at least one.
        pieces = max(1, min(r.size, round(r.size * min_partitions / total)))
        step, extra = divmod(r.size, pieces)
        pos = r.start
        for i in range(pieces):
            nxt = pos + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.stream, r.partition, pos, nxt, r.new_partition))
            pos = nxt
    return out


def pack_ranges(
    ranges: Sequence[OffsetRange],
    bytes_per_offset: Mapping[tuple[str, int], float],
    max_bytes: int,
    *,
    min_groups: int = 1,
) -> list[tuple[OffsetRange, ...]]:
    """``ranges`` packed into groups, one Spark partition each: as few groups as keep each
    group's estimated bytes (offsets times ``bytes_per_offset`` of the partition, 1.0 where
    missing) at most ``max_bytes``, and at least ``min_groups``; a range larger than
    ``max_bytes`` is a group alone. Ranges go largest first to the group with the fewest
    bytes (so the groups come out about even), keep their order inside a group, and the
    groups are ordered by their first range. Deterministic: the same input gives the same
    groups.
    """
    n = len(ranges)
    weight = [r.size * max(bytes_per_offset.get((r.stream, r.partition), 1.0), 0.0) for r in ranges]
    order = sorted(range(n), key=lambda i: (-weight[i], i))
    limit = max_bytes * (1 + _BYTES_SLACK)
    large = [w for w in weight if w > limit]
    small = sum(weight) - sum(large)
    groups = max(1, min_groups, len(large) + math.ceil(small / max_bytes))
    while groups < n:  # at most n rounds: each adds a group
        members: list[list[int]] = [[] for _ in range(groups)]
        loads = [(0.0, g) for g in range(groups)]
        for i in order:
            load, g = heapq.heappop(loads)
            members[g].append(i)
            heapq.heappush(loads, (load + weight[i], g))
        total = {g: load for load, g in loads}
        if all(len(members[g]) == 1 or total[g] <= limit for g in range(groups)):
            packed = sorted(sorted(m) for m in members if m)
            return [tuple(ranges[i] for i in m) for m in packed]
        groups += 1
    return [(r,) for r in ranges]
