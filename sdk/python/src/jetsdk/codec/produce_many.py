"""ProduceMany (api 17): many Produce requests to one server in one frame
(spec/protocol.md, "17 ProduceMany").

A request is a count, then that many *sections*, each a length and a Produce request body
(api 6) byte for byte: the Produce encoding, its flags and its message list apply inside a
section unchanged. The response is a count (the request's), then one section per request
section, in order: an error code, a length and either the Produce response body (error 0)
or a JSON error body as an error frame would carry (the section's own error; the other
sections are not affected).

This module is pure: no I/O. Decoders raise only :class:`CodecError`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs

from jetsdk.codec import _wire as w
from jetsdk.codec.errors import CodecError

__all__ = [
    "MAX_PRODUCE_SECTIONS",
    "ProduceSection",
    "decode_produce_many_request",
    "decode_produce_many_response",
    "encode_produce_many_request",
    "encode_produce_many_response",
    "produce_many_request_parts",
    "produce_many_response_sections",
    "produce_many_section_count",
    "produce_many_section_views",
]

MAX_PRODUCE_SECTIONS = 1024
"""Most sections in one ProduceMany request (a larger count is INVALID_ARGUMENT); the
whole request is bounded by the frame limit (``max_frame_bytes``)."""
_SECTION_HEAD = struct.Struct(">HI")  # error_code, length


@attrs.frozen
class ProduceSection:
    """One section of a ProduceMany response."""

    error_code: int
    """0: ``body`` is the Produce response body; else the section's error."""
    body: bytes
    """The Produce response body (error 0), else the JSON error body."""


def encode_produce_many_request(sections: Sequence[bytes]) -> bytes:
    """A ProduceMany request body of ``sections`` (each a Produce request body).

    Raises:
        CodecError: more than :data:`MAX_PRODUCE_SECTIONS` sections (reason ``"limit"``).
    """
    return b"".join(produce_many_request_parts(sections))


def produce_many_request_parts(
    sections: Sequence[bytes | tuple[bytes, ...]],
) -> tuple[bytes, ...]:
    """:func:`encode_produce_many_request` as the parts it joins, in order (section
    bodies as given, not copied; a section given in parts, as
    :func:`~jetsdk.codec.messages.encode_produce_request_parts` makes it, as those
    parts): for a gathered write of large sections.

    Raises:
        CodecError: more than :data:`MAX_PRODUCE_SECTIONS` sections (reason ``"limit"``).
    """
    if len(sections) > MAX_PRODUCE_SECTIONS:
        raise CodecError(f"{len(sections)} sections exceed {MAX_PRODUCE_SECTIONS}", reason="limit")
    pack = w.U32.pack
    parts = [pack(len(sections))]
    for body in sections:
        if isinstance(body, tuple):
            parts.append(pack(sum(map(len, body))))
            parts.extend(body)
        else:
            parts.append(pack(len(body)))
            parts.append(body)
    return tuple(parts)


def produce_many_section_count(body: bytes | bytearray | memoryview) -> int:
    """The section count of a ProduceMany request body (nothing else is looked at).

    Raises:
        CodecError: fewer than 4 bytes.
    """
    w.need(body, 0, 4, "section count")
    (count,) = w.U32.unpack_from(body, 0)
    return int(count)


def decode_produce_many_request(body: bytes | bytearray | memoryview) -> list[bytes]:
    """The sections of a ProduceMany request body, each a Produce request body (not
    decoded here: a section that does not decode is that section's error).

    Raises:
        CodecError: truncated, trailing bytes, or more than :data:`MAX_PRODUCE_SECTIONS`
            sections (reason ``"limit"``).
    """
    # Each section is copied once (the body itself is not copied first: at 1 MiB a copy
    # is a fresh buffer of its own): a slice of a bytes body, else of a view of it.
    return [s if isinstance(s, bytes) else bytes(s) for s in produce_many_section_views(body)]


def produce_many_section_views(
    body: bytes | bytearray | memoryview,
) -> list[bytes | memoryview]:
    """:func:`decode_produce_many_request`, with the sections of a body that is not
    ``bytes`` as views of it, not copied (the server's large request bodies, read in
    place into a ``bytearray``): the caller keeps ``body`` unchanged while it holds them.

    Raises:
        CodecError: as :func:`decode_produce_many_request`.
    """
    view = body if isinstance(body, bytes) else memoryview(body)
    try:
        count = produce_many_section_count(body)
        if count > MAX_PRODUCE_SECTIONS:
            raise CodecError(f"{count} sections exceed {MAX_PRODUCE_SECTIONS}", reason="limit")
        if count * 4 > len(body) - 4:
            raise CodecError(f"section count {count} exceeds the body", reason="truncated")
        p = 4
        sections: list[bytes | memoryview] = []
        unpack = w.U32.unpack_from
        for _ in range(count):
            w.need(body, p, 4, "section length")
            (n,) = unpack(body, p)
            p += 4
            w.need(body, p, n, "section")
            sections.append(view[p : p + n])
            p += n
        w.check_end(body, p, "produce-many request")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "produce-many request") from None
    return sections


def encode_produce_many_response(sections: Sequence[ProduceSection]) -> bytes:
    """A ProduceMany response body: one section per request section, in order.

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    pack = _SECTION_HEAD.pack
    parts = [w.U32.pack(len(sections))]
    try:
        for section in sections:
            parts.append(pack(section.error_code, len(section.body)))
            parts.append(section.body)
    except struct.error as exc:
        raise CodecError(f"produce-many section out of range: {exc}", reason="limit") from None
    return b"".join(parts)


def decode_produce_many_response(body: bytes | bytearray | memoryview) -> list[ProduceSection]:
    """The sections of a ProduceMany response body (bodies not decoded).

    Raises:
        CodecError: truncated or trailing bytes.
    """
    return [ProduceSection(code, part) for code, part in produce_many_response_sections(body)]


def produce_many_response_sections(
    body: bytes | bytearray | memoryview,
) -> list[tuple[int, bytes]]:
    """:func:`decode_produce_many_response` as ``(error_code, body)`` tuples: a client
    hands out each section as it is (no value type made per partition).

    Raises:
        CodecError: truncated or trailing bytes.
    """
    if not isinstance(body, bytes):
        body = bytes(body)
    head, unpack = _SECTION_HEAD.size, _SECTION_HEAD.unpack_from
    try:
        count, p = w.get_count(body, 0, head, "section")
        out: list[tuple[int, bytes]] = []
        for _ in range(count):
            w.need(body, p, head, "section head")
            code, n = unpack(body, p)
            p += head
            w.need(body, p, n, "section")
            out.append((code, body[p : p + n]))
            p += n
        w.check_end(body, p, "produce-many response")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "produce-many response") from None
    return out
