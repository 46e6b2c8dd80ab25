"""Mapping of PySyncObj's command outcomes to typed errors and wire codes (pure)."""

from __future__ import annotations

import pytest
from pysyncobj.config import FAIL_REASON

from jetsdk.codec.error_codes import ErrorCode
from jetserver.raft import NotLeader, OutcomeUnknown, RaftClosed, Unavailable
from jetserver.raft.metadata_raft import error_for


@pytest.mark.parametrize(
    ("reason", "kind", "fragment"),
    [
        (FAIL_REASON.QUEUE_FULL, Unavailable, "queue is full"),
        (FAIL_REASON.MISSING_LEADER, Unavailable, "no metadata leader"),
        (FAIL_REASON.DISCARDED, Unavailable, "not applied"),
        (FAIL_REASON.NOT_LEADER, Unavailable, "not the metadata leader"),
        (FAIL_REASON.REQUEST_DENIED, Unavailable, "refused"),
        (FAIL_REASON.LEADER_CHANGED, OutcomeUnknown, "leader changed"),
        (FAIL_REASON.UNKNOWN_OUTCOME, OutcomeUnknown, "outcome unknown"),
        (99, OutcomeUnknown, "raft failure 99"),
    ],
)
def test_fail_reasons(reason: int, kind: type[Exception], fragment: str) -> None:
    error = error_for(reason, "op x")
    assert type(error) is kind
    assert fragment in str(error)
    assert str(error).startswith("op x")


def test_success_is_no_error() -> None:
    assert error_for(FAIL_REASON.SUCCESS, "op") is None


def test_wire_codes_and_retriability() -> None:
    not_leader = NotLeader("s2", "10.0.0.2:7001")
    assert (not_leader.code, not_leader.retriable) == (ErrorCode.NOT_LEADER, True)
    assert "s2 at 10.0.0.2:7001" in str(not_leader)
    assert "unknown" in str(NotLeader(None, None))
    assert Unavailable("x").code == ErrorCode.UNAVAILABLE
    assert OutcomeUnknown("x").code == ErrorCode.TIMEOUT
    assert (RaftClosed("x").code, RaftClosed("x").retriable) == (ErrorCode.SHUTTING_DOWN, False)
