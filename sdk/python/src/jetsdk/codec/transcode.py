"""Transcoding between wire formats without decoding messages into objects: Produce request
to envelopes (the server's Produce path) and envelope to stored record (the partition
leader's ingest path).

A Produce request message, a kind 0 envelope and a record body hold the key, headers and
value in the same encodings (``nbytes32``, ``headers``, ``bytes32``; spec/protocol.md,
spec/envelope.md, spec/storage.md), in a different order and with different fields around
them, so each output is assembled from slices of the input after the same checks the
reference decoders make; outputs are byte for byte what the reference encoders write.

This module is pure: no I/O. Thread-safe.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from jetsdk.codec import _wire as w
from jetsdk.codec._envelope_frame import str16
from jetsdk.codec.crc import crc32 as _crc32
from jetsdk.codec.crc import crc32_combine as _crc32_combine
from jetsdk.codec.envelope import (
    COOKIE,
    ENVELOPE_VERSION,
    FLAG_PRODUCER,
    KEY_POS,
    KIND_MESSAGE,
    AckPolicy,
    scan_message,
)
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import (
    MAX_CORRELATION_ID_BYTES,
    MAX_KEY_BYTES,
    MAX_SUBJECT_BYTES,
    MAX_VALUE_BYTES,
)
from jetsdk.codec.messages import ProduceHead, decode_produce_head
from jetsdk.codec.record_controls import RecordControls, record_controls

__all__ = [
    "SPLIT_ENVELOPE_MIN",
    "SPLIT_VALUE_MIN",
    "DirectRecord",
    "EnvelopeBytes",
    "EnvelopeRecord",
    "ProducedEnvelope",
    "RecordControls",
    "SplitEnvelope",
    "direct_record",
    "envelope_record",
    "one_message_envelope",
    "produce_envelopes",
    "record_subjects",
]

EnvelopeRecord = tuple[bytes, int, str, str, AckPolicy, int | None, int, RecordControls | None]
"""(record body, message size, ack_inbox, correlation_id, ack_policy, producer_id,
producer_seq, header controls). The size is what counts against a stream's
max_message_bytes: value + key + header names (in characters) and values, as the server has
always counted it. The controls (:mod:`jetsdk.codec.record_controls`) are None when the
message has none; otherwise the body holds the headers they keep."""

_U16 = w.U16
_PRODUCER = struct.Struct(">QQ")
_NO_PRODUCER = b"\x00"
_HAS_PRODUCER = b"\x01"
_POLICY_BY_VALUE = tuple(AckPolicy)
_U32 = w.U32
_I32 = w.I32
_ENVELOPE_PREFIX = struct.Struct(">4sBBH")
_NO_HEADERS = b"\x00\x00"
_new_tuple = tuple.__new__
"""Builds a NamedTuple from a tuple without its Python-level ``__new__`` (hot path)."""
_CORR16_CACHED = 4096
_CORR16 = tuple(_U16.pack(len(str(i))) + str(i).encode() for i in range(_CORR16_CACHED))
"""Correlation ids ``"0"``, ``"1"``, ... as str16, for the first messages of a request."""
_CORR_TEXT = tuple(str(i) for i in range(_CORR16_CACHED))
"""The same as text."""

SPLIT_VALUE_MIN = 64 * 1024
"""The one-message paths (:func:`one_message_envelope`, the key CAS one) leave values from
this size on to :func:`produce_envelopes`."""
SPLIT_ENVELOPE_MIN = 16 * 1024
"""Values from this size on are left out of their envelope's bytes by
:func:`produce_envelopes` with ``split`` (:class:`SplitEnvelope`), their CRC taken once for
the envelope and the record. It was SPLIT_VALUE_MIN: a 16 KiB value was copied into its
envelope and scanned twice (issue 39)."""


class SplitEnvelope:
    """A kind 0 envelope as two parts not joined: its head (everything before the value)
    and its value, a view of the Produce request it came in. Written to a socket as two
    buffers, it is the envelope byte for byte; joined, a large value was copied once more
    (about 0.2 ms per MiB on the dev VM) only to be written out."""

    __slots__ = ("head", "size", "value")

    def __init__(self, head: bytes, value: memoryview) -> None:
        self.head = head
        self.value = value
        self.size = len(head) + len(value)

    def __len__(self) -> int:
        """The envelope's length in bytes."""
        return self.size

    def __bytes__(self) -> bytes:
        """The envelope's bytes, joined."""
        return b"".join((self.head, self.value))


