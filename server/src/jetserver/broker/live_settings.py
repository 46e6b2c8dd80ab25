"""Apply a stream's updated storage settings to its open replicas (UpdateStream).

A replica opens its log with the settings of the stream's spec
(:func:`~jetserver.broker.stream_files.log_config`); after an UpdateStream changes the spec,
:class:`LiveLogSettings` hands every open local replica the new
:class:`~jetserver.storage.LogConfig`: appends roll, and retention and compaction remove,
by it from their next run. Called after each reconciliation with the metadata (cluster)
and after a single server's update; a replica opened later reads the spec anyway.

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
    """Applies updated log settings to the open local replicas (see the module docstring)."""

    _seen: dict[str, StreamSpec] = attrs.field(factory=dict)
    """Stream name -> the spec last applied (specs are immutable: an unchanged one is the
    same object in the next metadata state, so a reconciliation of thousands of
    partitions costs one identity check per stream)."""

    def apply(self, streams: StreamManager, metas: Iterable[StreamMeta]) -> int:
        """Give each open local replica of ``metas`` whose spec changed since the last call
        its stream's current log settings; return how many replicas changed."""
        changed = 0
        seen: dict[str, StreamSpec] = {}
        for meta in metas:
            seen[meta.name] = meta.spec
            if self._seen.get(meta.name) is meta.spec:
                continue
            cfg = log_config(meta, streams.config)
            for p in range(meta.spec.partitions):
                replica = streams.local_replica(meta.name, p)
                if replica is None or replica.closed or replica.log.config == cfg:
                    continue
                replica.log.update_config(cfg)
                changed += 1
        self._seen = seen
        return changed
