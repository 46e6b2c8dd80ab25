"""Free space of the data directory's file system: a floor for client writes, and a
reserve that gives metadata writes room on a full disk (spec/storage.md, "Free space").

- **Floor.** :meth:`DiskSpace.check` (the space guard of every partition log's
  ``append``, and of CreateStream) raises :class:`~jetserver.storage.errors.DiskFull`
  while the free space is below the floor. The free space is ``statvfs`` ``f_bavail``,
  counted as if the reserve were in place (releasing the reserve never lets client
  writes in again). It is sampled at most every :data:`SAMPLE_INTERVAL_S` while writes
  are accepted, and at every check while they are refused, so that writes resume as soon
  as space returns.
- **Reserve.** A file of ``reserve_bytes`` (:data:`RESERVE_FILE`) allocated in the data
  directory at start, and again whenever the free space allows it. A metadata write
  (``metadata.json``, the Raft journal, its term and vote, its snapshot) that fails with
  ENOSPC deletes the reserve of its file system and is tried once more
  (:func:`with_reserve`): deleting a stream, which frees space, needs such a write first.

Task safety: :class:`DiskSpace` on the event loop (its blocking calls through worker
threads), except :meth:`DiskSpace.check`, which a follower's append also calls from a worker
thread: a race there only makes one estimate of the free space less exact (the next sample
corrects it). :class:`Reserve` and :data:`RESERVES` from any thread.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import anyio
import attrs

from jetserver.logs import fields
from jetserver.storage.errors import DiskFull

log = logging.getLogger(__name__)

T = TypeVar("T")

MiB = 1024 * 1024
DEFAULT_FLOOR_BYTES = 64 * MiB
"""Default floor on a large file system: room for the appends under way (a partition
appends at most ``[ingest] max_batch_bytes``, 8 MiB, at once), followers' replication,
index and checkpoint files written after the refusal."""
DEFAULT_FLOOR_FRACTION = 0.05
"""On a file system smaller than 1.28 GiB the default floor is this share of its size
instead (a test's or a small device's disk stays usable)."""
DEFAULT_RESERVE_BYTES = 16 * MiB
"""Default reserve: several rewrites of the metadata of thousands of streams."""
DEFAULT_RESERVE_FRACTION = 0.02
"""On a file system smaller than 800 MiB the default reserve is this share of its size."""
SAMPLE_INTERVAL_S = 0.1
"""Longest age of the free-space sample a check uses while writes are accepted."""
RESERVE_INTERVAL_S = 1.0
"""How often the reserve is allocated again after a release, if there is room."""
RESERVE_FILE = "space-reserve"
"""The reserve's file in the data directory."""
_ZEROS = bytes(MiB)


def default_floor(total_bytes: int) -> int:
    """The floor when ``[storage] disk_free_floor_bytes`` is not set."""
    return min(DEFAULT_FLOOR_BYTES, int(total_bytes * DEFAULT_FLOOR_FRACTION))


def default_reserve(total_bytes: int) -> int:
    """The reserve when ``[storage] disk_reserve_bytes`` is not set."""
    return min(DEFAULT_RESERVE_BYTES, int(total_bytes * DEFAULT_RESERVE_FRACTION))


def usage(path: Path) -> tuple[int, int]:
    """``(free bytes, size in bytes)`` of the file system holding ``path`` (free: what an
    unprivileged writer may still use, ``f_bavail``)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def _allocate(path: Path, size: int) -> None:
    """Create ``path`` holding ``size`` allocated bytes and sync it (blocking)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        fallocate = getattr(os, "posix_fallocate", None)  # not on macOS
        try:
            if fallocate is None:
                raise OSError(errno.ENOSYS, "no posix_fallocate")
            fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            done = 0
            while done < size:  # no fallocate here: zeros take the blocks
                done += os.pwrite(fd, _ZEROS[: min(len(_ZEROS), size - done)], done)
        os.fsync(fd)
    finally:
        os.close(fd)