EnvelopeBytes = bytes | SplitEnvelope
"""An envelope as one ``bytes``, or as its two parts (:class:`SplitEnvelope`)."""

ProducedEnvelope = tuple[str, int, EnvelopeBytes | None]
"""One message of a Produce request, ready to publish: (subject, empty for the partition's
subject; message size as counted against max_message_bytes; the envelope, or None if its
producer sequence is out of range)."""


class DirectRecord(NamedTuple):
    """Where one message of a Produce request lies in the request, for a leader that
    appends it directly: :func:`direct_record` gives what :func:`envelope_record` gives
    for its envelope, without parsing the envelope again."""

    request: bytes | bytearray | memoryview
    """The Produce request body."""
    prefix: bytes
    """The record body's producer field (absent, or present with id and sequence)."""
    key_pos: int
    """Start of the key (``nbytes32``) in ``request``; headers and value follow it."""
    key_end: int
    """End of the key."""
    end: int
    """End of the value."""
    size: int
    """Message size as counted against max_message_bytes."""
    inbox: str
    """Ack inbox (empty with policy NONE)."""
    corr: str
    """Correlation id."""
    policy: AckPolicy
    """The request's ack policy (as in the envelope, even where the inbox is empty)."""
    producer_id: int | None
    """Producer id (None without one)."""
    producer_seq: int
    """Producer sequence (0 without a producer)."""
    controls: RecordControls | None
    """The message's header controls, or None. With controls, ``request`` is not the
    request but key, kept headers and value alone (the controls removed)."""
    value_crc: int
    """CRC-32 of the value field (its length and bytes: the last :attr:`value_len` bytes
    up to :attr:`end`), computed once for a large value with ``split``; -1 if not."""
    value_len: int
    """Bytes of the value field (4 and the value's)."""


def direct_record(record: DirectRecord, subjects: bytes) -> EnvelopeRecord:
    """What :func:`envelope_record` returns for the message's envelope, from its place in
    the request (``subjects`` as for :func:`envelope_record`)."""
    request, prefix, key_pos, key_end, end, size, inbox, corr, policy, producer_id, seq, ctl = (
        record[:12]
    )
    # The value by a view: the join is its one copy (a bytes slice would add another).
    tail = memoryview(request)[key_end:end]
    body = b"".join((prefix, request[key_pos:key_end], subjects, tail))
    return body, size, inbox, corr, policy, producer_id, seq, ctl


def _envelope_sealer(flags: int) -> tuple[bytes, int]:
    prefix = _ENVELOPE_PREFIX.pack(COOKIE, ENVELOPE_VERSION, KIND_MESSAGE, flags)
    return prefix, _crc32(prefix, 0)


_SEAL_PLAIN = _envelope_sealer(0)
_SEAL_PRODUCER = _envelope_sealer(FLAG_PRODUCER)
_NONE = int(AckPolicy.NONE)  # (a plain int: an enum member's look-up is ~170 ns on 3.11)


