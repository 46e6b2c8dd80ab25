"""What ``Producer.send_soon`` checks before it queues a message.

A message that could not be encoded must fail alone, at the call, with a typed error; it
must never reach the producer's background tasks (where an encoding error would stop them
and fail every other message). The limits are the encoding's own
(:mod:`jetsdk.codec.limits`); the server may refuse less (its message size limit), which
the caller's handle reports.
"""

from __future__ import annotations

from typing import Any

from jetsdk.codec.limits import (
    MAX_HEADER_COUNT,
    MAX_HEADER_NAME_BYTES,
    MAX_KEY_BYTES,
    MAX_SUBJECT_BYTES,
    MAX_VALUE_BYTES,
)
from jetsdk.errors import InvalidArgument, MessageTooLarge
from jetsdk.message import Headers, HeadersInput, normalize_headers

_BYTES_LIKE = (bytes, bytearray, memoryview)
_PER_HEADER_OVERHEAD = 6
"""Bytes a header adds besides its name and value, for the message size check."""


def message_size(value: bytes, key: bytes | None, headers: Headers) -> int:
    """The size a message counts against the message size limit (value, key, headers)."""
    size = len(value) + (len(key) if key is not None else 0)
    if headers:
        size += sum(len(n) + len(v) + _PER_HEADER_OVERHEAD for n, v in headers)
    return size


def checked_bytes(what: str, data: Any) -> bytes:
    """``data`` as bytes.

    Raises:
        TypeError: ``data`` is not bytes, bytearray or memoryview (an int would otherwise
            become that many zero bytes, a str has no single encoding).
    """
    if not isinstance(data, _BYTES_LIKE):
        raise TypeError(f"{what} must be bytes, bytearray or memoryview, not {type(data).__name__}")
    return bytes(data)


def checked_message(
    value: Any, key: Any, headers: HeadersInput | None, subject: Any
) -> tuple[bytes, bytes | None, Headers]:
    """The message's parts, checked against the encoding's limits.

    Raises:
        TypeError: a value, key, header or subject of the wrong type.
        InvalidArgument: a key, header name or subject over its limit, too many headers,
            or a header name or subject that is not valid UTF-8 text (``field`` says which).
        MessageTooLarge: a value or header value over the encoding's limit.
    """
    data = checked_bytes("value", value)
    if len(data) > MAX_VALUE_BYTES:
        raise MessageTooLarge(
            f"value of {len(data)} bytes exceeds the encoding's limit of {MAX_VALUE_BYTES}",
            details={"max_message_bytes": MAX_VALUE_BYTES},
        )
    key_bytes = None if key is None else checked_bytes("key", key)
    if key_bytes is not None and len(key_bytes) > MAX_KEY_BYTES:
        raise InvalidArgument(
            f"key of {len(key_bytes)} bytes exceeds the limit of {MAX_KEY_BYTES}",
            details={"field": "key", "limit": MAX_KEY_BYTES},
        )
    hdrs = normalize_headers(headers) if headers else ()
    if len(hdrs) > MAX_HEADER_COUNT:
        raise InvalidArgument(
            f"{len(hdrs)} headers exceed the limit of {MAX_HEADER_COUNT}",
            details={"field": "headers", "limit": MAX_HEADER_COUNT},
        )
    for name, hval in hdrs:
        size = _utf8_size(name, "headers")
        if size > MAX_HEADER_NAME_BYTES:
            raise InvalidArgument(
                f"header name of {size} bytes exceeds the limit of {MAX_HEADER_NAME_BYTES}",
                details={"field": "headers", "limit": MAX_HEADER_NAME_BYTES},
            )
        if len(hval) > MAX_VALUE_BYTES:
            raise MessageTooLarge(
                f"header {name!r} value of {len(hval)} bytes exceeds {MAX_VALUE_BYTES}",
                details={"max_message_bytes": MAX_VALUE_BYTES},
            )
    if not isinstance(subject, str):
        raise TypeError(f"subject must be str, not {type(subject).__name__}")
    if _utf8_size(subject, "subject") > MAX_SUBJECT_BYTES:
        raise InvalidArgument(
            f"subject over {MAX_SUBJECT_BYTES} bytes",
            details={"field": "subject", "limit": MAX_SUBJECT_BYTES},
        )
    if subject and (any(c.isspace() for c in subject) or "" in subject.split(".")):
        raise InvalidArgument(f"bad subject {subject!r}", details={"field": "subject"})
    return data, key_bytes, hdrs


def _utf8_size(text: str, field: str) -> int:
    try:
        return len(text.encode())
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"{field}: not valid UTF-8 text ({exc})", details={"field": field}
        ) from None
