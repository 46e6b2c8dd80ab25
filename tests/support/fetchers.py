"""A follower fetcher of a test's one partition, for the replication tests' fake leaders."""

from __future__ import annotations

from typing import Any, TypeVar

from jetserver.replication.config import ReplicationConfig
from jetserver.replication.fetcher import FollowerFetcher
from jetserver.storage import Log

F = TypeVar("F", bound=FollowerFetcher)


def follower_fetcher(
    cls: type[F],
    stream: str,
    port: int,
    log_: Log,
    config: ReplicationConfig,
    **extra: Any,
) -> F:
    """A ``cls`` following ``stream``/0 as ``f1`` (replica 1, durability ``flushed``) from
    leader ``l1`` (epoch 0) at 127.0.0.1:``port``, appending to ``log_``; ``extra``: the other
    fetcher arguments (``on_hw`` at least)."""
    return cls(
        stream=stream,
        partition=0,
        server_id="f1",
        replica_id=1,
        leader="l1",
        leader_address=f"127.0.0.1:{port}",
        leader_epoch=0,
        log=log_,
        durability="flushed",
        config=config,
        request_flush=lambda: None,
        **extra,
    )
