"""Operating-system resources the server depends on: open files, and its data directory.

- At start the server raises its soft open-file limit (``RLIMIT_NOFILE``) to the hard
  limit, logs both with an estimate of what it needs, and takes an exclusive lock on its
  data directory (a second server on the same directory fails at once).
- Before opening a new stream's partitions it checks there is room for their files
  (:func:`check_room`), so that CreateStream fails cleanly instead of half-opening.
- An ``EMFILE``/``ENFILE`` error is described with the limit and the remedy
  (:func:`describe_open_error`).

An idle partition holds :data:`FILES_PER_PARTITION` open file (its active segment); its
indexes are opened only while they are read or written, and its older (sealed) segments
share a bounded cache of open files (:data:`~jetserver.storage.files.SEALED_FILES`, the
``[storage] open_sealed_files`` setting).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import resource
import time
from pathlib import Path

from jetsdk.codec.error_codes import ErrorCode
from jetserver.errors import ApiError, JetServerError
from jetserver.logs import fields
from jetserver.storage.files import SEALED_FILES

log = logging.getLogger(__name__)

FILES_PER_PARTITION = 1
"""Files an open, idle partition holds (the active segment)."""
FILES_PER_CONNECTION = 1
"""Files a client connection holds (its socket)."""
FILES_RESERVED = 64
"""Files kept free for everything else: sockets, the metadata, segment reads, rolls."""
NEAR_LIMIT_FRACTION = 0.8
"""Above this share of the limit the server warns (log and metric)."""
DATA_DIR_LOCK = ".server.lock"
"""The file in the data directory a running server holds an exclusive lock on."""
_PROC_FDS = Path("/proc/self/fd")


def open_file_limit() -> int:
    """The soft ``RLIMIT_NOFILE`` (what this process may open)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return int(soft) if soft != resource.RLIM_INFINITY else 1 << 31


def open_files() -> int:
    """How many files (and sockets) this process holds open now (-1 if unknown)."""
    try:
        return len(os.listdir(_PROC_FDS))
    except OSError:
        return -1


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft open-file limit to the hard limit; return (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit", extra=fields(error=str(exc)))
    return int(soft), open_file_limit()


def files_needed(partitions: int, connections: int = 0) -> int:
    """An estimate of the files the server needs for this much work: the partitions'
    active segments, the connections, the cache of open sealed segments, and a reserve."""
    return (
        partitions * FILES_PER_PARTITION
        + connections * FILES_PER_CONNECTION
        + SEALED_FILES.capacity
        + FILES_RESERVED
    )


def log_file_limits(partitions: int, before: int, after: int) -> None:
    """Log the limit at start, with the estimate for the partitions in the metadata."""
    needed = files_needed(partitions)
    extra = fields(
        limit=after,
        limit_before=before,
        partitions=partitions,
        files_needed=needed,
        files_per_partition=FILES_PER_PARTITION,
        open_sealed_files=SEALED_FILES.capacity,
    )
    if needed > after * NEAR_LIMIT_FRACTION:
        log.warning("the open-file limit is near what the partitions need", extra=extra)
    else:
        log.info("open-file limit", extra=extra)


_RECOUNT_S = 0.5
"""How long a count of the open files is reused (listing /proc/self/fd costs O(files))."""
_counted: list[float] = [0.0, -1.0]
"""[time of the last listing, files counted then plus what was reserved since]."""


def _files_in_use(now: float) -> int:
    if now - _counted[0] >= _RECOUNT_S or _counted[1] < 0:
        _counted[0], _counted[1] = now, float(open_files())
    return int(_counted[1])


def check_room(new_files: int, what: str, *, reserve: bool = True) -> None:
    """Refuse work that would leave fewer than :data:`FILES_RESERVED` files free. The count
    of open files is listed at most every half second and advanced by each reservation in
    between (``reserve``: count ``new_files`` as opened now), so opening thousands of
    partitions stays linear.

    Raises:
        ApiError: STORAGE_ERROR naming the limit and the remedy.
    """
    used = _files_in_use(time.monotonic())
    if used < 0:
        return
    limit = open_file_limit()
    if used + new_files + FILES_RESERVED > limit:
        raise ApiError(
            ErrorCode.STORAGE_ERROR,
            f"too many open files: {what} needs {new_files} more, {used} of the limit "
            f"{limit} are open; raise the open-file limit (ulimit -n, LimitNOFILE=)",
            {"open_files": used, "open_file_limit": limit, "needed": new_files},
        )
    if reserve:
        _counted[1] += new_files


def describe_open_error(exc: BaseException) -> str:
    """``exc`` as a message; for EMFILE/ENFILE (also inside a StorageError) with the limit
    and the remedy."""
    if isinstance(exc, ApiError):
        return exc.message
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in (errno.EMFILE, errno.ENFILE):
            return (
                f"too many open files (limit {open_file_limit()}, {open_files()} open); "
                "raise the open-file limit (ulimit -n, LimitNOFILE=)"
            )
        cause = cause.__cause__
    return str(exc)


class DataDirInUse(JetServerError):
    """Another process holds this data directory."""


class DataDirLock:
    """An exclusive ``flock`` on ``<data_dir>/.server.lock`` held while the server runs."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / DATA_DIR_LOCK
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock.

        Raises:
            DataDirInUse: another process (or server in this process) holds it.
            OSError: the directory is unusable.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise DataDirInUse(
                f"data directory {self.path.parent} is in use by another jet server"
            ) from exc
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
