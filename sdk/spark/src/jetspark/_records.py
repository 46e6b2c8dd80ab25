"""A Fetch response's record bytes to source rows in Arrow, without a Python object per
record.

:func:`scan` walks the record frames (the only per-record Python: one header unpack and
the CRC check, as :func:`jetsdk.codec.record.iter_records` does), and
:func:`records_batch` finds every field of every record with numpy (record layout:
spec/storage.md, "Record") and gathers each column's bytes at once. Headers, which few
records carry, are walked in Python for the records that have them.

The result equals :func:`jetspark.schema.records_to_batch` of the decoded records (the
tests compare them).
"""

from __future__ import annotations

import struct

import attrs
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from jetsdk.codec.crc import crc32 as _crc32
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import (
    MAX_HEADER_COUNT,
    MAX_HEADER_NAME_BYTES,
    MAX_KEY_BYTES,
    MAX_SUBJECT_BYTES,
    MAX_VALUE_BYTES,
)
from jetsdk.codec.record import (
    ATTR_PRODUCER,
    CRC_COVERED_HEADER,
    HEADER,
    HEADER_SIZE,
    MAX_BODY_BYTES,
)
from jetspark._arrow import I64, U8, read_be, slices

__all__ = ["records_batch", "scan"]

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def scan(raw: bytes | bytearray | memoryview, end: int) -> tuple[list[int], int | None]:
    """The start positions in ``raw`` of the whole records with offsets below ``end``
    (CRC checked), and the offset after the last whole record looked at (None if ``raw``
    holds no whole record). A trailing partial record is ignored.

    Raises:
        CodecError: a record fails its CRC or has an absurd length.
    """
    mv = memoryview(raw)
    n = len(mv)
    unpack = HEADER.unpack_from
    crc32 = _crc32
    starts: list[int] = []
    append = starts.append
    pos = 0
    nxt: int | None = None
    while n - pos >= HEADER_SIZE:
        offset, _ts, _epoch, length, crc = unpack(mv, pos)
        if length > MAX_BODY_BYTES:
            raise CodecError(f"record length {length} over limit", reason="limit")
        size = HEADER_SIZE + length
        if n - pos < size:
            break
        nxt = offset + 1
        if offset >= end:
            break
        body = mv[pos + HEADER_SIZE : pos + size]
        if crc32(body, crc32(mv[pos : pos + CRC_COVERED_HEADER], 0)) != crc:
            raise CodecError(f"record CRC mismatch at byte {pos}", reason="crc")
        append(pos)
        pos += size
    return starts, nxt


def _within(pos: I64, ends: I64) -> None:
    if len(pos) and bool((pos > ends).any()):
        raise CodecError("malformed record body (a field runs past the record)")


_HeaderSpans = tuple[I64, I64, I64, I64]
"""Start and length of every header name, then of every header value, in row order."""


@attrs.frozen
class _Layout:
    """Where every field of every record is in the buffer (numpy arrays, one per field)."""

    starts: I64
    key_start: I64
    key_len: I64
    has_key: npt.NDArray[np.bool_]
    subject_start: I64
    subject_len: I64
    header_count: I64
    headers: _HeaderSpans
    value_start: I64
    value_len: I64


