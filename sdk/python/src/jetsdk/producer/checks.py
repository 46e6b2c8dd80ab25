"""What ``Producer.send_soon`` checks before it queues a message.

A message that could not be encoded must fail alone, at the call, with a typed error; it
must never reach the producer's background tasks (where an encoding error would stop them
and fail every other message). The limits are the encoding's own
(:mod:`jetsdk.codec.limits`); the server may refuse less (its message size limit), which
the caller's handle reports.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from jetsdk.codec.compression import COMPRESSION_HEADER, ValueCompressor
from jetsdk.codec.limits import (
    MAX_HEADER_COUNT,
    MAX_HEADER_NAME_BYTES,
    MAX_KEY_BYTES,
    MAX_SUBJECT_BYTES,
    MAX_VALUE_BYTES,
)
from jetsdk.codec.record_controls import EXPECTED_OFFSET_HEADER, MSG_ID_HEADER
from jetsdk.errors import InvalidArgument, MessageTooLarge
from jetsdk.message import TIMESTAMP_HEADER, Headers, HeadersInput, normalize_headers

_BYTES_LIKE = (bytes, bytearray, memoryview)
_PER_HEADER_OVERHEAD = 6
"""Bytes a header adds besides its name and value, for the message size check."""
_I64_MAX = 2**63 - 1
_I64_MIN = -(2**63)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
MAX_MSG_ID_BYTES = 1024
"""Longest ``msg_id`` :func:`control_headers` accepts (JetStream ids are short strings)."""


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
    # The plain message (a bytes value in the limit, no key, headers or subject): nothing
    # else to check (a str subject "" passes every subject check below).
    plain = type(value) is bytes and key is None and not headers and subject == ""
    if plain and len(value) <= MAX_VALUE_BYTES:
        return value, None, ()
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


def control_headers(headers: Headers, msg_id: Any, expected_offset: Any, timestamp: Any) -> Headers:
    """``headers`` plus the headers that carry ``send``'s ``msg_id`` (``Nats-Msg-Id``),
    ``expected_offset`` (``Jet-Expected-Offset``) and ``timestamp`` (``Jet-Timestamp``, ns
    since the epoch); the server reads the first two as plain clients' header controls
    (spec/protocol.md §6).

    Raises:
        TypeError: an argument of the wrong type.
        InvalidArgument: an empty or too long ``msg_id``, an offset or timestamp out of
            range, a naive datetime, or a header for the same control given in ``headers``
            too (``field`` says which).
    """
    extra: list[tuple[str, bytes]] = []
    if msg_id is not None:
        raw = msg_id.encode() if isinstance(msg_id, str) else checked_bytes("msg_id", msg_id)
        if not raw or len(raw) > MAX_MSG_ID_BYTES:
            raise InvalidArgument(
                f"msg_id must be 1 to {MAX_MSG_ID_BYTES} bytes, not {len(raw)}",
                details={"field": "msg_id", "limit": MAX_MSG_ID_BYTES},
            )
        extra.append((MSG_ID_HEADER, raw))
    if expected_offset is not None:
        if not isinstance(expected_offset, int) or isinstance(expected_offset, bool):
            raise TypeError(f"expected_offset must be int, not {type(expected_offset).__name__}")
        if not 0 <= expected_offset <= _I64_MAX:
            raise InvalidArgument(
                f"expected_offset must be a non-negative offset, not {expected_offset}",
                details={"field": "expected_offset"},
            )
        extra.append((EXPECTED_OFFSET_HEADER, str(expected_offset).encode()))
    if timestamp is not None:
        extra.append((TIMESTAMP_HEADER, str(_timestamp_ns(timestamp)).encode()))
    taken = {name.lower() for name, _ in extra}
    for name, _ in headers:
        if name.lower() in taken:
            raise InvalidArgument(
                f"header {name!r} is also given as an argument of send",
                details={"field": "headers"},
            )
    return (*headers, *extra)


def _timestamp_ns(timestamp: Any) -> int:
    if isinstance(timestamp, datetime):
        if timestamp.tzinfo is None or timestamp.utcoffset() is None:
            raise InvalidArgument(
                "timestamp must be an aware datetime (with tzinfo) or int nanoseconds",
                details={"field": "timestamp"},
            )
        ns = ((timestamp - _EPOCH) // _MICROSECOND) * 1000
    elif isinstance(timestamp, int) and not isinstance(timestamp, bool):
        ns = timestamp
    else:
        raise TypeError(f"timestamp must be int or datetime, not {type(timestamp).__name__}")
    if not _I64_MIN <= ns <= _I64_MAX:
        raise InvalidArgument(f"timestamp {ns} ns is out of range", details={"field": "timestamp"})
    return ns


def _utf8_size(text: str, field: str) -> int:
    try:
        return len(text.encode())
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"{field}: not valid UTF-8 text ({exc})", details={"field": field}
        ) from None


_CODEC_HEADER = COMPRESSION_HEADER.lower()


def compressed(
    compressor: ValueCompressor, value: bytes, headers: Headers
) -> tuple[bytes, Headers]:
    """``value`` and ``headers`` as a producer with ``compressor`` stores them: the value
    compressed and the header ``Jet-Compression`` added, or both as they are if the value
    is short, would not get smaller (or is skipped after such values: see
    :class:`~jetsdk.codec.compression.ValueCompressor`), or already carries the header
    (compressed by the application)."""
    for name, _ in headers:
        if name.lower() == _CODEC_HEADER:
            return value, headers
    packed = compressor.compress(value)
    if packed is None:
        return value, headers
    return packed, (*headers, (COMPRESSION_HEADER, compressor.codec.encode()))
