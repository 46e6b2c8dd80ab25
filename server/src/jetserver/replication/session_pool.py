"""The fetch sessions of one server, by leader address (spec/cluster.md, "Fetch
sessions"): :class:`~jetserver.replication.session.FetchSession` per leader server,
started on first use, closed by itself once no fetcher has used it for
``IDLE_CLOSE_S``.

Task safety: one event loop.
"""

from __future__ import annotations

import attrs
from anyio.abc import TaskGroup

from jetserver.replication.config import ReplicationConfig
from jetserver.replication.session import FetchSession
from jetserver.security.peer import PLAIN, PeerSecurity


@attrs.define(eq=False)
class FetchSessions:
    """The fetch sessions of one server, by leader address."""

    config: ReplicationConfig
    """Replication settings."""
    task_group: TaskGroup
    """Where the sessions' loops run."""
    security: PeerSecurity = PLAIN
    """TLS and the internal token for connections to leaders."""
    _sessions: dict[str, FetchSession] = attrs.field(factory=dict)

    def acquire(self, address: str) -> FetchSession:
        """The session to ``address`` (started if needed), counted as used until
        :meth:`release`."""
        session = self._sessions.get(address)
        if session is None or session.closed:
            session = FetchSession(address, self.config, self.security)
            self._sessions[address] = session
            self.task_group.start_soon(session.run)
        session.users += 1
        return session

    def release(self, session: FetchSession) -> None:
        """A fetcher stopped using ``session``."""
        session.users -= 1
        if session.users <= 0:
            session._work.set()  # start its idle bound
            if self._sessions.get(session.address) is session and session.closed:
                del self._sessions[session.address]

    @property
    def sessions(self) -> list[FetchSession]:
        """Open sessions."""
        return [s for s in self._sessions.values() if not s.closed]
