"""Where a stream's data lives on disk, and opening / removing it (blocking helpers).

Layout: ``<data_dir>/streams/<name>-<stream_id>/<partition>/`` per partition. A removal
first renames the stream directory to ``*.deleted`` (atomic), then deletes it, so an
interrupted removal is finished at the next start (:data:`DELETED_SUFFIX`).

Every function here blocks (file I/O): call it from a worker thread in async code.
"""

from __future__ import annotations

import functools
import logging
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import anyio
import attrs

from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import Record, iter_records
from jetserver.config.server import ServerConfig
from jetserver.logs import fields
from jetserver.metadata.model import MetadataState, PartitionAssignment, StreamMeta
from jetserver.replication.producers import REBUILD_RECORDS, ProducerTable
from jetserver.storage import Log, LogConfig, StorageError
from jetserver.storage.files import fsync_directory, sync_file_system
from jetserver.storage.fsync_threads import FSYNC_LANES, THREADS

log = logging.getLogger(__name__)

STREAMS_DIR = "streams"
"""Directory of the streams' data inside the server's data directory."""
DELETED_SUFFIX = ".deleted"
"""Suffix of a stream directory being removed."""


def stream_dir(data_dir: Path, meta: StreamMeta) -> Path:
    """Directory holding every partition of ``meta``."""
    return data_dir / STREAMS_DIR / f"{meta.name}-{meta.stream_id}"


def log_config(meta: StreamMeta, config: ServerConfig) -> LogConfig:
    """The storage settings of a stream's partitions."""
    spec = meta.spec
    return LogConfig(
        segment_max_bytes=spec.segment_max_bytes,
        segment_max_age_s=spec.segment_max_age_s,
        index_interval_bytes=config.storage.index_interval_bytes,
        retention_max_age_s=spec.retention_max_age_s,
        retention_max_bytes=spec.retention_max_bytes,
        retention_max_messages=spec.retention_max_messages,
        compact=spec.compact,
        delete_retention_s=spec.delete_retention_s,
    )


def open_partition_log(
    directory: Path,
    cfg: LogConfig,
    name: str,
    partition: int,
    sole_replica: bool,
    sync_dir: Callable[[Path], None] = fsync_directory,
) -> tuple[Log, ProducerTable]:
    """Open (recover) a partition's log, log what recovery repaired, and rebuild the
    idempotent-producer table from its tail.

    With ``sole_replica`` (replication factor 1) whatever survived on disk is committed once
    flushed, so the HW is set to the log end; a replicated partition keeps its checkpointed
    HW (its tail may be uncommitted). ``sync_dir``: as ``Log.open``'s (the caller fsyncs the
    directories it recorded before the log is used).
    """
    # Log.open makes the directory if needed. The server holds the data directory (no
    # lock file). The clean-shutdown marker stays until the first truncation: deleting it
    # (an unlink and a directory fsync) was two thirds of the open work of a restart, and
    # over a third of its time at 10,000.
    log_ = Log.open(directory, cfg, lock=False, keep_clean_marker=True, sync_dir=sync_dir)
    report = log_.recovery
    if not report.ok or report.indexes_rebuilt:
        log.warning(
            "recovery repaired the log",
            extra=fields(
                stream=name,
                partition=partition,
                bytes_truncated=report.bytes_truncated,
                indexes_rebuilt=report.indexes_rebuilt,
                corrupt_files=",".join(report.corrupt_files) or None,
                unreadable_ranges=str(list(report.unreadable_ranges)) or None,
                notes="; ".join(report.notes) or None,
            ),
        )
    elif not (report.clean_shutdown or report.fresh):  # a new partition is not worth a line
        log.info(
            "log recovered after an unclean shutdown; nothing to repair",
            extra=fields(stream=name, partition=partition),
        )
    log_.flush()
    if sole_replica:
        log_.set_high_watermark(log_.log_end_offset)
    producers = ProducerTable()
    try:
        producers.rebuild(tail_records(log_, REBUILD_RECORDS))
    except (StorageError, CodecError) as exc:  # a damaged tail must not stop the server
        log.warning(
            "cannot rebuild idempotent producer state",
            extra=fields(stream=name, partition=partition, error=str(exc)),
        )
    return log_, producers


