"""The SDK's exceptions: one root, :class:`JetError`, and a family per wire error code.

Every exception the SDK raises on purpose is a :class:`JetError`. Each carries:

- ``code``: the wire :class:`~jetsdk.codec.error_codes.ErrorCode` (or an int this version
  does not know), so callers can switch on it;
- ``retriable``: True when sending the same request again (maybe to another server, maybe
  after refreshing metadata) may succeed;
- ``details``: the error's ``details`` object from the server (spec/protocol.md), empty
  for errors raised by the client itself.

A registry maps wire codes to classes (:func:`error_from_code`, :func:`error_from_body`).
Wire errors and I/O exceptions are translated once, where they enter the SDK (the
connection's reader and request path); code above that only sees JetError subclasses.

Some classes also derive from the matching builtin (``Timeout`` is a ``TimeoutError``,
``JetConnectionError`` a ``ConnectionError``) so generic ``except`` clauses keep working.

Exceptions pickle with their details (useful across process pools and Spark executors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from jetsdk.codec.error_codes import ErrorCode, error_name, is_retriable
from jetsdk.codec.messages import ErrorBody

__all__ = [
    "ClientClosed",
    "ConcurrentUse",
    "DuplicateSequence",
    "FetchSessionLost",
    "FrameTooLarge",
    "InvalidArgument",
    "JetConnectionError",
    "JetError",
    "MalformedFrame",
    "MessageTooLarge",
    "NotEnoughReplicas",
    "NotLeader",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "PartitionNotFound",
    "PartitionOffline",
    "PermissionDenied",
    "ProtocolError",
    "ServerError",
    "ShuttingDown",
    "StorageError",
    "StreamExists",
    "StreamNotFound",
    "Timeout",
    "TooManyRequests",
    "Unauthenticated",
    "Unavailable",
    "UnsupportedApi",
    "WrongExpectedOffset",
    "error_from_body",
    "error_from_code",
]


class JetError(Exception):
    """Root of every SDK exception.

    Attributes:
        code: the wire error code (an ErrorCode, or a plain int unknown to this version).
        retriable: True if retrying the same request may succeed.
        details: code-specific fields sent by the server (empty for client-side errors).
    """

    default_code: ClassVar[int] = ErrorCode.UNKNOWN

    def __init__(
        self,
        message: str = "",
        *,
        code: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        raw = self.default_code if code is None else code
        try:
            self.code: int = ErrorCode(raw)
        except ValueError:
            self.code = raw
        self.details: dict[str, Any] = dict(details) if details else {}
        self.message = message

    @property
    def retriable(self) -> bool:
        """True if the same request may succeed when sent again."""
        return is_retriable(self.code)

    @property
    def code_name(self) -> str:
        """Name of :attr:`code` (``"CODE_<n>"`` for unknown codes)."""
        return error_name(self.code)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, int(self.code), self.details))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code_name})"


def _rebuild(cls: type[JetError], message: str, code: int, details: dict[str, Any]) -> JetError:
    return cls(message, code=code, details=details)


# --- client-side and transport errors ---------------------------------------------------


class JetConnectionError(JetError, ConnectionError):
    """Could not connect, or the connection was lost; requests in flight on it failed.

    Always retriable: the client reconnects on next use. For a Produce request the
    message may or may not have been stored.
    """

    default_code = ErrorCode.UNAVAILABLE

    @property
    def retriable(self) -> bool:
        """Always True."""
        return True


class ClientClosed(JetError):
    """The client, producer or consumer was closed (or not yet entered) when used."""

    @property
    def retriable(self) -> bool:
        """Always False."""
        return False


class ConcurrentUse(JetError, RuntimeError):
    """An object that one thread at a time may use was used by two at once (a sync
    Consumer iterated or fetched from two threads). Nothing was taken from it."""

    @property
    def retriable(self) -> bool:
        """Always False."""
        return False


class ProtocolError(JetError):
    """The peer broke the wire protocol (or refused ours); the connection is closed."""

    default_code = ErrorCode.MALFORMED_FRAME


class MalformedFrame(ProtocolError):
    """A frame or body that does not decode."""

    default_code = ErrorCode.MALFORMED_FRAME


class FrameTooLarge(ProtocolError):
    """A frame over the peer's limit (details ``max_frame_bytes``)."""

    default_code = ErrorCode.FRAME_TOO_LARGE


class UnsupportedApi(ProtocolError):
    """The server does not know the API key or protocol version."""

    default_code = ErrorCode.UNSUPPORTED_API


