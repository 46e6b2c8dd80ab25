"""File-level helpers: segment file names, shared file descriptors, durable writes."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

from jetserver.storage import durability_trace
from jetserver.storage.errors import LogClosedError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX)
CLEANED_SUFFIX = ".cleaned"
"""Appended to a segment file name while compaction writes its replacement."""
TMP_SUFFIX = ".tmp"
"""Appended to a checkpoint file name while it is written."""
BASE_OFFSET_DIGITS = 20

_SEGMENT_NAME = re.compile(r"^([0-9]{20})(\.log|\.index|\.timeindex)$")


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for base offset 42 and suffix ``.log``."""
    if not 0 <= base_offset < 10**BASE_OFFSET_DIGITS:
        raise ValueError(f"base offset {base_offset} does not fit 20 digits")
    if suffix not in SEGMENT_SUFFIXES:
        raise ValueError(f"unknown segment suffix {suffix!r}")
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """``(base_offset, suffix)`` of a segment file name, or None for any other name."""
    match = _SEGMENT_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2)


def fsync_directory(directory: Path) -> None:
    """Make renames, creations and deletions in ``directory`` durable."""
    trace = durability_trace.TRACE
    entries = durability_trace.list_entries(directory) if trace is not None else {}
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if trace is not None:
        trace.dir_synced(directory, entries)


def write_file_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (replacing it in place) and fsync it.

    Not atomic: use for files whose damage recovery can detect (indexes).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        traced_create(fd)
        write_all(fd, data, 0)
        fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old or the new file, never a mix.

    Write ``<path>.tmp``, fsync it, rename it over ``path``, fsync the directory.
    """
    tmp = path.with_name(path.name + TMP_SUFFIX)
    write_file_durably(tmp, data)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def write_all(fd: int, data: bytes | memoryview, position: int) -> None:
    """``os.pwrite`` all of ``data`` at ``position`` (looping over short writes)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def pread_exact(fd: int, length: int, position: int) -> bytes:
    """Read up to ``length`` bytes at ``position``; shorter only at end of file."""
    data = os.pread(fd, length, position)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def fdatasync(fd: int) -> None:
    """fdatasync where the platform has it, fsync elsewhere."""
    _traced_sync(fd, getattr(os, "fdatasync", os.fsync))


def fsync(fd: int) -> None:
    """os.fsync (recorded by the durability trace when it is on)."""
    _traced_sync(fd, os.fsync)


def _traced_sync(fd: int, sync: Callable[[int], None]) -> None:
    trace = durability_trace.TRACE
    if trace is None:
        sync(fd)
        return
    size = os.fstat(fd).st_size  # before the sync: a racing append is not durable
    sync(fd)
    trace.synced(fd, size)


def traced_create(fd: int) -> None:
    """Tell the durability trace (when on) that ``fd`` was just created or truncated."""
    trace = durability_trace.TRACE
    if trace is not None:
        trace.created(fd)


class SharedFile:
    """An open file descriptor shared by a segment and the read slices that point into it.

    The descriptor is closed when the last holder releases it, so a reader keeps a valid
    descriptor (and the data it saw) even after compaction or retention unlinks the file.

    Thread-safety: acquire/release may be called from any thread.
    """

    __slots__ = ("_lock", "_refs", "fd", "path")

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        """The descriptor (valid while any holder has not released it)."""
        self.path = path
        """The path the file was opened at (it may since have been renamed or unlinked)."""
        self._refs = 1
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path, *, create: bool = False) -> SharedFile:
        """Open ``path`` read-write (creating it if ``create``); raises OSError."""
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        if create and durability_trace.TRACE is not None and not path.exists():
            fd = os.open(path, flags, 0o644)
            traced_create(fd)
            return cls(fd, path)
        return cls(os.open(path, flags, 0o644), path)

    def acquire(self) -> None:
        """Take one more reference; LogClosedError if the descriptor is already closed."""
        with self._lock:
            if self._refs <= 0:
                raise LogClosedError(f"{self.path} is closed")
            self._refs += 1

    def release(self) -> None:
        """Drop one reference; the last one closes the descriptor."""
        with self._lock:
            if self._refs <= 0:
                return
            self._refs -= 1
            if self._refs:
                return
        os.close(self.fd)

    @property
    def closed(self) -> bool:
        """True once every reference has been released."""
        return self._refs <= 0


class FileLease:
    """One reference to a :class:`SharedFile`, released once (explicitly or when collected)."""

    __slots__ = ("__weakref__", "_file")

    def __init__(self, file: SharedFile) -> None:
        self._file: SharedFile | None = None
        file.acquire()
        self._file = file

    def release(self) -> None:
        """Release the reference (idempotent)."""
        file, self._file = self._file, None
        if file is not None:
            file.release()

    def __del__(self) -> None:
        # A forgotten ReadSlice must not leak a descriptor forever.
        self.release()
