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
