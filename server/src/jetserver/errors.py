"""The server's exception families.

``JetServerError`` is the root. ``ApiError`` carries a wire error code and is the one type
request handlers raise to answer a client with an error frame (or a per-message error);
the protocol layer converts it at the connection boundary. ``ConfigError`` is a bad
configuration value, reported to the operator before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jetsdk.codec.error_codes import ErrorCode


class JetServerError(Exception):
    """Root of every exception the server raises on purpose."""


class ConfigError(JetServerError, ValueError):
    """A configuration file, flag or environment variable holds a bad value (also a
    ``ValueError``, which the storage engine's settings raised before).

    Attributes:
        source: where the value came from (``"flag --port"``, ``"env JET_LISTEN_PORT"``,
            ``"file jet.toml"``, ``"default"``), empty if unknown.
    """

    def __init__(self, message: str, *, source: str = "") -> None:
        super().__init__(f"{source}: {message}" if source else message)
        self.source = source


class ApiError(JetServerError):
    """An error answered to a client with a wire error code.

    Attributes:
        code: the wire error code.
        message: human-readable explanation (sent to the client).
        details: code-specific fields (spec/protocol.md, "Error codes").
    """

    def __init__(
        self, code: ErrorCode, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})


def invalid_argument(field: str, message: str) -> ApiError:
    """An INVALID_ARGUMENT error naming the offending ``field``."""
    return ApiError(ErrorCode.INVALID_ARGUMENT, message, {"field": field})


def stream_not_found(name: str) -> ApiError:
    """A STREAM_NOT_FOUND error for stream ``name``."""
    return ApiError(ErrorCode.STREAM_NOT_FOUND, f"stream {name!r} does not exist", {"stream": name})


def partition_not_found(name: str, partition: int, count: int) -> ApiError:
    """A PARTITION_NOT_FOUND error for ``partition`` of a stream with ``count`` partitions."""
    return ApiError(
        ErrorCode.PARTITION_NOT_FOUND,
        f"stream {name!r} has no partition {partition} (it has {count})",
        {"stream": name, "partition": partition},
    )
