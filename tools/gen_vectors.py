"""Generate the byte-exact test vectors in spec/vectors/ (record, envelope, protocol).

Usage (from the repository root)::

    python tools/gen_vectors.py           # (re)write spec/vectors/*.json
    python tools/gen_vectors.py --check   # exit 1 if a committed file differs

Output is deterministic: fixed inputs, no clock, no randomness. Each file is a JSON object::

    {"format": ..., "doc": ..., "cases": [{"name", "type", "fields", "hex"}],
     "invalid": [{"name", "type", "hex", "error_reason"}], ...}

Field conventions (spec/README.md, "Test vectors"): byte strings are lowercase hex in fields
whose name ends in ``_hex`` (``null`` for an absent key); headers are ``[name, value_hex]``
pairs; integers are exact (timestamps exceed 2**53: parse them as 64-bit integers).
"""

from __future__ import annotations

import argparse
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import orjson

from jetsdk.codec import envelope as env
from jetsdk.codec import epoch_messages as epoch_msg
from jetsdk.codec import fetch_messages as fetch_msg
from jetsdk.codec import fetch_stream as fs
from jetsdk.codec import frames as fr
from jetsdk.codec import messages as msg
from jetsdk.codec import produce_many as pm
from jetsdk.codec import produce_values as pv
from jetsdk.codec import replica_fetch as rf
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.json_ack import encode_json_ack
from jetsdk.codec.nats_headers import parse_header_block
from jetsdk.codec.record import Record, encode_body, encode_record, frame_body

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "spec" / "vectors"

T0 = 1_700_000_000_000_000_000
"""2023-11-14T22:13:20Z in ns: the base timestamp of every vector."""

Fields = dict[str, Any]
Case = dict[str, Any]


def bad(name: str, type_: str, hex_: str, reason: str) -> Case:
    """An invalid case: decoding ``hex_`` with the ``type_`` decoder fails with ``reason``."""
    return {"name": name, "type": type_, "hex": hex_, "error_reason": reason}


