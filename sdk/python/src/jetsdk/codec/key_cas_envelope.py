"""The envelope and direct record of a Produce request whose one message is a plain
compare-and-set (:func:`~jetsdk.codec.produce_values.lone_key_cas`: no subject, a key, one
``Jet-Expected-Key-Offset`` header, a value), read in one pass: byte for byte what
:func:`~jetsdk.codec.transcode.produce_envelopes` (``split``, with ``records``) gives for
it, without its general decode (headers decoded into a tuple, controls parsed from them,
the record's bytes joined from parsed headers). A leader appends a table's won
compare-and-set from it (``jetserver.broker.produce_cas``)."""

from __future__ import annotations

import struct

from jetsdk.codec._envelope_frame import U32, str16
from jetsdk.codec.crc import crc32
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import MAX_SUBJECT_BYTES
from jetsdk.codec.messages import ProduceHead
from jetsdk.codec.produce_values import lone_key_cas_at
from jetsdk.codec.record_controls import RecordControls
from jetsdk.codec.transcode import (
    _CORR16,
    _HAS_PRODUCER,
    _NO_HEADERS,
    _NO_PRODUCER,
    _POLICY_BY_VALUE,
    _PRODUCER,
    _SEAL_PLAIN,
    _SEAL_PRODUCER,
    SPLIT_VALUE_MIN,
    DirectRecord,
)

__all__ = ["KeyCasEnvelope", "key_cas_envelope"]

KeyCasEnvelope = tuple[bytes, int, int, DirectRecord, bytes]
"""The message's key, the offset its ``Jet-Expected-Key-Offset`` names (-1: absent), its
size (as counted against max_message_bytes), its direct record and its envelope."""
_U32 = U32
_NONE = 0  # AckPolicy.NONE


def key_cas_envelope(
    body: bytes | bytearray | memoryview, head: ProduceHead, ack_inbox: str
) -> KeyCasEnvelope | None:
    """The one message of the Produce request ``body`` (its ``head`` decoded) if it is a
    plain compare-and-set with a value under :data:`SPLIT_VALUE_MIN`, as
    ``produce_envelopes(body, ack_inbox, records, head, split=True)`` builds it (subject
    empty); None for any other request, or a field out of range (that function says
    why)."""
    _stream, _partition, policy, _timeout, producer_id, seq, count, p = head
    if count != 1:
        return None
    found = lone_key_cas_at(body, p)
    if found is None:
        return None
    key, expected, size, key_end, value_pos = found
    end = len(body)
    if end - value_pos - 4 >= SPLIT_VALUE_MIN:
        return None
    if policy == _NONE:
        ack_inbox = ""
    key_pos = p + 2
    try:
        inbox16 = str16(ack_inbox, "ack inbox", MAX_SUBJECT_BYTES)
        if producer_id is None:
            producer, record_prefix, seq = b"", _NO_PRODUCER, 0
            prefix, prefix_crc = _SEAL_PLAIN
        else:
            producer = _PRODUCER.pack(producer_id, seq)
            record_prefix = _HAS_PRODUCER + producer
            prefix, prefix_crc = _SEAL_PRODUCER
        record_policy = _POLICY_BY_VALUE[policy]
    except (CodecError, struct.error, IndexError):
        return None
    env_head = b"".join((bytes((policy,)), body[key_pos:value_pos], inbox16, _CORR16[0], producer))
    value = body[value_pos:end]
    crc = _U32.pack(crc32(value, crc32(env_head, prefix_crc)))
    envelope = b"".join((prefix, crc, env_head, value))
    own = b"".join((body[key_pos:key_end], _NO_HEADERS, value))  # the control removed
    controls = RecordControls((), None, None, "", expected)
    record = DirectRecord(
        own,
        record_prefix,
        0,
        key_end - key_pos,
        len(own),
        size,
        ack_inbox,
        "0",
        record_policy,
        producer_id,
        seq,
        controls,
        -1,
        end - value_pos,
    )
    return key, expected, size, record, envelope
