"""Replica placement for a new stream: pure, deterministic, spread evenly.

:func:`place_replicas` puts ``partitions`` x ``replication_factor`` replicas on ``servers``:

- Replicas: the servers, sorted by id, form a ring; partition ``p`` takes the block of
  ``replication_factor`` consecutive ring positions starting at ``start + p * rf``. All the
  blocks together walk the ring round-robin, so every server holds
  ``partitions * rf // n`` replicas or one more, and a block never repeats a server
  (``rf <= n``).
- Leaders: each partition's leader is the member of its block that leads the fewest of
  this stream's partitions so far (ties: the fewest partitions of existing streams, then
  the block order). Leaders then differ by at most one between servers too (checked by a
  property test over every cluster size up to 9 and 40 partitions).
- Across streams, ``start`` is the ring position of the server leading the fewest
  partitions of existing streams (ties: the fewest replicas, then the id), so successive
  small streams do not pile their leaders on one server.

The leader comes first in each partition's replica list, the others follow in ring order.
Nothing here reads a clock or randomness: the same inputs give the same placement (the
metadata leader decides it and carries it in the CreateStream operation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from jetserver.errors import invalid_argument
from jetserver.metadata.model import StreamMeta


def server_load(streams: Iterable[StreamMeta]) -> dict[str, tuple[int, int]]:
    """Server id -> (partitions it leads, replicas it holds) over ``streams``."""
    load: dict[str, list[int]] = {}
    for meta in streams:
        for a in meta.partitions:
            load.setdefault(a.leader, [0, 0])[0] += 1
            for r in a.replicas:
                load.setdefault(r, [0, 0])[1] += 1
    return {s: (v[0], v[1]) for s, v in load.items()}


def place_replicas(
    partitions: int,
    replication_factor: int,
    servers: Sequence[str],
    load: Mapping[str, tuple[int, int]] | None = None,
) -> tuple[tuple[str, ...], ...]:
    """Per partition, the replica server ids, leader first (see the module docstring).

    Args:
        partitions: number of partitions (>= 1).
        replication_factor: replicas per partition (>= 1).
        servers: the servers replicas may go to (the live registered servers).
        load: existing (leaders, replicas) per server, from :func:`server_load`.

    Raises:
        ApiError: INVALID_ARGUMENT (field ``replication_factor``) if there are fewer
            servers than the replication factor; ValueError for counts below 1.
    """
    if partitions < 1 or replication_factor < 1:
        raise ValueError("partitions and replication_factor must be >= 1")
    ring = sorted(set(servers))
    n = len(ring)
    if replication_factor > n:
        raise invalid_argument(
            "replication_factor",
            f"replication factor {replication_factor} exceeds the {n} live "
            f"server{'s' if n != 1 else ''} of the cluster ({', '.join(ring) or 'none'})",
        )
    load = load or {}
    start = min(range(n), key=lambda i: (*load.get(ring[i], (0, 0)), ring[i]))
    led: dict[str, int] = {}
    placement = []
    for p in range(partitions):
        first = start + p * replication_factor
        block = [ring[(first + k) % n] for k in range(replication_factor)]
        leader = min(
            range(replication_factor),
            key=lambda k: (led.get(block[k], 0), load.get(block[k], (0, 0))[0], k),
        )
        led[block[leader]] = led.get(block[leader], 0) + 1
        placement.append(tuple(block[leader:] + block[:leader]))
    return tuple(placement)