class Reserve:
    """A file of ``size`` allocated bytes, deleted to make room for a metadata write.

    Thread-safe (a lock): the Raft thread and worker threads release it, a worker thread
    allocates it.

    Args:
        path: the file.
        size: bytes to hold (0: no reserve).
    """

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        self.held = False
        """The file is allocated."""
        self.releases = 0
        """Times it was released for a write that found no room."""
        self._lock = threading.Lock()

    def adopt(self) -> None:
        """Hold the file an earlier run left if it has the size; remove it if there is to
        be no reserve (blocking)."""
        with self._lock:
            try:
                blocks = self.path.stat().st_blocks
            except FileNotFoundError:
                return
            if self.size <= 0:
                self._unlink()
            elif blocks * 512 >= self.size:
                self.held = True

    def ensure(self) -> bool:
        """Allocate the file unless it is held already (blocking); True if held now."""
        with self._lock:
            if self.held or self.size <= 0:
                return self.held
            try:
                _allocate(self.path, self.size)
            except OSError as exc:
                self._unlink()
                log.debug("cannot allocate the disk space reserve", extra=fields(error=str(exc)))
                return False
            self.held = True
            return True

    def release(self, needed_by: Path | None = None) -> bool:
        """Delete the file if held (for a write of ``needed_by``); True if that freed its
        space."""
        with self._lock:
            if not self.held:
                return False
            self._unlink()
            self.held = False
            self.releases += 1
        log.warning(
            "disk full: released the space reserve for a metadata write; it is allocated "
            "again once there is room",
            extra=fields(path=str(self.path), bytes=self.size, write=str(needed_by)),
        )
        return True

    def _unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class Reserves:
    """The reserves of the servers in this process, by file system (device). Thread-safe."""

    def __init__(self) -> None:
        self._by_device: dict[int, list[Reserve]] = {}
        self._lock = threading.Lock()

    def register(self, reserve: Reserve) -> None:
        """Make ``reserve`` releasable for writes on its file system."""
        device = os.stat(reserve.path.parent).st_dev
        with self._lock:
            self._by_device.setdefault(device, []).append(reserve)

    def unregister(self, reserve: Reserve) -> None:
        """Forget ``reserve`` (its file stays)."""
        with self._lock:
            for reserves in self._by_device.values():
                if reserve in reserves:
                    reserves.remove(reserve)

    def release_for(self, path: Path) -> bool:
        """Release one held reserve on the file system of ``path``; False if none."""
        try:
            device = os.stat(path if path.is_dir() else path.parent).st_dev
        except OSError:
            return False
        with self._lock:
            candidates = list(self._by_device.get(device, ()))
        return any(r.release(path) for r in candidates)


RESERVES = Reserves()
"""The process's reserves (a process may run several servers: tests)."""


def with_reserve(path: Path, write: Callable[[], T]) -> T:
    """``write()``; if it fails with ENOSPC, release a reserve on the file system of
    ``path`` and call it again (as long as there are reserves to release).

    ``write`` must be safe to repeat after a failure (it rewrites or cuts back what it
    wrote)."""
    while True:
        try:
            return write()
        except OSError as exc:
            if exc.errno != errno.ENOSPC or not RESERVES.release_for(path):
                raise


