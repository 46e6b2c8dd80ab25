"""File-level helpers: segment file names, shared file descriptors, durable writes."""

from __future__ import annotations

import ctypes
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

from jetserver.infra import hops
from jetserver.storage import durability_trace
from jetserver.storage.config import DEFAULT_OPEN_SEALED_FILES
from jetserver.storage.errors import LogClosedError, StorageError

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


def sync_file_system(path: Path) -> None:
    """Make every write and directory change on the file system holding ``path`` durable:
    Linux ``syncfs`` (one call for many files' changes, e.g. the clean-shutdown markers
    every partition writes at a server's stop); ``sync`` where it is missing or fails."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        syncfs = _syncfs()
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


_SYNCFS: list[Callable[[int], int] | None] = []


def _syncfs() -> Callable[[int], int] | None:
    if not _SYNCFS:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.syncfs
            fn.argtypes = [ctypes.c_int]
            fn.restype = ctypes.c_int
            _SYNCFS.append(fn)
        except (OSError, AttributeError):
            _SYNCFS.append(None)
    return _SYNCFS[0]


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


def write_file_durably(path: Path | str, data: bytes) -> None:
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


def write_file_atomically(path: Path | str, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old or the new file, never a mix.

    Write ``<path>.tmp``, fsync it, rename it over ``path``, fsync the directory. Without
    ``sync``: no fsync at all (the caller syncs the file system later; until then a crash
    may leave the old file, the new one, or a new one empty or cut short).
    """
    tmp = f"{path}{TMP_SUFFIX}"  # a str: a server's stop writes thousands (pathlib: slower)
    if not sync:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            traced_create(fd)
            write_all(fd, data, 0)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return
    write_file_durably(tmp, data)
    os.replace(tmp, path)
    fsync_directory(Path(path).parent)


IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX")) if hasattr(os, "sysconf") else 16
"""Most buffers one gathered write takes (POSIX guarantees at least 16; Linux has 1024)."""


WRITE_PIECE_BYTES = 1 << 20
"""Most bytes one ``pwrite``/``pwritev`` call writes of a buffer too large for one
(:data:`WRITE_MAX_BYTES`). On the dev VM (Linux 6.18, ext4) a single write of 2 MiB or
more from a freshly received buffer cost 1.6-2.4 CPU ms/MiB, the same bytes in writes of
at most 1 MiB 0.6-0.75 (the kernel's copy into the page cache,
``copy_folio_from_iter_atomic``, was 46 % of a follower's CPU with 4 MiB replica fetches);
up to 1.5 MiB in one write was as cheap as smaller ones."""
WRITE_MAX_BYTES = WRITE_PIECE_BYTES + (1 << 18)
"""Most bytes of whole buffers one gathered write takes (1.25 MiB, within what was as
cheap as smaller writes): a record of a 1 MiB value (its header and the value) is one
write, not a 1 MiB one and one of its last few dozen bytes."""


def write_all(
    fd: int, data: bytes | memoryview | Sequence[bytes | memoryview], position: int
) -> None:
    """``os.pwrite`` all of ``data`` at ``position`` (looping over short writes), in writes
    of at most :data:`WRITE_MAX_BYTES`.

    ``data`` may be a sequence of buffers, written back to back with gathered writes
    (``os.pwritev``, at most IOV_MAX buffers a call) instead of being joined first: a batch
    of large records goes to the page cache without one more copy in memory. A write
    takes whole buffers up to WRITE_MAX_BYTES together; a buffer over that is written in
    pieces of :data:`WRITE_PIECE_BYTES`.
    """
    if type(data) is bytes and len(data) <= WRITE_MAX_BYTES:  # the usual record: no view
        written = os.pwrite(fd, data, position)
        if written == len(data):
            return
        data = memoryview(data)[written:]
        position += written
    if isinstance(data, (bytes, memoryview)):
        view = memoryview(data)
        while view:
            piece = view if len(view) <= WRITE_MAX_BYTES else view[:WRITE_PIECE_BYTES]
            written = os.pwrite(fd, piece, position)
            view = view[written:]
            position += written
        return
    parts: list[bytes | memoryview] = list(data)
    if not parts:
        return
    if len(parts) <= IOV_MAX and sum(map(len, parts)) <= WRITE_MAX_BYTES:
        chunk: list[bytes | memoryview] = parts  # the usual batch: one gathered write
    else:
        chunk = _piece(parts, 0)
    i = 0
    while True:
        written = os.pwritev(fd, chunk, position)
        position += written
        while i < len(parts):  # skip what was written; a short write resumes mid-buffer
            size = len(parts[i])
            if written < size:
                if written:
                    parts[i] = memoryview(parts[i])[written:]
                break
            written -= size
            i += 1
        if i == len(parts):
            return
        chunk = _piece(parts, i)


