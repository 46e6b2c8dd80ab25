"""Apply a stream's updated storage settings and message limit to its open replicas
(UpdateStream).

A replica opens its log with the settings of the stream's spec
(:func:`~jetserver.broker.stream_files.log_config`); after an UpdateStream changes the spec,
:class:`LiveLogSettings` hands every open local replica the new
:class:`~jetserver.storage.LogConfig`: appends roll, and retention and compaction remove,
by it from their next run; the replica's sequencer refuses messages above the stream's
``max_message_bytes`` from its next batch. Called after each reconciliation with the
metadata (cluster) and after a single server's update; a replica opened later reads the
spec anyway.

Task safety: event loop.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from jetserver.broker.stream_files import log_config
from jetserver.broker.streams import StreamManager
from jetserver.metadata.model import StreamMeta, StreamSpec

__all__ = ["LiveLogSettings"]


@attrs.define(eq=False)
class LiveLogSettings:
    """Applies updated log settings and message limits to the open local replicas (see
    the module docstring)."""

    _seen: dict[str, StreamSpec] = attrs.field(factory=dict)
    """Stream name -> the spec last applied (specs are immutable: an unchanged one is the
    same object in the next metadata state, so a reconciliation of thousands of
    partitions costs one identity check per stream)."""

    def apply(self, streams: StreamManager, metas: Iterable[StreamMeta]) -> int:
        """Give each open local replica of ``metas`` whose spec changed since the last call
        its stream's current log settings and message limit; return how many changes
        were made (a replica whose log settings and limit both changed counts twice)."""
        changed = 0
        seen: dict[str, StreamSpec] = {}
        for meta in metas:
            seen[meta.name] = meta.spec
            if self._seen.get(meta.name) is meta.spec:
                continue
            cfg = log_config(meta, streams.config)
            limit = meta.spec.max_message_bytes or streams.config.limits.max_message_bytes
            for p in range(meta.spec.partitions):
                replica = streams.local_replica(meta.name, p)
                if replica is None or replica.closed:
                    continue
                if replica.max_message_bytes != limit:
                    replica.set_max_message_bytes(limit)
                    changed += 1
                if replica.log.config == cfg:
                    continue
                replica.log.update_config(cfg)
                changed += 1
        self._seen = seen
        return changed