@attrs.define(eq=False)
class DiskSpace:
    """The free space of a data directory's file system, its floor and its reserve.

    Build with :meth:`open` (blocking), then run :meth:`run` in a task group; :meth:`close`
    at the end. Event loop only, except :meth:`check` (see the module docstring).
    """

    directory: Path
    """The data directory."""
    floor_setting: int | None = None
    """``[storage] disk_free_floor_bytes`` (None: :func:`default_floor`; 0: no floor)."""
    reserve_setting: int | None = None
    """``[storage] disk_reserve_bytes`` (None: :func:`default_reserve`; 0: no reserve)."""
    free_bytes: int = 0
    """Free bytes at the last sample."""
    total_bytes: int = 0
    """Size of the file system at the last sample."""
    floor_bytes: int = 0
    """The floor in force (bytes)."""
    refusing: bool = False
    """Client writes are refused (free space below the floor at the last sample)."""
    refused_checks: int = 0
    """Checks that raised DiskFull (appends and creations refused)."""
    reserve: Reserve = attrs.field(init=False)
    _sampled_at: float = -math.inf
    _written: int = 0
    """Bytes checked since the last sample."""

    @classmethod
    def open(
        cls, directory: Path, floor_bytes: int | None = None, reserve_bytes: int | None = None
    ) -> DiskSpace:
        """Sample the file system and allocate the reserve if there is room (blocking)."""
        directory.mkdir(parents=True, exist_ok=True)
        space = cls(directory, floor_bytes, reserve_bytes)
        _free, total = usage(directory)
        size = default_reserve(total) if reserve_bytes is None else reserve_bytes
        space.reserve = Reserve(directory / RESERVE_FILE, size)
        space.reserve.adopt()
        space.sample()
        if not space.refusing:
            space.reserve.ensure()
        RESERVES.register(space.reserve)
        space.sample()
        log.info(
            "disk space",
            extra=fields(
                free_bytes=space.free_bytes,
                floor_bytes=space.floor_bytes,
                reserve_bytes=size if space.reserve.held else 0,
            ),
        )
        return space

    def close(self) -> None:
        """Stop releasing the reserve for this process (the file stays for the next run)."""
        RESERVES.unregister(self.reserve)

    def sample(self, now: float | None = None) -> None:
        """Read the free space now (one ``statvfs``) and decide whether to refuse."""
        self._sampled_at = time.monotonic() if now is None else now
        self._written = 0
        try:
            self.free_bytes, self.total_bytes = usage(self.directory)
        except OSError as exc:
            log.warning("cannot read the free disk space", extra=fields(error=str(exc)))
            return
        floor = self.floor_setting
        self.floor_bytes = default_floor(self.total_bytes) if floor is None else floor
        refusing = self.floor_bytes > 0 and self.free_bytes - self._missing() < self.floor_bytes
        if refusing != self.refusing:
            self.refusing = refusing
            extra = fields(free_bytes=self.free_bytes, floor_bytes=self.floor_bytes)
            if refusing:
                log.warning("disk nearly full: refusing client writes", extra=extra)
            else:
                log.info("disk space back above the floor: accepting writes", extra=extra)

    def _missing(self) -> int:
        """The reserve's bytes while it is released (free space is counted without them)."""
        return 0 if self.reserve.held else self.reserve.size

    def check_now(self) -> None:
        """:meth:`check` on a fresh sample (a stream's creation: rare, and the disk may
        have filled since the last sample by writes that are not jet's).

        Raises:
            DiskFull: the free space is below the floor.
        """
        self.sample()
        self.check()

    def check(self, nbytes: int = 0) -> None:
        """Raise DiskFull if client writes (``nbytes`` about to be written) are refused now.

        Cheap: the last sample less the bytes checked since is the estimate; the file
        system is asked again when the sample is older than SAMPLE_INTERVAL_S, or the
        estimate falls below the floor, or writes are refused.

        Raises:
            DiskFull: the free space is below the floor.
        """
        self._written += nbytes
        now = time.monotonic()
        if (
            self.refusing
            or now - self._sampled_at >= SAMPLE_INTERVAL_S
            or (
                self.floor_bytes > 0
                and self.free_bytes - self._written - self._missing() < self.floor_bytes
            )
        ):
            self.sample(now)
            self._written = nbytes
        if self.refusing:
            self.refused_checks += 1
            raise DiskFull(
                f"disk nearly full: {self.free_bytes} bytes free for {self.directory}, below "
                f"the floor of {self.floor_bytes} bytes ([storage] disk_free_floor_bytes); "
                "writes are accepted again once space is freed"
            )

    async def run(self) -> None:
        """Sample every :data:`RESERVE_INTERVAL_S`; allocate the reserve again once the free
        space allows it (runs until cancelled)."""
        while True:
            await anyio.sleep(RESERVE_INTERVAL_S)
            self.sample()
            if not self.refusing and not self.reserve.held and self.reserve.size > 0:
                if await anyio.to_thread.run_sync(self.reserve.ensure):
                    log.info(
                        "disk space reserve allocated again",
                        extra=fields(bytes=self.reserve.size),
                    )
                self.sample()
