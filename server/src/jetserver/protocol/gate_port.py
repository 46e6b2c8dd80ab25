"""What request dispatch needs of the security gate: the port protocol owns.

:class:`~jetserver.protocol.handlers.Dispatcher` asks a :class:`RequestGate` to screen every
request before answering it; :class:`jetserver.security.gate.Security` (TLS, authentication,
ACLs: a layer above) is the implementation. :class:`Session`, what one connection has
proven, is the value both sides share: the gate fills it in, the connection carries it.

Task safety: one event loop; a Session belongs to one connection.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from jetsdk.codec.frames import Frame
from jetsdk.codec.messages import ProduceHead
from jetserver.protocol.connection import Reply
from jetserver.security.passwords import INTERNAL_IDENTITY

__all__ = ["RequestGate", "Session"]


@attrs.define(eq=False)
class Session:
    """What one connection has proven."""

    identity: str | None = None
    """The authenticated identity (None: not authenticated)."""
    tls_identity: str | None = None
    """The verified client certificate's CN (None: no certificate)."""
    peer: str = ""
    """The client's IP address ("" if unknown): failed logins are throttled per address."""

    @property
    def internal(self) -> bool:
        """True for another server of the cluster (every right)."""
        return self.identity == INTERNAL_IDENTITY


class RequestGate(Protocol):
    """Screens requests before dispatch (implemented by
    :class:`jetserver.security.gate.Security`, whose docstrings say more)."""

    def screens(self, api: int) -> bool:
        """False if :meth:`screen` lets every request of ``api`` through now: no need to
        call it."""

    def authorizes(self, session: Session) -> bool:
        """True if :meth:`screen` checks the grants of ``session``'s requests (a Produce's
        head is then decoded once, by the caller, for both)."""

    async def screen(
        self, frame: Frame, session: Session, produce_head: ProduceHead | None = None
    ) -> Reply | None:
        """Answer or refuse ``frame`` here, or None to let the handlers answer it."""

    def produce_refusal(
        self, session: Session, body: bytes | memoryview, head: ProduceHead
    ) -> str | None:
        """Why ``session`` may not send the Produce request ``body`` (one section of a
        ProduceMany request, checked as a Produce of its own), or None if it may."""
