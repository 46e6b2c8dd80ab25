"""A follower fetcher of a test's one partition, for the replication tests' fake leaders."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.abc

from jetserver.replication.config import ReplicationConfig
from jetserver.replication.fetcher import FollowerFetcher
from jetserver.replication.session import FetchSession
from jetserver.storage import Log

F = TypeVar("F", bound=FollowerFetcher)

FAST_FETCH = ReplicationConfig(
    fetch_max_wait_s=0.1,
    request_slack_s=0.1,
    retry_min_s=0.02,
    retry_max_s=0.05,
    leader_silence_s=0.2,
)
"""Short polls, slack and back-off for a follower of a fake leader: a fetch with no answer
times out after 0.2 s, and the leader counts as silent after 0.2 s."""


async def ignore_hw(_hw: int) -> None:
    """An ``on_hw`` for a fetcher whose HW the test does not look at."""


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


@asynccontextmanager
async def session_to(
    serve: Callable[[anyio.abc.SocketListener], Awaitable[None]],
    config: ReplicationConfig,
    users: int = 1,
) -> AsyncIterator[tuple[anyio.abc.TaskGroup, int, FetchSession]]:
    """A fake leader (``serve`` on a loopback listener) and a running fetch session of
    ``users`` fetchers to it; yields the task group running both, the port and the session."""
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tg,
    ):
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        tg.start_soon(serve, listener)
        session = FetchSession(f"127.0.0.1:{port}", config)
        session.users = users
        tg.start_soon(session.run)
        yield tg, port, session
