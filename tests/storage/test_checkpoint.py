from __future__ import annotations

from pathlib import Path

import pytest

from jetserver.storage import CorruptFileError
from jetserver.storage.checkpoint import (
    MAX_CHECKPOINT_BYTES,
    format_checkpoint,
    parse_checkpoint,
    read_checkpoint,
    read_single_value,
    write_checkpoint,
)
from jetserver.storage.files import READ_CHUNK, SMALL_READ, FileTooLarge, read_file_if_exists


def test_format_is_kafka_like() -> None:
    assert format_checkpoint([(42,)]) == b"0\n1\n42\n"
    assert format_checkpoint([(0, 0), (3, 120)]) == b"0\n2\n0 0\n3 120\n"
    assert format_checkpoint([]) == b"0\n0\n"
    with pytest.raises(ValueError):
        format_checkpoint([(-1,)])


def test_parse_round_trip() -> None:
    assert parse_checkpoint(b"0\n2\n0 0\n3 120\n", 2) == [(0, 0), (3, 120)]
    assert parse_checkpoint(b"0\n0\n", 1) == []
    # One entry (most files; parsed in one match) of one, two and three fields.
    assert parse_checkpoint(b"0\n1\n0\n", 1) == [(0,)]
    assert parse_checkpoint(b"0\n1\n42\n", 1) == [(42,)]
    assert parse_checkpoint(b"0\n1\n7 4096\n", 2) == [(7, 4096)]
    assert parse_checkpoint(b"0\n1\n1 2 3\n", 3) == [(1, 2, 3)]
    big = 10**19
    assert parse_checkpoint(b"0\n1\n%d %d\n" % (big, big), 2) == [(big, big)]
    with pytest.raises(CorruptFileError):
        parse_checkpoint(b"0\n1\n42\n", 2)  # too few fields
    with pytest.raises(CorruptFileError):
        parse_checkpoint(b"0\n1\n4 02\n", 2)  # leading zero in the second field
    with pytest.raises(CorruptFileError):
        parse_checkpoint(b"0\n1\n4 2\n\n", 2)  # a trailing empty line


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"0\n1\n42",  # no final newline
        b"1\n1\n42\n",  # unknown version
        b"0\n2\n42\n",  # count mismatch
        b"0\n1\n042\n",  # leading zero
        b"0\n1\n-4\n",
        b"0\n1\n4 2\n",  # wrong field count
        b"0\n1\n 42\n",
        b"0\r\n1\r\n42\r\n",
        b"0\n1\n99999999999999999999999\n",
    ],
)
def test_parse_is_strict(data: bytes) -> None:
    with pytest.raises(CorruptFileError):
        parse_checkpoint(data, 1)


def test_files(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path, "hw", 1) is None
    write_checkpoint(tmp_path, "hw", [(7,)])
    assert read_single_value(tmp_path, "hw") == 7
    (tmp_path / "two").write_bytes(b"0\n2\n1\n2\n")
    with pytest.raises(CorruptFileError):
        read_single_value(tmp_path, "two")


def test_reads_whole_files_and_refuses_oversized_checkpoints(tmp_path: Path) -> None:
    # The one-open read used at every partition's open: missing, empty, small and
    # multi-chunk files, and a checkpoint past its size bound stays a corrupt file.
    assert read_file_if_exists(tmp_path / "missing") is None
    (tmp_path / "empty").write_bytes(b"")
    assert read_file_if_exists(tmp_path / "empty") == b""
    big = bytes(range(256)) * (READ_CHUNK // 100)
    (tmp_path / "big").write_bytes(big)
    assert read_file_if_exists(tmp_path / "big") == big
    with pytest.raises(FileTooLarge):
        read_file_if_exists(tmp_path / "big", limit=len(big) - 1)
    # Around the first read's size (one read below it, fstat and more reads from it on).
    for size in (1, SMALL_READ - 1, SMALL_READ, SMALL_READ + 1, 2 * SMALL_READ):
        data = bytes(range(251)) * (size // 251) + bytes(range(size % 251))
        (tmp_path / "f").write_bytes(data)
        assert read_file_if_exists(tmp_path / "f") == data
        assert read_file_if_exists(str(tmp_path / "f"), limit=size) == data
        with pytest.raises(FileTooLarge):
            read_file_if_exists(tmp_path / "f", limit=size - 1)
    assert read_checkpoint(tmp_path, "missing", 1) is None
    with (tmp_path / "huge").open("wb") as f:
        f.truncate(MAX_CHECKPOINT_BYTES + 1)
    with pytest.raises(CorruptFileError, match="too large"):
        read_checkpoint(tmp_path, "huge", 1)
