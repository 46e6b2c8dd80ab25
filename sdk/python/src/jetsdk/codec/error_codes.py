"""Wire error codes and ack policies (spec/protocol.md "Error codes", spec/acks.md).

The numeric values are part of the wire format: they appear in error frames, in Produce
results, in Fetch responses and in envelope acks. Never renumber them.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Error codes shared by the client protocol and envelope acks."""

    NONE = 0
    UNKNOWN = 1
    MALFORMED_FRAME = 2
    FRAME_TOO_LARGE = 3
    UNSUPPORTED_API = 4
    STREAM_NOT_FOUND = 5
    PARTITION_NOT_FOUND = 6
    STREAM_EXISTS = 7
    INVALID_ARGUMENT = 8
    OFFSET_OUT_OF_RANGE = 9
    MESSAGE_TOO_LARGE = 10
    NOT_LEADER = 11
    TIMEOUT = 12
    NOT_ENOUGH_REPLICAS = 13
    STORAGE_ERROR = 14
    UNAVAILABLE = 15
    PERMISSION_DENIED = 16
    UNAUTHENTICATED = 17
    SHUTTING_DOWN = 18
    TOO_MANY_REQUESTS = 19
    DUPLICATE_SEQUENCE = 20
    WRONG_EXPECTED_OFFSET = 21
    PARTITION_OFFLINE = 22
    WRONG_EXPECTED_KEY_OFFSET = 23
    FETCH_SESSION_LOST = 24
    OUT_OF_ORDER_SEQUENCE = 25


RETRIABLE: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.NOT_LEADER,
        ErrorCode.TIMEOUT,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.STORAGE_ERROR,
        ErrorCode.UNAVAILABLE,
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.TOO_MANY_REQUESTS,
        ErrorCode.OUT_OF_ORDER_SEQUENCE,
    }
)
"""Codes after which the same request may succeed if sent again (maybe to another server)."""


def is_retriable(code: int) -> bool:
    """True if ``code`` (a known or unknown wire value) is in :data:`RETRIABLE`."""
    return code in RETRIABLE


def error_name(code: int) -> str:
    """The name of a wire error code; ``"CODE_<n>"`` for a code this version does not know."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"CODE_{code}"


class AckPolicy(enum.IntEnum):
    """When the partition leader acknowledges a message (spec/acks.md)."""

    NONE = 0
    """No ack is sent."""
    LEADER = 1
    """Ack once the leader appended the message to its local log."""
    ALL = 2
    """Ack once the message is committed: on every in-sync replica (fsynced by default)."""
