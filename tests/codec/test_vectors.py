"""The byte-exact vectors in spec/vectors/ against the codecs, both ways."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import attrs
import pytest

from jetsdk.codec import envelope as env
from jetsdk.codec import fetch_messages as fetch_msg
from jetsdk.codec import fetch_stream as fs
from jetsdk.codec import frames as fr
from jetsdk.codec import messages as msg
from jetsdk.codec import produce_many as pm
from jetsdk.codec import produce_values as pv
from jetsdk.codec import replica_fetch as rf
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.errors import CodecError
from jetsdk.codec.json_ack import decode_json_ack, encode_json_ack
from jetsdk.codec.nats_headers import parse_header_block
from jetsdk.codec.record import Record, decode_record, encode_record, iter_records
from support.vectors import VECTORS, load_vectors

ROOT = Path(__file__).resolve().parents[2]


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


def unhex(value: str | None) -> bytes | None:
    return None if value is None else bytes.fromhex(value)


def headers_of(pairs: list[list[str]]) -> tuple[tuple[str, bytes], ...]:
    return tuple((name, bytes.fromhex(value)) for name, value in pairs)


def record_of(f: dict[str, Any]) -> Record:
    return Record(
        offset=f["offset"],
        timestamp=f["timestamp"],
        leader_epoch=f["leader_epoch"],
        value=bytes.fromhex(f["value_hex"]),
        key=unhex(f["key_hex"]),
        subject=f["subject"],
        reply=f["reply"],
        headers=headers_of(f["headers"]),
        producer_id=f["producer_id"],
        producer_seq=f["producer_seq"],
    )


RECORD = load_vectors("record.json")
ENVELOPE = load_vectors("envelope.json")
PROTOCOL = load_vectors("protocol.json")


def test_vectors_are_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("gen_vectors", ROOT / "tools" / "gen_vectors.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, build in module.FILES.items():
        assert module.render(build) == (VECTORS / name).read_bytes(), f"{name} is stale"


def test_vector_files_cover_the_brief() -> None:
    assert {
        "keyless",
        "keyed",
        "tombstone",
        "headers_repeated_names",
        "producer_id",
        "unicode_subject_and_header",
    } <= set(ids(RECORD["cases"]))
    assert {"message_minimal", "message_full", "ack", "ack_error", "ack_batch"} <= set(
        ids(ENVELOPE["cases"])
    )
    assert any(p["name"].startswith("cookie_but_") for p in ENVELOPE["plain"])
    body_types = {c["fields"]["body_type"] for c in PROTOCOL["cases"]}
    assert body_types == {
        "json",
        "error",
        "produce_request",
        "produce_response",
        "produce_response_current_values",
        "produce_response_latest_values",
        "produce_many_request",
        "produce_many_response",
        "fetch_request",
        "fetch_response",
        "fetch_stream_request",
        "cancel_fetch_stream_request",
        "cancel_fetch_stream_response",
        "fetch_stream_credit_request",
        "fetch_stream_credit_response",
        "replica_fetch_request",
        "replica_fetch_response",
    }
    apis = {c["fields"]["api"] for c in PROTOCOL["cases"]}
    assert apis == {int(a) for a in fr.Api}


# ---------------------------------------------------------------------------- records


@pytest.mark.parametrize("case", RECORD["cases"], ids=ids(RECORD["cases"]))
def test_record_vector(case: dict[str, Any]) -> None:
    raw = bytes.fromhex(case["hex"])
    record = record_of(case["fields"])
    assert encode_record(record) == raw
    assert decode_record(raw) == (record, len(raw))
    assert decode_record(memoryview(raw)) == (record, len(raw))


@pytest.mark.parametrize("case", RECORD["invalid"], ids=ids(RECORD["invalid"]))
def test_record_invalid_vector(case: dict[str, Any]) -> None:
    with pytest.raises(CodecError) as info:
        decode_record(bytes.fromhex(case["hex"]))
    assert info.value.reason == case["error_reason"]


# ---------------------------------------------------------------------------- envelope


def message_of(f: dict[str, Any]) -> env.EnvelopeMessage:
    return env.EnvelopeMessage(
        value=bytes.fromhex(f["value_hex"]),
        key=unhex(f["key_hex"]),
        headers=headers_of(f["headers"]),
        ack_inbox=f["ack_inbox"],
        correlation_id=f["correlation_id"],
        ack_policy=AckPolicy(f["ack_policy"]),
        producer_id=f["producer_id"],
        producer_seq=f["producer_seq"],
    )


def ack_of(f: dict[str, Any]) -> env.EnvelopeAck:
    return env.EnvelopeAck(**{**f, "ack_policy": AckPolicy(f["ack_policy"])})


@pytest.mark.parametrize("case", ENVELOPE["cases"], ids=ids(ENVELOPE["cases"]))
def test_envelope_vector(case: dict[str, Any]) -> None:
    raw = bytes.fromhex(case["hex"])
    if case["type"] == "message":
        m = message_of(case["fields"])
        assert env.encode_message(m) == raw
        assert env.decode_message(raw) == m
        assert env.parse_nats_payload(raw) == m
    else:
        acks = [ack_of(a) for a in case["fields"]["acks"]]
        encoded = env.encode_ack(acks[0]) if case["type"] == "ack" else env.encode_acks(acks)
        assert encoded == raw
        assert env.decode_acks(raw) == acks
        assert env.parse_nats_payload(raw) is None  # an ack on a stream subject is plain


@pytest.mark.parametrize("case", ENVELOPE["invalid"], ids=ids(ENVELOPE["invalid"]))
def test_envelope_invalid_vector(case: dict[str, Any]) -> None:
    raw = bytes.fromhex(case["hex"])
    decode = env.decode_message if case["type"] == "message" else env.decode_acks
    with pytest.raises(CodecError) as info:
        decode(raw)
    assert info.value.reason == case["error_reason"]


@pytest.mark.parametrize("case", ENVELOPE["plain"], ids=ids(ENVELOPE["plain"]))
def test_envelope_plain_vector(case: dict[str, Any]) -> None:
    assert env.parse_nats_payload(bytes.fromhex(case["hex"])) is None


# ---------------------------------------------------------------------------- protocol


def produce_request_of(f: dict[str, Any]) -> msg.ProduceRequest:
    return msg.ProduceRequest(
        stream=f["stream"],
        partition=f["partition"],
        ack_policy=AckPolicy(f["ack_policy"]),
        timeout_ms=f["timeout_ms"],
        producer_id=f["producer_id"],
        base_seq=f["base_seq"],
        current_values=f.get("current_values", False),
        latest_values=f.get("latest_values", False),
        messages=tuple(
            msg.ProduceMessage(
                value=bytes.fromhex(m["value_hex"]),
                key=unhex(m["key_hex"]),
                headers=headers_of(m["headers"]),
                subject=m["subject"],
            )
            for m in f["messages"]
        ),
    )


def current_results_of(f: dict[str, Any]) -> list[msg.ProduceResult]:
    return [
        msg.ProduceResult(
            r["error_code"], r["offset"], r["timestamp"], unhex(r["current_value_hex"])
        )
        for r in f["results"]
    ]


def latest_results_of(f: dict[str, Any]) -> list[msg.ProduceResult]:
    return [
        msg.ProduceResult(
            r["error_code"],
            r["offset"],
            r["timestamp"],
            unhex(r["current_value_hex"]),
            r["latest_offset"],
        )
        for r in f["results"]
    ]


def replica_fetch_request_of(f: Any) -> rf.ReplicaFetchRequest:
    return rf.ReplicaFetchRequest(
        session_id=f["session_id"],
        max_wait_ms=f["max_wait_ms"],
        max_bytes=f["max_bytes"],
        partitions=tuple(rf.ReplicaFetchPartition(**p) for p in f["partitions"]),
        flags=f["flags"],
        session_epoch=f["session_epoch"],
        forget=tuple(f["forget"]),
    )


def replica_fetch_answers_of(f: Any) -> list[rf.ReplicaFetchAnswer]:
    return [
        rf.ReplicaFetchAnswer(
            a["index"],
            a["error_code"],
            a["hw"],
            a["log_start"],
            a["leo"],
            a["message"],
            bytes.fromhex(a["records_hex"]),
        )
        for a in f["answers"]
    ]


def produce_many_sections_of(f: Any) -> list[pm.ProduceSection]:
    sections = []
    for section in f["sections"]:
        if section["error_code"] == 0:
            results = [msg.ProduceResult(**r) for r in section["results"]]
            sections.append(pm.ProduceSection(0, msg.encode_produce_response(results)))
        else:
            e = section["error"]
            body = msg.encode_error(e["code"], e["message"], e["details"])
            sections.append(pm.ProduceSection(section["error_code"], body))
    return sections


def encode_body(body_type: str, f: Any) -> bytes:
    if body_type == "produce_many_request":
        return pm.encode_produce_many_request(
            [msg.encode_produce_request(produce_request_of(r)) for r in f["sections"]]
        )
    if body_type == "produce_many_response":
        return pm.encode_produce_many_response(produce_many_sections_of(f))
    if body_type == "json":
        return msg.encode_json(f)
    if body_type == "error":
        return msg.encode_error(f["code"], f["message"], f["details"])
    if body_type == "produce_request":
        return msg.encode_produce_request(produce_request_of(f))
    if body_type == "produce_response":
        return msg.encode_produce_response([msg.ProduceResult(**r) for r in f["results"]])
    if body_type == "produce_response_current_values":
        return pv.encode_produce_response_values(current_results_of(f))
    if body_type == "produce_response_latest_values":
        return pv.encode_produce_response_values(latest_results_of(f), latest=True)
    if body_type == "fetch_request":
        return fetch_msg.encode_fetch_request(fetch_msg.FetchRequest(**f))
    if body_type == "fetch_stream_request":
        return fs.encode_fetch_stream_request(fs.FetchStreamRequest(**f))
    if body_type == "cancel_fetch_stream_request":
        return fs.encode_cancel_fetch_stream(f["correlation_id"])
    if body_type == "cancel_fetch_stream_response":
        return fs.encode_cancel_fetch_stream_answer(f["ended"])
    if body_type == "fetch_stream_credit_request":
        return fs.encode_fetch_stream_credit(fs.FetchStreamCredit(**f))
    if body_type == "fetch_stream_credit_response":
        return fs.encode_fetch_stream_credit_answer(f["remaining"])
    if body_type == "replica_fetch_request":
        return rf.encode_replica_fetch_request(replica_fetch_request_of(f))
    if body_type == "replica_fetch_response":
        return rf.encode_replica_fetch_response(replica_fetch_answers_of(f), f["flags"])
    assert body_type == "fetch_response"
    data = b"".join(encode_record(record_of(r)) for r in f["records"])
    data += bytes.fromhex(f["trailing_hex"])
    head = fetch_msg.encode_fetch_response_header(
        f["error_code"], f["hw"], f["log_start"], f["leo"], len(data)
    )
    return head + data


def check_decoded_body(body_type: str, f: Any, body: bytes) -> None:
    if body_type == "json":
        assert msg.decode_json(body) == f
    elif body_type == "error":
        assert msg.decode_error(body) == msg.ErrorBody(**f)
    elif body_type == "produce_request":
        assert msg.decode_produce_request(body) == produce_request_of(f)
    elif body_type == "produce_response":
        assert msg.decode_produce_response(body) == [msg.ProduceResult(**r) for r in f["results"]]
    elif body_type == "produce_response_current_values":
        assert pv.decode_produce_response_values(body) == current_results_of(f)
    elif body_type == "produce_response_latest_values":
        assert pv.decode_produce_response_values(body, latest=True) == latest_results_of(f)
    elif body_type == "produce_many_request":
        sections = pm.decode_produce_many_request(body)
        assert [msg.decode_produce_request(s) for s in sections] == [
            produce_request_of(r) for r in f["sections"]
        ]
    elif body_type == "produce_many_response":
        decoded = pm.decode_produce_many_response(body)
        assert decoded == produce_many_sections_of(f)
        for section, want in zip(decoded, f["sections"], strict=True):
            if section.error_code:
                assert msg.decode_error(section.body) == msg.ErrorBody(**want["error"])
            else:
                results = msg.decode_produce_response(section.body)
                assert results == [msg.ProduceResult(**r) for r in want["results"]]
    elif body_type == "fetch_request":
        assert fetch_msg.decode_fetch_request(body) == fetch_msg.FetchRequest(**f)
    elif body_type == "fetch_stream_request":
        assert fs.decode_fetch_stream_request(body) == fs.FetchStreamRequest(**f)
    elif body_type == "cancel_fetch_stream_request":
        assert fs.decode_cancel_fetch_stream(body) == f["correlation_id"]
    elif body_type == "cancel_fetch_stream_response":
        assert fs.decode_cancel_fetch_stream_answer(body) is f["ended"]
    elif body_type == "fetch_stream_credit_request":
        assert fs.decode_fetch_stream_credit(body) == fs.FetchStreamCredit(**f)
    elif body_type == "fetch_stream_credit_response":
        assert fs.decode_fetch_stream_credit_answer(body) == f["remaining"]
    elif body_type == "replica_fetch_request":
        assert rf.decode_replica_fetch_request(body) == replica_fetch_request_of(f)
    elif body_type == "replica_fetch_response":
        decoded = rf.decode_replica_fetch_response(body)
        assert decoded.flags == f["flags"]
        assert [attrs.evolve(a, records=bytes(a.records)) for a in decoded.answers] == (
            replica_fetch_answers_of(f)
        )
    else:
        header, records = fetch_msg.decode_fetch_response(body)
        assert (header.error_code, header.hw, header.log_start, header.leo) == (
            f["error_code"],
            f["hw"],
            f["log_start"],
            f["leo"],
        )
        assert header.records_len == len(records)
        assert list(iter_records(records)) == [record_of(r) for r in f["records"]]


@pytest.mark.parametrize("case", PROTOCOL["cases"], ids=ids(PROTOCOL["cases"]))
def test_protocol_vector(case: dict[str, Any]) -> None:
    raw = bytes.fromhex(case["hex"])
    f = case["fields"]
    body = encode_body(f["body_type"], f["body"])
    assert fr.encode_frame(f["api"], f["correlation_id"], body, flags=f["flags"]) == raw
    header = fr.encode_frame_header(f["api"], f["correlation_id"], len(body), flags=f["flags"])
    assert header == raw[: fr.FRAME_HEADER_SIZE]
    decoder = fr.FrameDecoder()
    decoder.feed(raw)
    frame = decoder.next_frame()
    assert frame == fr.Frame(
        api=f["api"], flags=f["flags"], correlation_id=f["correlation_id"], body=body
    )
    assert decoder.next_frame() is None
    assert decoder.buffered_bytes == 0
    check_decoded_body(f["body_type"], f["body"], frame.body)


def decode_frame(raw: bytes, max_frame_bytes: int) -> fr.Frame | None:
    decoder = fr.FrameDecoder(max_frame_bytes)
    decoder.feed(raw)
    return decoder.next_frame()


DECODERS: dict[str, Any] = {
    "json": msg.decode_json,
    "error": msg.decode_error,
    "produce_request": msg.decode_produce_request,
    "produce_response": msg.decode_produce_response,
    "produce_response_current_values": pv.decode_produce_response_values,
    "fetch_request": fetch_msg.decode_fetch_request,
    "produce_many_request": pm.decode_produce_many_request,
    "produce_many_response": pm.decode_produce_many_response,
    "fetch_response": fetch_msg.decode_fetch_response,
    "fetch_stream_request": fs.decode_fetch_stream_request,
    "cancel_fetch_stream_request": fs.decode_cancel_fetch_stream,
    "cancel_fetch_stream_response": fs.decode_cancel_fetch_stream_answer,
    "fetch_stream_credit_request": fs.decode_fetch_stream_credit,
    "fetch_stream_credit_response": fs.decode_fetch_stream_credit_answer,
    "replica_fetch_request": rf.decode_replica_fetch_request,
    "replica_fetch_response": rf.decode_replica_fetch_response,
}


@pytest.mark.parametrize("case", PROTOCOL["invalid"], ids=ids(PROTOCOL["invalid"]))
def test_protocol_invalid_vector(case: dict[str, Any]) -> None:
    raw = bytes.fromhex(case["hex"])
    if case["type"] == "frame":
        limit = case.get("max_frame_bytes", fr.DEFAULT_MAX_FRAME_BYTES)
        with pytest.raises(CodecError) as info:
            decode_frame(raw, limit)
    else:
        with pytest.raises(CodecError) as info:
            DECODERS[case["type"]](raw)
    assert info.value.reason == case["error_reason"]


def test_json_acks() -> None:
    cases = ENVELOPE["json_acks"]
    assert {"json_ack", "json_ack_duplicate", "json_ack_error"} <= set(ids(cases))
    for case in cases:
        f = case["fields"]
        raw = case["text"].encode()
        encoded = encode_json_ack(
            f["stream"], f["partition"], f["offset"], f["error_code"], f["error_message"]
        )
        assert encoded == raw, case["name"]
        assert decode_json_ack(raw) == (
            f["stream"],
            f["partition"],
            f["offset"],
            f["error_code"],
            f["error_message"],
        ), case["name"]


def test_nats_header_blocks() -> None:
    cases = ENVELOPE["nats_header_blocks"]
    assert {"repeated_names_and_case", "empty_and_binary_values"} <= set(ids(cases))
    for case in cases:
        block = bytes.fromhex(case["block_hex"])
        assert parse_header_block(block) == headers_of(case["headers"]), case["name"]