class OpenJob(NamedTuple):
    """The arguments of :func:`open_partition_log` for one partition."""

    directory: Path
    cfg: LogConfig
    name: str
    partition: int
    sole_replica: bool


@attrs.define
class OpenJobs:
    """Makes the :class:`OpenJob` of each partition to open; the partitions of a stream
    share its directory path and :class:`LogConfig` (made once: a restart makes thousands
    of jobs on the event loop, and every open log keeps its config)."""

    data_dir: Path
    config: ServerConfig
    _streams: dict[int, tuple[StreamMeta, Path, LogConfig]] = attrs.field(factory=dict)
    """By ``id(meta)``; the meta is kept, so its id stays its own."""

    def job(self, meta: StreamMeta, assignment: PartitionAssignment) -> OpenJob:
        """What :func:`open_partition_log` needs to open this partition's log."""
        known = self._streams.get(id(meta))
        if known is None:
            known = (meta, stream_dir(self.data_dir, meta), log_config(meta, self.config))
            self._streams[id(meta)] = known
        p = assignment.partition
        return OpenJob(known[1] / str(p), known[2], meta.name, p, meta.spec.replication_factor == 1)


def open_partition_logs(jobs: Sequence[OpenJob]) -> list[tuple[Log, ProducerTable] | Exception]:
    """:func:`open_partition_log` for each job, one after the other (in one worker-thread
    call); each result is the opened log and producer table, or the exception that stopped
    that partition from opening (the others still open). The directory fsyncs of their
    recoveries run after the last open, at once (:func:`sync_directories`), and return
    before any log is handed out; a log whose directory did not sync is abandoned (released,
    nothing written) and its result is the error."""
    results: list[tuple[Log, ProducerTable] | Exception] = []
    to_sync: list[list[Path]] = []
    for job in jobs:
        dirs: list[Path] = []
        try:
            results.append(open_partition_log(*job, sync_dir=dirs.append))
        except Exception as exc:
            results.append(exc)
        to_sync.append(dirs)
    failed = sync_directories([d for dirs in to_sync for d in dirs])
    if failed:
        for i, dirs in enumerate(to_sync):
            errors = [failed[d] for d in dirs if d in failed]
            opened = results[i]
            if errors and not isinstance(opened, Exception):
                opened[0].abandon()  # not used: the next open recovers it as after a crash
                error = StorageError(f"cannot fsync directory {dirs[0]}: {errors[0]}")
                error.__cause__ = errors[0]
                results[i] = error
    return results


def sync_directories(directories: Sequence[Path], lanes: int = FSYNC_LANES) -> dict[Path, OSError]:
    """Fsync each directory, shared among up to ``lanes`` threads that run at once (this
    one and :data:`~jetserver.storage.fsync_threads.THREADS`), and return once all returned: the
    directories whose fsync failed, with the error. Blocks: call from a worker thread."""
    failed: dict[Path, OSError] = {}
    shares = [list(directories[i::lanes]) for i in range(min(lanes, len(directories)))]
    if not shares:
        return failed
    done = threading.Semaphore(0)

    def lane(share: list[Path]) -> None:
        try:
            for directory in share:
                try:
                    fsync_directory(directory)
                except OSError as exc:
                    failed[directory] = exc
        finally:
            done.release()

    for share in shares[1:]:
        THREADS.submit(functools.partial(lane, share))
    lane(shares[0])
    for _ in shares:
        done.acquire()
    return failed


def unknown_stream_dirs(data_dir: Path, state: MetadataState) -> list[Path]:
    """Stream directories under ``data_dir`` that ``state`` does not know (deleted streams;
    not those already renamed for removal)."""
    known = {stream_dir(data_dir, m).name for m in state.streams.values()}
    try:
        paths = [p for p in (data_dir / STREAMS_DIR).iterdir() if p.is_dir()]
    except FileNotFoundError:
        return []
    return [p for p in paths if p.name not in known and not p.name.endswith(DELETED_SUFFIX)]


