"""Which failures a producer sends again (at least once; with an idempotent producer also
after a timeout, since the leader drops the duplicate). Pure values."""

from __future__ import annotations

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.messages import decode_produce_result_tuples
from jetsdk.errors import (
    JetConnectionError,
    JetError,
    NotEnoughReplicas,
    NotLeader,
    OutOfOrderSequence,
    ShuttingDown,
    StorageError,
    Timeout,
    TooManyRequests,
    Unavailable,
)

# Errors after which the server did not store the batch, or at-least-once allows a resend.
RETRY_CLASSES = (
    NotLeader,
    Unavailable,
    ShuttingDown,
    TooManyRequests,
    NotEnoughReplicas,
    StorageError,
    JetConnectionError,
    OutOfOrderSequence,
)
IDEMPOTENT_RETRY_CLASSES = (*RETRY_CLASSES, Timeout)
"""Also a request timeout (maybe stored) when the server deduplicates the retry."""


RETRY_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER,
        ErrorCode.UNAVAILABLE,
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.TOO_MANY_REQUESTS,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.STORAGE_ERROR,
        ErrorCode.OUT_OF_ORDER_SEQUENCE,
    }
)
"""Per-message result codes after which the message is sent again."""
IDEMPOTENT_RETRY_CODES = RETRY_CODES | {ErrorCode.TIMEOUT}
"""Also TIMEOUT (maybe stored) when the server deduplicates the retry."""
MAX_BACKOFF_STEP = 30
"""Retry number beyond which the backoff stops growing (it is capped anyway)."""


def never(error: JetError) -> bool:
    return False


def should_retry(error: JetError) -> bool:
    return isinstance(error, RETRY_CLASSES)


def should_retry_idempotent(error: JetError) -> bool:
    return isinstance(error, IDEMPOTENT_RETRY_CLASSES)


def stored_results(body: bytes | None, count: int) -> list[tuple[int, int, int]] | None:
    """The ``(error_code, offset, timestamp)`` results of Produce answer ``body`` (for
    ``count`` messages) if it stored every message (or found it a duplicate); None if it
    did not, is undecodable, or is None."""
    if body is None:
        return None
    try:
        results = decode_produce_result_tuples(body)
    except CodecError:
        return None
    if len(results) != count:
        return None
    for code, _offset, _timestamp in results:
        if code != ErrorCode.NONE and code != ErrorCode.DUPLICATE_SEQUENCE:
            return None
    return results


def expired(where: tuple[str, int], delivery_timeout: float, error: JetError | None) -> JetError:
    """The error for messages to ``where`` (stream, partition) not delivered within
    ``delivery_timeout``: ``error`` (the last one) said so, or Timeout if there was none."""
    stream, partition = where
    details = {"stream": stream, "partition": partition}
    if error is None:
        return Timeout(
            f"send to {stream}/{partition} not acknowledged within delivery_timeout="
            f"{delivery_timeout} s; the message may or may not be stored",
            details=details,
        )
    return type(error)(
        f"send to {stream}/{partition} failed after retrying for delivery_timeout="
        f"{delivery_timeout} s: {error}",
        code=error.code,
        details={**details, **error.details},
    )
