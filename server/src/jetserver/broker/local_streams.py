"""A server alone: CreateStream and DeleteStream against ``metadata.json``, and the opening of
its partitions at start.

In a cluster the same requests go through :mod:`jetserver.cluster.forwarding` and every
server's :meth:`~jetserver.broker.streams.StreamManager.reconcile` opens what the replicated
metadata assigns it; :class:`LocalStreams` exists only without ``[cluster]``. It proposes to
the :class:`~jetserver.metadata.store.MetadataStore`, then has the
:class:`~jetserver.broker.streams.StreamManager` open (or close) the partitions, which this
server all leads.

Task safety: event loop thread only; create and delete hold the manager's lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import anyio
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.broker.gc_pause import release_frozen
from jetserver.broker.stream_files import remove_stream_dir, stream_dir, unknown_stream_dirs
from jetserver.broker.streams import StreamManager
from jetserver.errors import ApiError
from jetserver.infra.resources import FILES_PER_PARTITION, check_room, describe_open_error
from jetserver.logs import fields
from jetserver.metadata.creation import create_stream_op, created_stream
from jetserver.metadata.model import StreamMeta
from jetserver.metadata.ops import DeleteStream
from jetserver.metadata.reserved import checked_spec
from jetserver.metadata.store import MetadataStore

log = logging.getLogger(__name__)

__all__ = ["LocalStreams"]


@attrs.define(eq=False)
class LocalStreams:
    """Stream operations of a server alone (see the module docstring)."""

    manager: StreamManager
    """Opens, subscribes and closes the partitions."""
    store: MetadataStore
    """``metadata.json``: this server's streams."""

    async def open_all(self) -> None:
        """Open and subscribe every partition in the metadata (at start, after
        :meth:`StreamManager.start`); from ``open_in_background_from`` partitions on, leave
        them to :meth:`StreamManager.open_pending` (opened after ready, each on first use)."""
        manager = self.manager
        for path in unknown_stream_dirs(manager.data_dir, self.store.state):
            log.warning(
                "data directory not in metadata; left alone (remove it by hand)",
                extra=fields(path=str(path)),
            )
        started = time.monotonic()
        me = manager.server_id
        wanted = [(m, a) for m in manager.streams() for a in m.partitions if a.leader == me]
        if len(wanted) >= manager.config.storage.open_in_background_from:
            manager.pending.add(wanted)
            return
        opened = await manager.open_partitions(wanted, subscribe=True)
        await manager.confirm_subscriptions()
        log.info(
            "partitions opened",
            extra=fields(
                count=opened,
                offline=len(wanted) - opened,
                seconds=round(time.monotonic() - started, 2),
            ),
        )

    async def create(self, request: Mapping[str, Any]) -> tuple[bool, StreamMeta]:
        """Validate and create a stream (idempotent); return ``(created, stream)``.

        Raises:
            ApiError: INVALID_ARGUMENT, STREAM_EXISTS, STORAGE_ERROR.
        """
        manager = self.manager
        config = manager.config
        spec = checked_spec(
            request,
            cluster_size=1,
            max_message_bytes=config.limits.max_message_bytes,
            default_segment_max_bytes=config.storage.segment_max_bytes,
            default_segment_max_age_s=config.storage.segment_max_age_s,
            nats_max_payload=manager.link.max_payload,
        )
        async with manager.lock:
            if spec.name not in self.store.state.streams:
                need = spec.partitions * FILES_PER_PARTITION
                check_room(need, f"stream {spec.name!r}", reserve=False)
                if manager.disk is not None:
                    manager.disk.check_now()  # DiskFull (STORAGE_ERROR) below the floor
            me = manager.server_id
            op = create_stream_op(spec, tuple((me,) for _ in range(spec.partitions)))
            try:
                result = await self.store.propose(op)
            except OSError as exc:
                raise ApiError(ErrorCode.STORAGE_ERROR, f"cannot write metadata: {exc}") from exc
            stream = created_stream(result, spec)
            if result.created:
                try:
                    await self._open_stream(stream)
                    await manager.confirm_subscriptions()
                except Exception as exc:
                    reason = describe_open_error(exc)
                    log.error(
                        "cannot open new stream; creating it is undone",
                        extra=fields(stream=spec.name, error=reason),
                    )
                    with anyio.CancelScope(shield=True):
                        await self._delete_locked(spec.name)
                    raise ApiError(
                        ErrorCode.STORAGE_ERROR,
                        f"stream {spec.name!r} cannot be opened, not created: {reason}",
                        {"stream": spec.name},
                    ) from exc
            return result.created, stream

    async def delete(self, name: str) -> None:
        """Delete a stream: metadata first, then stop its partitions and remove its data.

        Raises:
            ApiError: STREAM_NOT_FOUND, STORAGE_ERROR.
        """
        async with self.manager.lock:
            await self._delete_locked(name)
            log.info("stream deleted", extra=fields(stream=name))

    async def _open_stream(self, meta: StreamMeta) -> None:
        """Open and subscribe every partition of a new stream; raises the first error."""
        errors: list[Exception] = []
        leading = [(meta, a) for a in meta.partitions if a.leader == self.manager.server_id]
        await self.manager.open_partitions(leading, subscribe=True, errors=errors)
        if errors:
            raise errors[0]

    async def _delete_locked(self, name: str) -> None:
        try:
            result = await self.store.propose(DeleteStream(name))
        except OSError as exc:
            raise ApiError(ErrorCode.STORAGE_ERROR, f"cannot write metadata: {exc}") from exc
        if not result.ok:
            raise ApiError(result.error_code, result.message, {"stream": name})
        meta = result.stream
        assert meta is not None
        await self.manager.stop_stream(meta)
        release_frozen()
        data = stream_dir(self.manager.data_dir, meta)
        await anyio.to_thread.run_sync(remove_stream_dir, data)
