"""When the metadata Raft member starts an election: PySyncObj's election deadline moved
from outside its own timeouts (the first election, a joining member's, a hastened one after
the leader's process is gone, and the short retries after it). Used by the Raft thread
(:mod:`.host`) only; like it, it reads and sets PySyncObj's private election state.

Thread safety: the Raft thread only.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import attrs
from pysyncobj.monotonic import monotonic

from jetserver.logs import fields

log = logging.getLogger(__name__)

FIRST_ELECTION_S = (1.0, 2.0)
"""Election timeout (bounds) of a member that has not known a leader since it started,
when the configured one is longer: a cluster's first election, and a restarted member's
while no leader answers it, come as soon as before the election timeout became 3-4.5 s
(the servers' steady timeout leaves room for garbage collections; the first election has
none to wait out). Every later timeout is the configured one."""
HASTENED_RETRY_S = (0.4, 1.6)
"""Election timeout (bounds) of each new term while the leader's process is known gone and
no other leader is known yet (after :meth:`.host.RaftHost.hasten_election`), instead of the
configured one (3-4.5 s). The survivors stagger their hastened elections by rank, each
from its own finding of the death; found further apart than the stagger, both stood in
the same term, the votes split, and the next term waited out a whole election timeout (a
kill -9 at 3,000 partitions under load: found 0.9 s apart, the metadata leader back after
5.7 s, and every election of the failover behind it). Short randomized timeouts end a
split within a retry or two. Timeouts decide only when an election starts, never its
outcome: Raft's safety does not depend on them."""
HASTENED_FOR_S = 20.0
"""Longest the short timeouts of :data:`HASTENED_RETRY_S` last after a hastened election."""


def first_election(obj: Any, min_s: float, max_s: float) -> None:
    """Bring the first election deadline within :data:`FIRST_ELECTION_S` (never later)."""
    if obj._getLeader() is not None:
        return
    low, high = min(FIRST_ELECTION_S[0], min_s), min(FIRST_ELECTION_S[1], max_s)
    deadline = monotonic() + random.uniform(low, high)
    if deadline < obj._SyncObj__raftElectionDeadline:
        obj._SyncObj__raftElectionDeadline = deadline


def postpone_election(obj: Any, delay_s: float) -> None:
    """Keep PySyncObj from starting an election for ``delay_s`` from now."""
    obj._SyncObj__raftElectionDeadline = monotonic() + delay_s


@attrs.define
class Hastened:
    """The leader at ``leader_address`` is gone: short election timeouts until another
    leads (:data:`HASTENED_RETRY_S`)."""

    leader_address: str
    until: float
    """When the short timeouts end (monotonic seconds)."""
    term: int
    """The last term whose election deadline was looked at."""


def _voted_for_another(obj: Any, gone_leader: str) -> bool:
    """This member gave its vote in the current term to another live candidate (not to
    itself, nor to the gone leader, which it voted for in that leader's term)."""
    voted = obj._SyncObj__votedForNodeId
    return voted is not None and str(voted) not in (str(obj._SyncObj__selfNode.id), gone_leader)


def hasten_election(obj: Any, leader_address: str, delay_s: float) -> Hastened | None:
    """Start an election ``delay_s`` from now if ``obj`` follows ``leader_address`` (or knows
    no leader: an election after its death is under way) and its election deadline is
    later (never postpones one), unless it voted for another candidate in this term (that
    one is about to win). Returns the short-timeout mode (None: another leader is known)."""
    leader = obj._getLeader()
    if obj._isLeader() or (leader is not None and str(leader.id) != leader_address):
        return None
    if not _voted_for_another(obj, leader_address):
        deadline = monotonic() + delay_s
        if deadline < obj._SyncObj__raftElectionDeadline:
            obj._SyncObj__raftElectionDeadline = deadline
            log.info(
                "metadata raft: the leader's process is gone; electing another",
                extra=fields(leader=leader_address, in_s=round(delay_s, 3)),
            )
    return Hastened(leader_address, monotonic() + HASTENED_FOR_S, int(obj.raftCurrentTerm))


def retry_soon(obj: Any, hastened: Hastened) -> Hastened | None:
    """After a hastened election: bring each new term's election deadline within
    :data:`HASTENED_RETRY_S` (once per term), unless this member voted for another
    candidate in it; None (the configured timeouts again) once a leader is known or after
    :data:`HASTENED_FOR_S`."""
    leader = obj._getLeader()
    if (
        obj._isLeader()
        or (leader is not None and str(leader.id) != hastened.leader_address)
        or monotonic() > hastened.until
    ):
        return None
    term = int(obj.raftCurrentTerm)
    if term == hastened.term:
        return hastened
    hastened.term = term
    if _voted_for_another(obj, hastened.leader_address):
        return hastened
    delay_s = random.uniform(*HASTENED_RETRY_S)
    deadline = monotonic() + delay_s
    if deadline < obj._SyncObj__raftElectionDeadline:
        obj._SyncObj__raftElectionDeadline = deadline
        log.info(
            "metadata raft: no leader elected in a term after the leader's death; "
            "the next election sooner",
            extra=fields(leader=hastened.leader_address, term=term, in_s=round(delay_s, 3)),
        )
    return hastened
