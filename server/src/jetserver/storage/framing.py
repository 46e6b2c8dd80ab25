"""Framing a batch of record bodies into stored records (spec/storage.md, "Record").

This produces exactly the bytes of :func:`jetsdk.codec.record.frame_body` applied to each
body with consecutive offsets (tests/storage/test_framing.py checks it against the codec
for random input). Framing is the per-record cost of an append, so a batch is framed with
whole-batch operations that run in C (``map``, ``array`` slices, one ``join``) instead of a
Python loop:

- the CRC of a record is ``crc32(body, crc32(header24))``. CRC-32 is affine over GF(2), so
  ``crc32(header24) = M ^ A(offset) ^ B(length)`` where ``M`` depends only on the batch's
  timestamp and epoch and ``A``/``B`` are linear; ``A`` and ``B`` of the low 16 bits come
  from 64K-entry tables, and the per-record values are combined with one big-integer XOR
  per batch. That leaves one ``crc32`` call (over the body) per record.
- the 28-byte headers are assembled as 32-bit words in one ``array`` (byte-swapped to
  big-endian), split with one ``struct`` unpack and interleaved with the bodies for one
  ``bytes.join``.

Small batches (and batches with a field out of range, which then raise like the codec)
take a plain per-record loop.

A body may come in two parts (:data:`Body`): its head (producer field, key, subject and
reply, built per record) and its tail (headers and value: a view of the Produce request
the record came in). The record is then framed around the tail as it is, not rebuilt: the
CRC runs over both parts and the parts are written gathered (issue 39: the join of a body
was the server's last copy of every produced payload before the disk, and a fresh buffer
per record; ``python -m bench.profile_bytes --processes 1``).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from functools import cache
from typing import NamedTuple, TypeAlias, cast

from jetsdk.codec.record import CRC_COVERED_HEADER, HEADER_SIZE
from jetserver.storage.crc import crc32 as _crc32
from jetserver.storage.crc import crc32_combine as _crc32_combine

_HEAD = struct.Struct(">qqII")
"""offset, timestamp, leader_epoch, length: the 24 bytes the CRC covers first."""
_CRC = struct.Struct(">I")
_TS_EPOCH = struct.Struct(">qI")
_OFFSET = struct.Struct(">q")
_U32 = struct.Struct(">I")
assert _HEAD.size == CRC_COVERED_HEADER
assert _HEAD.size + _CRC.size == HEADER_SIZE

Body: TypeAlias = bytes | tuple[bytes, bytes | memoryview]
"""A record body (spec/storage.md), whole or as (head, tail) stored back to back (a
:class:`CheckedBody` where the CRC of the tail's end is known)."""


class CheckedBody(tuple[bytes, bytes | memoryview]):
    """A body as (head, tail) whose tail ends with ``value_len`` bytes of known CRC-32
    ``value_crc`` (a large value's, taken once for its NATS copy too): its record's CRC
    runs over the rest only and combines the two (``crc32_combine``), not a second pass
    over the value."""

    value_crc: int
    value_len: int

    def __new__(
        cls, head: bytes, tail: bytes | memoryview, value_crc: int, value_len: int
    ) -> CheckedBody:
        body = super().__new__(cls, (head, tail))
        body.value_crc = value_crc
        body.value_len = value_len
        return body


BULK_MIN_RECORDS = 8
"""Batches with fewer records are framed record by record (less set-up)."""
_LOW_BITS = 16
_LOW = (1 << _LOW_BITS) - 1
_I64_MAX = 2**63 - 1
_U32_MAX = 2**32 - 1
_WORDS = HEADER_SIZE // 4  # 7 big-endian u32 words per header
_BULK_OK = sys.byteorder == "little" and array("I").itemsize == 4 and array("q").itemsize == 8

_ZERO_HEADER_CRC = _crc32(bytes(CRC_COVERED_HEADER), 0)


def _offset_part(offset: int) -> int:
    """A(offset): the linear contribution of the offset field to crc32(header24)."""
    return _crc32(_OFFSET.pack(offset) + bytes(16), 0) ^ _ZERO_HEADER_CRC


def _length_part(length: int) -> int:
    """B(length): the linear contribution of the length field to crc32(header24)."""
    return _crc32(bytes(20) + _U32.pack(length), 0) ^ _ZERO_HEADER_CRC


def _table(part: int) -> array[int]:
    """Linear contributions of every 16-bit value (built from the 16 single-bit ones)."""
    values = [0]
    for bit in range(_LOW_BITS):
        v = _offset_part(1 << bit) if part == 0 else _length_part(1 << bit)
        values.extend([x ^ v for x in values])
    return array("I", values)


@cache
def _tables() -> tuple[array[int], array[int]]:
    """(A, B) for the low 16 bits of offsets and lengths; built on first use (~10 ms)."""
    return _table(0), _table(1)


_splitters: dict[int, struct.Struct] = {}
_MAX_SPLITTERS = 64
_MAX_CACHED_RECORDS = 4096
"""Per-batch-size helpers for bigger batches are built each time (bounded memory)."""


def _splitter(n: int) -> struct.Struct:
    """A Struct that cuts ``n`` 28-byte headers out of one buffer."""
    s = _splitters.get(n)
    if s is None:
        if n > _MAX_CACHED_RECORDS:
            return struct.Struct(f"{HEADER_SIZE}s" * n)
        if len(_splitters) >= _MAX_SPLITTERS:
            _splitters.clear()
        s = _splitters[n] = struct.Struct(f"{HEADER_SIZE}s" * n)
    return s


_ones: dict[int, int] = {}


def _repeated(value: int, n: int) -> int:
    """The integer whose ``n`` little-endian u32 words all equal ``value``."""
    ones = _ones.get(n)
    if ones is None:
        if n > _MAX_CACHED_RECORDS:
            return value * int.from_bytes(b"\x01\x00\x00\x00" * n, "little")
        if len(_ones) >= _MAX_SPLITTERS:
            _ones.clear()
        ones = _ones[n] = int.from_bytes(b"\x01\x00\x00\x00" * n, "little")
    return value * ones


def _xor_words(words: array[int], other: int) -> array[int]:
    """``words`` (u32) XOR the u32 words of the little-endian integer ``other``."""
    x = int.from_bytes(words.tobytes(), "little") ^ other
    out = array("I")
    out.frombytes(x.to_bytes(4 * len(words), "little"))
    return out


def _body_len(body: Body) -> int:
    if isinstance(body, tuple):
        return len(body[0]) + len(body[1])
    return len(body)


def _body_crc(body: Body, init: int) -> int:
    if isinstance(body, tuple):
        head, tail = body
        if type(body) is CheckedBody and _crc32_combine is not None:
            rest = len(tail) - body.value_len
            start = _crc32(memoryview(tail)[:rest], _crc32(head, init))
            return _crc32_combine(start, body.value_crc, body.value_len)
        return _crc32(tail, _crc32(head, init))
    return _crc32(body, init)


def _flat(parts: list[bytes | Body]) -> list[bytes | memoryview]:
    """``parts`` with every two-part body spread into its two parts."""
    out: list[bytes | memoryview] = []
    for p in parts:
        if isinstance(p, tuple):
            out.extend(p)
        else:
            out.append(p)
    return out


def whole_body(body: Body) -> bytes:
    """``body`` as one buffer."""
    return b"".join(body) if isinstance(body, tuple) else body


def whole_bodies(bodies: list[Body], start: int = 0) -> list[bytes]:
    """``bodies`` itself, every two-part body from index ``start`` on joined in place."""
    for i in range(start, len(bodies)):
        body = bodies[i]
        if isinstance(body, tuple):
            bodies[i] = b"".join(body)
    return cast("list[bytes]", bodies)


class FramedBatch(NamedTuple):
    """A framed batch and what the log needs to index it."""

    data: bytes | list[bytes | memoryview]
    """The stored records, back to back: one buffer, or parts to write in order."""
    body_sizes: list[int]
    """Length of each record's body (a record is ``HEADER_SIZE`` bytes more)."""
    uniform: bool
    """True if every body has the same length."""
    size: int
    """Bytes of ``data``."""


GATHER_MIN_RECORD = 4096
"""Average stored record size from which a batch is written gathered, not joined."""


def frame_batch(
    first_offset: int, timestamp: int, leader_epoch: int, bodies: Sequence[Body]
) -> bytes:
    """Stored records for ``bodies`` at offsets ``first_offset, first_offset + 1, ...``.

    Raises:
        struct.error: an offset, timestamp, epoch or length out of its field's range.
    """
    data = frame_batch_sizes(first_offset, timestamp, leader_epoch, bodies).data
    return data if isinstance(data, bytes) else b"".join(data)


def frame_batch_sizes(
    first_offset: int, timestamp: int, leader_epoch: int, bodies: Sequence[Body]
) -> FramedBatch:
    """Like :func:`frame_batch`, also returning the body sizes (for index positions).

    Records of GATHER_MIN_RECORD bytes or more on average come as a list of parts (header,
    body, header, body, ...) to be written with one gathered write, not joined (a copy
    of the batch saved; ``bench/profile_bytes.py``); smaller ones are joined, which costs
    less than a gathered write of many small buffers.

    Raises:
        struct.error: an offset, timestamp, epoch or length out of its field's range.
    """
    if len(bodies) == 1:
        return _frame_one(first_offset, timestamp, leader_epoch, bodies[0])
    split = any(isinstance(b, tuple) for b in bodies)
    lens = list(map(_body_len if split else len, bodies))
    n = len(lens)
    uniform = n > 0 and lens.count(lens[0]) == n
    if (
        n < BULK_MIN_RECORDS
        or not _BULK_OK
        or first_offset < 0
        or first_offset + n - 1 > _I64_MAX
        or not 0 <= leader_epoch <= _U32_MAX
        or (lens[0] if uniform else max(lens)) > _U32_MAX
    ):
        parts = _frame_loop(first_offset, timestamp, leader_epoch, bodies)
    else:
        ts_epoch = _TS_EPOCH.pack(timestamp, leader_epoch)  # struct.error if out of range
        parts = _frame_bulk(first_offset, ts_epoch, bodies, lens, uniform, split)
    flat = _flat(parts) if split else cast("list[bytes | memoryview]", parts)
    size = HEADER_SIZE * n + sum(lens)
    if size >= n * GATHER_MIN_RECORD:
        return FramedBatch(flat, lens, uniform, size)
    return FramedBatch(b"".join(flat), lens, uniform, size)


def _frame_one(offset: int, timestamp: int, leader_epoch: int, body: Body) -> FramedBatch:
    """:func:`frame_batch_sizes` of one record (a Produce of one message at light load:
    about a third of the general path's Python calls)."""
    pieces: tuple[bytes | memoryview, ...] = body if isinstance(body, tuple) else (body,)
    length = len(pieces[0]) + len(pieces[1]) if len(pieces) == 2 else len(pieces[0])
    h = _HEAD.pack(offset, timestamp, leader_epoch, length)
    parts = [h, _CRC.pack(_body_crc(body, _crc32(h, 0))), *pieces]
    size = HEADER_SIZE + length
    data = parts if size >= GATHER_MIN_RECORD else b"".join(parts)
    return FramedBatch(data, [length], True, size)


def frame_small(
    offset: int,
    timestamp: int,
    leader_epoch: int,
    head: bytes,
    tail: bytes | memoryview,
    length: int,
) -> bytes:
    """The stored record of the body ``head + tail`` (``length`` bytes) as one buffer:
    :func:`frame_batch` of one small two-part body (``Appender.append_one``).

    Raises:
        struct.error: an offset, timestamp, epoch or length out of its field's range.
    """
    h = _HEAD.pack(offset, timestamp, leader_epoch, length)
    return b"".join((h, _CRC.pack(_crc32(tail, _crc32(head, _crc32(h, 0)))), head, tail))


def _frame_loop(
    first_offset: int, timestamp: int, leader_epoch: int, bodies: Sequence[Body]
) -> list[bytes | Body]:
    parts: list[bytes | Body] = []
    put = parts.append
    head = _HEAD.pack
    crc_bytes = _CRC.pack
    offset = first_offset
    for body in bodies:
        h = head(offset, timestamp, leader_epoch, _body_len(body))
        put(h)
        put(crc_bytes(_body_crc(body, _crc32(h, 0))))
        put(body)
        offset += 1
    return parts


def _frame_bulk(
    first: int,
    ts_epoch: bytes,
    bodies: Sequence[Body],
    lens: list[int],
    uniform: bool,
    split: bool,
) -> list[bytes | Body]:
    n = len(lens)
    end = first + n
    a_low, b_low = _tables()
    # crc32(header24) = M ^ A(offset) ^ B(length); M covers the timestamp and epoch.
    m = _crc32(bytes(4), _crc32(ts_epoch, _crc32(bytes(8), 0)))
    length0 = lens[0]
    if uniform:
        m ^= b_low[length0] if length0 <= _LOW else _length_part(length0)
    if (first & _LOW) + n <= _LOW + 1:  # the usual case: one run of the A table
        low = first & _LOW
        high = first - low
        inits = _xor_words(a_low[low : low + n], _repeated(m ^ _offset_part(high), n))
    else:
        inits = array("I")
        o = first
        while o < end:
            low = o & _LOW
            high = o - low
            run = min(end, high + _LOW + 1) - o
            base = m ^ _offset_part(high)
            inits.extend(_xor_words(a_low[low : low + run], _repeated(base, run)))
            o += run
    if not uniform:
        if max(lens) <= _LOW:
            parts_b = array("I", map(b_low.__getitem__, lens))
        else:
            parts_b = array("I", [b_low[x] if x <= _LOW else _length_part(x) for x in lens])
        inits = _xor_words(inits, int.from_bytes(parts_b.tobytes(), "little"))
    crcs = array("I", map(_body_crc if split else _crc32, bodies, inits))  # type: ignore[arg-type]
    crcs.byteswap()
    # The headers as native u32 words whose bytes are the big-endian fields: a template
    # with the fields every record shares, then the varying ones by extended slices.
    high = first >> 32
    low = first & _U32_MAX
    template = _U32.pack(high) + bytes(4) + ts_epoch + _U32.pack(length0) + bytes(4)
    words = array("I", template * n)
    if low + n <= _U32_MAX + 1:
        lows = array("I", range(low, low + n))
    else:  # the offsets cross a multiple of 2**32
        offsets = array("Q", range(first, end))
        offsets.byteswap()
        both = array("I", offsets.tobytes())
        words[0::_WORDS] = both[0::2]
        lows = both[1::2]
        lows.byteswap()
    lows.byteswap()
    words[1::_WORDS] = lows
    if not uniform:
        lengths = array("I", lens)
        lengths.byteswap()
        words[5::_WORDS] = lengths
    words[6::_WORDS] = crcs
    parts: list[bytes | Body] = [b""] * (2 * n)
    parts[0::2] = _splitter(n).unpack(words)
    parts[1::2] = bodies
    return parts
