"""The key index behind ``Jet-Expected-Key-Offset`` (spec/storage.md §11.1) on a real log:
last live offset per key, tombstones, the batch being appended, rebuild on a new epoch or
a log cut back, the bound, and body scanning."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import HEADER, decode_record, encode_body
from jetsdk.codec.record_controls import record_controls
from jetsdk.codec.ttl import TTL_HEADER
from jetserver.broker.key_index import (
    ABSENT,
    IndexBehind,
    IndexFull,
    KeyIndex,
    _plain_fields,
    scan_body,
)
from jetserver.storage import Log
from jetserver.storage.config import LogConfig


def put(key: bytes, value: bytes, *headers: tuple[str, bytes]) -> bytes:
    return encode_body(value, key=key, subject="t", headers=headers)


def test_offsets_tombstones_and_pending(tmp_path: Path) -> None:
    with Log.open(tmp_path / "p") as log:
        log.append([put(b"a", b"1"), put(b"b", b"1"), put(b"a", b"2"), put(b"b", b"")], 1, 0)
        index = KeyIndex()
        assert index.offset_of(log, 0, b"a", []) == 2
        assert index.offset_of(log, 0, b"b", []) == ABSENT  # deleted
        assert index.offset_of(log, 0, b"c", []) == ABSENT
        assert index.rebuilds == 1
        log.append([put(b"c", b"1")], 2, 0)
        pending = [put(b"a", b""), put(b"b", b"3")]  # to be appended at 5 and 6
        assert index.offset_of(log, 0, b"c", pending) == 4  # caught up, not rebuilt
        assert index.offset_of(log, 0, b"a", pending) == ABSENT
        assert index.offset_of(log, 0, b"b", pending) == 6
        pending.append(put(b"a", b"9"))
        assert index.offset_of(log, 0, b"a", pending) == 7
        assert index.rebuilds == 1
        assert index.offset_of(log, 1, b"a", []) == 2  # a new epoch rebuilds from the log
        assert index.rebuilds == 2
        log.truncate_to(2)  # the log cut back (a follower reconciling): rebuilt too
        assert index.offset_of(log, 1, b"a", []) == 0
        assert index.offset_of(log, 1, b"b", []) == 1
        assert index.rebuilds == 3


def test_bound_refuses_unknown_keys_never_answers_wrong(tmp_path: Path) -> None:
    with Log.open(tmp_path / "p") as log:
        log.append([put(b"k%d" % i, b"v") for i in range(5)], 1, 0)
        index = KeyIndex(max_keys=3)
        assert index.offset_of(log, 0, b"k0", []) == 0
        assert index.full
        assert len(index) == 3
        with pytest.raises(IndexFull):
            index.offset_of(log, 0, b"k4", [])
        with pytest.raises(IndexFull):
            index.offset_of(log, 0, b"never", [])


def test_a_long_log_is_indexed_over_several_checks(tmp_path: Path) -> None:
    """A check reads at most ``scan_budget`` records; until the index reaches the log end
    it answers IndexBehind (UNAVAILABLE on the wire), and each check reads further."""
    config = LogConfig(segment_max_bytes=4096)  # many small segments: many reads
    with Log.open(tmp_path / "p", config) as log:
        for i in range(40):
            log.append([put(b"k%d" % (j % 7), b"v%d" % i) for j in range(10)], i + 1, 0)
        index = KeyIndex(scan_budget=50)
        ends: list[int] = []
        for _ in range(100):
            try:
                found = index.offset_of(log, 0, b"k3", [])
                break
            except IndexBehind as exc:
                ends.append(exc.end)
        assert len(ends) >= 3  # spread over several checks
        assert set(ends) == {400}
        assert found == 393  # the last record of k3: batch 39, j = 3
        assert index.rebuilds == 1


def test_body_scan() -> None:
    body = encode_body(b"v", key=b"key", subject="s", reply="r", headers=(("X", b"1"),))
    assert scan_body(body) == (b"key", False)
    assert scan_body(encode_body(b"", key=b"k")) == (b"k", True)
    assert scan_body(encode_body(b"", key=None)) == (None, False)
    assert scan_body(encode_body(b"v", key=b"k", producer_id=7, producer_seq=1)) == (b"k", False)
    with pytest.raises(CodecError):
        scan_body(body[:9])


def test_record_controls_of_produce_messages() -> None:
    """Jet-Expected-Key-Offset is a control of Produce messages (not stored, like
    Jet-Expected-Offset): -1 or an offset; anything else is an error."""
    got = record_controls((("X", b"1"), ("jet-expected-KEY-offset", b"12")))
    assert got is not None
    assert got.expected_key_offset == 12
    assert got.headers == (("X", b"1"),)
    absent = record_controls((("Jet-Expected-Key-Offset", b"-1"),))
    assert absent is not None
    assert absent.expected_key_offset == -1
    bad = record_controls((("Jet-Expected-Key-Offset", b"-2"),))
    assert bad is not None
    assert bad.error.startswith("Jet-Expected-Key-Offset must be")


def test_ttl_records_count_until_their_expiry(tmp_path: Path) -> None:
    """spec/storage.md §11.2: a record with Jet-TTL is the key's offset until its expiry
    (timestamp + TTL, by the wall clock), then the key is absent, as after a tombstone; on a
    rebuild too. A later put without TTL is live; a malformed TTL is no TTL."""
    now = time.time_ns()
    hour, old = (TTL_HEADER, b"3600000"), now - 10 * 10**9
    with Log.open(tmp_path / "p") as log:
        log.append([put(b"gone", b"1", (TTL_HEADER, b"1000"))], old, 0)  # expired 9 s ago
        log.append([put(b"back", b"1", (TTL_HEADER, b"1000"))], old, 0)
        log.append([put(b"bad", b"1", (TTL_HEADER, b"1x"))], old, 0)
        log.append([put(b"live", b"1", hour), put(b"back", b"2")], now, 0)
        index = KeyIndex()
        assert index.offset_of(log, 0, b"gone", []) == ABSENT
        assert index.offset_of(log, 0, b"back", []) == 4
        assert index.offset_of(log, 0, b"bad", []) == 2
        assert index.offset_of(log, 0, b"live", []) == 3
        assert index.offset_of(log, 1, b"gone", []) == ABSENT  # rebuilt: the same answers
        assert index.offset_of(log, 1, b"live", []) == 3
        assert index.rebuilds == 2
        log.append([put(b"gone", b"again")], now, 0)  # put again: live (no TTL)
        assert index.offset_of(log, 1, b"gone", []) == 5


def test_a_cut_refilled_before_the_next_check_rebuilds(tmp_path: Path) -> None:
    """An fsync failure cuts the log back and appends refill the freed offsets before the
    next check: the log end alone does not show the cut, the count of cuts does. Without
    it the index kept ``k`` at offset 2, a record of another key now."""
    with Log.open(tmp_path / "p") as log:
        log.append([put(b"k", b"1"), put(b"x", b"1"), put(b"k", b"2")], 1, 0)
        index = KeyIndex()
        assert index.offset_of(log, 0, b"k", []) == 2
        log.truncate_to(2)  # as Log.recover_unsynced after a failed fsync
        log.append([put(b"y", b"1"), put(b"y", b"2")], 2, 0)  # 2 and 3: past the old end
        assert index.offset_of(log, 0, b"k", [], cuts=1) == 0
        assert index.rebuilds == 2
        assert index.recent_value(b"k", 2) is None  # the cut record's value is forgotten too
        assert index.recent_value(b"k", 0) == b"1"


def test_recent_values_are_bounded_and_exact(tmp_path: Path) -> None:
    with Log.open(tmp_path / "p") as log:
        log.append([put(b"a", b"1" * 40), put(b"b", b"2" * 40), put(b"a", b"3" * 40)], 1, 0)
        index = KeyIndex(recent_bytes=100)
        assert index.offset_of(log, 0, b"a", []) == 2
        assert index.recent_value(b"a", 2) == b"3" * 40
        assert index.recent_value(b"a", 0) is None  # only the record at that offset
        assert index.recent_value(b"b", 1) == b"2" * 40
        log.append([put(b"c", b"4" * 40), put(b"b", b"")], 2, 0)
        assert index.offset_of(log, 0, b"c", []) == 3
        assert index.recent_value(b"b", 1) is None  # deleted
        assert index.recent_value(b"c", 3) == b"4" * 40
        log.append([put(b"d", b"5" * 40)], 3, 0)
        assert index.offset_of(log, 0, b"d", []) == 5
        assert index.recent_value(b"a", 2) is None  # the oldest, dropped for the bound
        assert index.recent_value(b"d", 5) == b"5" * 40


class CountedReads:
    """A log whose reads are counted (everything else goes to the real one)."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.reads = 0

    def read(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return self.log.read(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.log, name)


def test_appends_it_is_told_of_are_indexed_without_reading_the_log(tmp_path: Path) -> None:
    """The sequencer tells the index of each batch it appends: a caught-up index takes the
    records from their bodies (TTL, tombstones, recent values and two-part bodies as read
    from the log), so a check after one's own append reads nothing back. An append it was
    not told of, or told of out of order, is read from the log at the next check."""
    now = time.time_ns() - 10 * 10**9  # stamps 10 s ago: a 1 s TTL has run out
    with Log.open(tmp_path / "p") as log:
        reads = CountedReads(log)
        log.append([put(b"a", b"1")], now, 0)
        index = KeyIndex()
        assert index.offset_of(reads, 0, b"a", []) == 0  # type: ignore[arg-type]
        built = reads.reads
        for i in range(5):
            value = b"v%d" % i
            bodies: list[Any] = [
                put(b"a", value),
                put(b"b", b""),
                put(b"t", b"1", (TTL_HEADER, b"1000")),
            ]
            bodies[0] = (bodies[0][:7], memoryview(bodies[0])[7:])  # a two-part body
            first, ts = log.append(bodies, now, 0)
            index.appended(0, 0, first, ts, bodies)
            assert index.offset_of(reads, 0, b"a", []) == first  # type: ignore[arg-type]
            assert index.offset_of(reads, 0, b"b", []) == ABSENT  # type: ignore[arg-type]
            assert index.recent_value(b"a", first) == value
        assert index.offset_of(reads, 0, b"t", []) == ABSENT  # type: ignore[arg-type]
        assert reads.reads == built
        log.append([put(b"c", b"1")], now, 0)  # not told
        first, ts = log.append([put(b"a", b"late")], now, 0)
        index.appended(0, 0, first, ts, [put(b"a", b"late")])  # after a gap: ignored
        index.appended(1, 0, first, ts, [put(b"a", b"late")])  # another epoch: ignored
        assert index.offset_of(reads, 0, b"c", []) == first - 1  # type: ignore[arg-type]
        assert index.offset_of(reads, 0, b"a", []) == first  # type: ignore[arg-type]
        assert reads.reads > built
        assert index.rebuilds == 1


@pytest.mark.parametrize("producer", [None, (7, 3)])
def test_plain_bodies_read_as_the_full_decoder_reads_them(producer: tuple[int, int] | None) -> None:
    """``_plain_fields`` (the index's shortcut for an appended body with no reply and no
    headers) gives the key and value decode_record gives, and declines (None) a body with a
    reply or headers, or one cut short."""
    pid, seq = producer or (None, 0)
    cases = [(b"k", b"v" * 100), (b"k", b""), (None, b"v"), (b"", b"x")]
    for key, value in cases:
        body = encode_body(value, key=key, subject="s.t", producer_id=pid, producer_seq=seq)
        framed = HEADER.pack(5, 1, 0, len(body), 0) + body
        record, _end = decode_record(framed, verify=False)
        assert _plain_fields(body) == (record.key, record.value)
        assert _plain_fields(body[:-1]) is None
    assert _plain_fields(encode_body(b"v", key=b"k", subject="s", reply="r")) is None
    headers = ((TTL_HEADER, b"1000"),)
    assert _plain_fields(encode_body(b"v", key=b"k", subject="s", headers=headers)) is None
