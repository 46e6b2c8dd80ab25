"""The current value a refused compare-and-set carries back (spec/protocol.md §6, "current
values") read from a real log: uncommitted records count, another key's record or a
tombstone at the offset gives none, a compressed value is left out, and the bytes of one
response are bounded."""

from __future__ import annotations

from pathlib import Path

from jetsdk.codec.compression import COMPRESSION_HEADER
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, encode_produce_request
from jetsdk.codec.record import encode_body
from jetsdk.codec.transcode import DirectRecord, produce_envelopes
from jetserver.broker.current_values import current_values, value_at
from jetserver.storage import Log

REFUSED = int(ErrorCode.WRONG_EXPECTED_KEY_OFFSET)


def put(key: bytes, value: bytes, *headers: tuple[str, bytes]) -> bytes:
    return encode_body(value, key=key, subject="t", headers=headers)


def direct_records(*keys: bytes | None) -> list[DirectRecord | None]:
    """Where each message of a Produce request of compare-and-sets on ``keys`` lies (as the
    server's direct path finds them)."""
    messages = tuple(
        ProduceMessage(b"new", key, (("Jet-Expected-Key-Offset", b"0"),)) for key in keys
    )
    body = encode_produce_request(ProduceRequest("t", 0, 2, 1000, messages, current_values=True))
    records: list[DirectRecord | None] = []
    produce_envelopes(body, "_INBOX.t", records)
    return records


def test_value_at_reads_past_the_high_watermark(tmp_path: Path) -> None:
    with Log.open(tmp_path / "p") as log:
        log.append([put(b"a", b"1"), put(b"b", b"2"), put(b"a", b"")], 1, 0)
        assert log.high_watermark == 0  # nothing committed: the index counts them anyway
        assert value_at(log, 0, b"a") == b"1"
        assert value_at(log, 1, b"b") == b"2"
        assert value_at(log, 1, b"a") is None  # another key's record
        assert value_at(log, 2, b"a") is None  # a tombstone
        assert value_at(log, 3, b"a") is None  # past the end
        assert value_at(log, -1, b"a") is None
        log.append([put(b"z", b"zz", (COMPRESSION_HEADER, b"zstd"))], 2, 0)
        assert value_at(log, 3, b"z") is None  # stored compressed: left out


def test_values_by_result_and_the_bound(tmp_path: Path) -> None:
    with Log.open(tmp_path / "p") as log:
        log.append([put(b"a", b"x" * 600), put(b"b", b"y" * 600), put(b"c", b"z" * 10)], 1, 0)
        records = direct_records(b"a", b"b", b"c", b"a", None)
        results = [(REFUSED, 0, -1), (REFUSED, 1, -1), (REFUSED, 2, -1), (0, 7, 5)]
        results.append((REFUSED, -1, -1))
        values = current_values(log, records, results, budget=1000)
        # the second value would pass the bound: left out; the third still fits
        assert values == [b"x" * 600, None, b"z" * 10, None, None]
        all_of = [b"x" * 600, b"y" * 600, b"z" * 10, None, None]
        assert current_values(log, records, results) == all_of
        assert current_values(None, records, results) == [None] * 5  # through NATS
        assert current_values(log, None, results) == [None] * 5
