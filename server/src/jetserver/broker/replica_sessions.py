"""The leader's side of incremental fetch sessions (spec/cluster.md, "Fetch sessions";
Kafka's KIP-227).

A follower server's fetch session names itself by a random ``session_id``. The leader
keeps, per session, the partitions parked from its last request (:class:`Slot`: the
partition's fetch position and epoch, its replica, its follower): a request carries only
the partitions new to the session or changed, and the slots that leave it; the others
wait on as they were. ``session_epoch`` 0 starts a session afresh (a full request); each
later request must carry the epoch the leader expects next, or it is refused with
``FETCH_SESSION_LOST`` (the leader restarted, evicted the session, or a request was lost
in between) and the follower sends a full request.

The sessions held are bounded (:data:`MAX_FETCH_SESSIONS`, least recently used evicted
first); one unused for :data:`SESSION_IDLE_S` is forgotten when a new one starts.

Task safety: event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.replica_fetch import ReplicaFetchPartition, ReplicaFetchRequest
from jetserver.broker.partition import PartitionReplica
from jetserver.errors import ApiError

MAX_FETCH_SESSIONS = 256
"""Fetch sessions a leader server holds at once (one per follower server and leader in a
steady cluster; a restarted follower starts a new one); the least recently used goes
first."""
SESSION_IDLE_S = 120.0
"""A session with no request for this long is forgotten (its follower sends a request
every ``fetch_max_wait_s`` while it follows anything here)."""
_EPOCH_WRAP = 1 << 32


@attrs.define(eq=False)
class Slot:
    """A partition of a session that passed the leader's checks: its follower's fetch,
    parked here until answered or changed."""

    index: int
    """The partition's slot in the session (the answer names it)."""
    part: ReplicaFetchPartition
    """The follower's fetch (position, flushed offset, epoch) as last sent."""
    replica: PartitionReplica
    """The replica led here."""
    follower: str
    """The follower's server id."""
    fresh: bool = True
    """Not answered since it entered the session or changed: the end of a long poll
    answers it (an answer without records is what clears a damaged replica), where it
    leaves a partition answered before out."""
    log_start_sent: int = -1
    """The log start offset the last answer for its slot carried (-1: none yet): one
    that moved since (a purge, retention) rides along with the next answer that goes
    out."""


@attrs.define(eq=False)
class LeaderSession:
    """One follower session's parked partitions."""

    session_id: int
    """The follower's name for the session."""
    epoch: int = 1
    """The ``session_epoch`` its next incremental request must carry."""
    slots: dict[int, Slot] = attrs.field(factory=dict)
    """Parked partitions by slot."""
    used_at: float = 0.0
    """When its last request came (monotonic seconds)."""


@attrs.define(eq=False)
class LeaderSessions:
    """The fetch sessions held by this (leader) server (module docstring)."""

    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds."""
    evicted: int = 0
    """Sessions evicted over :data:`MAX_FETCH_SESSIONS` or idle."""
    lost: int = 0
    """Incremental requests refused with ``FETCH_SESSION_LOST``."""
    _sessions: dict[int, LeaderSession] = attrs.field(factory=dict)
    """By session id, least recently used first."""

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, req: ReplicaFetchRequest) -> LeaderSession:
        """The session ``req`` builds on (a new one for ``session_epoch`` 0), its epoch
        moved on to the next request's.

        Raises:
            ApiError: FETCH_SESSION_LOST (an incremental request of a session not held, or
                not the epoch expected).
        """
        now = self.clock()
        sessions = self._sessions
        sid = req.session_id
        if req.session_epoch == 0:
            sessions.pop(sid, None)
            session = LeaderSession(sid)
            self._make_room(now)
        else:
            found = sessions.pop(sid, None)
            if found is None or found.epoch != req.session_epoch:
                self.lost += 1
                raise ApiError(
                    ErrorCode.FETCH_SESSION_LOST,
                    f"fetch session {sid:#x} not held here at epoch {req.session_epoch}",
                    {"session_epoch": found.epoch if found is not None else None},
                )
            session = found
        sessions[sid] = session  # most recently used last
        session.used_at = now
        session.epoch = req.session_epoch + 1 if req.session_epoch + 1 < _EPOCH_WRAP else 1
        return session

    def _make_room(self, now: float) -> None:
        sessions = self._sessions
        while sessions:
            sid, oldest = next(iter(sessions.items()))
            if len(sessions) < MAX_FETCH_SESSIONS and now - oldest.used_at < SESSION_IDLE_S:
                return
            del sessions[sid]
            self.evicted += 1

    def forget(self, session: LeaderSession) -> None:
        """Drop ``session`` (its request failed as a whole: the follower starts afresh)."""
        if self._sessions.get(session.session_id) is session:
            del self._sessions[session.session_id]
