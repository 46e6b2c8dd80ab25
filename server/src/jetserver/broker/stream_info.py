"""StreamInfo JSON (spec/protocol.md): a stream's metadata as the APIs answer it, with each
partition's log positions where this server holds a replica (DescribeStream).

Below the request handlers and the cluster's forwarder, which both answer with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from jetserver.broker.streams import StreamManager
from jetserver.metadata.health import IsDown, never_down, offline_reason
from jetserver.metadata.model import StreamMeta
from jetserver.metadata.validate import partition_subject
from jetserver.storage import Log

__all__ = ["StreamInfoCache", "stream_info"]


def _log_view(log: Log) -> dict[str, Any]:
    return {
        "hw": log.high_watermark,
        "leo": log.log_end_offset,
        "log_start": log.log_start_offset,
        "size_bytes": log.size_bytes,
        "segments": log.segment_count,
    }


def stream_info(
    meta: StreamMeta,
    streams: StreamManager | None = None,
    *,
    describe: bool = False,
    is_down: IsDown = never_down,
) -> dict[str, Any]:
    """StreamInfo JSON. Each partition has ``offline``: null, or why it is offline (no
    live leader in the liveness view ``is_down``; with ``describe``, first: why its
    replica here cannot open). With ``describe`` each partition also has hw, leo,
    log_start, size_bytes and segments (null where this server holds no replica)."""
    spec = meta.spec
    partitions = []
    for a in meta.partitions:
        info: dict[str, Any] = {
            "partition": a.partition,
            "subject": partition_subject(spec.subject, a.partition),
            "leader": a.leader,
            "replicas": list(a.replicas),
            "isr": list(a.isr),
            "leader_epoch": a.leader_epoch,
            "offline": offline_reason(a, is_down),
        }
        if describe:
            replica = streams.local_replica(spec.name, a.partition) if streams else None
            if replica is not None and not replica.closed:
                info.update(_log_view(replica.log))
            else:
                info.update(dict.fromkeys(("hw", "leo", "log_start", "size_bytes", "segments")))
            local = streams.offline.get((spec.name, a.partition)) if streams else None
            if local is not None:
                info["offline"] = local
        partitions.append(info)
    return {
        "name": spec.name,
        "subject": spec.subject,
        "group": spec.group,
        "partitions": partitions,
        "replication_factor": spec.replication_factor,
        "compact": spec.compact,
        "config": spec.config_dict(),
        "created_ns": meta.created_ns,
    }


@attrs.define(eq=False)
class StreamInfoCache:
    """Each stream's Metadata StreamInfo, built again only when the stream's metadata or
    the liveness view changed: a client polling the metadata of thousands of partitions
    (``bench scale_cluster`` watching a failover at 10,000: 8-17 % of a survivor's loop)
    otherwise rebuilt every partition's answer each time.

    The answers are shared between requests: their callers only encode them.
    """

    _kept: dict[str, tuple[StreamMeta, frozenset[str], dict[str, Any]]] = attrs.field(factory=dict)

    def info(self, meta: StreamMeta, down: frozenset[str], is_down: IsDown) -> dict[str, Any]:
        """``stream_info(meta, is_down=is_down)``, reused while ``meta`` is the same object
        and ``down`` (the registered servers ``is_down`` finds down) the same set."""
        kept = self._kept.get(meta.spec.name)
        if kept is not None and kept[0] is meta and kept[1] == down:
            return kept[2]
        info = stream_info(meta, is_down=is_down)
        self._kept[meta.spec.name] = (meta, down, info)
        return info

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget the streams not in ``names`` (deleted ones)."""
        wanted = set(names)
        for name in [n for n in self._kept if n not in wanted]:
            del self._kept[name]