def produce_envelopes(
    body: bytes | bytearray | memoryview,
    ack_inbox: str,
    records: list[DirectRecord | None] | None = None,
    head: ProduceHead | None = None,
    *,
    split: bool = False,
) -> tuple[ProduceHead, list[ProducedEnvelope]]:
    """Decode a Produce request body and build the kind 0 envelope of every message.

    Message ``i`` gets correlation id ``str(i)``, the request's ack policy, ``ack_inbox``
    (empty with policy NONE, whatever is passed) and, with a producer id, sequence
    ``base_seq + i``: each envelope is byte for byte what
    :class:`~jetsdk.codec.envelope.MessageEncoder` writes for the message
    :func:`~jetsdk.codec.messages.decode_produce_request` decodes. With ``records``, each
    message's :class:`DirectRecord` is appended to it too (None where the envelope is).
    ``head``: the body's :func:`~jetsdk.codec.messages.decode_produce_head`, if the caller
    has it already. ``split``: a value of :data:`SPLIT_ENVELOPE_MIN` bytes or more is not
    copied into its envelope, which comes as a :class:`SplitEnvelope` (its head and a view
    of ``body``: the caller keeps ``body`` unchanged while it holds them).

    Raises:
        CodecError: the body does not decode (as ``decode_produce_request``), or the ack
            inbox is over its limit.
    """
    if head is None:
        head = decode_produce_head(body)
    _stream, _partition, policy, _timeout, producer_id, base_seq, count, p = head
    if policy == _NONE:
        ack_inbox = ""
    inbox16 = str16(ack_inbox, "ack inbox", MAX_SUBJECT_BYTES)  # as MessageEncoder's
    record_policy = _POLICY_BY_VALUE[policy]
    policy_byte = bytes((int(policy),))
    prefix, prefix_crc = _SEAL_PLAIN if producer_id is None else _SEAL_PRODUCER
    pack_u32 = _U32.pack
    crc32 = _crc32
    combine = _crc32_combine
    new_tuple = _new_tuple
    u16 = _U16.unpack_from
    u32 = _U32.unpack_from
    i32 = _I32.unpack_from
    n = len(body)
    view = memoryview(body)
    out: list[ProducedEnvelope] = []
    append = out.append
    try:
        for i in range(count):
            (slen,) = u16(body, p)
            p += 2
            if slen:
                if slen > MAX_SUBJECT_BYTES:
                    raise CodecError(f"subject of {slen} bytes exceeds limit", reason="limit")
                end = p + slen
                if end > n:
                    raise CodecError("truncated subject", reason="truncated")
                subject = str(body[p:end], "utf-8")  # bytes, bytearray or memoryview
                p = end
            else:
                subject = ""
            key_pos = p
            (klen,) = i32(body, p)
            p += 4
            size = 0
            if klen != -1:
                if klen < 0:
                    raise CodecError(f"bad key length {klen}")
                if klen > MAX_KEY_BYTES:
                    raise CodecError(f"key of {klen} bytes exceeds limit", reason="limit")
                p += klen
                if p > n:
                    raise CodecError("truncated key", reason="truncated")
                size = klen
            key_end = p
            controls = None
            if body[p : p + 2] == _NO_HEADERS:
                p += 2
            else:
                headers, p = w.get_headers(body, p)
                size += sum(len(name) + len(value) for name, value in headers)
                controls = record_controls(headers)
            value_pos = p
            (vlen,) = u32(body, p)
            p += 4
            if vlen > MAX_VALUE_BYTES:
                raise CodecError(f"value of {vlen} bytes exceeds limit", reason="limit")
            end = p + vlen
            if end > n:
                raise CodecError("truncated value", reason="truncated")
            p = end
            size += vlen
            if i < _CORR16_CACHED:
                corr16, corr = _CORR16[i], _CORR_TEXT[i]
            else:
                corr16, corr = _str16_index(i), str(i)
            if producer_id is None:
                env_head = b"".join((policy_byte, body[key_pos:value_pos], inbox16, corr16))
                record_prefix, seq = _NO_PRODUCER, 0
            else:
                seq = base_seq + i
                try:
                    producer = _PRODUCER.pack(producer_id, seq)
                except struct.error:
                    append((subject, size, None))
                    if records is not None:
                        records.append(None)
                    continue
                env_head = b"".join(
                    (policy_byte, body[key_pos:value_pos], inbox16, corr16, producer)
                )
                record_prefix = _HAS_PRODUCER + producer
            # The envelope is joined once around the value, a view of the request; its CRC
            # runs over the two parts as they are joined. A large value's own CRC is taken
            # once: the envelope's and its record's follow from it (crc32_combine).
            value = view[value_pos:end]
            value_crc = -1
            if split and vlen >= SPLIT_ENVELOPE_MIN and combine is not None:
                value_crc = crc32(value, 0)
                crc = pack_u32(combine(crc32(env_head, prefix_crc), value_crc, len(value)))
            else:
                crc = pack_u32(crc32(value, crc32(env_head, prefix_crc)))
            if records is not None:
                if controls is None:
                    where = (body, record_prefix, key_pos, key_end, end, size, ack_inbox, corr)
                else:  # the record keeps the headers the controls keep: its own bytes
                    own = _without_controls(body[key_pos:key_end], controls, body[value_pos:end])
                    klen_end = key_end - key_pos
                    where = (own, record_prefix, 0, klen_end, len(own), size, ack_inbox, corr)
                records.append(
                    new_tuple(
                        DirectRecord,
                        (
                            *where,
                            record_policy,
                            producer_id,
                            seq,
                            controls,
                            value_crc,
                            end - value_pos,
                        ),
                    )
                )
            if split and vlen >= SPLIT_ENVELOPE_MIN:
                append((subject, size, SplitEnvelope(b"".join((prefix, crc, env_head)), value)))
            else:
                append((subject, size, b"".join((prefix, crc, env_head, value))))
        w.check_end(body, p, "produce request")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "produce request") from None
    return head, out


