"""Operating-system resources the server depends on: open files, and its data directory.

- At start the server raises its soft open-file limit (``RLIMIT_NOFILE``) to the hard
  limit, logs both with an estimate of what it needs, and takes an exclusive lock on its
  data directory (a second server on the same directory fails at once).
- Before opening a new stream's partitions it checks there is room for their files
  (:func:`check_room`), so that CreateStream fails cleanly instead of half-opening.
- An ``EMFILE``/``ENFILE`` error is described with the limit and the remedy
  (:func:`describe_open_error`).

A partition in use holds :data:`FILES_PER_PARTITION` open file (its active segment); an
idle one holds none once its active file is parked (:func:`park_idle_files`, every
:data:`IDLE_SWEEP_S`; at once when a server opens it idle), and the open active files are
bounded by :func:`active_file_budget` (the least recently opened idle ones are parked
first). Its indexes are opened only while they are read or written, and its older (sealed)
segments share a bounded cache of open files (:data:`~jetserver.storage.files.SEALED_FILES`,
the ``[storage] open_sealed_files`` setting).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import resource
import time
from pathlib import Path

import anyio

from jetsdk.codec.error_codes import ErrorCode
from jetserver.errors import ApiError, JetServerError
from jetserver.infra import hops
from jetserver.logs import fields
from jetserver.storage.files import SEALED_FILES
from jetserver.storage.idle_files import ACTIVE_FILES

log = logging.getLogger(__name__)

FILES_PER_PARTITION = 1
"""Files a partition holds while it is used (its active segment; opening one needs it)."""
FILES_PER_IDLE_PARTITION = 0
"""Files an idle partition holds once its active segment file is parked."""
IDLE_SWEEP_S = 5.0
"""How often idle partitions' active files are parked: one that appended nothing since the
last sweep (5-10 s idle), is fully fsynced and unused is closed until its next use."""
CONNECTIONS_SHARE = 8
"""One file in this many of the limit is kept for connections (sockets), beside
:data:`FILES_RESERVED`, when the budget of open active files is set."""
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


def active_file_budget(limit: int) -> int:
    """The most active segment files the server keeps open with ``limit`` files: the
    limit less the sealed-file cache, :data:`FILES_RESERVED` and a share for connections
    (at least half the limit)."""
    spare = limit - SEALED_FILES.capacity - FILES_RESERVED - limit // CONNECTIONS_SHARE
    return max(spare, limit // 2, 1)


def files_needed(partitions: int, connections: int = 0, busy: int = 0) -> int:
    """An estimate of the files the server needs for this much work: the active segments
    of the ``busy`` partitions (idle ones hold none once parked), the connections, the
    cache of open sealed segments, and a reserve."""
    return (
        min(busy, partitions) * FILES_PER_PARTITION
        + (partitions - min(busy, partitions)) * FILES_PER_IDLE_PARTITION
        + connections * FILES_PER_CONNECTION
        + SEALED_FILES.capacity
        + FILES_RESERVED
    )


def size_active_files(limit: int) -> int:
    """Bound the process's open active segment files by :func:`active_file_budget` and
    park a partition's file as soon as it opens idle (a server's start); return the
    budget."""
    budget = active_file_budget(limit)
    ACTIVE_FILES.configure(budget, park_opened=True)
    return budget


async def park_idle_files(interval_s: float = IDLE_SWEEP_S) -> None:
    """Every ``interval_s``, park the active files of the partitions idle since the last
    sweep (in a worker thread: a close each; nothing to do while none is open). Runs
    until cancelled."""
    while True:
        await anyio.sleep(interval_s)
        if len(ACTIVE_FILES):
            if hops.ENABLED:
                hops.mark("idle_sweep.start")
            await anyio.to_thread.run_sync(ACTIVE_FILES.sweep)
            if hops.ENABLED:
                hops.mark("idle_sweep.end")


def log_file_limits(partitions: int, before: int, after: int) -> None:
    """Log the limit at start, with the estimate for the partitions in the metadata."""
    needed = files_needed(partitions)
    extra = fields(
        limit=after,
        limit_before=before,
        partitions=partitions,
        files_needed=needed,
        files_per_partition=FILES_PER_PARTITION,
        files_per_idle_partition=FILES_PER_IDLE_PARTITION,
        active_file_budget=ACTIVE_FILES.budget,
        open_sealed_files=SEALED_FILES.capacity,
    )
    if needed > after * NEAR_LIMIT_FRACTION:
        log.warning("the open-file limit is near what the partitions need", extra=extra)
    elif partitions > ACTIVE_FILES.budget:
        log.info(
            "more partitions than open active files: idle ones are parked (closed until used)",
            extra=extra,
        )
    else:
        log.info("open-file limit", extra=extra)


_RECOUNT_S = 0.5
"""How long a count of the open files is reused (listing /proc/self/fd costs O(files))."""
_counted: list[float] = [0.0, -1.0, 0.0]
"""[time of the last listing, files counted then plus what was reserved since, what was
reserved since]."""


def _files_in_use(now: float) -> int:
    if now - _counted[0] >= _RECOUNT_S or _counted[1] < 0:
        _counted[0], _counted[1], _counted[2] = now, float(open_files()), 0.0
    return int(_counted[1])


def check_room(new_files: int, what: str, *, reserve: bool = True) -> None:
    """Refuse work that would leave fewer than :data:`FILES_RESERVED` files free once
    the idle partitions' active files are parked (the working set does not fit). The count
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
    over = used + new_files + FILES_RESERVED - limit
    if over > 0 and (ACTIVE_FILES.make_room(over) or _counted[2]):
        # Idle partitions' files were closed, or the count holds reservations of files
        # that may be parked since (a partition opened idle is): count again.
        _counted[0] = 0.0
        used = _files_in_use(time.monotonic())
    if used + new_files + FILES_RESERVED > limit:
        raise ApiError(
            ErrorCode.STORAGE_ERROR,
            f"too many open files: {what} needs {new_files} more, {used} of the limit "
            f"{limit} are open; raise the open-file limit (ulimit -n, LimitNOFILE=)",
            {"open_files": used, "open_file_limit": limit, "needed": new_files},
        )
    if reserve:
        _counted[1] += new_files
        _counted[2] += new_files


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