def hx(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def headers_fields(headers: tuple[tuple[str, bytes], ...]) -> list[list[str]]:
    return [[name, value.hex()] for name, value in headers]


# --------------------------------------------------------------------------------------
# records


def record_fields(r: Record) -> Fields:
    return {
        "offset": r.offset,
        "timestamp": r.timestamp,
        "leader_epoch": r.leader_epoch,
        "key_hex": hx(r.key),
        "value_hex": r.value.hex(),
        "subject": r.subject,
        "reply": r.reply,
        "headers": headers_fields(r.headers),
        "producer_id": r.producer_id,
        "producer_seq": r.producer_seq,
    }


RECORDS: list[tuple[str, Record]] = [
    ("keyless", Record(offset=0, timestamp=T0, leader_epoch=0, value=b"hello", subject="orders")),
    (
        "keyed",
        Record(
            offset=1,
            timestamp=T0 + 1000,
            leader_epoch=1,
            value=b'{"amount":42}',
            key=b"order-17",
            subject="orders",
        ),
    ),
    (
        "empty_key_is_not_null",
        Record(offset=2, timestamp=T0 + 2000, leader_epoch=1, value=b"v", key=b"", subject="a"),
    ),
    (
        "tombstone",
        Record(offset=3, timestamp=T0 + 3000, leader_epoch=1, value=b"", key=b"order-17"),
    ),
    (
        "headers_repeated_names",
        Record(
            offset=4,
            timestamp=T0 + 4000,
            leader_epoch=2,
            value=b"\x00\x01\x02",
            key=b"k",
            subject="orders.1",
            reply="_INBOX.abc",
            headers=(("trace", b"t-1"), ("tag", b"a"), ("tag", b""), ("bin", b"\xff\x00")),
        ),
    ),
    (
        "producer_id",
        Record(
            offset=5,
            timestamp=T0 + 5000,
            leader_epoch=3,
            value=b"idempotent",
            key=b"k",
            subject="orders",
            producer_id=0x1234,
            producer_seq=7,
        ),
    ),
    (
        "producer_id_max",
        Record(
            offset=2**63 - 1,
            timestamp=-1,
            leader_epoch=2**32 - 1,
            value=b"",
            producer_id=2**64 - 1,
            producer_seq=2**64 - 1,
        ),
    ),
    (
        "unicode_subject_and_header",
        Record(
            offset=6,
            timestamp=T0 + 6000,
            leader_epoch=0,
            value="héllo wörld".encode(),
            key="ключ".encode(),
            subject="zakázky.新しい",
            headers=(("名前", "値".encode()),),
        ),
    ),
]


def _corrupt_record(body: bytes, offset: int = 9) -> str:
    """A record whose CRC is valid but whose body is malformed."""
    return frame_body(offset, T0, 0, body).hex()


def record_file() -> dict[str, Any]:
    cases = [
        {"name": name, "type": "record", "fields": record_fields(r), "hex": encode_record(r).hex()}
        for name, r in RECORDS
    ]
    good = encode_record(RECORDS[1][1])
    flipped = bytearray(good)
    flipped[-1] ^= 0x01
    body = encode_body(b"v", key=b"k", subject="s")
    invalid = [
        {"name": "empty", "hex": "", "error_reason": "truncated"},
        {"name": "truncated_header", "hex": good[:27].hex(), "error_reason": "truncated"},
        {"name": "truncated_body", "hex": good[:-1].hex(), "error_reason": "truncated"},
        {"name": "value_bit_flip", "hex": bytes(flipped).hex(), "error_reason": "crc"},
        {
            "name": "unknown_attributes",
            "hex": _corrupt_record(b"\x02" + body[1:]),
            "error_reason": "malformed",
        },
        {
            "name": "negative_key_length",
            "hex": _corrupt_record(b"\x00\xff\xff\xff\xfe" + body[5:]),
            "error_reason": "malformed",
        },
        {
            "name": "trailing_byte_in_body",
            "hex": _corrupt_record(body + b"\x00"),
            "error_reason": "malformed",
        },
        {
            "name": "body_shorter_than_fields",
            "hex": _corrupt_record(body[:-1]),
            "error_reason": "malformed",
        },
        {
            "name": "subject_not_utf8",
            "hex": _corrupt_record(
                encode_body(b"v", subject="s").replace(b"\x00\x01s", b"\x00\x01\xff")
            ),
            "error_reason": "malformed",
        },
    ]
    for case in invalid:
        case["type"] = "record"
    return {
        "format": "record",
        "doc": "spec/storage.md (Record). decode: one record at byte 0 of hex, CRC verified.",
        "cases": cases,
        "invalid": invalid,
    }


# --------------------------------------------------------------------------------------
# envelope


def message_fields(m: env.EnvelopeMessage) -> Fields:
    return {
        "value_hex": m.value.hex(),
        "key_hex": hx(m.key),
        "headers": headers_fields(m.headers),
        "ack_inbox": m.ack_inbox,
        "correlation_id": m.correlation_id,
        "ack_policy": int(m.ack_policy),
        "producer_id": m.producer_id,
        "producer_seq": m.producer_seq,
    }


def ack_fields(a: env.EnvelopeAck) -> Fields:
    return {
        "stream": a.stream,
        "partition": a.partition,
        "offset": a.offset,
        "timestamp": a.timestamp,
        "correlation_id": a.correlation_id,
        "ack_policy": int(a.ack_policy),
        "error_code": a.error_code,
        "error_message": a.error_message,
    }


MESSAGES: list[tuple[str, env.EnvelopeMessage]] = [
    ("message_minimal", env.EnvelopeMessage(value=b"hi")),
    (
        "message_full",
        env.EnvelopeMessage(
            value=b'{"amount":42}',
            key=b"order-17",
            headers=(("trace", b"t-1"), ("tag", b"a"), ("tag", b"b")),
            ack_inbox="_INBOX.q8Zt3",
            correlation_id="req-1",
            ack_policy=AckPolicy.ALL,
            producer_id=0x1234,
            producer_seq=7,
        ),
    ),
    (
        "message_keyed_leader_ack",
        env.EnvelopeMessage(
            value=b"",
            key=b"order-17",
            ack_inbox="_INBOX.q8Zt3",
            correlation_id="42",
            ack_policy=AckPolicy.LEADER,
        ),
    ),
]

ACK_OK = env.EnvelopeAck(
    stream="orders",
    partition=0,
    offset=17,
    timestamp=T0,
    correlation_id="req-1",
    ack_policy=AckPolicy.LEADER,
)
ACK_ERR = env.EnvelopeAck(
    stream="orders",
    partition=2,
    offset=-1,
    timestamp=-1,
    correlation_id="req-2",
    ack_policy=AckPolicy.ALL,
    error_code=int(ErrorCode.NOT_ENOUGH_REPLICAS),
    error_message="isr 1 below min_isr 2",
)
ACK_PLAIN = env.EnvelopeAck(
    stream="orders",
    partition=0,
    offset=18,
    timestamp=T0 + 1,
    correlation_id="",
    ack_policy=AckPolicy.LEADER,
)


def envelope_file() -> dict[str, Any]:
    cases: list[Case] = [
        {
            "name": n,
            "type": "message",
            "fields": message_fields(m),
            "hex": env.encode_message(m).hex(),
        }
        for n, m in MESSAGES
    ]
    for name, acks, raw in (
        ("ack", [ACK_OK], env.encode_ack(ACK_OK)),
        ("ack_error", [ACK_ERR], env.encode_ack(ACK_ERR)),
        ("ack_for_plain_request", [ACK_PLAIN], env.encode_ack(ACK_PLAIN)),
        ("ack_batch", [ACK_OK, ACK_ERR, ACK_PLAIN], env.encode_acks([ACK_OK, ACK_ERR, ACK_PLAIN])),
    ):
        kind = "ack" if raw[5] == env.KIND_ACK else "ack_batch"
        cases.append(
            {
                "name": name,
                "type": kind,
                "fields": {"acks": [ack_fields(a) for a in acks]},
                "hex": raw.hex(),
            }
        )

    full = env.encode_message(MESSAGES[1][1])
    ack = env.encode_ack(ACK_OK)

    def reseal(
        raw: bytes, version: int | None = None, kind: int | None = None, flags: int | None = None
    ) -> bytes:
        """Change header fields and recompute the CRC so only that change is wrong."""
        b = bytearray(raw)
        if version is not None:
            b[4] = version
        if kind is not None:
            b[5] = kind
        if flags is not None:
            b[6:8] = flags.to_bytes(2, "big")
        crc = zlib.crc32(bytes(b[12:]), zlib.crc32(bytes(b[:8])))
        b[8:12] = crc.to_bytes(4, "big")
        return bytes(b)

    flipped = bytearray(full)
    flipped[-1] ^= 0x20
    invalid: list[Case] = [
        bad("message_truncated_header", "message", full[:11].hex(), "truncated"),
        bad("message_truncated_value", "message", reseal(full[:-1]).hex(), "truncated"),
        bad("message_bad_crc", "message", bytes(flipped).hex(), "crc"),
        bad("message_version_2", "message", reseal(full, version=2).hex(), "version"),
        bad("message_unknown_flag", "message", reseal(full, flags=0x0003).hex(), "malformed"),
        bad("message_trailing_byte", "message", reseal(full + b"\x00").hex(), "malformed"),
        bad(
            "message_unknown_ack_policy",
            "message",
            reseal(full[:12] + b"\x03" + full[13:]).hex(),
            "malformed",
        ),
        bad("message_is_an_ack", "message", ack.hex(), "malformed"),
        bad("ack_is_a_message", "ack", full.hex(), "malformed"),
        bad("ack_bad_crc", "ack", (ack[:-1] + bytes([ack[-1] ^ 1])).hex(), "crc"),
        bad("ack_truncated", "ack", reseal(ack[:-1]).hex(), "truncated"),
        bad("ack_with_flags", "ack", reseal(ack, flags=1).hex(), "malformed"),
        bad(
            "ack_batch_empty",
            "ack_batch",
            reseal(ack[:5] + b"\x02" + ack[6:12] + b"\x00\x00").hex(),
            "malformed",
        ),
        bad("unknown_kind", "ack", reseal(ack, kind=3).hex(), "malformed"),
    ]
    plain = [
        {"name": "text", "hex": b"hello world".hex()},
        {"name": "empty", "hex": ""},
        {"name": "cookie_only", "hex": env.COOKIE.hex()},
        {"name": "json", "hex": b'{"cookie": false}'.hex()},
    ] + [
        {"name": f"cookie_but_{c['name']}", "hex": c["hex"]}
        for c in invalid
        if c["type"] == "message" and c["name"] != "message_truncated_header"
    ]
    json_acks = [
        {
            "name": name,
            "fields": {
                "stream": "orders",
                "partition": partition,
                "offset": offset,
                "error_code": code,
                "error_message": text,
            },
            "text": encode_json_ack("orders", partition, offset, code, text).decode(),
        }
        for name, partition, offset, code, text in (
            ("json_ack", 0, 18, 0, ""),
            ("json_ack_duplicate", 1, 7, int(ErrorCode.DUPLICATE_SEQUENCE), ""),
            (
                "json_ack_error",
                2,
                -1,
                int(ErrorCode.MESSAGE_TOO_LARGE),
                "message of 2000 bytes exceeds max_message_bytes 1000",
            ),
            (
                "json_ack_key_offset",
                0,
                17,
                int(ErrorCode.WRONG_EXPECTED_KEY_OFFSET),
                "key b'user-1' is at offset 17, not 12",
            ),
        )
    ]
    header_blocks = [
        {
            "name": name,
            "block_hex": block.hex(),
            "headers": headers_fields(parse_header_block(block)),
        }
        for name, block in (
            (
                "repeated_names_and_case",
                b"NATS/1.0\r\nX-Multi: a\r\nX-Multi: b\r\nx-multi: c\r\n\r\n",
            ),
            (
                "empty_and_binary_values",
                b"NATS/1.0\r\nEmpty:\r\nRaw: \xff\xfe bytes\r\nSpaced:  two\r\n\r\n",
            ),
            ("inline_status_line", b"NATS/1.0 503\r\nKept: yes\r\n\r\n"),
            ("line_without_colon_skipped", b"NATS/1.0\r\nno colon\r\nA:b\r\n\r\n"),
        )
    ]
    return {
        "format": "envelope",
        "doc": "spec/envelope.md. type message: decode_message; ack and ack_batch: decode_acks "
        "(fields.acks lists the acks in order). plain: payloads parse_nats_payload must treat "
        "as plain messages (stored as they are). json_acks: the JSON ack of a plain request "
        "(spec/acks.md), byte for byte (text, UTF-8). nats_header_blocks: a NATS header "
        "block and the headers a plain message stores from it (parse_header_block).",
        "cases": cases,
        "invalid": invalid,
        "plain": plain,
        "json_acks": json_acks,
        "nats_header_blocks": header_blocks,
    }


# --------------------------------------------------------------------------------------
# protocol


def produce_request_fields(r: msg.ProduceRequest) -> Fields:
    current = {"current_values": True} if r.current_values else {}
    if r.latest_values:
        current["latest_values"] = True
    return {
        **current,
        "stream": r.stream,
        "partition": r.partition,
        "ack_policy": int(r.ack_policy),
        "timeout_ms": r.timeout_ms,
        "producer_id": r.producer_id,
        "base_seq": r.base_seq,
        "messages": [
            {
                "subject": m.subject,
                "key_hex": hx(m.key),
                "headers": headers_fields(m.headers),
                "value_hex": m.value.hex(),
            }
            for m in r.messages
        ],
    }


def frame_case(
    name: str, api: fr.Api, cid: int, flags: int, body_type: str, body_fields: Any, body: bytes
) -> Case:
    return {
        "name": name,
        "type": "frame",
        "fields": {
            "api": int(api),
            "flags": flags,
            "correlation_id": cid,
            "body_type": body_type,
            "body": body_fields,
        },
        "hex": fr.encode_frame(api, cid, body, flags=flags).hex(),
    }


def json_case(name: str, api: fr.Api, cid: int, flags: int, obj: dict[str, Any]) -> Case:
    return frame_case(name, api, cid, flags, "json", obj, msg.encode_json(obj))


RESP = fr.FLAG_RESPONSE
MORE = fr.FLAG_RESPONSE | fr.FLAG_MORE
ERR = fr.FLAG_RESPONSE | fr.FLAG_ERROR


def error_case(
    name: str, api: fr.Api, cid: int, code: ErrorCode, message: str, details: dict[str, Any]
) -> Case:
    """An error answer: its JSON fields and its bytes from one code, message and details."""
    fields = {"code": int(code), "name": code.name, "message": message, "details": details}
    return frame_case(
        name, api, cid, ERR, "error", fields, msg.encode_error(code, message, details)
    )


def produce_results_fields(results: list[msg.ProduceResult]) -> list[Fields]:
    return [
        {"error_code": r.error_code, "offset": r.offset, "timestamp": r.timestamp} for r in results
    ]


def produce_request_case(name: str, cid: int, req: msg.ProduceRequest) -> Case:
    fields = produce_request_fields(req)
    body = msg.encode_produce_request(req)
    return frame_case(name, fr.Api.PRODUCE, cid, 0, "produce_request", fields, body)


def produce_response_case(name: str, cid: int, results: list[msg.ProduceResult]) -> Case:
    fields = {"results": produce_results_fields(results)}
    body = msg.encode_produce_response(results)
    return frame_case(name, fr.Api.PRODUCE, cid, RESP, "produce_response", fields, body)


STREAM_INFO: dict[str, Any] = {
    "name": "orders",
    "subject": "orders",
    "group": None,
    "partitions": [
        {
            "partition": 0,
            "subject": "orders",
            "leader": "s1",
            "replicas": ["s1"],
            "isr": ["s1"],
            "leader_epoch": 1,
        }
    ],
    "replication_factor": 1,
    "compact": False,
    "config": {"retention_max_age_s": None},
    "created_ns": T0,
}

PRODUCE_REQ = msg.ProduceRequest(
    stream="orders",
    partition=1,
    ack_policy=AckPolicy.ALL,
    timeout_ms=5000,
    messages=(
        msg.ProduceMessage(value=b"hello", key=b"k1", headers=(("trace", b"t-1"),)),
        msg.ProduceMessage(value=b"", key=b"k2", subject="orders.1"),
        msg.ProduceMessage(value=b"plain"),
    ),
    producer_id=0x1234,
    base_seq=100,
)
PRODUCE_REQ_MIN = msg.ProduceRequest(
    stream="s",
    partition=0,
    ack_policy=AckPolicy.NONE,
    timeout_ms=0,
    messages=(msg.ProduceMessage(value=b"x"),),
)
PRODUCE_REQ_CAS = msg.ProduceRequest(
    stream="prices",
    partition=0,
    ack_policy=AckPolicy.ALL,
    timeout_ms=5000,
    messages=(
        msg.ProduceMessage(b"190.1", b"AAPL", (("Jet-Expected-Key-Offset", b"12"),)),
        msg.ProduceMessage(b"1.09", b"EURUSD", (("Jet-Expected-Key-Offset", b"3"),)),
        msg.ProduceMessage(b"410.0", b"MSFT", (("Jet-Expected-Key-Offset", b"-1"),)),
    ),
    producer_id=0x1234,
    base_seq=7,
    current_values=True,
)
"""Compare-and-set writes with the current-values flag (spec/protocol.md §6)."""
PRODUCE_RESULTS_CAS = [
    msg.ProduceResult(int(ErrorCode.WRONG_EXPECTED_KEY_OFFSET), 17, -1, b"189.9"),
    msg.ProduceResult(int(ErrorCode.WRONG_EXPECTED_KEY_OFFSET), -1, -1, None),
    msg.ProduceResult(0, 18, T0),
]
"""Its answer: AAPL is at offset 17, not 12 (the value there follows); EURUSD has no live
record (deleted: offset -1, no value); MSFT was absent and is stored at 18."""
PRODUCE_REQ_LATEST = attrs.evolve(PRODUCE_REQ_CAS, latest_values=True)
"""The same with the latest-values flag too (spec/protocol.md §6, bit 3)."""
PRODUCE_RESULTS_LATEST = [
    msg.ProduceResult(int(ErrorCode.WRONG_EXPECTED_KEY_OFFSET), 17, -1, b"189.9"),
    msg.ProduceResult(0, 18, T0, b"1.10", 21),
    msg.ProduceResult(0, 19, T0),
]
"""Its answer: AAPL refused as before; EURUSD stored at 18, and a racing write of it built
on that one is at 21 (its value follows); MSFT stored at 19, no later record (-1)."""
PRODUCE_RESULTS = [
    msg.ProduceResult(error_code=0, offset=17, timestamp=T0),
    msg.ProduceResult(error_code=0, offset=18, timestamp=T0),
    msg.ProduceResult(error_code=int(ErrorCode.TIMEOUT), offset=-1, timestamp=-1),
]
PRODUCE_RESULTS_TOO_LARGE = [
    msg.ProduceResult(error_code=0, offset=19, timestamp=T0),
    msg.ProduceResult(error_code=int(ErrorCode.MESSAGE_TOO_LARGE), offset=-1, timestamp=-1),
]
"""A Produce answer whose second message was over the stream's max_message_bytes (the
first was stored; spec/protocol.md, "Stream settings")."""
FETCH_REQ = fetch_msg.FetchRequest(
    stream="orders", partition=0, offset=17, max_bytes=1048576, max_wait_ms=500
)
FETCH_STREAM_REQ = fs.FetchStreamRequest(
    stream="orders", partition=0, offset=17, max_bytes=65536, max_wait_ms=5000, max_responses=64
)
"""A FetchStream request (spec/protocol.md, api 18): up to 64 answers, idle expiry 5 s."""
FETCH_STREAM_CREDIT = fs.FetchStreamCredit(correlation_id=22, more_responses=32)
"""32 more answers for that stream (api 20), granted once its consumer took 32."""
PRODUCE_MANY_SECTIONS = [PRODUCE_REQ_MIN, PRODUCE_REQ]
"""A ProduceMany request: two Produce bodies, byte for byte (spec/protocol.md, api 17)."""
NOT_LEADER_ERROR = {
    "code": int(ErrorCode.NOT_LEADER),
    "name": "NOT_LEADER",
    "message": "partition orders/3 is led by s2",
    "details": {"stream": "orders", "partition": 3, "leader": "s2", "leader_epoch": 4},
}
"""The error of one ProduceMany section (the other sections are answered as usual)."""


def produce_many_request_fields(sections: list[msg.ProduceRequest]) -> Fields:
    return {"sections": [produce_request_fields(r) for r in sections]}


def produce_many_request_body(sections: list[msg.ProduceRequest]) -> bytes:
    return pm.encode_produce_many_request([msg.encode_produce_request(r) for r in sections])


def produce_many_response_body() -> bytes:
    return pm.encode_produce_many_response(
        [
            pm.ProduceSection(0, msg.encode_produce_response(PRODUCE_RESULTS_TOO_LARGE)),
            pm.ProduceSection(
                int(ErrorCode.NOT_LEADER),
                msg.encode_error(
                    ErrorCode.NOT_LEADER, NOT_LEADER_ERROR["message"], NOT_LEADER_ERROR["details"]
                ),
            ),
        ]
    )


def produce_many_response_fields() -> Fields:
    return {
        "sections": [
            {
                "error_code": 0,
                "results": produce_results_fields(PRODUCE_RESULTS_TOO_LARGE),
            },
            {"error_code": int(ErrorCode.NOT_LEADER), "error": NOT_LEADER_ERROR},
        ]
    }


FETCH_REQ_FOLLOWER = fetch_msg.FetchRequest(
    stream="orders",
    partition=3,
    offset=120,
    max_bytes=65536,
    max_wait_ms=500,
    replica_id=2,
    replica_flushed=118,
    leader_epoch=4,
)
OFFSET_FOR_EPOCH_REQ = epoch_msg.OffsetForLeaderEpochRequest(
    stream="orders", partition=3, leader_epoch=3, current_leader_epoch=4, replica_id=2
)
OFFSET_FOR_EPOCH_RESP = epoch_msg.OffsetForLeaderEpochResponse(leader_epoch=3, end_offset=117)
FETCH_RECORDS = [
    Record(offset=17, timestamp=T0, leader_epoch=1, value=b"hello", key=b"k1", subject="orders"),
    Record(offset=19, timestamp=T0 + 5, leader_epoch=1, value=b"world", subject="orders"),
]


def fetch_response_case(
    name: str,
    cid: int,
    error_code: int,
    hw: int,
    log_start: int,
    leo: int,
    records: list[Record],
    trailing: bytes = b"",
    *,
    api: fr.Api = fr.Api.FETCH,
    flags: int = RESP,
) -> Case:
    data = b"".join(encode_record(r) for r in records) + trailing
    body = fetch_msg.encode_fetch_response_header(error_code, hw, log_start, leo, len(data)) + data
    fields = {
        "error_code": error_code,
        "hw": hw,
        "log_start": log_start,
        "leo": leo,
        "records": [record_fields(r) for r in records],
        "trailing_hex": trailing.hex(),
    }
    return frame_case(name, api, cid, flags, "fetch_response", fields, body)


REPLICA_FETCH_REQ = rf.ReplicaFetchRequest(
    session_id=0x0123456789ABCDEF,
    max_wait_ms=5000,
    max_bytes=8388608,
    partitions=(
        rf.ReplicaFetchPartition("orders", 3, 120, 2, 118, 4, 1048576, slot=0),
        rf.ReplicaFetchPartition("audit", 0, 0, 1, 0, 7, 1048576, slot=1),
    ),
)
REPLICA_FETCH_INCREMENTAL = rf.ReplicaFetchRequest(
    session_id=0x0123456789ABCDEF,
    max_wait_ms=500,
    max_bytes=8388608,
    partitions=(rf.ReplicaFetchPartition("orders", 3, 125, 2, 125, 4, 1048576, slot=0),),
    session_epoch=7,
    forget=(1, 4),
)
REPLICA_FETCH_WAKE = rf.ReplicaFetchRequest(
    session_id=0x0123456789ABCDEF, max_wait_ms=0, max_bytes=0, flags=rf.FLAG_WAKE
)
REPLICA_FETCH_ANSWERS = [
    rf.ReplicaFetchAnswer(0, 0, 20, 0, 21, "", b"".join(encode_record(r) for r in FETCH_RECORDS)),
    rf.ReplicaFetchAnswer(
        1, int(ErrorCode.NOT_LEADER), -1, -1, -1, "this server does not lead audit/0 in epoch 7"
    ),
]


REPLICA_FETCH_POLL_ENDED = rf.ReplicaFetchResponse(
    [rf.ReplicaFetchAnswer(2, 0, 21, 0, 21, "")], rf.RESPONSE_POLL_ENDED
)


def _with_wake_flag(body: bytes) -> bytes:
    """``body`` with its flags byte (after the 8-byte session id) set to WAKE."""
    return body[:8] + bytes([rf.FLAG_WAKE]) + body[9:]


def replica_fetch_request_fields(r: rf.ReplicaFetchRequest) -> Fields:
    return {
        "session_id": r.session_id,
        "flags": r.flags,
        "session_epoch": r.session_epoch,
        "max_wait_ms": r.max_wait_ms,
        "max_bytes": r.max_bytes,
        "partitions": [attrs.asdict(p) for p in r.partitions],
        "forget": list(r.forget),
    }


def replica_fetch_response_fields(response: rf.ReplicaFetchResponse) -> Fields:
    answers = response.answers
    return {
        "flags": response.flags,
        "answers": [
            {
                "index": a.index,
                "error_code": a.error_code,
                "hw": a.hw,
                "log_start": a.log_start,
                "leo": a.leo,
                "message": a.message,
                "records_hex": bytes(a.records).hex(),
            }
            for a in answers
        ],
    }


def replica_fetch_request_case(name: str, cid: int, req: rf.ReplicaFetchRequest) -> Case:
    fields = replica_fetch_request_fields(req)
    body = rf.encode_replica_fetch_request(req)
    return frame_case(name, fr.Api.REPLICA_FETCH, cid, 0, "replica_fetch_request", fields, body)


def replica_fetch_response_case(name: str, cid: int, response: rf.ReplicaFetchResponse) -> Case:
    fields = replica_fetch_response_fields(response)
    body = rf.encode_replica_fetch_response(response.answers, response.flags)
    return frame_case(name, fr.Api.REPLICA_FETCH, cid, RESP, "replica_fetch_response", fields, body)


def protocol_file() -> dict[str, Any]:
    cases: list[Case] = [
        json_case("hello_request", fr.Api.HELLO, 1, 0, {"protocol": 1, "client": "jetsdk/0.1.0"}),
        json_case(
            "hello_response",
            fr.Api.HELLO,
            1,
            RESP,
            {
                "protocol": 1,
                "server_id": "s1",
                "version": "0.1.0",
                "max_frame_bytes": 16777216,
                "max_message_bytes": 1048576,
                "apis": list(range(18)),
            },
        ),
        json_case("metadata_request", fr.Api.METADATA, 2, 0, {"streams": None}),
        json_case(
            "metadata_response",
            fr.Api.METADATA,
            2,
            RESP,
            {"servers": [{"id": "s1", "address": "127.0.0.1:9292"}], "streams": [STREAM_INFO]},
        ),
        json_case(
            "create_stream_request",
            fr.Api.CREATE_STREAM,
            3,
            0,
            {"name": "orders", "subject": "orders", "partitions": 1, "replication_factor": 1},
        ),
        json_case(
            "create_stream_response",
            fr.Api.CREATE_STREAM,
            3,
            RESP,
            {"created": True, "stream": STREAM_INFO},
        ),
        json_case("delete_stream_request", fr.Api.DELETE_STREAM, 4, 0, {"name": "orders"}),
        json_case("delete_stream_response", fr.Api.DELETE_STREAM, 4, RESP, {"deleted": True}),
        json_case("describe_stream_request", fr.Api.DESCRIBE_STREAM, 5, 0, {"name": "orders"}),
        json_case(
            "list_offsets_request",
            fr.Api.LIST_OFFSETS,
            6,
            0,
            {"stream": "orders", "partition": 0, "position": "timestamp", "timestamp_ns": T0},
        ),
        json_case(
            "list_offsets_response",
            fr.Api.LIST_OFFSETS,
            6,
            RESP,
            {"offset": 17, "hw": 20, "log_start": 0},
        ),
        json_case(
            "purge_stream_request",
            fr.Api.PURGE_STREAM,
            6,
            0,
            {"stream": "orders", "partition": 0, "before": 120},
        ),
        json_case(
            "purge_stream_response", fr.Api.PURGE_STREAM, 6, RESP, {"log_start": 120, "hw": 130}
        ),
        json_case(
            "update_stream_request",
            fr.Api.UPDATE_STREAM,
            6,
            0,
            {"name": "orders", "settings": {"retention_max_messages": 1000000}},
        ),
        json_case(
            "update_stream_max_message_bytes_request",
            fr.Api.UPDATE_STREAM,
            6,
            0,
            {"name": "orders", "settings": {"max_message_bytes": 262144}},
        ),
        produce_request_case("produce_request", 7, PRODUCE_REQ),
        produce_request_case("produce_request_minimal", 0xFFFFFFFF, PRODUCE_REQ_MIN),
        produce_response_case("produce_response", 7, PRODUCE_RESULTS),
        produce_response_case("produce_response_message_too_large", 8, PRODUCE_RESULTS_TOO_LARGE),
        produce_request_case("produce_request_current_values", 9, PRODUCE_REQ_CAS),
        frame_case(
            "produce_response_current_values",
            fr.Api.PRODUCE,
            9,
            RESP,
            "produce_response_current_values",
            {
                "results": [
                    {
                        "error_code": r.error_code,
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "current_value_hex": hx(r.current_value),
                    }
                    for r in PRODUCE_RESULTS_CAS
                ]
            },
            pv.encode_produce_response_values(PRODUCE_RESULTS_CAS),
        ),
        produce_request_case("produce_request_latest_values", 10, PRODUCE_REQ_LATEST),
        frame_case(
            "produce_response_latest_values",
            fr.Api.PRODUCE,
            10,
            RESP,
            "produce_response_latest_values",
            {
                "results": [
                    {
                        "error_code": r.error_code,
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "current_value_hex": hx(r.current_value),
                        "latest_offset": r.latest_offset,
                    }
                    for r in PRODUCE_RESULTS_LATEST
                ]
            },
            pv.encode_produce_response_values(PRODUCE_RESULTS_LATEST, latest=True),
        ),
        frame_case(
            "produce_many_request",
            fr.Api.PRODUCE_MANY,
            11,
            0,
            "produce_many_request",
            produce_many_request_fields(PRODUCE_MANY_SECTIONS),
            produce_many_request_body(PRODUCE_MANY_SECTIONS),
        ),
        frame_case(
            "produce_many_response",
            fr.Api.PRODUCE_MANY,
            11,
            RESP,
            "produce_many_response",
            produce_many_response_fields(),
            produce_many_response_body(),
        ),
        frame_case(
            "fetch_request",
            fr.Api.FETCH,
            8,
            0,
            "fetch_request",
            {
                "stream": "orders",
                "partition": 0,
                "offset": 17,
                "max_bytes": 1048576,
                "max_wait_ms": 500,
                "replica_id": -1,
                "replica_flushed": -1,
                "leader_epoch": -1,
            },
            fetch_msg.encode_fetch_request(FETCH_REQ),
        ),
        frame_case(
            "fetch_request_follower",
            fr.Api.FETCH,
            9,
            0,
            "fetch_request",
            {
                "stream": "orders",
                "partition": 3,
                "offset": 120,
                "max_bytes": 65536,
                "max_wait_ms": 500,
                "replica_id": 2,
                "replica_flushed": 118,
                "leader_epoch": 4,
            },
            fetch_msg.encode_fetch_request(FETCH_REQ_FOLLOWER),
        ),
        json_case(
            "offset_for_leader_epoch_request",
            fr.Api.OFFSET_FOR_LEADER_EPOCH,
            10,
            0,
            OFFSET_FOR_EPOCH_REQ.to_json(),
        ),
        json_case(
            "offset_for_leader_epoch_response",
            fr.Api.OFFSET_FOR_LEADER_EPOCH,
            10,
            RESP,
            OFFSET_FOR_EPOCH_RESP.to_json(),
        ),
        json_case(
            "report_leader_request",
            fr.Api.REPORT_LEADER,
            11,
            0,
            {"stream": "orders", "partition": 0, "leader_epoch": 3, "reporter": "s2"},
        ),
        json_case(
            "report_leader_response",
            fr.Api.REPORT_LEADER,
            11,
            RESP,
            {"accepted": True, "leader": "s3", "leader_epoch": 4},
        ),
        json_case(
            "authenticate_request_password",
            fr.Api.AUTHENTICATE,
            12,
            0,
            {"mechanism": "password", "user": "alice", "password": "s3cret"},
        ),
        json_case(
            "authenticate_request_token",
            fr.Api.AUTHENTICATE,
            13,
            0,
            {"mechanism": "token", "token": "Zm9vYmFy"},
        ),
        json_case("authenticate_response", fr.Api.AUTHENTICATE, 12, RESP, {"identity": "alice"}),
        json_case(
            "set_acl_request",
            fr.Api.SET_ACL,
            14,
            0,
            {
                "identity": "alice",
                "grants": [
                    {"permission": "publish", "pattern": "orders.*"},
                    {"permission": "group", "pattern": "etl-*"},
                ],
                "op_id": "7f3a9e",
            },
        ),
        json_case(
            "set_acl_response",
            fr.Api.SET_ACL,
            14,
            RESP,
            {
                "identity": "alice",
                "grants": [
                    {"permission": "publish", "pattern": "orders.*"},
                    {"permission": "group", "pattern": "etl-*"},
                ],
            },
        ),
        json_case("rebalance_leaders_request", fr.Api.REBALANCE_LEADERS, 19, 0, {"max": 500}),
        json_case(
            "rebalance_leaders_response",
            fr.Api.REBALANCE_LEADERS,
            19,
            RESP,
            {"moved": 12, "refused": 0, "remaining": 0},
        ),
        json_case("list_acls_request", fr.Api.LIST_ACLS, 15, 0, {}),
        json_case(
            "list_acls_response",
            fr.Api.LIST_ACLS,
            15,
            RESP,
            {"acls": {"alice": [{"permission": "fetch", "pattern": "orders.*"}], "bob": []}},
        ),
        error_case(
            "error_unauthenticated",
            fr.Api.METADATA,
            16,
            ErrorCode.UNAUTHENTICATED,
            "authenticate first (Authenticate, API 10)",
            {},
        ),
        error_case(
            "error_permission_denied",
            fr.Api.PRODUCE,
            17,
            ErrorCode.PERMISSION_DENIED,
            "permission denied: needs publish on stream 'payments'",
            {"identity": "alice"},
        ),
        replica_fetch_request_case("replica_fetch_request", 20, REPLICA_FETCH_REQ),
        replica_fetch_request_case("replica_fetch_wake", 21, REPLICA_FETCH_WAKE),
        replica_fetch_request_case("replica_fetch_incremental", 22, REPLICA_FETCH_INCREMENTAL),
        replica_fetch_response_case(
            "replica_fetch_response", 20, rf.ReplicaFetchResponse(REPLICA_FETCH_ANSWERS)
        ),
        replica_fetch_response_case(
            "replica_fetch_response_nothing_new", 21, rf.ReplicaFetchResponse([])
        ),
        replica_fetch_response_case(
            "replica_fetch_response_poll_ended", 22, REPLICA_FETCH_POLL_ENDED
        ),
        frame_case(
            "fetch_stream_request",
            fr.Api.FETCH_STREAM,
            22,
            0,
            "fetch_stream_request",
            attrs.asdict(FETCH_STREAM_REQ),
            fs.encode_fetch_stream_request(FETCH_STREAM_REQ),
        ),
        fetch_response_case(
            "fetch_stream_response_more",
            22,
            0,
            18,
            0,
            18,
            FETCH_RECORDS[:1],
            api=fr.Api.FETCH_STREAM,
            flags=MORE,
        ),
        fetch_response_case(
            "fetch_stream_response_last",
            22,
            0,
            20,
            0,
            21,
            FETCH_RECORDS[1:],
            api=fr.Api.FETCH_STREAM,
        ),
        frame_case(
            "cancel_fetch_stream_request",
            fr.Api.CANCEL_FETCH_STREAM,
            23,
            0,
            "cancel_fetch_stream_request",
            {"correlation_id": 22},
            fs.encode_cancel_fetch_stream(22),
        ),
        frame_case(
            "cancel_fetch_stream_response",
            fr.Api.CANCEL_FETCH_STREAM,
            23,
            RESP,
            "cancel_fetch_stream_response",
            {"ended": True},
            fs.encode_cancel_fetch_stream_answer(True),
        ),
        frame_case(
            "fetch_stream_credit_request",
            fr.Api.FETCH_STREAM_CREDIT,
            24,
            0,
            "fetch_stream_credit_request",
            attrs.asdict(FETCH_STREAM_CREDIT),
            fs.encode_fetch_stream_credit(FETCH_STREAM_CREDIT),
        ),
        frame_case(
            "fetch_stream_credit_response",
            fr.Api.FETCH_STREAM_CREDIT,
            24,
            RESP,
            "fetch_stream_credit_response",
            {"remaining": 48},
            fs.encode_fetch_stream_credit_answer(48),
        ),
        fetch_response_case("fetch_response_empty", 8, 0, 17, 0, 17, []),
        fetch_response_case("fetch_response_records_with_gap", 8, 0, 20, 0, 21, FETCH_RECORDS),
        fetch_response_case(
            "fetch_response_partial_tail",
            8,
            0,
            20,
            0,
            21,
            FETCH_RECORDS[:1],
            encode_record(FETCH_RECORDS[1])[:40],
        ),
        fetch_response_case(
            "fetch_response_offset_out_of_range",
            8,
            int(ErrorCode.OFFSET_OUT_OF_RANGE),
            20,
            5,
            21,
            [],
        ),
        error_case(
            "error_stream_not_found",
            fr.Api.DESCRIBE_STREAM,
            5,
            ErrorCode.STREAM_NOT_FOUND,
            "no stream 'nope'",
            {"stream": "nope"},
        ),
        error_case(
            "error_frame_too_large",
            fr.Api.HELLO,
            0,
            ErrorCode.FRAME_TOO_LARGE,
            "frame of 16777217 bytes exceeds the limit of 16777216",
            {"max_frame_bytes": 16777216},
        ),
    ]
    produce = msg.encode_produce_request(PRODUCE_REQ)
    fetch = fetch_msg.encode_fetch_request(FETCH_REQ)
    stream = fs.encode_fetch_stream_request(FETCH_STREAM_REQ)
    many = produce_many_request_body(PRODUCE_MANY_SECTIONS)
    invalid: list[Case] = [
        bad("frame_length_below_6", "frame", "0000000500000000000100", "malformed"),
        {
            "name": "frame_too_large_prefix_only",
            "type": "frame",
            "hex": "01000001",
            "error_reason": "limit",
            "max_frame_bytes": 16777216,
        },
        bad("frame_error_flag_without_response", "frame", "00000006060200000001", "malformed"),
        bad("frame_unknown_flag", "frame", "00000006060900000001", "malformed"),
        bad("frame_more_flag_on_request", "frame", "00000006120400000001", "malformed"),
        bad("frame_more_flag_on_error", "frame", "00000006120700000001", "malformed"),
        bad(
            "fetch_stream_request_truncated", "fetch_stream_request", stream[:-1].hex(), "truncated"
        ),
        bad(
            "fetch_stream_request_trailing",
            "fetch_stream_request",
            stream.hex() + "00",
            "malformed",
        ),
        bad(
            "cancel_fetch_stream_request_truncated",
            "cancel_fetch_stream_request",
            "000016",
            "truncated",
        ),
        bad(
            "cancel_fetch_stream_request_trailing",
            "cancel_fetch_stream_request",
            "0000001600",
            "malformed",
        ),
        bad(
            "cancel_fetch_stream_response_bad_value",
            "cancel_fetch_stream_response",
            "02",
            "malformed",
        ),
        bad(
            "fetch_stream_credit_request_truncated",
            "fetch_stream_credit_request",
            "00000016000000",
            "truncated",
        ),
        bad(
            "fetch_stream_credit_request_trailing",
            "fetch_stream_credit_request",
            "000000160000002000",
            "malformed",
        ),
        bad(
            "fetch_stream_credit_response_above_the_limit",
            "fetch_stream_credit_response",
            "00000401",
            "malformed",
        ),
        bad("json_not_an_object", "json", b"[1,2]".hex(), "malformed"),
        bad("json_invalid", "json", b'{"a":'.hex(), "malformed"),
        bad("error_without_code", "error", b'{"message":"x"}'.hex(), "malformed"),
        bad("produce_request_truncated", "produce_request", produce[:-1].hex(), "truncated"),
        bad(
            "produce_request_trailing_byte",
            "produce_request",
            (produce + b"\x00").hex(),
            "malformed",
        ),
        bad(
            "produce_request_ack_policy_3",
            "produce_request",
            (produce[:12] + b"\x03" + produce[13:]).hex(),
            "malformed",
        ),
        bad(
            "produce_request_count_too_big",
            "produce_request",
            msg.encode_produce_request(PRODUCE_REQ_MIN)[:13].hex() + "ffffffff",
            "truncated",
        ),
        bad(
            "produce_response_truncated",
            "produce_response",
            msg.encode_produce_response(PRODUCE_RESULTS)[:-1].hex(),
            "truncated",
        ),
        bad(
            "produce_response_current_values_truncated",
            "produce_response_current_values",
            pv.encode_produce_response_values(PRODUCE_RESULTS_CAS)[:-1].hex(),
            "truncated",
        ),
        bad(
            "produce_response_current_values_trailing",
            "produce_response_current_values",
            (pv.encode_produce_response_values(PRODUCE_RESULTS_CAS) + b"\0").hex(),
            "malformed",
        ),
        bad(
            "produce_request_unknown_flag",
            "produce_request",
            (produce[:17] + bytes([produce[17] | 0x80]) + produce[18:]).hex(),
            "malformed",
        ),
        bad(
            "produce_many_request_truncated",
            "produce_many_request",
            many[:-1].hex(),
            "truncated",
        ),
        bad(
            "produce_many_request_trailing_byte",
            "produce_many_request",
            (many + b"\x00").hex(),
            "malformed",
        ),
        bad(
            "produce_many_request_section_past_the_end",
            "produce_many_request",
            (many[:4] + b"\xff\xff\xff\xff" + many[8:]).hex(),
            "truncated",
        ),
        bad(
            "produce_many_request_too_many_sections",
            "produce_many_request",
            (pm.MAX_PRODUCE_SECTIONS + 1).to_bytes(4, "big").hex(),
            "limit",
        ),
        bad(
            "produce_many_response_truncated",
            "produce_many_response",
            produce_many_response_body()[:-1].hex(),
            "truncated",
        ),
        bad("fetch_request_truncated", "fetch_request", fetch[:-1].hex(), "truncated"),
        bad(
            "fetch_request_follower_without_replica_fields",
            "fetch_request",
            fetch_msg.encode_fetch_request(FETCH_REQ_FOLLOWER)[:-16].hex(),
            "truncated",
        ),
        bad(
            "fetch_request_consumer_with_replica_fields",
            "fetch_request",
            (fetch + fetch_msg.encode_fetch_request(FETCH_REQ_FOLLOWER)[-16:]).hex(),
            "malformed",
        ),
        bad(
            "replica_fetch_request_truncated",
            "replica_fetch_request",
            rf.encode_replica_fetch_request(REPLICA_FETCH_REQ)[:-1].hex(),
            "truncated",
        ),
        bad(
            "replica_fetch_wake_with_partitions",
            "replica_fetch_request",
            _with_wake_flag(
                rf.encode_replica_fetch_request(
                    attrs.evolve(REPLICA_FETCH_REQ, partitions=REPLICA_FETCH_REQ.partitions[:1])
                )
            ).hex(),
            "malformed",
        ),
        bad(
            "replica_fetch_response_records_truncated",
            "replica_fetch_response",
            rf.encode_replica_fetch_response(REPLICA_FETCH_ANSWERS[:1])[:-1].hex(),
            "truncated",
        ),
        bad(
            "fetch_response_records_len_mismatch",
            "fetch_response",
            fetch_msg.encode_fetch_response_header(0, 1, 0, 1, 10).hex() + "00",
            "truncated",
        ),
    ]
    return {
        "format": "protocol",
        "doc": "spec/protocol.md. type frame: a whole frame; fields.body_type names the body "
        "codec (json, error, produce_request, produce_response, produce_response_current_values "
        "(the answer to a request with current_values), produce_response_latest_values (with "
        "latest_values too), fetch_request, fetch_response, "
        "replica_fetch_request, replica_fetch_response). "
        "JSON bodies are compact with keys in the order given: other encoders may differ in "
        "bytes and must compare the decoded objects. invalid: type frame goes through a frame "
        "decoder (max_frame_bytes 16777216 unless given); other types are bodies.",
        "cases": cases,
        "invalid": invalid,
    }


# ---------------------------------------------------------------------------- compression

COMPRESSED_PLAIN = (
    b"[" + b",".join(b'{"id":%d,"name":"user-%d","active":true}' % (i, i) for i in range(32)) + b"]"
)
"""A JSON-like value of 1,293 bytes, as the application sent it."""
COMPRESSED_STORED = {
    "zstd": bytes.fromhex(
        "28b52ffd600d043d06005286131990478d0153dfccb2c0d80f7eff075b23dbac8c1bcd7477c00281bbbbffff"
        "ffff7f555555556598655194244190e3b87b4d89153d90b27570204163c98ce25986c8942d4253b064281b38"
        "8600043f2060334a0fb3e80e643a095ec780d21d90ed043c1d03457741d609f03a0694dd814c27e0d1b1ce40"
        "e1acbb4d20d3bc93ccc0c3ac639740b1bcbbca4046592793c093bc6391810259778f40e678278d81c018028b"
        "9653dc31b5c8b766b2acafcc6a215fcdc8b23e99a9453e352b4b7d5032286ce801"
    ),
    "lz4": bytes.fromhex(
        "04224d1868400d05000000000000ce46010000f2195b7b226964223a302c226e616d65223a22757365722d30"
        "222c22616374697665223a747275657d2c27001a3127001f312700041a3227001f322700041a3327001f3327"
        "00041a3427001f342700041a3527001f352700041a3627001f362700041a3727001f372700041a3827001f38"
        "2700041a3927001f392700041b3187011f318801060c89010f8a01051b318b011f318c01051b318d011f318e"
        "01051b318f011f319001051b3191011f319201051b3193011f319401051b3195011f319601051b3197011f31"
        "9801051b3199011f319a01051b329a011f329a01051b329a011f329a01051b329a011f329a01051b329a011f"
        "329a01051b329a011f329a01051b329a011f329a01051b329a011f329a01051b329a011f329a01051b329a01"
        "1f329a01051b329a011f329a01051b339a011f339a01051b339a0119339a01507275657d5d00000000"
    ),
}
"""COMPRESSED_PLAIN as jetsdk's Producer stored it with each codec when these were written
(zstandard level 3, its level then, with the content size; an LZ4 frame with the content
size). Fixed bytes, not recomputed: another library version or level may compress to other
bytes, and every reader must decompress these."""


def compression_file() -> dict[str, Any]:
    cases = []
    for codec, stored in COMPRESSED_STORED.items():
        record = Record(
            offset=42,
            timestamp=T0,
            leader_epoch=3,
            value=stored,
            key=b"user-1",
            subject="users.1",
            headers=(("Content-Type", b"application/json"), ("Jet-Compression", codec.encode())),
        )
        cases.append(
            {
                "name": f"{codec}_json_value",
                "type": "compressed_record",
                "codec": codec,
                "plain_value_hex": COMPRESSED_PLAIN.hex(),
                "plain_headers": [["Content-Type", b"application/json".hex()]],
                "fields": record_fields(record),
                "hex": encode_record(record).hex(),
            }
        )
    zstd = COMPRESSED_STORED["zstd"]
    invalid = [
        {"name": "unknown_codec", "codec": "brotli", "hex": zstd.hex(), "error_reason": "codec"},
        {
            "name": "zstd_truncated",
            "codec": "zstd",
            "hex": zstd[:-4].hex(),
            "error_reason": "corrupt",
        },
        {
            "name": "zstd_not_zstd",
            "codec": "zstd",
            "hex": COMPRESSED_PLAIN[:32].hex(),
            "error_reason": "corrupt",
        },
        {
            "name": "lz4_truncated",
            "codec": "lz4",
            "hex": COMPRESSED_STORED["lz4"][:-8].hex(),
            "error_reason": "corrupt",
        },
    ]
    return {
        "format": "compression",
        "doc": "spec/envelope.md, 'Compressed values'. cases: a record whose value is stored "
        "compressed, with the header Jet-Compression naming the codec; decompressing "
        "fields.value_hex gives plain_value_hex, and the record as the application sees it "
        "has plain_headers (Jet-Compression removed); key and subject are stored as they are. "
        "Compressing plain_value_hex again may give other bytes (library versions differ). "
        "invalid: stored value hex with its codec, and the error reason a reader gives.",
        "cases": cases,
        "invalid": invalid,
    }


FILES: dict[str, Callable[[], dict[str, Any]]] = {
    "record.json": record_file,
    "envelope.json": envelope_file,
    "protocol.json": protocol_file,
    "compression.json": compression_file,
}


def render(build: Callable[[], dict[str, Any]]) -> bytes:
    return orjson.dumps(build(), option=orjson.OPT_INDENT_2) + b"\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if a file is stale")
    parser.add_argument("--out", type=Path, default=OUT, help="output directory")
    args = parser.parse_args(argv)
    stale = []
    for name, build in FILES.items():
        path: Path = args.out / name
        data = render(build)
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"wrote {path}")
    if stale:
        print(
            f"stale vectors: {', '.join(stale)}; run python tools/gen_vectors.py", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