def records_batch(
    raw: bytes | bytearray | memoryview,
    starts: list[int],
    stream: str,
    partition: int,
    schema: pa.Schema,
) -> pa.RecordBatch:
    """One Arrow batch of source rows for the records of one partition at ``starts`` of
    ``raw`` (positions from :func:`scan`). Columns are matched by name, so ``schema`` may
    carry ``headers`` or not.

    Raises:
        CodecError: a malformed record body; ValueError: an unknown column.
    """
    buf: U8 = np.frombuffer(raw, dtype=np.uint8)
    layout = _layout(raw, buf, np.asarray(starts, dtype=np.int64))
    whole = pa.py_buffer(raw)
    n = len(starts)
    columns: list[pa.Array] = []
    try:
        for field in schema:
            name, type_ = field.name, field.type
            if name == "key":
                columns.append(
                    slices(type_, whole, layout.key_start, layout.key_len, layout.has_key)
                )
            elif name == "value":
                columns.append(slices(type_, whole, layout.value_start, layout.value_len))
            elif name == "stream":
                columns.append(pa.repeat(pa.scalar(stream, type_), n))
            elif name == "subject":
                columns.append(slices(type_, whole, layout.subject_start, layout.subject_len))
            elif name == "partition":
                columns.append(pa.repeat(pa.scalar(partition, type_), n))
            elif name == "offset":
                columns.append(pa.array(read_be(buf, layout.starts, ">i8"), type=type_))
            elif name == "timestamp":
                micros = read_be(buf, layout.starts + 8, ">i8") // 1000
                columns.append(pa.Array.from_buffers(type_, n, [None, pa.py_buffer(micros)]))
            elif name == "headers":
                columns.append(_headers_column(whole, type_, layout.header_count, layout.headers))
            else:
                raise ValueError(f"unexpected column {name!r} in the jetstream source schema")
    except pa.ArrowInvalid as exc:  # a subject or header name that is not UTF-8
        raise CodecError(f"malformed record: {exc}") from None
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _layout(raw: bytes | bytearray | memoryview, buf: U8, st: I64) -> _Layout:
    """Find the fields of the records at ``st`` (record layout: spec/storage.md).

    Raises:
        CodecError: a malformed body (checked as :func:`~jetsdk.codec.record.decode_record`
            does: attributes, lengths and limits, fields inside the record).
    """
    n = len(st)
    rec_end = st + HEADER_SIZE + read_be(buf, st + 20, ">u4")
    attrs_byte = buf[st + HEADER_SIZE].astype(np.int64)
    if n and bool((attrs_byte & ~ATTR_PRODUCER).any()):
        raise CodecError("unknown record attributes")
    p = st + HEADER_SIZE + 1 + 16 * (attrs_byte & ATTR_PRODUCER)
    _within(p + 4, rec_end)
    klen = read_be(buf, p, ">i4")
    if n and bool(((klen < -1) | (klen > MAX_KEY_BYTES)).any()):
        raise CodecError("bad key length")
    key_start = p + 4
    key_len = np.maximum(klen, 0)
    p = key_start + key_len
    _within(p + 2, rec_end)
    slen = read_be(buf, p, ">u2")
    subject_start = p + 2
    p = subject_start + slen
    _within(p + 2, rec_end)
    rlen = read_be(buf, p, ">u2")
    if n and bool(((slen > MAX_SUBJECT_BYTES) | (rlen > MAX_SUBJECT_BYTES)).any()):
        raise CodecError("subject over its limit", reason="limit")
    p = p + 2 + rlen
    _within(p + 2, rec_end)
    hcount = read_be(buf, p, ">u2")
    p = p + 2
    headers = _headers(raw, p, rec_end, hcount)  # moves p past the headers
    _within(p + 4, rec_end)
    vlen = read_be(buf, p, ">u4")
    value_start = p + 4
    if n and bool((value_start + vlen != rec_end).any()):
        raise CodecError("record body length mismatch")
    if n and bool((vlen > MAX_VALUE_BYTES).any()):
        raise CodecError("value over its limit", reason="limit")
    return _Layout(
        starts=st,
        key_start=key_start,
        key_len=key_len,
        has_key=klen >= 0,
        subject_start=subject_start,
        subject_len=slen,
        header_count=hcount,
        headers=headers,
        value_start=value_start,
        value_len=vlen,
    )


def _headers(
    raw: bytes | bytearray | memoryview, p: I64, rec_end: I64, hcount: I64
) -> _HeaderSpans:
    """Walk the headers of the records that have some; set ``p`` past them (in place)."""
    spans: list[list[int]] = [[], [], [], []]
    name_start, name_len, value_start, value_len = spans
    if len(hcount) and bool((hcount > MAX_HEADER_COUNT).any()):
        raise CodecError("too many headers", reason="limit")
    try:
        for i in np.flatnonzero(hcount).tolist():
            q = int(p[i])
            for _ in range(int(hcount[i])):
                (size,) = _U16.unpack_from(raw, q)
                if size > MAX_HEADER_NAME_BYTES:
                    raise CodecError("header name over its limit", reason="limit")
                name_start.append(q + 2)
                name_len.append(size)
                q += 2 + size
                (size,) = _U32.unpack_from(raw, q)
                if size > MAX_VALUE_BYTES:
                    raise CodecError("header value over its limit", reason="limit")
                value_start.append(q + 4)
                value_len.append(size)
                q += 4 + size
            if q > rec_end[i]:
                raise CodecError("malformed record headers")
            p[i] = q
    except struct.error as exc:
        raise CodecError(f"malformed record headers: {exc}") from None
    as_array = [np.asarray(s, dtype=np.int64) for s in spans]
    return as_array[0], as_array[1], as_array[2], as_array[3]


def _headers_column(
    whole: pa.Buffer, type_: pa.DataType, hcount: I64, spans: _HeaderSpans
) -> pa.Array:
    name_start, name_len, value_start, value_len = spans
    struct_type = type_.value_type
    names = slices(struct_type.field("key").type, whole, name_start, name_len)
    values = slices(struct_type.field("value").type, whole, value_start, value_len)
    entries = pa.StructArray.from_arrays([names, values], fields=list(struct_type))
    offsets = np.zeros(len(hcount) + 1, dtype=np.int32)
    np.cumsum(hcount, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), entries, type=type_)
