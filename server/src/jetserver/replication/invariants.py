"""Invariants of replication, checked where they live (TigerBeetle-style).

Cheap comparisons, left on in production: a failed one is a bug in the server, never bad
input or an I/O failure, and it stops the work at hand before it acts on a broken state
(the storage engine's own checks are :class:`jetserver.storage.InvariantViolation`).

- the high watermark never passes the leader's log end (:class:`LeaderState`);
- a replica never takes a role in a leader epoch older than one it already took
  (:class:`~jetserver.replication.core.ReplicaCore`);
- a follower never adopts a high watermark past its own log end (the fetcher).
"""

from __future__ import annotations

from jetserver.errors import JetServerError

__all__ = ["ReplicaInvariantViolation"]


class ReplicaInvariantViolation(JetServerError, AssertionError):
    """An invariant of replication failed: a bug, not a fault of the disk, the network or
    a client. Also an AssertionError, as a failed assertion."""
