"""Batch framing and the append-time index entries match the codec and the spec's rule."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.codec.record import encode_body, frame_body
from jetserver.storage import Log, LogConfig, crc, framing
from jetserver.storage.framing import BULK_MIN_RECORDS, frame_batch, frame_batch_sizes
from jetserver.storage.offset_index import index_points
from jetserver.storage.segment import batch_index_entries

HEADER = 28


def expected(first: int, ts: int, epoch: int, bodies: list[bytes]) -> bytes:
    return b"".join(frame_body(first + i, ts, epoch, b) for i, b in enumerate(bodies))


@settings(max_examples=200, deadline=None)
@given(
    first=st.integers(0, 2**63 - 1000),
    ts=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(0, 2**32 - 1),
    bodies=st.lists(st.binary(max_size=300), max_size=20),
)
def test_frame_batch_matches_the_codec(
    first: int, ts: int, epoch: int, bodies: list[bytes]
) -> None:
    assert frame_batch(first, ts, epoch, bodies) == expected(first, ts, epoch, bodies)


# Offsets next to the boundaries the bulk path splits on: 2**16 (CRC table runs), 2**32
# (the two header words of the offset) and the top of the i64 range.
BOUNDARY_OFFSETS = st.one_of(
    st.integers(0, 2**63 - 200),
    st.sampled_from([0, 1, 2**16 - 30, 2**32 - 30, 2**48 + 2**16 - 7, 2**63 - 100]).flatmap(
        lambda b: st.integers(b, b + 40)
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    first=BOUNDARY_OFFSETS,
    ts=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(0, 2**32 - 1),
    size=st.integers(0, 200),
    varied=st.lists(st.binary(max_size=200), max_size=3),
    n=st.integers(BULK_MIN_RECORDS, 60),
)
def test_bulk_framing_matches_the_codec(
    first: int, ts: int, epoch: int, size: int, varied: list[bytes], n: int
) -> None:
    # Mostly same-size bodies (the uniform path), with up to 3 of other sizes mixed in.
    bodies = [bytes([i % 251]) * size for i in range(n - len(varied))] + varied
    if first + n - 1 > 2**63 - 1:
        first = 2**63 - n
    data, lens, uniform, size = frame_batch_sizes(first, ts, epoch, bodies)
    assert lens == [len(b) for b in bodies]
    assert uniform == (len(set(lens)) == 1)
    joined = data if isinstance(data, bytes) else b"".join(data)
    assert joined == expected(first, ts, epoch, bodies)
    assert size == len(joined)


def test_bulk_framing_edge_cases() -> None:
    big = [b"a" * 65535, b"b" * 65536, b"c" * 70_000, b"", b"d"] * 2
    assert frame_batch(2**16 - 3, 5, 1, big) == expected(2**16 - 3, 5, 1, big)
    same_big = [b"z" * 70_000] * BULK_MIN_RECORDS
    assert frame_batch(7, 5, 1, same_big) == expected(7, 5, 1, same_big)
    # More records than one CRC-table run: crosses 2**16 boundaries several times.
    many = [bytes([i % 7]) for i in range(150_000)]
    assert frame_batch(12_345, -1, 3, many) == b"".join(framing._frame_loop(12_345, -1, 3, many))
    negative = [b"n"] * 20  # i64 offsets may be negative in the format (never in a Log)
    assert frame_batch(-10, 0, 0, negative) == expected(-10, 0, 0, negative)
    mixed = [b"x" * (i % 5) for i in range(70_000)]
    assert frame_batch(2**32 - 5, 0, 0, mixed) == b"".join(
        framing._frame_loop(2**32 - 5, 0, 0, mixed)
    )


@pytest.mark.parametrize(
    ("first", "ts", "epoch"),
    [(2**63 - 3, 0, 0), (-(2**63) - 1, 0, 0), (0, 2**63, 0), (0, -(2**63) - 1, 0), (0, 0, 2**32)],
)
def test_out_of_range_fields_raise_struct_error(first: int, ts: int, epoch: int) -> None:
    with pytest.raises(struct.error):
        frame_batch(first, ts, epoch, [b"x"] * (BULK_MIN_RECORDS + 2))


def test_zlib_fallback_frames_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = [b"v%d" % i for i in range(50)] + [b"same"] * 50
    fast = frame_batch(2**16 - 10, 99, 4, bodies)
    monkeypatch.setattr(framing, "_crc32", zlib.crc32)
    assert frame_batch(2**16 - 10, 99, 4, bodies) == fast == expected(2**16 - 10, 99, 4, bodies)


@pytest.mark.parametrize("n", [1, BULK_MIN_RECORDS + 1])
def test_a_checked_body_is_framed_the_same_without_a_second_pass_over_its_value(
    monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    # Issue 39: a large value's CRC is taken once (for its NATS copy's envelope); its
    # record's CRC combines it with the CRC of the rest of the body, the same bytes as a
    # pass over all of it, without one over the value.
    import os

    value = os.urandom(200_000)
    tail = memoryview(b"\x00\x02hv" + value)
    plain = [(b"head%d" % i, tail) for i in range(n)]
    checked = [framing.CheckedBody(h, t, zlib.crc32(value), len(value)) for h, t in plain]
    want = frame_batch(7, 99, 3, plain)
    assert want == expected(7, 99, 3, [h + bytes(t) for h, t in plain])
    scanned: list[int] = []
    real = framing._crc32

    def counting(data: bytes | bytearray | memoryview, start: int) -> int:
        scanned.append(len(data))
        return real(data, start)

    monkeypatch.setattr(framing, "_crc32", counting)
    assert frame_batch(7, 99, 3, checked) == want
    assert max(scanned) < len(value)
    assert framing.whole_body(checked[0]) == b"head0" + bytes(tail)


def test_crc_implementation_is_zlibs() -> None:
    assert crc.IMPLEMENTATION in ("isal", "zlib")
    assert crc.crc32(b"123456789", 0) == 0xCBF43926
    data = bytes(range(256)) * 5
    assert crc.crc32(data[100:], crc.crc32(data[:100], 0)) == zlib.crc32(data)


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(0, 3000),
    record=st.integers(HEADER, 600),
    n=st.integers(1, 80),
    interval=st.integers(1, 5000),
    behind=st.integers(0, 6000),
    data=st.data(),
)
def test_batch_index_entries_follow_the_rule(
    size: int, record: int, n: int, interval: int, behind: int, data: st.DataObject
) -> None:
    last_indexed = max(0, size - behind)
    uniform = data.draw(st.booleans())
    if uniform:
        lens = [record - HEADER] * n
    else:
        lens = data.draw(st.lists(st.integers(0, 600), min_size=n, max_size=n))
    starts = [size]
    for length in lens:
        starts.append(starts[-1] + HEADER + length)
    points = index_points(last_indexed, interval, starts, n)
    entries = batch_index_entries(1000, 77, lens, len(set(lens)) == 1, size, last_indexed, interval)
    assert list(entries.offsets) == [1000 + i for i in points]
    assert list(entries.positions) == [starts[i] for i in points]
    assert list(entries.max_timestamps) == [77] * len(points)


@pytest.mark.parametrize("record_size", [40, 100, 333, 1024, 5000, 9000])
def test_index_written_while_appending_equals_the_rebuilt_one(
    tmp_path: Path, record_size: int
) -> None:
    cfg = LogConfig(segment_max_bytes=200_000, index_interval_bytes=700)
    body = encode_body(b"x" * (record_size - 43))
    other = encode_body(b"y" * (record_size // 2))
    with Log.open(tmp_path, cfg) as log:
        for i, n in enumerate([1, 9, 50, 3, 200, 8, 120]):
            log.append([body] * n + [other] * (i % 2), 10 + i, 0)
    written = {p.name: p.read_bytes() for p in tmp_path.glob("*index")}
    assert written
    assert any(written.values())
    for name in written:
        (tmp_path / name).unlink()
    with Log.open(tmp_path, cfg) as log:
        assert log.recovery.indexes_rebuilt >= 2
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*index")} == written


@pytest.mark.parametrize("n", [1, BULK_MIN_RECORDS, 3 * BULK_MIN_RECORDS])
def test_large_records_come_as_parts_to_gather(n: int) -> None:
    # Records of GATHER_MIN_RECORD bytes or more are not joined (the appender writes them
    # with one gathered write); the parts are the headers around the bodies themselves
    # (the same objects, not copies).
    bodies = [bytes([i]) * (framing.GATHER_MIN_RECORD + i) for i in range(n)]
    data, _lens, _uniform, size = frame_batch_sizes(5, 9, 2, bodies)
    assert isinstance(data, list)
    in_parts = {id(part) for part in data}
    assert all(id(body) in in_parts for body in bodies)
    assert b"".join(data) == expected(5, 9, 2, bodies)
    assert size == len(b"".join(data))
    small = [b"s" * 100] * n
    assert isinstance(frame_batch_sizes(5, 9, 2, small).data, bytes)


def _split(body: bytes, at: int) -> framing.Body:
    """``body`` as (head, tail), the tail a view (as a direct Produce message's)."""
    cut = min(at, len(body))
    return body[:cut], memoryview(body)[cut:]


@settings(max_examples=200, deadline=None)
@given(
    first=BOUNDARY_OFFSETS,
    ts=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(0, 2**32 - 1),
    bodies=st.lists(
        st.tuples(st.binary(max_size=300), st.integers(0, 40), st.booleans()), max_size=40
    ),
    gather=st.booleans(),
)
def test_two_part_bodies_are_framed_as_their_concatenation(
    first: int,
    ts: int,
    epoch: int,
    bodies: list[tuple[bytes, int, bool]],
    gather: bool,
) -> None:
    """A body given as (head, tail) is stored exactly as the joined body: same records,
    CRCs and sizes, in the per-record and the bulk path, joined or gathered."""
    whole = [body for body, _at, _split_it in bodies]
    given_ = [_split(body, at) if split_it else body for body, at, split_it in bodies]
    with pytest.MonkeyPatch.context() as mp:
        if gather:
            mp.setattr(framing, "GATHER_MIN_RECORD", 0)
        got = frame_batch_sizes(first, ts, epoch, given_)
    data = got.data if isinstance(got.data, bytes) else b"".join(got.data)
    assert data == expected(first, ts, epoch, whole)
    assert got.body_sizes == [len(b) for b in whole]
    assert got.size == len(data)
    if gather and any(split_it for _b, _a, split_it in bodies):
        assert any(isinstance(part, memoryview) for part in got.data)  # the tail, not copied


def test_a_log_stores_two_part_bodies_as_whole_records(tmp_path: Path) -> None:
    bodies = [encode_body(bytes([i]) * (5000 + i), key=b"k%d" % i) for i in range(12)]
    given_ = [_split(body, 9) if i % 3 else body for i, body in enumerate(bodies)]
    log = Log.open(tmp_path / "p", LogConfig())
    try:
        first, ts = log.append(given_, 1_000, leader_epoch=0)
        read = log.read(first, 1 << 20, log.log_end_offset)
        with read:
            stored = read.read_bytes()
    finally:
        log.close()
    assert stored == expected(first, ts, 0, bodies)
    assert framing.whole_bodies(list(given_), 0) == bodies
