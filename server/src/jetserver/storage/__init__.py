"""The storage engine: one append-only, segmented log per partition (spec/storage.md).

The one interface is :class:`Log`::

    from jetserver.storage import Log, LogConfig

    log = Log.open(directory, LogConfig(compact=True))   # recovers; see log.recovery
    first, ts = log.append([encode_body(b"v", key=b"k")], time.time_ns(), leader_epoch=0)
    log.flush()                        # group commit: fsync shared by concurrent callers
    log.set_high_watermark(log.log_end_offset)
    with log.read(first, max_bytes=1 << 20) as sl:   # ReadSlice: fileno/position/length
        os.sendfile(sock.fileno(), sl.fileno, sl.position, sl.length)
        offset = sl.next_offset
    log.close()

* Writing (one writer task): ``append`` (bodies from ``jetsdk.codec.record.encode_body``;
  offsets assigned consecutively, timestamps kept non-decreasing), ``append_raw``
  (already-framed records from a leader, CRC-checked), ``truncate_to``, ``roll``,
  ``enforce_retention``, ``close``.
* Durability: ``flush(upto)`` blocks until ``flushed_offset >= upto``; concurrent callers
  share one fsync. Call it from a worker thread in async code.
* Reading (any thread): ``read(offset, max_bytes, max_offset=None)`` returns a
  :class:`ReadSlice` of whole records from one segment, up to the high watermark by
  default; ``offset_for_timestamp``; properties ``log_start_offset``, ``log_end_offset``,
  ``high_watermark``, ``flushed_offset``, ``size_bytes``, ``segment_count``.
* Replication state: ``set_high_watermark`` / ``checkpoint_high_watermark``; ``epochs`` (a
  :class:`LeaderEpochCache`: ``assign``, ``latest_epoch``, ``end_offset_for``).
* Maintenance: ``enforce_retention()`` (age, bytes, messages; whole segments);
  ``compact()`` (keys; safe in a background thread) returning a :class:`CompactionReport`.
* Recovery: ``Log.open`` never raises on corrupt data; ``log.recovery`` is a
  :class:`RecoveryReport` (bytes cut from a torn tail, indexes rebuilt, corrupt files,
  unreadable ranges that ``read`` refuses with :class:`CorruptRangeError`).

Errors: every deliberate error is a :class:`StorageError` carrying the wire ``code``.
"""

from jetserver.storage.compaction import CompactionReport
from jetserver.storage.config import (
    DEFAULT_DELETE_RETENTION_S,
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_SEGMENT_MAX_AGE_S,
    DEFAULT_SEGMENT_MAX_BYTES,
    LogConfig,
)
from jetserver.storage.epoch_cache import EpochEntry, LeaderEpochCache
from jetserver.storage.errors import (
    CorruptFileError,
    CorruptRangeError,
    DiskFull,
    InvalidArgumentError,
    InvalidRecordsError,
    InvariantViolation,
    LogClosedError,
    OffsetOutOfRange,
    StorageError,
    SyncFailedError,
)
from jetserver.storage.log import Log
from jetserver.storage.read_slice import ReadSlice
from jetserver.storage.recovery import RecoveryReport
from jetserver.storage.segment import SegmentInfo

__all__ = [
    "DEFAULT_DELETE_RETENTION_S",
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "DEFAULT_SEGMENT_MAX_AGE_S",
    "DEFAULT_SEGMENT_MAX_BYTES",
    "CompactionReport",
    "CorruptFileError",
    "CorruptRangeError",
    "DiskFull",
    "EpochEntry",
    "InvalidArgumentError",
    "InvalidRecordsError",
    "InvariantViolation",
    "LeaderEpochCache",
    "Log",
    "LogClosedError",
    "LogConfig",
    "OffsetOutOfRange",
    "ReadSlice",
    "RecoveryReport",
    "SegmentInfo",
    "StorageError",
    "SyncFailedError",
]
