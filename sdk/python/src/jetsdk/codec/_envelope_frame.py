"""The envelope's frame (spec/envelope.md, "Layout"): the 12-byte header, sealing a body
with its CRC, opening and checking one; shared by the message (:mod:`jetsdk.codec.envelope`)
and ack (:mod:`jetsdk.codec.envelope_acks`) codecs. Pure, no I/O."""

from __future__ import annotations

import struct

from jetsdk.codec import _wire as w
from jetsdk.codec.crc import crc32
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.errors import CodecError

COOKIE = b"\xffJET"
"""The four bytes every envelope starts with."""
ENVELOPE_VERSION = 1
"""The only version this codec reads and writes."""
KIND_MESSAGE = 0
KIND_ACK = 1
KIND_ACK_BATCH = 2
FLAG_PRODUCER = 0x0001
"""Kind 0 flag: producer_id and producer_seq are present."""

HEADER = struct.Struct(">4sBBHI")  # cookie, version, kind, flags, crc
ENVELOPE_HEADER_SIZE = HEADER.size  # 12
CRC_COVERED = 8
PREFIX = struct.Struct(">4sBBH")
PRODUCER = struct.Struct(">QQ")
ACK_MID = struct.Struct(">Iqq")  # partition, offset, timestamp
ACK_TAIL = struct.Struct(">BH")  # ack_policy, error_code
U32 = w.U32
U16 = w.U16
I32 = w.I32
QQ = struct.Struct(">qq")
ACK_POLICIES = frozenset(int(p) for p in AckPolicy)
POLICY_BY_VALUE = tuple(AckPolicy)  # index by wire value: faster than AckPolicy(value)
MIN_ACK = 2 + ACK_MID.size + 2 + ACK_TAIL.size + 2


def sealer(kind: int, flags: int) -> tuple[bytes, int]:
    prefix = PREFIX.pack(COOKIE, ENVELOPE_VERSION, kind, flags)
    return prefix, crc32(prefix, 0)


# The 8 bytes before the CRC and their CRC, for every prefix the encoders write.
MSG_PLAIN = sealer(KIND_MESSAGE, 0)
MSG_PRODUCER = sealer(KIND_MESSAGE, FLAG_PRODUCER)
ACK_ONE = sealer(KIND_ACK, 0)
ACK_BATCH = sealer(KIND_ACK_BATCH, 0)
POLICY_BYTE = tuple(bytes((int(p),)) for p in AckPolicy)
NO_KEY = b"\xff\xff\xff\xff"
NO_HEADERS = b"\x00\x00"
POLICY_BYTES = frozenset(POLICY_BYTE)
POLICY_KEY = struct.Struct(">Bi")
ACK_SUCCESS_TAIL = {int(p): bytes((int(p), 0, 0, 0, 0)) for p in AckPolicy}
"""ack_policy, error_code 0, empty error_message: the end of every success ack."""


PREFIX_CRCS = {prefix: crc for prefix, crc in (MSG_PLAIN, MSG_PRODUCER, ACK_ONE, ACK_BATCH)}
SLICE_MAX_BYTES = 64 * 1024
"""Payloads up to this size are CRC-checked through a bytes slice, bigger ones through a
memoryview (no copy)."""


def seal(sealer: tuple[bytes, int], body: bytes) -> bytes:
    prefix, crc = sealer
    return b"".join((prefix, U32.pack(crc32(body, crc)), body))


def str16(text: str, what: str, limit: int) -> bytes:
    """``text`` as a str16 (u16 length + UTF-8), refusing more than ``limit`` bytes (as
    :func:`~jetsdk.codec._wire.encode_text`)."""
    raw = w.encode_text(text, what, limit)
    return U16.pack(len(raw)) + raw


def open_envelope(payload: w.Buffer) -> tuple[int, int]:
    """Check cookie, version and CRC; return (kind, flags). The body starts at byte 12."""
    if len(payload) < ENVELOPE_HEADER_SIZE:
        raise CodecError("truncated envelope header", reason="truncated")
    cookie, version, kind, flags, crc = HEADER.unpack_from(payload, 0)
    if cookie != COOKIE:
        raise CodecError("payload does not start with the envelope cookie")
    if version != ENVELOPE_VERSION:
        raise CodecError(f"unsupported envelope version {version}", reason="version")
    if type(payload) is bytes and len(payload) <= SLICE_MAX_BYTES:
        # Small payloads: a bytes slice is cheaper than a memoryview, and the CRC of the
        # 8 bytes before the CRC field is known for every valid prefix.
        prefix = payload[:CRC_COVERED]
        start = PREFIX_CRCS.get(prefix)
        if start is None:
            start = crc32(prefix, 0)
        actual = crc32(payload[ENVELOPE_HEADER_SIZE:], start)
    else:
        mv = memoryview(payload)
        actual = crc32(mv[ENVELOPE_HEADER_SIZE:], crc32(mv[:CRC_COVERED], 0))
    if actual != crc:
        raise CodecError("envelope CRC mismatch", reason="crc")
    return kind, flags