# --- server-side errors -----------------------------------------------------------------


class ServerError(JetError):
    """An unexpected server error (UNKNOWN), or a code this SDK version does not know."""

    default_code = ErrorCode.UNKNOWN


class StreamNotFound(JetError):
    """The stream does not exist (details ``stream``)."""

    default_code = ErrorCode.STREAM_NOT_FOUND

    @property
    def stream(self) -> str | None:
        """The stream name, if the server sent it."""
        return _str_detail(self.details, "stream")


class PartitionNotFound(JetError):
    """The stream has no such partition (details ``stream``, ``partition``)."""

    default_code = ErrorCode.PARTITION_NOT_FOUND

    @property
    def partition(self) -> int | None:
        """The partition number, if the server sent it."""
        return _int_detail(self.details, "partition")


class StreamExists(JetError):
    """A stream with this name exists with another subject or other settings."""

    default_code = ErrorCode.STREAM_EXISTS


class InvalidArgument(JetError, ValueError):
    """A bad name, subject or option (details ``field``)."""

    default_code = ErrorCode.INVALID_ARGUMENT

    @property
    def field(self) -> str | None:
        """The offending field, if known."""
        return _str_detail(self.details, "field")


class OffsetOutOfRange(JetError):
    """A fetch offset below the log start or above the high watermark.

    Attributes ``log_start`` and ``hw`` come from the details (None if absent).
    """

    default_code = ErrorCode.OFFSET_OUT_OF_RANGE

    @property
    def log_start(self) -> int | None:
        """First offset still stored."""
        return _int_detail(self.details, "log_start")

    @property
    def hw(self) -> int | None:
        """High watermark at the time of the error."""
        return _int_detail(self.details, "hw")


class MessageTooLarge(JetError):
    """A message over the server's or stream's limit (details ``max_message_bytes``)."""

    default_code = ErrorCode.MESSAGE_TOO_LARGE

    @property
    def max_message_bytes(self) -> int | None:
        """The limit in force, if known."""
        return _int_detail(self.details, "max_message_bytes")


class NotLeader(JetError):
    """The server does not lead the partition (details ``leader``); retriable."""

    default_code = ErrorCode.NOT_LEADER

    @property
    def leader(self) -> str | None:
        """Id of the server the answering server believes leads, if known."""
        return _str_detail(self.details, "leader")


class Timeout(JetError, TimeoutError):
    """No answer or no ack in time. For a produce, the message may or may not be stored."""

    default_code = ErrorCode.TIMEOUT


class NotEnoughReplicas(JetError):
    """The in-sync replica set is below the minimum for an ALL ack; retriable."""

    default_code = ErrorCode.NOT_ENOUGH_REPLICAS


class StorageError(JetError):
    """A disk error on the server (full, read-only); retriable."""

    default_code = ErrorCode.STORAGE_ERROR


class Unavailable(JetError):
    """The server's NATS link is down, or the server is starting; retriable."""

    default_code = ErrorCode.UNAVAILABLE


class PermissionDenied(JetError):
    """Not allowed."""

    default_code = ErrorCode.PERMISSION_DENIED


class Unauthenticated(JetError):
    """Missing or bad credentials."""

    default_code = ErrorCode.UNAUTHENTICATED


class ShuttingDown(JetError):
    """The server is shutting down; retriable (on another server)."""

    default_code = ErrorCode.SHUTTING_DOWN


class TooManyRequests(JetError):
    """A per-connection limit was hit; retriable after a pause."""

    default_code = ErrorCode.TOO_MANY_REQUESTS


class DuplicateSequence(JetError):
    """An idempotent retry of a message already stored (the producer treats it as success)."""

    default_code = ErrorCode.DUPLICATE_SEQUENCE


class WrongExpectedOffset(JetError):
    """The message expected another offset (``Jet-Expected-Offset``); it is not stored
    (details ``expected``, ``next``)."""

    default_code = ErrorCode.WRONG_EXPECTED_OFFSET


