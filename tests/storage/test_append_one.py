"""``Log.append_one`` (a one-record append framed and written directly) stores what
``Log.append`` of the same one-record batch stores: the same files, byte for byte, the
same offsets, timestamps, index entries, rolls and errors."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from jetsdk.codec.record import encode_body
from jetserver.storage import Log, LogConfig, framing
from jetserver.storage.errors import InvalidRecordsError

_CONFIG = LogConfig(segment_max_bytes=3_000, index_interval_bytes=300)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def _body(value: int, cut: int, kind: str) -> framing.Body:
    whole = encode_body(bytes([value % 251]) * value, key=b"k1")
    if kind == "whole":
        return whole
    at = min(cut, len(whole))
    if kind == "checked":  # a value whose CRC is known (a large value's, in the broker)
        tail = memoryview(whole)[at:]
        return framing.CheckedBody(whole[:at], tail, framing._crc32(tail, 0), len(tail))
    return whole[:at], memoryview(whole)[at:]


def _records() -> list[tuple[int, int, str, int, int]]:
    """(value bytes, cut, kind, timestamp step, epoch step): first records of 100 stored
    bytes (an index entry exactly one interval after the last), then a seeded mix, from
    4,096 stored bytes on (the general path) and timestamps that go back."""
    rng = random.Random(32)
    even = [(55, 9, "split", 1, 0)] * 12
    kinds = ["split", "split", "split", "whole", "checked"]
    mixed = [
        (rng.choice([0, 1, 55, 300, 4_030, 4_040, 5_000]), rng.randrange(40), rng.choice(kinds))
        for _ in range(150)
    ]
    return even + [(v, c, k, rng.randrange(-5, 6), int(rng.random() < 0.05)) for v, c, k in mixed]


def test_append_one_stores_what_append_of_one_stores(tmp_path: Path) -> None:
    assert len(encode_body(b"x" * 55, key=b"k1")) + 28 == 100
    one_dir, batch_dir = tmp_path / "one", tmp_path / "batch"
    one, batch = Log.open(one_dir, _CONFIG), Log.open(batch_dir, _CONFIG)
    ts, epoch = 1_000, 0
    try:
        for value, cut, kind, step, epoch_step in _records():
            ts += step
            epoch += epoch_step
            got = one.append_one(_body(value, cut, kind), ts, epoch)
            assert got == batch.append([_body(value, cut, kind)], ts, epoch)
            assert one.log_end_offset == batch.log_end_offset == got[0] + 1
        assert _files(one_dir) == _files(batch_dir)
    finally:
        one.close()
        batch.close()
    files = _files(one_dir)
    assert files == _files(batch_dir)  # with the index files written at the close
    assert sum(name.endswith(".index") and len(data) > 0 for name, data in files.items()) >= 5


def test_append_one_refuses_what_append_refuses(tmp_path: Path) -> None:
    with Log.open(tmp_path, _CONFIG) as log:
        log.append_one((b"head", b"tail"), 10, 3)
        with pytest.raises(InvalidRecordsError, match="below the latest"):
            log.append_one((b"head", b"tail"), 11, 2)
        assert log.log_end_offset == 1
        assert log.append_one((b"h", b"t"), 5, 3) == (1, 10)  # the log's last timestamp
