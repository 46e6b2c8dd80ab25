"""The streams this server holds: metadata operations and their side effects.

:class:`StreamManager` turns metadata into running partitions: it opens each partition's log
(recovering it), starts its tasks, and subscribes it to its NATS subject (in the stream's
load-balance queue group, if any). Creating a stream proposes a CreateStream to the metadata
store, then starts the partitions; deleting stops them and removes the data.

Data layout: ``<data_dir>/streams/<name>-<stream_id>/<partition>/`` per partition. A delete
first renames the stream directory to ``*.deleted`` (atomic), then removes it, so an
interrupted delete is finished at the next start.

Task safety: event loop thread only; create/delete are serialized by a lock.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs
from anyio.abc import TaskGroup

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.record import Record, iter_records
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.producers import REBUILD_RECORDS, ProducerTable
from jetserver.config import ServerConfig
from jetserver.errors import ApiError, partition_not_found, stream_not_found
from jetserver.logs import fields
from jetserver.metadata.model import StreamMeta
from jetserver.metadata.ops import CreateStream, DeleteStream
from jetserver.metadata.store import MetadataStore
from jetserver.metadata.validate import partition_subject, spec_from_request
from jetserver.nats_link import NatsLink, NatsUnavailable, SubscriptionHandle
from jetserver.storage import Log, LogConfig, StorageError

log = logging.getLogger(__name__)

STREAMS_DIR = "streams"
DELETED_SUFFIX = ".deleted"
SUBSCRIBE_CONFIRM_TIMEOUT_S = 5.0
QUEUE_GROUP_PREFIX = "jet.lb."
"""NATS queue group of a load-balance group ``g`` is ``jet.lb.g``."""


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


@attrs.define(eq=False)
class _Running:
    """A started partition and its subscription."""

    replica: PartitionReplica
    sub: SubscriptionHandle | None = None


@attrs.define(eq=False)
class StreamManager:
    """Streams and partitions of this server (single server: it leads every partition)."""

    config: ServerConfig
    """Server configuration."""
    store: MetadataStore
    """Metadata state machine and its persistence."""
    link: NatsLink
    """NATS link for subscriptions and acks."""
    _tg: TaskGroup | None = None
    _running: dict[tuple[str, int], _Running] = attrs.field(factory=dict)
    _lock: anyio.Lock = attrs.field(factory=anyio.Lock)

    @property
    def data_dir(self) -> Path:
        """The server's data directory."""
        return Path(self.config.server.data_dir)

    @property
    def server_id(self) -> str:
        """This server's id."""
        return self.config.server.id

    # ------------------------------------------------------------------ lookups

    def stream(self, name: str) -> StreamMeta:
        """The stream called ``name``.

        Raises:
            ApiError: STREAM_NOT_FOUND.
        """
        meta = self.store.state.streams.get(name)
        if meta is None:
            raise stream_not_found(name)
        return meta

    def streams(self) -> list[StreamMeta]:
        """Every stream, by name."""
        return sorted(self.store.state.streams.values(), key=lambda m: m.name)

    def replica(self, name: str, partition: int) -> PartitionReplica:
        """The local replica of ``name``/``partition``.

        Raises:
            ApiError: STREAM_NOT_FOUND, PARTITION_NOT_FOUND, or UNAVAILABLE if it is not open.
        """
        meta = self.stream(name)
        if not 0 <= partition < meta.spec.partitions:
            raise partition_not_found(name, partition, meta.spec.partitions)
        running = self._running.get((name, partition))
        if running is None or running.replica.closed:
            raise ApiError(
                ErrorCode.UNAVAILABLE,
                f"partition {name}/{partition} is not open on this server",
                {"stream": name, "partition": partition},
            )
        return running.replica

    def local_replica(self, name: str, partition: int) -> PartitionReplica | None:
        """The local replica if open, else None (no error)."""
        running = self._running.get((name, partition))
        return None if running is None else running.replica

    # ------------------------------------------------------------------ lifecycle

    async def start(self, tg: TaskGroup) -> None:
        """Finish interrupted deletes, then open and subscribe every stream in the metadata."""
        self._tg = tg
        root = self.data_dir / STREAMS_DIR
        root.mkdir(parents=True, exist_ok=True)
        for leftover in root.glob(f"*{DELETED_SUFFIX}"):
            log.info("removing data of a deleted stream", extra=fields(path=str(leftover)))
            await anyio.to_thread.run_sync(shutil.rmtree, leftover, True)
        known = {stream_dir(self.data_dir, m).name for m in self.streams()}
        for path in root.iterdir():
            if path.name not in known:
                log.warning(
                    "data directory not in metadata; left alone (remove it by hand)",
                    extra=fields(path=str(path)),
                )
        for meta in self.streams():
            await self._open_stream(meta)
        await self._confirm_subscriptions()

    async def _confirm_subscriptions(self) -> None:
        """Round-trip to NATS so the new subscriptions are active before we answer: a
        message published after CreateStream returns is then captured."""
        try:
            await self.link.flush(SUBSCRIBE_CONFIRM_TIMEOUT_S)
        except NatsUnavailable as exc:
            # Subscriptions are replayed by nats-py once the link is back.
            log.warning("cannot confirm subscriptions", extra=fields(error=str(exc)))

    async def _open_stream(self, meta: StreamMeta) -> None:
        assert self._tg is not None
        directory = stream_dir(self.data_dir, meta)
        cfg = log_config(meta, self.config)
        max_message = meta.spec.max_message_bytes or self.config.limits.max_message_bytes
        for assignment in meta.partitions:
            p = assignment.partition
            if assignment.leader != self.server_id:
                continue
            pdir = directory / str(p)
            log_, producers = await anyio.to_thread.run_sync(
                self._open_log, pdir, cfg, meta.name, p
            )
            replica = PartitionReplica(
                stream=meta.name,
                partition=p,
                subject=partition_subject(meta.spec.subject, p),
                log=log_,
                link=self.link,
                max_message_bytes=max_message,
                ingest=self.config.ingest,
                storage=self.config.storage,
                leader_epoch=assignment.leader_epoch,
                compact=meta.spec.compact,
                producers=producers,
            )
            await self._tg.start(replica.run)
            running = _Running(replica)
            self._running[(meta.name, p)] = running
            queue = QUEUE_GROUP_PREFIX + meta.spec.group if meta.spec.group else ""
            running.sub = await self.link.subscribe(
                replica.subject, replica.on_message, queue=queue
            )
            log.info(
                "partition open",
                extra=fields(
                    stream=meta.name,
                    partition=p,
                    subject=replica.subject,
                    queue=queue or None,
                    log_start=log_.log_start_offset,
                    hw=log_.high_watermark,
                    leo=log_.log_end_offset,
                ),
            )

    @staticmethod
    def _open_log(
        directory: Path, cfg: LogConfig, name: str, partition: int
    ) -> tuple[Log, ProducerTable]:
        directory.mkdir(parents=True, exist_ok=True)
        log_ = Log.open(directory, cfg)
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
        elif not report.clean_shutdown:
            log.info(
                "log recovered after an unclean shutdown; nothing to repair",
                extra=fields(stream=name, partition=partition),
            )
        # RF=1: whatever survived on disk is durable once flushed, so it is committed.
        log_.flush()
        log_.set_high_watermark(log_.log_end_offset)
        producers = ProducerTable()
        try:
            producers.rebuild(_tail_records(log_, REBUILD_RECORDS))
        except StorageError as exc:
            log.warning(
                "cannot rebuild idempotent producer state",
                extra=fields(stream=name, partition=partition, error=str(exc)),
            )
        return log_, producers

    async def stop(self) -> None:
        """Stop ingest (unsubscribe), append what was queued, flush, checkpoint, close logs."""
        running = list(self._running.values())
        for r in running:
            if r.sub is not None:
                await r.sub.unsubscribe()
        for r in running:
            r.replica.stop(drain=True)
        for r in running:
            await r.replica.wait_stopped()
        self._running.clear()

    def wake_all(self) -> None:
        """Wake every fetch waiting on any partition (shutdown)."""
        for r in self._running.values():
            r.replica.wake_waiters()

    # ------------------------------------------------------------------ operations

    async def create(self, request: Mapping[str, Any]) -> tuple[bool, StreamMeta]:
        """Validate and create a stream (idempotent); return ``(created, stream)``.

        Raises:
            ApiError: INVALID_ARGUMENT, STREAM_EXISTS, STORAGE_ERROR.
        """
        spec = spec_from_request(
            request,
            cluster_size=1,
            max_message_bytes=self.config.limits.max_message_bytes,
            default_segment_max_bytes=self.config.storage.segment_max_bytes,
            default_segment_max_age_s=self.config.storage.segment_max_age_s,
        )
        async with self._lock:
            op = CreateStream(
                spec=spec,
                stream_id=secrets.token_hex(4),
                created_ns=time.time_ns(),
                replicas=tuple((self.server_id,) for _ in range(spec.partitions)),
            )
            try:
                result = await self.store.propose(op)
            except OSError as exc:
                raise ApiError(ErrorCode.STORAGE_ERROR, f"cannot write metadata: {exc}") from exc
            if not result.ok:
                raise ApiError(result.error_code, result.message, {"stream": spec.name})
            assert result.stream is not None
            if result.created:
                log.info(
                    "stream created",
                    extra=fields(
                        stream=spec.name,
                        subject=spec.subject,
                        partitions=spec.partitions,
                        group=spec.group,
                    ),
                )
                try:
                    await self._open_stream(result.stream)
                    await self._confirm_subscriptions()
                except Exception as exc:
                    log.exception("cannot open new stream", extra=fields(stream=spec.name))
                    raise ApiError(
                        ErrorCode.STORAGE_ERROR, f"stream created but cannot be opened: {exc}"
                    ) from exc
            return result.created, result.stream

    async def delete(self, name: str) -> None:
        """Delete a stream: metadata first, then stop its partitions and remove its data.

        Raises:
            ApiError: STREAM_NOT_FOUND, STORAGE_ERROR.
        """
        async with self._lock:
            try:
                result = await self.store.propose(DeleteStream(name))
            except OSError as exc:
                raise ApiError(ErrorCode.STORAGE_ERROR, f"cannot write metadata: {exc}") from exc
            if not result.ok:
                raise ApiError(result.error_code, result.message, {"stream": name})
            meta = result.stream
            assert meta is not None
            for p in range(meta.spec.partitions):
                running = self._running.pop((name, p), None)
                if running is None:
                    continue
                if running.sub is not None:
                    await running.sub.unsubscribe()
                running.replica.stop(drain=False)
                await running.replica.wait_stopped()
            directory = stream_dir(self.data_dir, meta)
            if directory.exists():
                doomed = directory.with_name(directory.name + DELETED_SUFFIX)
                directory.rename(doomed)
                await anyio.to_thread.run_sync(shutil.rmtree, doomed, True)
            log.info("stream deleted", extra=fields(stream=name))


def _tail_records(log_: Log, count: int) -> Iterator[Record]:
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
