"""The stored record: one message in a partition log (spec/storage.md, "Record").

The same bytes are written to segment files, sent in fetch responses and copied to
followers, so a record is encoded once, at append time, and never again.

Layout (big-endian)::

    offset        int64    absolute offset in the partition
    timestamp     int64    nanoseconds since the Unix epoch (server-assigned)
    leader_epoch  uint32   epoch of the leader that appended it
    length        uint32   size of the body that follows the crc field
    crc           uint32   CRC-32 (zlib) of the 24 header bytes before it, then of the body
    body          length bytes:
        attributes    uint8    bit 0: producer id and sequence present; other bits 0
        [producer_id  uint64, producer_seq uint64]   only when bit 0 is set
        key_len       int32    -1: no key
        key           key_len bytes
        subject_len   uint16, subject (UTF-8)
        reply_len     uint16, reply (UTF-8)
        header_count  uint16, then per header: name_len uint16, name (UTF-8),
                      value_len uint32, value
        value_len     uint32, value

This module is pure: no I/O. Decoders raise only :class:`~jetsdk.codec.errors.CodecError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import attrs

from jetsdk.codec._wire import I32, U16, U32, Headers
from jetsdk.codec.crc import crc32
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import (
    MAX_HEADER_COUNT,
    MAX_HEADER_NAME_BYTES,
    MAX_KEY_BYTES,
    MAX_SUBJECT_BYTES,
    MAX_VALUE_BYTES,
)
from jetsdk.codec.slots import slot_setters

HEADER = struct.Struct(">qqIII")
"""offset, timestamp, leader_epoch, length, crc."""
HEADER_SIZE = HEADER.size  # 28
CRC_COVERED_HEADER = 24
"""The CRC covers the first 24 header bytes (everything but itself), then the body."""
MAX_BODY_BYTES = MAX_VALUE_BYTES + MAX_KEY_BYTES + 16 * 1024 * 1024
"""Largest body a decoder accepts; bigger length fields are corruption."""

ATTR_PRODUCER = 0x01
_KNOWN_ATTRS = ATTR_PRODUCER

_PRODUCER = struct.Struct(">QQ")
_LENGTH = struct.Struct(">I")
_LENGTH_POS = 20
"""Where the body length lies in a record header."""


@attrs.frozen
class Record:
    """One decoded record."""

    offset: int
    """Absolute offset within the partition."""
    timestamp: int
    """Server-assigned time, nanoseconds since the Unix epoch."""
    leader_epoch: int
    """Leader epoch at append time."""
    value: bytes
    """The payload; empty together with a key marks a tombstone."""
    key: bytes | None = None
    """The key, or None for a keyless record (distinct from an empty key)."""
    subject: str = ""
    """NATS subject the message arrived on."""
    reply: str = ""
    """NATS reply subject of a plain message, empty if none."""
    headers: Headers = ()
    """Ordered (name, value) pairs; names may repeat."""
    producer_id: int | None = None
    """Idempotent producer id, or None."""
    producer_seq: int = 0
    """Producer sequence number (meaningful only with a producer id)."""

    @property
    def is_tombstone(self) -> bool:
        """A keyed record with an empty value deletes its key under compaction."""
        return self.key is not None and not self.value


def encode_body(
    value: bytes,
    key: bytes | None = None,
    subject: str = "",
    reply: str = "",
    headers: Sequence[tuple[str, bytes]] = (),
    producer_id: int | None = None,
    producer_seq: int = 0,
) -> bytes:
    """Encode the part of a record that does not depend on its offset.

    Raises:
        CodecError: a field is over its limit or out of range (reason ``"limit"``).
    """
    parts: list[bytes] = []
    try:
        if producer_id is None:
            parts.append(b"\x00")
        else:
            parts.append(b"\x01")
            parts.append(_PRODUCER.pack(producer_id, producer_seq))
        if key is None:
            parts.append(b"\xff\xff\xff\xff")
        else:
            if len(key) > MAX_KEY_BYTES:
                raise CodecError(f"key of {len(key)} bytes exceeds {MAX_KEY_BYTES}", reason="limit")
            parts.append(I32.pack(len(key)))
            parts.append(key)
        for text in (subject, reply):
            raw = text.encode()
            if len(raw) > MAX_SUBJECT_BYTES:
                raise CodecError(f"subject of {len(raw)} bytes exceeds limit", reason="limit")
            parts.append(U16.pack(len(raw)))
            parts.append(raw)
        if len(headers) > MAX_HEADER_COUNT:
            raise CodecError(f"{len(headers)} headers exceed {MAX_HEADER_COUNT}", reason="limit")
        parts.append(U16.pack(len(headers)))
        for name, hval in headers:
            raw = name.encode()
            if len(raw) > MAX_HEADER_NAME_BYTES:
                raise CodecError("header name exceeds limit", reason="limit")
            parts.append(U16.pack(len(raw)))
            parts.append(raw)
            if len(hval) > MAX_VALUE_BYTES:
                raise CodecError("header value exceeds limit", reason="limit")
            parts.append(U32.pack(len(hval)))
            parts.append(bytes(hval))
        if len(value) > MAX_VALUE_BYTES:
            raise CodecError(
                f"value of {len(value)} bytes exceeds {MAX_VALUE_BYTES}", reason="limit"
            )
        parts.append(U32.pack(len(value)))
        parts.append(bytes(value))
    except (struct.error, UnicodeEncodeError) as exc:
        raise CodecError(f"record field out of range: {exc}", reason="limit") from None
    return b"".join(parts)


def frame_body(offset: int, timestamp: int, leader_epoch: int, body: bytes) -> bytes:
    """Prefix an encoded body with its header (offset, timestamp, epoch, length, CRC).

    Raises:
        CodecError: a header field out of range (reason ``"limit"``).
    """
    try:
        head = HEADER.pack(offset, timestamp, leader_epoch, len(body), 0)[:CRC_COVERED_HEADER]
    except struct.error as exc:
        raise CodecError(f"record header field out of range: {exc}", reason="limit") from None
    crc = crc32(body, crc32(head, 0))
    return head + U32.pack(crc) + body


def encode_record(record: Record) -> bytes:
    """Encode a whole record to its stored bytes.

    Raises:
        CodecError: a field over its limit or out of range (reason ``"limit"``).
    """
    body = encode_body(
        record.value,
        key=record.key,
        subject=record.subject,
        reply=record.reply,
        headers=record.headers,
        producer_id=record.producer_id,
        producer_seq=record.producer_seq,
    )
    return frame_body(record.offset, record.timestamp, record.leader_epoch, body)


def peek_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int, int, int]:
    """Read ``(offset, timestamp, leader_epoch, total_size)`` of the record at ``pos``.

    Does not verify the CRC. Raises CodecError if fewer than HEADER_SIZE bytes remain or
    the length field is absurd.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CodecError("truncated record header", reason="truncated")
    offset, ts, epoch, length, _crc = HEADER.unpack_from(buf, pos)
    if length > MAX_BODY_BYTES:
        raise CodecError(f"record length {length} over limit", reason="limit")
    return offset, ts, epoch, HEADER_SIZE + length


