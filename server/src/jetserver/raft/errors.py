"""Errors of the metadata Raft layer.

:class:`RaftError` is the root. Each class carries the wire :class:`ErrorCode` the server
answers a client with (``code``) and whether retrying can succeed (``retriable``).

What a failed proposal means for the operation:

- :class:`NotLeader`: not proposed at all (this server is not the Raft leader); send it to
  ``leader_id`` / ``leader_address`` (None while an election runs).
- :class:`Unavailable`: not applied (no leader known, queue full, superseded by a new leader).
- :class:`OutcomeUnknown` (and :class:`ProposalTimeout`): it may or may not be applied. Retry
  with the same ``op_id``: the state machine applies an op id once and answers the retry
  with the original result.
"""

from __future__ import annotations

from jetsdk.codec.error_codes import ErrorCode
from jetserver.errors import JetServerError


class RaftError(JetServerError):
    """Root of the metadata Raft errors."""

    code: ErrorCode = ErrorCode.UNAVAILABLE
    """The wire error code for a client."""
    retriable: bool = True
    """True if the same request may succeed later."""


class NotLeader(RaftError):
    """This server is not the metadata leader; the proposal was not made.

    Attributes:
        leader_id: server id of the current leader, None if unknown (election running).
        leader_address: its Raft address ``host:port``, None if unknown.
    """

    code = ErrorCode.NOT_LEADER

    def __init__(self, leader_id: str | None, leader_address: str | None) -> None:
        where = f"{leader_id} at {leader_address}" if leader_address else "unknown"
        super().__init__(f"not the metadata leader (leader: {where})")
        self.leader_id = leader_id
        self.leader_address = leader_address


class Unavailable(RaftError):
    """The proposal was not applied: no leader, queue full, or superseded by a new leader."""


class OutcomeUnknown(RaftError):
    """The proposal may or may not have been applied; retry with the same op id."""

    code = ErrorCode.TIMEOUT


class ProposalTimeout(OutcomeUnknown):
    """No outcome within the proposal timeout (the op may still be applied later)."""


class EntryTooLarge(RaftError):
    """The operation encodes to more than the largest metadata entry; never retriable."""

    code = ErrorCode.INVALID_ARGUMENT
    retriable = False


class RaftTimeout(RaftError):
    """A wait (applied index, leader) did not finish within its bound."""

    code = ErrorCode.TIMEOUT


class RaftClosed(RaftError):
    """The Raft node is stopped (or failed); nothing more can be proposed."""

    code = ErrorCode.SHUTTING_DOWN
    retriable = False


class RaftStartError(RaftError):
    """The Raft node could not start: port in use, unreadable journal or snapshot."""

    retriable = False