OneMessage = tuple[str, int, int, str, int, bytes, DirectRecord]
"""A Produce request of one message (:func:`one_message_envelope`): stream, partition,
timeout_ms, subject, message size, envelope and record."""
_ONE_HEAD = struct.Struct(">IBIBI")  # partition, ack_policy, timeout_ms, flags, count
_LEADER = int(AckPolicy.LEADER)
_ALL = int(AckPolicy.ALL)
_POLICIES = {
    _LEADER: (AckPolicy.LEADER, bytes((_LEADER,))),
    _NONE: (AckPolicy.NONE, bytes((_NONE,))),
    _ALL: (AckPolicy.ALL, bytes((_ALL,))),
}
"""The ack policies :func:`one_message_envelope` takes: the record's and the envelope's."""


def one_message_envelope(body: bytes, ack_inbox: str) -> OneMessage | None:
    """:func:`~jetsdk.codec.messages.decode_produce_head` and :func:`produce_envelopes`
    (with ``records``) of the common Produce request in one pass: one message, any ack
    policy (NONE: no ack inbox, whatever is passed), no flags (no producer id, no values
    asked for), no header controls (headers that are not
    :mod:`~jetsdk.codec.record_controls`), a value under :data:`SPLIT_VALUE_MIN`; its
    envelope and record byte for byte theirs. None for any other request, or a body that
    does not decode (the general functions say why)."""
    n = len(body)
    try:
        (slen,) = _U16.unpack_from(body, 0)
        p = 2 + slen
        partition, ack, timeout_ms, flags, count = _ONE_HEAD.unpack_from(body, p)
        policy = _POLICIES.get(ack)
        if policy is None or flags or count != 1 or slen > w.MAX_STR16_BYTES:
            return None
        stream = str(body[2:p], "utf-8")
        p += _ONE_HEAD.size
        (slen,) = _U16.unpack_from(body, p)
        p += 2
        subject = ""
        if slen:
            if slen > MAX_SUBJECT_BYTES:
                return None
            subject = str(body[p : p + slen], "utf-8")
            p += slen
        key_pos = p
        (klen,) = _I32.unpack_from(body, p)
        p += 4
        size = 0
        if klen != -1:
            if not 0 <= klen <= MAX_KEY_BYTES:
                return None
            p += klen
            size = klen
        key_end = p
        if body[p : p + 2] == _NO_HEADERS:
            value_pos = p + 2
        else:  # as produce_envelopes: the general path takes a message with controls
            headers, value_pos = w.get_headers(body, p)
            if record_controls(headers) is not None:
                return None
            size += sum(len(name) + len(value) for name, value in headers)
        (vlen,) = _U32.unpack_from(body, value_pos)
        end = value_pos + 4 + vlen
        if end != n or vlen >= SPLIT_VALUE_MIN:
            return None
        if ack == _NONE:
            ack_inbox = ""
        inbox16 = str16(ack_inbox, "ack inbox", MAX_SUBJECT_BYTES)
    except (struct.error, UnicodeDecodeError, CodecError):
        return None
    env_head = b"".join((policy[1], body[key_pos:value_pos], inbox16, _CORR16[0]))
    value = body[value_pos:end]
    prefix, prefix_crc = _SEAL_PLAIN
    crc = _U32.pack(_crc32(value, _crc32(env_head, prefix_crc)))
    size += vlen
    record = _new_tuple(
        DirectRecord,
        (
            body,
            _NO_PRODUCER,
            key_pos,
            key_end,
            end,
            size,
            ack_inbox,
            "0",
            policy[0],
            None,
            0,
            None,
            -1,
            end - value_pos,
        ),
    )
    envelope = b"".join((prefix, crc, env_head, value))
    return stream, partition, timeout_ms, subject, size, envelope, record