class WrongExpectedKeyOffset(JetError):
    """A per-key compare-and-set (``Jet-Expected-Key-Offset``) found the key at another
    offset; the message is not stored. ``current_revision``: the offset of the key's last
    live record (-1: the key has none), as the server saw it."""

    default_code = ErrorCode.WRONG_EXPECTED_KEY_OFFSET

    @property
    def current_revision(self) -> int:
        """The key's current revision (-1: absent), from details ``current_revision``."""
        value = self.details.get("current_revision", -1)
        return value if isinstance(value, int) else -1

    @property
    def current_value(self) -> bytes | None:
        """The key's value at :attr:`current_revision` as the partition leader's log holds
        it (details ``current_value``), when the write asked for it (a table's writes do):
        it may not be committed yet, so base a new compare-and-set on it (that one commits
        only if this value does) but never treat it as the key's committed value. None: the
        key has no value, or the server left it out (spec/protocol.md §6)."""
        value = self.details.get("current_value")
        return value if isinstance(value, bytes) else None


class PartitionOffline(JetError):
    """The partition's replica on the answering server cannot open (details ``offline``:
    why, e.g. too many open files); not retried: someone must fix the server."""

    default_code = ErrorCode.PARTITION_OFFLINE


class FetchSessionLost(JetError):
    """A leader server does not hold the fetch session an incremental ReplicaFetch builds on
    (it restarted, evicted the session, or the request's ``session_epoch`` is not the one
    it expects): the follower server sends a full request (servers only)."""

    default_code = ErrorCode.FETCH_SESSION_LOST


class OutOfOrderSequence(JetError):
    """An idempotent producer's message came before an earlier sequence of its producer
    for the partition was stored (a request ahead of one that failed or was lost): not
    stored; retriable, the producer sends it again after the earlier ones."""

    default_code = ErrorCode.OUT_OF_ORDER_SEQUENCE


_REGISTRY: dict[int, type[JetError]] = {
    ErrorCode.UNKNOWN: ServerError,
    ErrorCode.MALFORMED_FRAME: MalformedFrame,
    ErrorCode.FRAME_TOO_LARGE: FrameTooLarge,
    ErrorCode.UNSUPPORTED_API: UnsupportedApi,
    ErrorCode.STREAM_NOT_FOUND: StreamNotFound,
    ErrorCode.PARTITION_NOT_FOUND: PartitionNotFound,
    ErrorCode.STREAM_EXISTS: StreamExists,
    ErrorCode.INVALID_ARGUMENT: InvalidArgument,
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRange,
    ErrorCode.MESSAGE_TOO_LARGE: MessageTooLarge,
    ErrorCode.NOT_LEADER: NotLeader,
    ErrorCode.TIMEOUT: Timeout,
    ErrorCode.NOT_ENOUGH_REPLICAS: NotEnoughReplicas,
    ErrorCode.STORAGE_ERROR: StorageError,
    ErrorCode.UNAVAILABLE: Unavailable,
    ErrorCode.PERMISSION_DENIED: PermissionDenied,
    ErrorCode.UNAUTHENTICATED: Unauthenticated,
    ErrorCode.SHUTTING_DOWN: ShuttingDown,
    ErrorCode.TOO_MANY_REQUESTS: TooManyRequests,
    ErrorCode.DUPLICATE_SEQUENCE: DuplicateSequence,
    ErrorCode.WRONG_EXPECTED_OFFSET: WrongExpectedOffset,
    ErrorCode.PARTITION_OFFLINE: PartitionOffline,
    ErrorCode.WRONG_EXPECTED_KEY_OFFSET: WrongExpectedKeyOffset,
    ErrorCode.FETCH_SESSION_LOST: FetchSessionLost,
    ErrorCode.OUT_OF_ORDER_SEQUENCE: OutOfOrderSequence,
}
"""Wire code -> exception class. Every ErrorCode except NONE has an entry."""


def error_class(code: int) -> type[JetError]:
    """The exception class for a wire code (ServerError for codes this version lacks)."""
    return _REGISTRY.get(code, ServerError)


def error_from_code(
    code: int, message: str = "", details: Mapping[str, Any] | None = None
) -> JetError:
    """Build the exception for a wire error code (never called with NONE).

    Raises:
        ValueError: ``code`` is 0 (NONE): success is not an error.
    """
    if code == ErrorCode.NONE:
        raise ValueError("error code NONE is not an error")
    return error_class(code)(message or error_name(code), code=code, details=details)


def error_from_body(body: ErrorBody) -> JetError:
    """Build the exception for a decoded error response body."""
    return error_from_code(body.code, body.message or body.name, body.details)


def _int_detail(details: Mapping[str, Any], name: str) -> int | None:
    value = details.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_detail(details: Mapping[str, Any], name: str) -> str | None:
    value = details.get(name)
    return value if isinstance(value, str) else None