def check_crc(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """Verify the record at ``pos`` is whole and its CRC matches; return its total size."""
    _o, _t, _e, size = peek_header(buf, pos)
    if len(buf) - pos < size:
        raise CodecError("truncated record body", reason="truncated")
    mv = memoryview(buf)
    crc = U32.unpack_from(buf, pos + CRC_COVERED_HEADER)[0]
    actual = crc32(mv[pos + HEADER_SIZE : pos + size], crc32(mv[pos : pos + 24], 0))
    if crc != actual:
        raise CodecError(f"record CRC mismatch at byte {pos}", reason="crc")
    return size


_set_offset, _set_ts, _set_epoch, _set_value, _set_key = slot_setters(
    Record, "offset", "timestamp", "leader_epoch", "value", "key"
)
_set_subject, _set_reply, _set_headers, _set_pid, _set_pseq = slot_setters(
    Record, "subject", "reply", "headers", "producer_id", "producer_seq"
)
_new_object = object.__new__


def _new_record(
    offset: int,
    timestamp: int,
    epoch: int,
    value: bytes,
    key: bytes | None,
    subject: str,
    reply: str,
    headers: Headers,
    producer_id: int | None,
    producer_seq: int,
) -> Record:
    """``Record(...)`` setting its slots directly (:mod:`jetsdk.codec.slots`): the
    consumer's hot path."""
    record: Record = _new_object(Record)
    _set_offset(record, offset)
    _set_ts(record, timestamp)
    _set_epoch(record, epoch)
    _set_value(record, value)
    _set_key(record, key)
    _set_subject(record, subject)
    _set_reply(record, reply)
    _set_headers(record, headers)
    _set_pid(record, producer_id)
    _set_pseq(record, producer_seq)
    return record


def with_value(record: Record, value: bytes, headers: Headers) -> Record:
    """A copy of ``record`` with ``value`` and ``headers`` (``attrs.evolve`` without its
    per-call field walk: a consumer decompressing every record of a fetch spent 0.45 times as
    long in ``evolve`` as in zstd at 16 KiB)."""
    return _new_record(
        record.offset,
        record.timestamp,
        record.leader_epoch,
        value,
        record.key,
        record.subject,
        record.reply,
        headers,
        record.producer_id,
        record.producer_seq,
    )


def decode_record(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, verify: bool = True
) -> tuple[Record, int]:
    """Decode the record at ``pos``; return it and the position just past it.

    Raises:
        CodecError: truncated, bad CRC (when ``verify``), or a malformed body.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CodecError("truncated record header", reason="truncated")
    offset, ts, epoch, length, crc = HEADER.unpack_from(buf, pos)
    if length > MAX_BODY_BYTES:
        raise CodecError(f"record length {length} over limit", reason="limit")
    p = pos + HEADER_SIZE
    end = p + length
    if len(buf) < end:
        raise CodecError("truncated record body", reason="truncated")
    if verify:
        mv = memoryview(buf)
        if crc != crc32(mv[p:end], crc32(mv[pos : pos + CRC_COVERED_HEADER], 0)):
            raise CodecError(f"record CRC mismatch at byte {pos}", reason="crc")
    try:
        attrs_byte = buf[p]
        p += 1
        if attrs_byte & ~_KNOWN_ATTRS:
            raise CodecError(f"unknown record attributes {attrs_byte:#x}")
        producer_id: int | None = None
        producer_seq = 0
        if attrs_byte & ATTR_PRODUCER:
            producer_id, producer_seq = _PRODUCER.unpack_from(buf, p)
            p += 16
        (klen,) = I32.unpack_from(buf, p)
        p += 4
        key: bytes | None
        if klen == -1:
            key = None
        elif 0 <= klen <= MAX_KEY_BYTES:
            key = bytes(buf[p : p + klen])
            p += klen
        else:
            raise CodecError(f"bad key length {klen}")
        (slen,) = U16.unpack_from(buf, p)
        p += 2
        if slen > MAX_SUBJECT_BYTES:
            raise CodecError(f"subject of {slen} bytes exceeds limit", reason="limit")
        subject = _text(buf, p, slen)
        p += slen
        (rlen,) = U16.unpack_from(buf, p)
        p += 2
        if rlen > MAX_SUBJECT_BYTES:
            raise CodecError(f"reply of {rlen} bytes exceeds limit", reason="limit")
        reply = _text(buf, p, rlen) if rlen else ""
        p += rlen
        (hcount,) = U16.unpack_from(buf, p)
        p += 2
        headers: Headers = ()
        if hcount:
            headers, p = _headers(buf, p, hcount)
        (vlen,) = U32.unpack_from(buf, p)
        p += 4
        if vlen > MAX_VALUE_BYTES:
            raise CodecError(f"value of {vlen} bytes exceeds limit", reason="limit")
        value = bytes(buf[p : p + vlen])
        p += vlen
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise CodecError(f"malformed record body at byte {pos}: {exc}") from None
    if p != end:
        raise CodecError(f"record body length mismatch at byte {pos} ({p} != {end})")
    record = _new_record(
        offset, ts, epoch, value, key, subject, reply, headers, producer_id, producer_seq
    )
    return record, end


_subject_texts: dict[bytes, str] = {}
_MAX_CACHED_TEXTS = 1024


def _text(buf: bytes | bytearray | memoryview, p: int, size: int) -> str:
    """The UTF-8 text at ``p`` (subjects repeat: the decoded strings are cached)."""
    raw = bytes(buf[p : p + size])
    text = _subject_texts.get(raw)
    if text is None:
        if len(raw) != size:
            raise IndexError("text past the end of the record")
        text = raw.decode()
        if len(_subject_texts) >= _MAX_CACHED_TEXTS:
            _subject_texts.clear()
        _subject_texts[raw] = text
    return text


def _headers(buf: bytes | bytearray | memoryview, p: int, count: int) -> tuple[Headers, int]:
    if count > MAX_HEADER_COUNT:
        raise CodecError(f"{count} headers exceed limit", reason="limit")
    headers: list[tuple[str, bytes]] = []
    for _ in range(count):
        (nlen,) = U16.unpack_from(buf, p)
        p += 2
        if nlen > MAX_HEADER_NAME_BYTES:
            raise CodecError(f"header name of {nlen} bytes exceeds limit", reason="limit")
        name = bytes(buf[p : p + nlen]).decode()
        p += nlen
        (vlen,) = U32.unpack_from(buf, p)
        p += 4
        if vlen > MAX_VALUE_BYTES:
            raise CodecError(f"header value of {vlen} bytes exceeds limit", reason="limit")
        headers.append((name, bytes(buf[p : p + vlen])))
        p += vlen
    return tuple(headers), p


def iter_records(buf: bytes | bytearray | memoryview, *, verify: bool = True) -> Iterator[Record]:
    """Decode consecutive records; a trailing partial record is ignored (spec: fetch).

    A whole record that fails its CRC or is malformed raises CodecError.
    """
    pos = 0
    n = len(buf)
    length_at = _LENGTH.unpack_from
    while n - pos >= HEADER_SIZE:
        (length,) = length_at(buf, pos + _LENGTH_POS)
        if n - pos < HEADER_SIZE + length and length <= MAX_BODY_BYTES:
            return
        record, pos = decode_record(buf, pos, verify=verify)
        yield record
