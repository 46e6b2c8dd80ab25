"""Mirror a Spark query's processed offsets into its consumer group's log (spec/groups.md).

Spark keeps a streaming query's offsets in its checkpoint, where lag tools cannot see them.
With option ``group`` the source also writes, after each committed micro-batch, the next
offset to process of every changed partition as **simple commits** of that group
(spec/groups.md §7.2: commit records with generation -1 in the group's ``__groups``
partition, member ``"jetspark"``, metadata ``"jetspark"``). So the SDK's own tools read
them like any group's offsets: ``jetsdk.consumer.group_admin.group_offsets`` /
``group_lag`` (and a group member that later takes the streams over starts from them).

Simple commits apply only to partitions no group member owns or targets: mirror under a
group name that no :class:`jetsdk.consumer.Consumer` uses for the same streams (refused
commits are logged by the source, not raised). Offsets may move back when a query restarts
from an older checkpoint: the mirror shows what the query processed.

This is a mirror, not the source of truth: Spark restarts from its checkpoint, never from
here. :func:`committed_offsets` and :func:`group_lag` read it back (blocking).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from jetsdk.client import Client
from jetsdk.consumer import OffsetAndMetadata
from jetsdk.consumer.group_admin import commit_offsets, group_offsets
from jetsdk.consumer.group_admin import group_lag as sdk_group_lag
from jetsdk.group.stream_partition import StreamPartition
from jetspark._bridge import shared_bridge
from jetspark.options import security_args, security_options

__all__ = [
    "MIRROR_COMMITTER",
    "committed_offsets",
    "group_lag",
    "write_offsets",
]

MIRROR_COMMITTER = "jetspark"
"""The ``member`` (committer name) and metadata of the mirrored commits."""


async def write_offsets(
    client: Client, group: str, offsets: Mapping[str, Mapping[int, int]]
) -> None:
    """Commit ``{stream: {partition: next offset}}`` for ``group`` as simple commits (ack ALL,
    waits until the group log has applied them).

    Raises:
        CommitFailed: refused (``group_active``: a member of ``group`` owns or targets the
            partition) or not stored; JetError: other SDK errors.
    """
    wanted = {
        StreamPartition(stream, part): OffsetAndMetadata(offset, MIRROR_COMMITTER)
        for stream, parts in offsets.items()
        for part, offset in parts.items()
    }
    await commit_offsets(client, group, wanted, committer=MIRROR_COMMITTER)


async def _committed(client: Client, group: str) -> dict[tuple[str, int], int]:
    found = await group_offsets(client, group)
    return {(key.stream, key.partition): entry.offset for key, entry in found.items()}


def committed_offsets(
    servers: Sequence[str], group: str, **security: Any
) -> dict[tuple[str, int], int]:
    """``{(stream, partition): next offset}`` committed for ``group`` (blocking; by Spark's
    mirror or by anyone else committing for that group).

    ``security``: the keyword arguments of :func:`jetspark.foreach_batch_sink` for TLS and
    credentials (``tls``, ``tls_ca``, ``tls_cert``, ``tls_key``, ``server_hostname``,
    ``token``, ``user``, ``password``).

    Raises:
        OptionError: a bad security argument.
        JetError: the SDK's errors.
    """
    return _on_bridge(servers, security, _committed, group)


async def _lag(client: Client, group: str) -> dict[tuple[str, int], int]:
    found = await sdk_group_lag(client, group)
    return {(key.stream, key.partition): lag.lag for key, lag in found.items()}


def group_lag(servers: Sequence[str], group: str, **security: Any) -> dict[tuple[str, int], int]:
    """``{(stream, partition): high watermark - committed offset}`` for every partition of
    the streams ``group`` has offsets for (blocking). ``security`` and the errors as
    :func:`committed_offsets`."""
    return _on_bridge(servers, security, _lag, group)


def _on_bridge(
    servers: Sequence[str],
    security: Mapping[str, Any],
    read: Callable[[Client, str], Awaitable[dict[tuple[str, int], int]]],
    group: str,
) -> dict[tuple[str, int], int]:
    """``read(client, group)`` on the shared bridge to ``servers`` (``security``: the
    keyword arguments of :func:`jetspark.foreach_batch_sink` for TLS and credentials)."""
    bridge = shared_bridge(servers, security=security_options(security_args(**security)))
    return bridge.call(read, bridge.client, group)
