"""Shared primitives of the binary formats (spec/README.md, "Conventions").

Encoders append to a ``list[bytes]`` that the caller joins once; decoders take a buffer and a
position and return ``(value, new_position)``. Decoders check lengths against the buffer and
the named limits themselves and raise :class:`CodecError`; callers wrap a whole decode in
``except DECODE_ERRORS`` as a safety net for ``struct.error`` on a short fixed-size read.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import (
    MAX_HEADER_COUNT,
    MAX_HEADER_NAME_BYTES,
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
)

Buffer = bytes | bytearray | memoryview
Headers = tuple[tuple[str, bytes], ...]

U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
U64 = struct.Struct(">Q")

MAX_STR16_BYTES = 0xFFFF
NULL_LEN = b"\xff\xff\xff\xff"

DECODE_ERRORS = (struct.error, UnicodeDecodeError, IndexError, OverflowError)
"""Exceptions a decode may hit on bad input besides CodecError; callers convert them."""


def encode_text(text: str, what: str, limit: int = MAX_STR16_BYTES) -> bytes:
    """UTF-8 bytes of ``text``, refusing more than ``limit`` bytes (reason "limit")."""
    try:
        raw = text.encode()
    except (UnicodeEncodeError, AttributeError) as exc:
        raise CodecError(f"{what} is not encodable text: {exc}", reason="limit") from None
    if len(raw) > limit:
        raise CodecError(f"{what} of {len(raw)} bytes exceeds {limit}", reason="limit")
    return raw


def put_str16(parts: list[bytes], text: str, what: str, limit: int = MAX_STR16_BYTES) -> None:
    """Append a ``str16``."""
    raw = encode_text(text, what, limit)
    parts.append(U16.pack(len(raw)))
    parts.append(raw)


def put_nbytes32(parts: list[bytes], data: bytes | None, what: str, limit: int) -> None:
    """Append an ``nbytes32`` (length -1 for None)."""
    if data is None:
        parts.append(NULL_LEN)
        return
    if len(data) > limit:
        raise CodecError(f"{what} of {len(data)} bytes exceeds {limit}", reason="limit")
    parts.append(U32.pack(len(data)))
    parts.append(bytes(data))


def put_bytes32(parts: list[bytes], data: bytes, what: str, limit: int) -> None:
    """Append a ``bytes32``."""
    if len(data) > limit:
        raise CodecError(f"{what} of {len(data)} bytes exceeds {limit}", reason="limit")
    parts.append(U32.pack(len(data)))
    parts.append(bytes(data))


def put_key(parts: list[bytes], key: bytes | None) -> None:
    """Append a key as ``nbytes32`` under MAX_KEY_BYTES."""
    put_nbytes32(parts, key, "key", MAX_KEY_BYTES)


def put_value(parts: list[bytes], value: bytes) -> None:
    """Append a value as ``bytes32`` under MAX_VALUE_BYTES."""
    put_bytes32(parts, value, "value", MAX_VALUE_BYTES)


def put_headers(parts: list[bytes], headers: Sequence[tuple[str, bytes]]) -> None:
    """Append ``headers``: u16 count, then (str16 name, bytes32 value) pairs."""
    if len(headers) > MAX_HEADER_COUNT:
        raise CodecError(f"{len(headers)} headers exceed {MAX_HEADER_COUNT}", reason="limit")
    parts.append(U16.pack(len(headers)))
    for name, hval in headers:
        put_str16(parts, name, "header name", MAX_HEADER_NAME_BYTES)
        put_bytes32(parts, hval, "header value", MAX_VALUE_BYTES)


def get_str16(buf: Buffer, p: int, what: str, limit: int = MAX_STR16_BYTES) -> tuple[str, int]:
    """Read a ``str16`` at ``p``."""
    (n,) = U16.unpack_from(buf, p)
    p += 2
    if n > limit:
        raise CodecError(f"{what} of {n} bytes exceeds {limit}", reason="limit")
    end = p + n
    if end > len(buf):
        raise CodecError(f"truncated {what}", reason="truncated")
    try:
        return str(buf[p:end], "utf-8"), end
    except UnicodeDecodeError:
        raise CodecError(f"{what} is not valid UTF-8") from None


def get_bytes(buf: Buffer, p: int, n: int, what: str) -> tuple[bytes, int]:
    """Read ``n`` raw bytes at ``p``."""
    end = p + n
    if end > len(buf):
        raise CodecError(f"truncated {what}", reason="truncated")
    return bytes(buf[p:end]), end


def get_nbytes32(buf: Buffer, p: int, what: str, limit: int) -> tuple[bytes | None, int]:
    """Read an ``nbytes32`` (None for length -1)."""
    (n,) = I32.unpack_from(buf, p)
    p += 4
    if n == -1:
        return None, p
    if n < 0:
        raise CodecError(f"bad {what} length {n}")
    if n > limit:
        raise CodecError(f"{what} of {n} bytes exceeds {limit}", reason="limit")
    return get_bytes(buf, p, n, what)


def get_bytes32(buf: Buffer, p: int, what: str, limit: int) -> tuple[bytes, int]:
    """Read a ``bytes32``."""
    (n,) = U32.unpack_from(buf, p)
    p += 4
    if n > limit:
        raise CodecError(f"{what} of {n} bytes exceeds {limit}", reason="limit")
    return get_bytes(buf, p, n, what)


def get_headers(buf: Buffer, p: int) -> tuple[Headers, int]:
    """Read ``headers``."""
    (count,) = U16.unpack_from(buf, p)
    p += 2
    if count > MAX_HEADER_COUNT:
        raise CodecError(f"{count} headers exceed {MAX_HEADER_COUNT}", reason="limit")
    if not count:
        return (), p
    out: list[tuple[str, bytes]] = []
    for _ in range(count):
        name, p = get_str16(buf, p, "header name", MAX_HEADER_NAME_BYTES)
        hval, p = get_bytes32(buf, p, "header value", MAX_VALUE_BYTES)
        out.append((name, hval))
    return tuple(out), p


def need(buf: Buffer, p: int, n: int, what: str) -> None:
    """Raise a "truncated" CodecError unless ``n`` bytes remain at ``p``."""
    if p + n > len(buf):
        raise CodecError(f"truncated {what}", reason="truncated")


def get_count(buf: Buffer, p: int, item_bytes: int, what: str) -> tuple[int, int]:
    """The u32 count of ``what`` items at ``p`` and the position after it.

    Raises a "truncated" CodecError if the count is missing, or if that many items of at
    least ``item_bytes`` each cannot fit in the rest of ``buf``: a count is bounded by the
    body before anything is sized by it.
    """
    if p + 4 > len(buf):  # (need's check, without its call and this text made each time)
        raise CodecError(f"truncated {what} count", reason="truncated")
    (count,) = U32.unpack_from(buf, p)
    p += 4
    if count * item_bytes > len(buf) - p:
        raise CodecError(f"{what} count {count} exceeds the body", reason="truncated")
    return count, p


def check_end(buf: Buffer, p: int, what: str) -> None:
    """Raise unless ``p`` is exactly the end of ``buf`` (no trailing bytes)."""
    if p != len(buf):
        raise CodecError(f"{len(buf) - p} trailing bytes after {what}")


def convert(exc: Exception, what: str) -> CodecError:
    """A CodecError for an unexpected low-level exception met while decoding ``what``."""
    reason = "truncated" if isinstance(exc, struct.error) else "malformed"
    return CodecError(f"malformed {what}: {exc}", reason=reason)
