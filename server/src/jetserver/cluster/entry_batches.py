"""How many queued metadata ops go in one Raft entry: the batch-size rule shared by the
metadata leader's elections (ElectLeaders, :mod:`.elections`) and the partition leaders'
ISR changes (UpdateIsrs, :mod:`.controller`). Pure."""

from __future__ import annotations

from collections.abc import Collection

from jetserver.metadata.ops import ElectLeader
from jetserver.raft.machine import MAX_ENTRY_BYTES

MAX_BATCH = 5000
"""Most elections in one Raft entry (ElectLeaders), within :data:`MAX_BATCH_BYTES` too (a
dead server's 3,334 leaderships at 10,000 partitions in one entry; spec/cluster.md)."""
MAX_BATCH_BYTES = MAX_ENTRY_BYTES // 2
"""Most encoded bytes of one entry's elections (:func:`election_bytes`): half the limit,
about 4,000 elections of short names, 1,300 of 255-character ones."""
ELECTION_BYTES = 128
"""An encoded ElectLeader's bytes besides its names (keys, numbers: 111 at most, and
``keep_isr``)."""


def election_bytes(op: ElectLeader) -> int:
    """An upper bound of ``op``'s encoded size in an ElectLeaders entry."""
    names = op.stream + op.leader + (op.stream_id or "")
    return ELECTION_BYTES + len(names.encode())


def batch_size(sizes: Collection[int], most: int = MAX_BATCH, bytes_: int = MAX_BATCH_BYTES) -> int:
    """How many queued ops (bounds of their encoded sizes, in order: :func:`election_bytes`)
    go in the next entry: at most ``most``, within ``bytes_`` bytes, at least one."""
    total = 0
    for taken, size in enumerate(sizes):
        total += size
        if taken == most or (taken and total > bytes_):
            return taken
    return len(sizes)
