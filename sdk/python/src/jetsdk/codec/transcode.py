"""Envelope to stored record, without decoding the message into objects (the partition
leader's ingest hot path).

A kind 0 envelope and a record body hold the key, headers and value in the same encodings
(``nbytes32``, ``headers``, ``bytes32``; spec/envelope.md, spec/storage.md), in a different
order and with different fields around them. :func:`envelope_record` checks the envelope
exactly as :func:`~jetsdk.codec.envelope.decode_message` does and assembles the record body
from slices of the payload: byte for byte what
:func:`~jetsdk.codec.record.encode_body` writes for the decoded message.

This module is pure: no I/O. Thread-safe.
"""

from __future__ import annotations

import struct

from jetsdk.codec.envelope import (
    COOKIE,
    KEY_POS,
    AckPolicy,
    scan_message,
)
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import MAX_SUBJECT_BYTES

__all__ = ["EnvelopeRecord", "envelope_record", "record_subjects"]

EnvelopeRecord = tuple[bytes, int, str, str, AckPolicy, int | None, int]
"""(record body, message size, ack_inbox, correlation_id, ack_policy, producer_id,
producer_seq). The size is what counts against a stream's max_message_bytes: value + key +
header names (in characters) and values, as the server has always counted it."""

_U16 = struct.Struct(">H")
_PRODUCER = struct.Struct(">QQ")
_NO_PRODUCER = b"\x00"
_HAS_PRODUCER = b"\x01"
_POLICY_BY_VALUE = tuple(AckPolicy)


def record_subjects(subject: str, reply: str) -> bytes:
    """The subject and reply fields of a record body (two ``str16``).

    Raises:
        CodecError: a subject over MAX_SUBJECT_BYTES or not encodable (reason ``"limit"``).
    """
    parts: list[bytes] = []
    for text in (subject, reply):
        try:
            raw = text.encode()
        except UnicodeEncodeError as exc:
            raise CodecError(f"record field out of range: {exc}", reason="limit") from None
        if len(raw) > MAX_SUBJECT_BYTES:
            raise CodecError(f"subject of {len(raw)} bytes exceeds limit", reason="limit")
        parts.append(_U16.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


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
    if headers:
        size += sum(len(n) + len(v) for n, v in headers)
    producer_id: int | None = None
    producer_seq = 0
    if producer_pos < 0:
        body = b"".join(
            (
                _NO_PRODUCER,
                payload[KEY_POS:key_end],
                subjects,
                payload[key_end:headers_end],
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
                payload[key_end:headers_end],
                payload[value_pos:],
            )
        )
    return body, size, inbox, corr, _POLICY_BY_VALUE[policy], producer_id, producer_seq
