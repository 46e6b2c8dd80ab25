"""Exceptions of the storage engine.

Every error raised on purpose by :mod:`jetserver.storage` is a :class:`StorageError`. Each
class carries the wire :class:`~jetsdk.codec.error_codes.ErrorCode` a server should answer
with, and whether retrying the same request may succeed.
"""

from __future__ import annotations

from jetsdk.codec.error_codes import ErrorCode
from jetserver.errors import JetServerError


class StorageError(JetServerError):
    """Root of the storage errors: an I/O failure or a state the log cannot serve.

    Attributes:
        code: the wire error code a server should answer with.
        retriable: True if the same request may succeed later.
    """

    code: ErrorCode = ErrorCode.STORAGE_ERROR
    retriable: bool = True


class OffsetOutOfRange(StorageError):
    """A read below the log start offset or above the log end offset.

    Attributes:
        offset: the offset asked for.
        log_start_offset: first offset the log holds.
        log_end_offset: next offset the log will assign.
    """

    code = ErrorCode.OFFSET_OUT_OF_RANGE
    retriable = False

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class CorruptRangeError(StorageError):
    """The requested offsets lie in a range that recovery found corrupt and will not serve.

    Reading at ``end`` or later works again (a caller may skip the range deliberately).

    Attributes:
        start: first offset of the unreadable range.
        end: first offset after it.
        path: the segment file that holds the damage.
    """

    retriable = False

    def __init__(self, start: int, end: int, path: str) -> None:
        super().__init__(f"offsets [{start}, {end}) are unreadable: {path} is corrupt")
        self.start = start
        self.end = end
        self.path = path


class InvalidRecordsError(StorageError):
    """Records handed to ``append_raw`` (or ``append``) that the log refuses.

    Bad CRC, offsets below the log end or not increasing, a leader epoch below the latest
    one, a batch too large for a segment.
    """

    code = ErrorCode.INVALID_ARGUMENT
    retriable = False


class InvalidArgumentError(StorageError, ValueError):
    """A bad argument to a storage call (negative size, offset out of its domain, ...)."""

    code = ErrorCode.INVALID_ARGUMENT
    retriable = False


class SyncFailedError(StorageError):
    """An fsync/fdatasync of the log failed, now or earlier.

    Linux may drop the dirty pages of a failed writeback and report the error only once, so
    nothing written since the last good sync can be trusted to be on disk, and a later
    fsync that "succeeds" proves nothing about it. The log refuses to flush until
    :meth:`~jetserver.storage.log.Log.recover_unsynced` cut it back to what was synced.
    """


class ShortSegmentFileError(StorageError):
    """A segment file ends before the bytes the log counts in it: a failed writeback
    dropped its tail and the log was not cut back to disk yet (spec/storage.md §7.1
    step 5), or the file was damaged behind the log's back. Retriable: the cut back ends
    it."""


class LogClosedError(StorageError):
    """The log was closed; open it again to use it."""

    code = ErrorCode.UNAVAILABLE


class CorruptFileError(StorageError):
    """A storage file (index, checkpoint) failed validation.

    Raised by the parsers; :meth:`Log.open` catches it, reports the file in its
    :class:`RecoveryReport` and repairs or ignores the file.

    Attributes:
        path: the file that failed validation.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class DiskFull(StorageError):
    """Client writes are refused: the data directory's file system has less free space
    than the configured floor (``[storage] disk_free_floor_bytes``). Retriable: writes are
    accepted again as soon as space is freed (deleting a stream, retention, an operator)."""


class InvariantViolation(StorageError, AssertionError):
    """An invariant of the log failed (HW above the LEO, the active segment ending past the
    LEO): a bug, not an I/O failure. Checked on every append with cheap comparisons that
    stay on in production (TigerBeetle-style), before the batch is written: the append
    changed nothing. Also an AssertionError, as a failed assertion; not retriable."""

    retriable = False