def _without_controls(
    key: bytes | bytearray | memoryview,
    controls: RecordControls,
    value: bytes | bytearray | memoryview,
) -> bytes:
    """``key``, the headers ``controls`` keeps and ``value``, as a record body holds them."""
    parts: list[bytes] = []
    w.put_headers(parts, controls.headers)
    return b"".join((key, *parts, value))


def _str16_index(i: int) -> bytes:
    raw = str(i).encode()
    if len(raw) > MAX_CORRELATION_ID_BYTES:  # pragma: no cover - needs 10**1024 messages
        raise CodecError("correlation id over its limit", reason="limit")
    return _U16.pack(len(raw)) + raw


def record_subjects(subject: str, reply: str) -> bytes:
    """The subject and reply fields of a record body (two ``str16``).

    Raises:
        CodecError: a subject over MAX_SUBJECT_BYTES or not encodable (reason ``"limit"``).
    """
    return str16(subject, "subject", MAX_SUBJECT_BYTES) + str16(reply, "reply", MAX_SUBJECT_BYTES)


def envelope_record(
    payload: bytes | bytearray | memoryview, subjects: bytes
) -> EnvelopeRecord | None:
    """The record for a NATS payload that is a valid kind 0 envelope; None for a plain one.

    Args:
        payload: the NATS message payload.
        subjects: the record's subject and reply fields, from :func:`record_subjects`.

    Returns:
        None exactly when :func:`~jetsdk.codec.envelope.parse_nats_payload` returns None;
        otherwise the record body (as ``encode_body`` would write it for the decoded
        message, subject and reply) with the fields the leader needs for acks, limits and
        deduplication. Never raises.
    """
    if payload[:4] != COOKIE:
        return None
    if not isinstance(payload, bytes):
        payload = bytes(payload)
    try:
        policy, klen, headers, headers_end, inbox, corr, producer_pos, value_pos = scan_message(
            payload
        )
    except CodecError:
        return None
    key_end = KEY_POS + 4 + (klen if klen > 0 else 0)
    value_len = len(payload) - value_pos - 4
    size = value_len + (klen if klen > 0 else 0)
    controls = None
    if headers:
        size += sum(len(n) + len(v) for n, v in headers)
        controls = record_controls(headers)
        if controls is not None:
            kept: list[bytes] = []
            w.put_headers(kept, controls.headers)
            headers_bytes = b"".join(kept)
    producer_id: int | None = None
    producer_seq = 0
    if producer_pos < 0:
        body = b"".join(
            (
                _NO_PRODUCER,
                payload[KEY_POS:key_end],
                subjects,
                payload[key_end:headers_end] if controls is None else headers_bytes,
                payload[value_pos:],
            )
        )
    else:
        producer_id, producer_seq = _PRODUCER.unpack_from(payload, producer_pos)
        body = b"".join(
            (
                _HAS_PRODUCER,
                payload[producer_pos : producer_pos + 16],
                payload[KEY_POS:key_end],
                subjects,
                payload[key_end:headers_end] if controls is None else headers_bytes,
                payload[value_pos:],
            )
        )
    return body, size, inbox, corr, _POLICY_BY_VALUE[policy], producer_id, producer_seq, controls
