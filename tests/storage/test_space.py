"""Free space (spec/storage.md §13): the log's space guard, the floor, the reserve and its
release on ENOSPC, on real files in a temporary directory."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from jetsdk.codec.record import encode_body, frame_body
from jetserver.storage import DiskFull, Log
from jetserver.storage.space import (
    DEFAULT_FLOOR_BYTES,
    DEFAULT_RESERVE_BYTES,
    RESERVE_FILE,
    RESERVES,
    DiskSpace,
    Reserve,
    default_floor,
    default_reserve,
    usage,
    with_reserve,
)
from support.tmpfs import mount_tmpfs, unmount

from .helpers import SMALL, bodies

RESERVE = 64 * 1024


@pytest.fixture
def space(tmp_path: Path) -> Iterator[DiskSpace]:
    """A DiskSpace (no floor, a 64 KiB reserve) on a 4 MiB tmpfs of its own, so that no
    other writer moves its free space (needs root; skipped otherwise)."""
    mnt = tmp_path / "disk"
    mount_tmpfs(mnt, "4m")
    try:
        disk = DiskSpace.open(mnt / "data", floor_bytes=0, reserve_bytes=RESERVE)
        try:
            yield disk
        finally:
            disk.close()
    finally:
        unmount(mnt)


def refuse(nbytes: int) -> None:
    raise DiskFull(f"refused {nbytes} bytes")


def test_guard_refuses_append_and_append_raw_writing_nothing(tmp_path: Path) -> None:
    seen: list[int] = []
    with Log.open(tmp_path / "log", SMALL) as log:
        log.append(bodies(2), 1, 0)
        log.space_guard = seen.append
        log.append(bodies(3), 2, 0)
        assert log.log_end_offset == 5
        assert len(seen) == 1
        assert seen[0] > 0  # the framed batch's size
        size = log.size_bytes
        log.space_guard = refuse
        with pytest.raises(DiskFull):
            log.append(bodies(3), 3, 0)
        with pytest.raises(DiskFull):
            log.append_raw(frame_body(5, 4, 0, encode_body(b"copied")))
        assert log.log_end_offset == 5
        assert log.size_bytes == size
        log.space_guard = None
        assert log.append_raw(frame_body(5, 4, 0, encode_body(b"copied"))) == 6


def test_defaults_scale_down_on_a_small_file_system() -> None:
    assert default_floor(1 << 40) == DEFAULT_FLOOR_BYTES
    assert default_reserve(1 << 40) == DEFAULT_RESERVE_BYTES
    assert default_floor(4 * 1024 * 1024) == 209715  # 5 %
    assert default_reserve(4 * 1024 * 1024) == 83886  # 2 %


def test_reserve_is_allocated_and_kept_across_runs(space: DiskSpace) -> None:
    path = space.directory / RESERVE_FILE
    assert space.reserve.held
    assert path.stat().st_blocks * 512 >= RESERVE
    space.close()
    again = DiskSpace.open(space.directory, floor_bytes=0, reserve_bytes=RESERVE)
    try:
        assert again.reserve.held
        assert again.reserve.releases == 0
    finally:
        again.close()
    none = DiskSpace.open(space.directory, floor_bytes=0, reserve_bytes=0)
    none.close()
    assert not path.exists()  # no reserve wanted: the old file goes


def test_floor_refuses_and_names_it(space: DiskSpace) -> None:
    space.check(1024)
    free, _total = usage(space.directory)
    space.floor_setting = free + (1 << 30)  # above what is free: refused at once
    space.sample()
    with pytest.raises(DiskFull, match="below the floor of"):
        space.check(1024)
    assert space.refusing
    assert space.refused_checks == 1
    space.floor_setting = 0
    space.check(1024)  # refusing: the next check samples again
    assert not space.refusing


def test_estimate_crossing_the_floor_samples_again(space: DiskSpace) -> None:
    free, _total = usage(space.directory)
    space.floor_setting = free - 512 * 1024  # 512 KiB above the floor
    space.sample()
    space.check(0)
    # The estimate says this write crosses the floor: the file system is asked again (it
    # has not changed, so the write is accepted).
    space.check(1 << 20)
    assert not space.refusing
    assert space._written == 1 << 20


def test_enospc_releases_the_reserve_once(space: DiskSpace, tmp_path: Path) -> None:
    target = space.directory / "metadata.json"
    calls: list[bool] = []

    def write() -> str:
        calls.append(space.reserve.held)
        if space.reserve.held:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return "written"

    assert with_reserve(target, write) == "written"
    assert calls == [True, False]
    assert not (space.directory / RESERVE_FILE).exists()
    assert space.reserve.releases == 1

    # No reserve left: the error stands (no loop).
    def full() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError, match="No space left"):
        with_reserve(target, full)
    # Other errors are not the reserve's business.
    space.reserve.ensure()

    def denied() -> None:
        raise PermissionError(errno.EACCES, "denied")

    with pytest.raises(PermissionError):
        with_reserve(target, denied)
    assert space.reserve.held
    # A file on another file system does not release it.
    assert not RESERVES.release_for(Path("/proc/self"))


def test_released_reserve_counts_as_used(space: DiskSpace) -> None:
    free, _total = usage(space.directory)
    space.floor_setting = free + RESERVE // 2  # refused with the reserve held...
    space.sample()
    assert space.refusing
    assert space.reserve.release()
    assert usage(space.directory)[0] >= space.floor_setting
    space.sample()  # ...and still refused once its release freed more than the gap
    assert space.refusing


def test_reserve_without_fallocate_writes_zeros(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where there is no posix_fallocate (macOS), the reserve is written with zeros."""
    monkeypatch.delattr(os, "posix_fallocate", raising=False)
    reserve = Reserve(tmp_path / RESERVE_FILE, 3 * 1024 * 1024 + 5)
    assert reserve.ensure()
    st = reserve.path.stat()
    assert st.st_size == reserve.size
    assert st.st_blocks * 512 >= reserve.size
    assert reserve.release()
    assert not reserve.path.exists()
