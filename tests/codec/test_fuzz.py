"""Fuzz-style tests: on any input, decoders return or raise CodecError, nothing else.

Covers random bytes, truncation at every position of valid encodings, and single-byte
mutations (also re-sealed with a valid CRC so the body parsers are reached).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jetsdk.codec import envelope as env
from jetsdk.codec import fetch_messages as fetch_msg
from jetsdk.codec import fetch_stream as fs
from jetsdk.codec import messages as msg
from jetsdk.codec import produce_many as pm
from jetsdk.codec import produce_values as pv
from jetsdk.codec import replica_fetch as rf
from jetsdk.codec import transcode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import Frame, FrameDecoder
from jetsdk.codec.record import HEADER_SIZE, decode_record, encode_record, frame_body, iter_records
from support.vectors import load_vectors

from .strategies import (
    acks,
    envelope_messages,
    fetch_requests,
    json_objects,
    produce_requests,
    produce_results,
    produce_results_with_latest,
    produce_results_with_values,
    records,
)

FUZZ = settings(max_examples=200, deadline=None)


def decode_fetch_with_records(body: bytes) -> None:
    _header, data = fetch_msg.decode_fetch_response(body)
    for _ in iter_records(data):
        pass


def envelopes_of_request(body: bytes) -> None:
    transcode.produce_envelopes(bytes(body), "_INBOX.fuzz")


def envelope_record_checked(raw: bytes) -> None:
    """The server's ingest fast path: never raises; None exactly when the reference parser
    says the payload is not a valid envelope."""
    out = transcode.envelope_record(raw, transcode.record_subjects("s", ""))
    assert (out is None) == (env.parse_nats_payload(raw) is None)
    if out is not None:
        return
    env.decode_message(raw)  # a cookie-less or invalid payload: the reference must refuse


def decode_frames(raw: bytes) -> None:
    decoder = FrameDecoder(max_frame_bytes=1 << 20)
    decoder.feed(raw)
    while decoder.next_frame() is not None:
        pass


DECODERS: dict[str, Callable[[bytes], Any]] = {
    "record": decode_record,
    "iter_records": lambda b: list(iter_records(b)),
    "message": env.decode_message,
    "scan_message": lambda b: env.scan_message(bytes(b)),
    "acks": env.decode_acks,
    "ack_tuples": env.decode_ack_tuples,
    "envelope_record": envelope_record_checked,
    "produce_envelopes": envelopes_of_request,
    "json": msg.decode_json,
    "error": msg.decode_error,
    "produce_request": msg.decode_produce_request,
    "produce_response": msg.decode_produce_response,
    "produce_response_current_values": pv.decode_produce_response_values,
    "produce_response_latest_values": lambda b: pv.decode_produce_response_values(b, True),
    "produce_many_request": pm.decode_produce_many_request,
    "produce_many_response": pm.decode_produce_many_response,
    "fetch_request": fetch_msg.decode_fetch_request,
    "fetch_stream_request": fs.decode_fetch_stream_request,
    "cancel_fetch_stream_request": fs.decode_cancel_fetch_stream,
    "cancel_fetch_stream_response": fs.decode_cancel_fetch_stream_answer,
    "fetch_stream_credit_request": fs.decode_fetch_stream_credit,
    "fetch_stream_credit_response": fs.decode_fetch_stream_credit_answer,
    "fetch_response": decode_fetch_with_records,
    "replica_fetch_request": rf.decode_replica_fetch_request,
    "replica_fetch_response": rf.decode_replica_fetch_response,
    "frames": decode_frames,
}

STRICT = set(DECODERS) - {"iter_records", "frames"}
"""Decoders for which any strict prefix of a valid encoding is an error (a frame decoder and
iter_records wait for / ignore a partial tail instead)."""


def only_codec_error(name: str, data: bytes) -> bool:
    """Decode; True if it raised CodecError. Any other exception fails the test."""
    try:
        DECODERS[name](data)
    except CodecError:
        return True
    return False


def fetch_body(recs: list[Any]) -> bytes:
    data = b"".join(encode_record(r) for r in recs)
    return fetch_msg.encode_fetch_response_header(0, 1, 0, 1, len(data)) + data


replica_fetch_partitions = st.builds(
    rf.ReplicaFetchPartition,
    stream=st.text(min_size=1, max_size=8),
    partition=st.integers(0, 2**32 - 1),
    offset=st.integers(-1, 2**63 - 1),
    replica_id=st.integers(0, 5),
    replica_flushed=st.integers(-1, 2**63 - 1),
    leader_epoch=st.integers(0, 2**63 - 1),
    max_bytes=st.integers(0, 2**32 - 1),
    slot=st.integers(0, 2**32 - 1),
)
replica_fetch_requests = st.builds(
    rf.ReplicaFetchRequest,
    session_id=st.integers(0, 2**64 - 1),
    max_wait_ms=st.integers(0, 2**32 - 1),
    max_bytes=st.integers(0, 2**32 - 1),
    partitions=st.lists(replica_fetch_partitions, max_size=3).map(tuple),
    session_epoch=st.integers(0, 2**32 - 1),
    forget=st.lists(st.integers(0, 2**32 - 1), max_size=3).map(tuple),
)
replica_fetch_answers = st.lists(
    st.builds(
        rf.ReplicaFetchAnswer,
        index=st.integers(0, 2**32 - 1),
        error_code=st.integers(0, 30),
        hw=st.integers(-1, 2**63 - 1),
        log_start=st.integers(-1, 2**63 - 1),
        leo=st.integers(-1, 2**63 - 1),
        message=st.text(max_size=10),
        records=st.binary(max_size=20),
    ),
    max_size=3,
)

ENCODINGS: dict[str, st.SearchStrategy[bytes]] = {
    "record": records.map(encode_record),
    "iter_records": st.lists(records, max_size=3).map(
        lambda rs: b"".join(encode_record(r) for r in rs)
    ),
    "message": envelope_messages().map(env.encode_message),
    "scan_message": envelope_messages().map(env.encode_message),
    "acks": st.lists(acks, min_size=1, max_size=3).map(env.encode_acks),
    "ack_tuples": st.lists(acks, min_size=1, max_size=3).map(env.encode_acks),
    "envelope_record": envelope_messages().map(env.encode_message),
    "produce_envelopes": produce_requests().map(msg.encode_produce_request),
    "json": json_objects.map(msg.encode_json),
    "error": st.tuples(st.integers(0, 30), st.text(max_size=10)).map(
        lambda t: msg.encode_error(t[0], t[1], {"k": t[1]})  # type: ignore[arg-type]
    ),
    "produce_request": produce_requests().map(msg.encode_produce_request),
    "produce_response": st.lists(produce_results, max_size=4).map(msg.encode_produce_response),
    "produce_response_current_values": st.lists(produce_results_with_values, max_size=4).map(
        pv.encode_produce_response_values
    ),
    "produce_response_latest_values": st.lists(produce_results_with_latest, max_size=4).map(
        lambda results: pv.encode_produce_response_values(results, latest=True)
    ),
    "produce_many_request": st.lists(
        produce_requests().map(msg.encode_produce_request), max_size=3
    ).map(pm.encode_produce_many_request),
    "produce_many_response": st.lists(
        st.builds(pm.ProduceSection, st.integers(0, 30), st.binary(max_size=20)), max_size=3
    ).map(pm.encode_produce_many_response),
    "fetch_request": fetch_requests().map(fetch_msg.encode_fetch_request),
    "fetch_stream_request": st.builds(
        fs.FetchStreamRequest,
        st.text(max_size=8),
        st.integers(0, 2**32 - 1),
        st.integers(-(2**63), 2**63 - 1),
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**32 - 1),
    ).map(fs.encode_fetch_stream_request),
    "cancel_fetch_stream_request": st.integers(0, 2**32 - 1).map(fs.encode_cancel_fetch_stream),
    "cancel_fetch_stream_response": st.booleans().map(fs.encode_cancel_fetch_stream_answer),
    "fetch_stream_credit_request": st.builds(
        fs.FetchStreamCredit, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)
    ).map(fs.encode_fetch_stream_credit),
    "fetch_stream_credit_response": st.integers(0, fs.MAX_FETCH_STREAM_RESPONSES).map(
        fs.encode_fetch_stream_credit_answer
    ),
    "fetch_response": st.lists(records, max_size=3).map(fetch_body),
    "replica_fetch_request": replica_fetch_requests.map(rf.encode_replica_fetch_request),
    "replica_fetch_response": replica_fetch_answers.map(rf.encode_replica_fetch_response),
    "frames": st.lists(st.binary(max_size=20), max_size=3).map(
        lambda bodies: b"".join(
            (len(b) + 6).to_bytes(4, "big") + b"\x06\x00\x00\x00\x00\x01" + b for b in bodies
        )
    ),
}


def reseal(name: str, raw: bytes) -> bytes:
    """Recompute the CRC of a (possibly mutated) record or envelope so it passes the check."""
    if name == "record" and len(raw) >= HEADER_SIZE:
        offset = int.from_bytes(raw[:8], "big", signed=True)
        ts = int.from_bytes(raw[8:16], "big", signed=True)
        epoch = int.from_bytes(raw[16:20], "big")
        return frame_body(offset, ts, epoch, raw[HEADER_SIZE:])
    envelopes = ("message", "scan_message", "envelope_record", "acks", "ack_tuples")
    if name in envelopes and len(raw) >= env.ENVELOPE_HEADER_SIZE:
        crc = zlib.crc32(raw[12:], zlib.crc32(raw[:8]))
        return raw[:8] + crc.to_bytes(4, "big") + raw[12:]
    return raw


def vector_encodings() -> list[tuple[str, bytes]]:
    """Valid encodings from the committed vectors, tagged with their decoder."""
    out: list[tuple[str, bytes]] = []
    for case in load_vectors("record.json")["cases"]:
        out.append(("record", bytes.fromhex(case["hex"])))
    for case in load_vectors("envelope.json")["cases"]:
        out.append(("message" if case["type"] == "message" else "acks", bytes.fromhex(case["hex"])))
    for case in load_vectors("protocol.json")["cases"]:
        raw = bytes.fromhex(case["hex"])
        body_type = case["fields"]["body_type"]
        out.append((body_type, raw[10:]))
    return out


VECTOR_ENCODINGS = vector_encodings()


@pytest.mark.parametrize(("name", "raw"), VECTOR_ENCODINGS, ids=[n for n, _ in VECTOR_ENCODINGS])
def test_every_truncation_of_a_vector_fails(name: str, raw: bytes) -> None:
    for cut in range(len(raw)):
        assert only_codec_error(name, raw[:cut]), f"{name} decoded a prefix of {cut} bytes"


@pytest.mark.parametrize(("name", "raw"), VECTOR_ENCODINGS, ids=[n for n, _ in VECTOR_ENCODINGS])
def test_every_single_byte_mutation_of_a_vector_is_handled(name: str, raw: bytes) -> None:
    for i in range(len(raw)):
        for delta in (0x01, 0x80, 0xFF):
            mutated = bytearray(raw)
            mutated[i] ^= delta
            only_codec_error(name, bytes(mutated))
            only_codec_error(name, reseal(name, bytes(mutated)))
            if name == "message":
                env.parse_nats_payload(bytes(mutated))  # must not raise


@pytest.mark.parametrize("name", sorted(DECODERS))
@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes(name: str, data: bytes) -> None:
    only_codec_error(name, data)
    only_codec_error(name, reseal(name, data))


@FUZZ
@given(body=st.binary(max_size=200), kind=st.integers(0, 3), flags=st.integers(0, 3))
def test_random_envelope_bodies_with_valid_crc(body: bytes, kind: int, flags: int) -> None:
    raw = reseal("message", env.COOKIE + bytes([1, kind, 0, flags]) + b"\x00" * 4 + body)
    only_codec_error("message", raw)
    only_codec_error("acks", raw)
    env.parse_nats_payload(raw)


@FUZZ
@given(data=st.data())
def test_every_truncation_of_valid_encodings(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(DECODERS)), label="decoder")
    raw = data.draw(ENCODINGS[name], label="encoding")
    assert not only_codec_error(name, raw)
    for cut in range(len(raw)):
        failed = only_codec_error(name, raw[:cut])
        assert failed or name not in STRICT, f"{name} decoded a prefix of {cut} bytes"


@FUZZ
@given(data=st.data())
def test_single_byte_mutations_of_valid_encodings(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(DECODERS)), label="decoder")
    raw = data.draw(ENCODINGS[name], label="encoding")
    if not raw:
        return
    for _ in range(4):
        mutated = bytearray(raw)
        i = data.draw(st.integers(0, len(raw) - 1), label="position")
        mutated[i] = data.draw(st.integers(0, 255), label="byte")
        only_codec_error(name, bytes(mutated))
        only_codec_error(name, reseal(name, bytes(mutated)))


@FUZZ
@given(data=st.binary(max_size=300), chunks=st.lists(st.integers(0, 50), max_size=20))
def test_frame_decoder_on_random_chunks(data: bytes, chunks: list[int]) -> None:
    # However the bytes arrive, the decoder yields the same frames (and then the same
    # error, if any) as when they arrive in one piece.
    def decode(pieces: list[bytes]) -> tuple[list[Frame], str | None]:
        decoder = FrameDecoder(max_frame_bytes=1000)
        frames: list[Frame] = []
        try:
            for piece in pieces:
                decoder.feed(piece)
                while (frame := decoder.next_frame()) is not None:
                    frames.append(frame)
        except CodecError as exc:
            return frames, type(exc).__name__
        return frames, None

    pieces, pos = [], 0
    for size in [*chunks, len(data)]:
        pieces.append(data[pos : pos + size])
        pos += size
    assert decode(pieces) == decode([data])


@FUZZ
@given(st.binary(max_size=100))
@example(env.encode_message(env.EnvelopeMessage(b"v", key=b"k", ack_inbox="i"))[4:])
def test_parse_nats_payload_never_raises(tail: bytes) -> None:
    # Whatever follows the cookie: either a plain message (None) or a valid envelope, and
    # then exactly the bytes its message encodes to (one encoding per message).
    payload = env.COOKIE + tail
    parsed = env.parse_nats_payload(payload)
    assert parsed is None or env.encode_message(parsed) == payload
    parsed = env.parse_nats_payload(tail)
    assert parsed is None or env.encode_message(parsed) == tail
