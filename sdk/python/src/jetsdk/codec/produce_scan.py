"""The message subjects of a Produce request, read without decoding its messages.

The server's authorization reads them on every Produce (spec/security.md §3): a walk over
the message framing (spec/protocol.md, Produce) that copies no key or value.
"""

from __future__ import annotations

from jetsdk.codec import _wire as w
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import MAX_SUBJECT_BYTES
from jetsdk.codec.messages import decode_produce_head

__all__ = ["produce_subjects"]


def produce_subjects(
    body: bytes | bytearray | memoryview,
) -> tuple[str, int, frozenset[str]]:
    """``(stream, partition, subjects)`` of a Produce request body without decoding its
    messages: the distinct message subjects, with ``""`` for messages that use the
    partition's subject (the server's authorization reads this on every Produce).

    Raises:
        CodecError: as :func:`decode_produce_request`.
    """
    stream, partition, _ack, _timeout, _pid, _seq, count, p = decode_produce_head(body)
    n = len(body)
    u16, i32, u32 = w.U16.unpack_from, w.I32.unpack_from, w.U32.unpack_from
    subjects: set[str] = set()
    try:
        for _ in range(count):
            (slen,) = u16(body, p)
            p += 2
            if slen > MAX_SUBJECT_BYTES or p + slen > n:
                raise CodecError("bad or truncated subject", reason="truncated")
            subjects.add(str(body[p : p + slen], "utf-8") if slen else "")
            p += slen
            (klen,) = i32(body, p)
            p += 4
            if klen > 0:
                p += klen
            elif klen < -1:
                raise CodecError(f"bad key length {klen}")
            if body[p : p + 2] == b"\x00\x00":
                p += 2
            else:
                _headers, p = w.get_headers(body, p)
            (vlen,) = u32(body, p)
            p += 4 + vlen
            if p > n:
                raise CodecError("truncated value", reason="truncated")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "produce request") from None
    return stream, partition, frozenset(subjects)
