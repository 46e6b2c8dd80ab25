from __future__ import annotations

import os
from pathlib import Path

import pytest

from jetserver.storage import LogClosedError
from jetserver.storage.files import (
    FileLease,
    SharedFile,
    parse_segment_file_name,
    segment_file_name,
    write_file_atomically,
)


def test_segment_names() -> None:
    assert segment_file_name(0, ".log") == "00000000000000000000.log"
    assert segment_file_name(1234, ".timeindex") == "00000000000000001234.timeindex"
    assert parse_segment_file_name("00000000000000001234.index") == (1234, ".index")
    assert parse_segment_file_name("1234.log") is None
    assert parse_segment_file_name("00000000000000001234.log.cleaned") is None
    with pytest.raises(ValueError):
        segment_file_name(-1, ".log")
    with pytest.raises(ValueError):
        segment_file_name(1, ".txt")


def test_shared_file_closes_with_last_reference(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    shared = SharedFile.open(path)
    lease = FileLease(shared)
    shared.release_owner()  # the owner lets go (e.g. the segment was deleted)
    os.unlink(path)
    assert os.pread(shared.fd, 5, 0) == b"hello"  # still readable through the lease
    lease.release()
    lease.release()  # idempotent
    assert shared.closed
    with pytest.raises(LogClosedError):
        FileLease(shared)


def test_atomic_write_leaves_no_tmp(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    write_file_atomically(target, b"one")
    write_file_atomically(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_write_all_gathers_parts_beyond_iov_max(tmp_path: Path) -> None:
    # More parts than one pwritev takes, of mixed sizes (views among them), at an offset:
    # the file holds exactly their concatenation after the bytes already there.
    from jetserver.storage.files import IOV_MAX, write_all

    parts: list[bytes | memoryview] = [
        bytes([i % 256]) * (1 + i % 37) for i in range(2 * IOV_MAX + 5)
    ]
    parts[3] = memoryview(b"a view of bytes")[2:]
    path = tmp_path / "gathered"
    path.write_bytes(b"HEAD")
    fd = os.open(path, os.O_RDWR)
    try:
        write_all(fd, parts, 4)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"HEAD" + b"".join(parts)


def test_write_all_writes_at_most_a_piece_per_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One write of 2 MiB or more cost the kernel about three times the CPU per byte of
    # writes of at most 1 MiB (WRITE_PIECE_BYTES): a large buffer, and parts of which one
    # is larger than WRITE_MAX_BYTES, go in pieces (the last up to WRITE_MAX_BYTES whole);
    # the file holds exactly the bytes.
    from jetserver.storage.files import WRITE_MAX_BYTES, WRITE_PIECE_BYTES, write_all

    sizes: list[int] = []
    real_pwrite, real_pwritev = os.pwrite, os.pwritev

    def pwrite(fd: int, data: bytes | memoryview, position: int) -> int:
        sizes.append(len(data))
        return real_pwrite(fd, data, position)

    def pwritev(fd: int, parts: list[bytes | memoryview], position: int) -> int:
        sizes.append(sum(map(len, parts)))
        return real_pwritev(fd, parts, position)

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "pwritev", pwritev)
    big = os.urandom(3 * WRITE_PIECE_BYTES + 5)
    parts: list[bytes | memoryview] = [b"head", memoryview(big)[7:], b"", b"tail"]
    path = tmp_path / "pieces"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        write_all(fd, big, 0)
        write_all(fd, parts, len(big))
    finally:
        os.close(fd)
    assert path.read_bytes() == big + b"".join(parts)
    assert max(sizes) <= WRITE_MAX_BYTES
    assert sum(sizes) == len(big) + sum(map(len, parts))
    # 2 pieces and the last MiB with its 5 bytes; the parts: head with the first piece's
    # rest, a piece, the last MiB and 2 bytes with the tail.
    assert sizes == [WRITE_PIECE_BYTES] * 2 + [WRITE_PIECE_BYTES + 5] + [WRITE_PIECE_BYTES] * 2 + [
        WRITE_PIECE_BYTES + 6
    ]


def test_a_record_of_a_1_mib_value_is_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 39: a stored record of a 1 MiB value (its header and body head, then the value,
    # a view of the request) went in two writes, a 1 MiB one and one of its last bytes;
    # whole buffers up to WRITE_MAX_BYTES go in one. Four such records: one write each.
    from jetserver.storage.files import write_all

    calls: list[int] = []
    real_pwritev = os.pwritev

    def pwritev(fd: int, parts: list[bytes | memoryview], position: int) -> int:
        calls.append(sum(map(len, parts)))
        return real_pwritev(fd, parts, position)

    monkeypatch.setattr(os, "pwritev", pwritev)
    value = os.urandom(1 << 20)
    record: list[bytes | memoryview] = [b"h" * 50, memoryview(value)]
    path = tmp_path / "records"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        write_all(fd, record, 0)
        assert calls == [50 + len(value)]
        write_all(fd, record * 4, len(b"".join(record)))
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(record) * 5
    assert len(calls) == 5  # (a write may end with the next record's 50 bytes)
    assert sum(calls) == 5 * (50 + len(value))