def _piece(parts: list[bytes | memoryview], i: int) -> list[bytes | memoryview]:
    """The buffers of the next gathered write from ``parts[i]`` on: at most IOV_MAX of
    them, whole buffers of at most WRITE_MAX_BYTES together, and of a buffer over
    WRITE_MAX_BYTES that follows them as much as fills the write to WRITE_PIECE_BYTES."""
    chunk: list[bytes | memoryview] = []
    total = 0
    for part in parts[i : i + IOV_MAX]:
        size = len(part)
        if total + size <= WRITE_MAX_BYTES:
            chunk.append(part)
            total += size
            continue
        if size > WRITE_MAX_BYTES and total < WRITE_PIECE_BYTES:
            # Written in pieces anyway: its first one fills this write up to a piece.
            chunk.append(memoryview(part)[: WRITE_PIECE_BYTES - total])
        break
    return chunk


READ_CHUNK = 1 << 20
"""Largest single read of :func:`read_file_if_exists`."""
SMALL_READ = 4096
"""First read of :func:`read_file_if_exists`: a file shorter than this needs no other call."""


def read_file_if_exists(path: Path | str, limit: int | None = None) -> bytes | None:
    """The whole contents of ``path``, or None if it does not exist: one open and one read
    for a file under SMALL_READ bytes, else one fstat and two more reads (a restart reads
    several small files per partition, thousands of partitions; pathlib's ``stat`` then
    ``read_bytes`` cost about twice the calls).

    Raises:
        FileTooLarge: the file holds more than ``limit`` bytes (at most SMALL_READ read).
        OSError: the file exists but cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        # A small file (checkpoints, markers, a short segment's indexes) in one read: a read
        # of a regular file that returns less than asked for has reached its end.
        first = os.read(fd, SMALL_READ)
        if len(first) < SMALL_READ:
            if limit is not None and len(first) > limit:
                raise FileTooLarge(len(first))
            return first
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise FileTooLarge(size)
        parts: list[bytes] = [first]
        while True:  # to the end of the file: one read of the rest, one that finds the end
            chunk = os.read(fd, READ_CHUNK if len(parts) > 1 else max(size + 1 - len(first), 1))
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
    finally:
        os.close(fd)


class FileTooLarge(OSError):
    """:func:`read_file_if_exists`: the file is larger than the caller's limit."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


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
        if hops.ENABLED:  # the system call alone, in the thread that makes it
            hops.mark("sync.start")
            sync(fd)
            hops.mark("sync.end")
            return
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

    A sealed segment's file can be *parked* by an :class:`~jetserver.storage.open_files.
    OpenFileCache`: while only its owner (the segment) holds it, the descriptor is closed
    and ``fd`` is -1; the next :meth:`acquire` opens the file again at ``path``. A file
    whose segment was deleted (:meth:`retire`) is never opened again.

    An active segment's file can be parked too (:meth:`park_idle`, by
    :class:`~jetserver.storage.idle_files.IdleFiles`): only while the parker holds its
    log's writer lock (the writer uses ``fd`` without a lease), the log is fully fsynced
    and no lease is out. The writer opens it again with :meth:`unpark`, a reader or an
    fsync with :meth:`acquire`; either then calls :attr:`on_reopen`.

    Thread-safety: acquire/release/park may be called from any thread.
    """

    __slots__ = (
        "_lock",
        "_owned",
        "_park_when_idle",
        "_refs",
        "_retired",
        "cache",
        "fd",
        "on_reopen",
        "path",
    )

    def __init__(self, fd: int, path: str | Path) -> None:
        self.fd = fd
        """The descriptor: valid while any holder has not released it, except that a
        parked file has -1 until the next :meth:`acquire` (hold a lease to use it)."""
        self.path = os.fspath(path)
        """The path the file was opened at (it may since have been renamed or unlinked); a
        str, not a Path (a third of the size: one is kept per partition, issue 34)."""
        self.cache: OpenFileCache | None = None
        """The cache that may park this file (a sealed segment's), None while pinned open."""
        self.on_reopen: Callable[[], None] | None = None
        """Called (no lock held) after a parked active file was opened again: its log
        tells its :class:`~jetserver.storage.idle_files.IdleFiles` it holds a file again."""
        self._refs = 1
        self._owned = True
        self._retired = False
        self._park_when_idle = False
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str | Path, *, create: bool = False) -> SharedFile:
        """Open ``path`` read-write (creating it if ``create``); raises OSError."""
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        if create and durability_trace.TRACE is not None and not os.path.exists(path):
            fd = os.open(path, flags, 0o644)
            traced_create(fd)
            return cls(fd, path)
        return cls(os.open(path, flags, 0o644), path)

    def acquire(self) -> None:
        """Take one more reference, opening a parked file again.

        Raises:
            LogClosedError: the descriptor is already closed, or the file was parked and
                is gone since (its segment was deleted). StorageError: reopening failed
                (for example EMFILE).
        """
        with self._lock:
            reopened = self._ensure_open()
            self._refs += 1
        cache = self.cache
        if cache is not None:
            cache.touch(self)
        elif reopened and self.on_reopen is not None:
            self.on_reopen()

    def unpark(self) -> int:
        """The writer's descriptor of a parked active file: open it again (the log's
        writer lock held); return it.

        Raises:
            LogClosedError, StorageError: as :meth:`acquire`.
        """
        with self._lock:
            reopened = self._ensure_open()
            fd = self.fd
        if reopened and self.on_reopen is not None:
            self.on_reopen()
        return fd

    def park_idle(self) -> bool:
        """Close an active file's descriptor if its owner alone holds it; True if it is
        closed now. The caller holds the log's writer lock and has checked that nothing
        written is unsynced: closing drops no data, and a later fsync on a new descriptor
        cannot miss a writeback error of pages it never saw. A lease (a reader, an fsync
        in flight) keeps the file open: its holder uses the descriptor's number."""
        with self._lock:
            if self.fd < 0:
                return self._refs > 0
            if self._refs != 1 or not self._owned or self.cache is not None:
                return False
            self._park()
            return True

    def _ensure_open(self) -> bool:
        """Open a parked file again (lock held); True if it was parked."""
        if self._refs <= 0:
            raise LogClosedError(f"{self.path} is closed")
        if self.fd >= 0:
            return False
        self._reopen()
        return True

    def _reopen(self) -> None:
        """Open a parked file again (lock held)."""
        if self._retired:
            raise LogClosedError(f"{self.path} was deleted")
        try:
            self.fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError as exc:
            raise LogClosedError(f"{self.path} is gone") from exc
        except OSError as exc:
            raise StorageError(f"cannot open {self.path} again: {exc}") from exc

    def release(self) -> None:
        """Drop one reference; the last one closes the descriptor."""
        with self._lock:
            if self._refs <= 0:
                return
            self._refs -= 1
            if self._refs:
                if self._refs == 1 and self._park_when_idle and self._owned and self.cache:
                    self._park()
                return
            fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)
        cache = self.cache
        if cache is not None:
            cache.forget(self)

    def release_owner(self) -> None:
        """The segment drops its own reference (it was deleted, replaced or closed)."""
        with self._lock:
            self._owned = False
        self.release()

    def retire(self) -> None:
        """The file was unlinked: a parked descriptor is never opened again."""
        with self._lock:
            self._retired = True

    def park(self) -> None:
        """Close the descriptor while only the owner holds it (at once, or when the last
        reader releases it); the next :meth:`acquire` opens the file again."""
        with self._lock:
            if self._refs <= 0 or self.fd < 0 or not self._owned or self.cache is None:
                return
            if self._refs == 1:
                self._park()
            else:
                self._park_when_idle = True

    def keep_open(self) -> None:
        """Cancel a pending :meth:`park` (the file was used again)."""
        with self._lock:
            self._park_when_idle = False

    def _park(self) -> None:
        os.close(self.fd)
        self.fd = -1
        self._park_when_idle = False

    def pin(self) -> None:
        """Keep the file open from now on (its segment became the active one again).

        Raises:
            LogClosedError, StorageError: as :meth:`acquire`.
        """
        with self._lock:
            cache, self.cache = self.cache, None
            self._park_when_idle = False
            if self._refs > 0 and self.fd < 0:
                self._reopen()
        if cache is not None:
            cache.forget(self)

    def seal(self, cache: OpenFileCache) -> None:
        """Let ``cache`` park the file when it is idle (its segment is sealed)."""
        with self._lock:
            if self._refs <= 0:
                return
            self.cache = cache
            self.on_reopen = None
        cache.touch(self)

    @property
    def parked(self) -> bool:
        """True while the descriptor is closed by the cache (the file is still in use)."""
        return self._refs > 0 and self.fd < 0

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


class OpenFileCache:
    """Keeps at most ``capacity`` sealed segment files open, least recently used parked.

    Active segments are not in it (they stay open for appends). A parked file is opened
    again on its next lease, so the bound costs an ``open(2)`` on a cold read, never data.
    A file in use by a reader when it is evicted is parked when that reader lets go.

    Thread-safety: all methods may be called from any thread. Lock order: the cache's
    lock, then a file's.
    """

    def __init__(self, capacity: int = DEFAULT_OPEN_SEALED_FILES) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._lru: OrderedDict[SharedFile, None] = OrderedDict()
        self._lock = threading.Lock()
        self.parks = 0
        """Files parked so far (each costs one reopen if it is read again)."""

    @property
    def capacity(self) -> int:
        """The most sealed files kept open when idle."""
        return self._capacity

    def set_capacity(self, capacity: int) -> None:
        """Change the bound (parking files at once if it shrank)."""
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        with self._lock:
            self._capacity = capacity
            self._evict()

    def __len__(self) -> int:
        """Sealed files open now (or about to be parked when their readers let go)."""
        return len(self._lru)

    def touch(self, file: SharedFile) -> None:
        """``file`` was just used: it becomes the most recently used, and the least
        recently used beyond the bound are parked."""
        with self._lock:
            if file in self._lru:
                self._lru.move_to_end(file)
                file.keep_open()
                return
            self._lru[file] = None
            self._evict()

    def forget(self, file: SharedFile) -> None:
        """``file`` was closed or pinned: it no longer counts."""
        with self._lock:
            self._lru.pop(file, None)

    def _evict(self) -> None:
        while len(self._lru) > self._capacity:
            oldest, _ = self._lru.popitem(last=False)
            oldest.park()
            self.parks += 1


SEALED_FILES = OpenFileCache()
"""The server's cache of open sealed segment files (its bound is the ``[storage]
open_sealed_files`` setting)."""