async def remove_unknown_stream_dirs(data_dir: Path, state: MetadataState) -> None:
    """Remove the stream directories that ``state`` does not know (deleted streams)."""
    for path in unknown_stream_dirs(data_dir, state):
        log.info("removing data of a deleted stream", extra=fields(path=str(path)))
        try:
            await anyio.to_thread.run_sync(remove_stream_dir, path)
        except OSError as exc:
            log.warning(
                "cannot remove data of a deleted stream",
                extra=fields(path=str(path), error=str(exc)),
            )


def remove_stream_dir(directory: Path) -> None:
    """Rename ``directory`` to ``*.deleted`` (atomic), then remove it (finished at the next
    start if interrupted)."""
    if directory.exists():
        doomed = directory.with_name(directory.name + DELETED_SUFFIX)
        directory.rename(doomed)
        shutil.rmtree(doomed, True)


def tail_records(log_: Log, count: int) -> Iterator[Record]:
    """The last ``count`` records (fewer if compacted or short), in offset order."""
    offset = max(log_.log_start_offset, log_.log_end_offset - count)
    end = log_.log_end_offset
    while offset < end:
        with log_.read(offset, 1 << 20, end) as records:
            data = records.read_bytes()
            nxt = records.next_offset
        for record in iter_records(data, verify=False):
            yield record
            nxt = max(nxt, record.offset + 1)
        if nxt <= offset:
            return
        offset = nxt


@attrs.define(eq=False)
class MarkerSync:
    """Makes the clean-shutdown markers written without fsyncs at a server's stop durable
    (:class:`LogCloser`): :meth:`after` returns once a sync of the data directory's file
    system that started after the call has completed. Syncs run one at a time, so one
    covers every caller that asked while the previous ran (group commit)."""

    path: Path
    """A directory on the file system to sync (the data directory)."""
    syncs: int = 0
    """Syncs completed."""
    _started: int = 0
    _lock: anyio.Lock = attrs.field(factory=anyio.Lock)

    async def after(self) -> None:
        """Wait for a file-system sync that starts after this call."""
        need = self._started + 1
        async with self._lock:
            if self.syncs >= need:
                return  # one started after the call and completed meanwhile
            self._started += 1
            number = self._started
            await anyio.to_thread.run_sync(sync_file_system, self.path)
            self.syncs = number


CLOSE_BATCH = 64
"""Logs one worker-thread call closes at a server's stop."""
CLOSE_THREADS = 8
"""Worker-thread calls closing logs at once."""


@attrs.define(eq=False)
class LogCloser:
    """Closes many logs in few worker-thread calls (a server's stop): each caller queues
    its log; up to ``CLOSE_THREADS`` callers at a time take batches of ``CLOSE_BATCH``
    from the queue to a worker thread until it is empty. A worker-thread round trip per
    partition was most of the event loop's work of a stop at 10,000 partitions."""

    sync_marker: bool = True
    """Fsync each clean-shutdown marker (False: the caller syncs the file system after)."""
    _queue: list[tuple[Log, list[BaseException | None], anyio.Event]] = attrs.field(factory=list)
    _runners: int = 0

    async def close(self, log_: Log) -> None:
        """Close ``log_`` (in a batch); raises what its close raised."""
        item: tuple[Log, list[BaseException | None], anyio.Event] = (log_, [None], anyio.Event())
        self._queue.append(item)
        if self._runners < CLOSE_THREADS:
            self._runners += 1
            try:
                while self._queue:
                    batch, self._queue = self._queue[:CLOSE_BATCH], self._queue[CLOSE_BATCH:]
                    try:
                        await anyio.to_thread.run_sync(self._close_all, batch)
                    finally:
                        for _log, _error, done in batch:
                            done.set()
            finally:
                self._runners -= 1
        await item[2].wait()
        if item[1][0] is not None:
            raise item[1][0]

    def _close_all(self, batch: list[tuple[Log, list[BaseException | None], anyio.Event]]) -> None:
        for log_, error, _done in batch:
            try:
                log_.close(sync_marker=self.sync_marker)
            except Exception as exc:
                error[0] = exc
