"""A Fetch response's records as a table needs them: entries and expiries, without a
:class:`~jetsdk.codec.record.Record` per record.

A table reads every record of its stream and keeps only the key, the value, the offset and,
for a record with a ``Jet-TTL`` header, its expiry; the subject, reply, producer fields and
other headers are of no use to it. :func:`table_rows` checks each record's CRC and lengths
(record layout: spec/storage.md, "Record"), takes those fields with a few struct reads and
builds the :class:`~jetsdk.table.view.Entry` the view stores (one object per record);
a record with a reply or headers (few have any) or anything unexpected is decoded by
:func:`~jetsdk.codec.record.decode_record`, which raises the codec's error for a malformed
one. Pure.
"""

from __future__ import annotations

import struct
from functools import partial

import attrs

from jetsdk.codec.crc import crc32
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import MAX_KEY_BYTES, MAX_VALUE_BYTES
from jetsdk.codec.record import (
    CRC_COVERED_HEADER,
    HEADER,
    HEADER_SIZE,
    MAX_BODY_BYTES,
    decode_record,
)
from jetsdk.codec.ttl import expiry_ns
from jetsdk.table.view import Entry

__all__ = ["Decoded", "table_rows"]

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_TAIL = struct.Struct(">HHI")
"""After the subject: reply length, header count, value length (when the reply is empty)."""
_new_entry = partial(tuple.__new__, Entry)


@attrs.define(eq=False)
class Decoded:
    """The keyed records of a Fetch response as entries, in offset order."""

    entries: list[Entry]
    """One per keyed record: ``Entry(key, value, offset, partition)``, an empty value for
    a tombstone."""
    expiries: dict[int, int]
    """Index in :attr:`entries` -> expiry (ns since the epoch) of the records with a
    well-formed ``Jet-TTL``."""
    records: int = 0
    """Whole records decoded, keyless ones included."""
    deletes: int = 0
    """Tombstones among :attr:`entries`."""
    next_offset: int | None = None
    """The offset after the last whole record (None: no whole record)."""


def table_rows(raw: bytes | bytearray | memoryview, partition: int) -> Decoded:
    """The entries of the whole records in ``raw`` (a trailing partial record is left for
    the next Fetch).

    Raises:
        CodecError: a record fails its CRC or is malformed.
    """
    buf = raw if isinstance(raw, bytes) else bytes(raw)
    mv = memoryview(buf)
    n = len(buf)
    head = HEADER.unpack_from
    i32 = _I32.unpack_from
    u16 = _U16.unpack_from
    tail = _TAIL.unpack_from
    out = Decoded([], {})
    entries = out.entries
    append = entries.append
    records = deletes = 0
    pos = 0
    last = -1
    while n - pos >= HEADER_SIZE:
        offset, timestamp, _epoch, length, crc = head(buf, pos)
        if length > MAX_BODY_BYTES:
            raise CodecError(f"record length {length} over limit", reason="limit")
        p = pos + HEADER_SIZE
        end = p + length
        if end > n:
            break
        if crc32(mv[p:end], crc32(mv[pos : pos + CRC_COVERED_HEADER], 0)) != crc:
            raise CodecError(f"record CRC mismatch at byte {pos}", reason="crc")
        records += 1
        last = offset
        try:
            flags = buf[p]
            p += 1 if flags == 0 else 17  # producer id and sequence (bit 0)
            (klen,) = i32(buf, p)
            p += 4 + klen if klen > 0 else 4
            p += 2 + u16(buf, p)[0]  # subject
            rlen, count, vlen = tail(buf, p)
            p += 8
            simple = (
                rlen == 0
                and count == 0
                and flags in (0, 1)
                and -1 <= klen <= MAX_KEY_BYTES
                and vlen <= MAX_VALUE_BYTES
                and p + vlen == end
            )
        except struct.error:
            simple = False
        if simple:
            if klen >= 0:
                key_at = pos + HEADER_SIZE + (1 if flags == 0 else 17) + 4
                value = buf[p:end]
                append(_new_entry((buf[key_at : key_at + klen], value, offset, partition)))
                if not vlen:
                    deletes += 1
        else:  # a reply, headers (a TTL?), or a malformed record: the full decoder decides
            record, _ = decode_record(buf, pos, verify=False)
            if record.key is not None:
                value = record.value
                expires = expiry_ns(record.key, value, timestamp, record.headers)
                if expires is not None:
                    out.expiries[len(entries)] = expires
                append(_new_entry((record.key, value, offset, partition)))
                if not value:
                    deletes += 1
        pos = end
    out.records, out.deletes = records, deletes
    if records:
        out.next_offset = last + 1
    return out
