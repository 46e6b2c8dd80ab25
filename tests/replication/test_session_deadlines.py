"""A fetch session's bounds on its partitions' fetches (jetserver.replication.session).

The session keeps every waiting fetch's bound in one task (a heap of deadlines) instead of
a cancel scope around each fetch. The leader here is a real 127.0.0.1 socket that reads the
session's requests and never answers them:

- fetches asked with different bounds, the later-asked one due first, each end with
  Timeout at their own bound, in the order of their bounds;
- a fetch waiting when its session ends is told at once (ClientClosed), rather than when
  its bound passes: nothing would end its wait any more;
- a request answered late, after one of its fetches' bounds but before another's (a
  loaded leader), times out only the first: the other gets its answer.
"""

from __future__ import annotations

import functools

import anyio
import anyio.abc
import pytest

from jetsdk.codec.replica_fetch import (
    ReplicaFetchAnswer,
    ReplicaFetchPartition,
)
from jetsdk.errors import ClientClosed, Timeout
from jetserver.replication.config import ReplicationConfig
from jetserver.replication.session import FetchSession
from support.fetchers import session_to
from support.frames_in import frames_from, replica_fetch_reply, replica_fetches

pytestmark = pytest.mark.anyio

CONFIG = ReplicationConfig(fetch_max_wait_s=0.1, request_slack_s=5.0)
"""Requests are answered late (5 s slack): only the fetches' own bounds end them here."""


async def _never_answer(
    listener: anyio.abc.SocketListener, asked: anyio.Event | None = None
) -> None:
    """Read every request (``asked`` set at the first) and answer none."""

    async def handle(conn: anyio.abc.SocketStream) -> None:
        async with conn:
            async for _frame in frames_from(conn):
                if asked is not None:
                    asked.set()

    await listener.serve(handle)


def _part(stream: str) -> ReplicaFetchPartition:
    return ReplicaFetchPartition(stream, 0, 0, 1, 0, 0, 1 << 20)


async def test_waiting_fetches_end_at_their_own_bounds_in_order() -> None:
    ended: list[tuple[str, float, type[BaseException]]] = []
    async with session_to(_never_answer, CONFIG, users=3) as (tg, _port, session):
        started = anyio.current_time()

        async def fetch(stream: str, bound_s: float) -> None:
            try:
                await session.fetch(_part(stream), bound_s)
            except Exception as exc:
                ended.append((stream, anyio.current_time() - started, type(exc)))

        with anyio.fail_after(10.0):
            async with anyio.create_task_group() as fetches:
                fetches.start_soon(fetch, "late", 1.2)
                await anyio.sleep(0.05)  # (not a synchronisation: "late" is asked first)
                fetches.start_soon(fetch, "early", 0.4)  # asked later, due first
                fetches.start_soon(fetch, "middle", 0.8)
        tg.cancel_scope.cancel()
    assert [s for s, _, _ in ended] == ["early", "middle", "late"]
    assert all(kind is Timeout for _, _, kind in ended)
    for (_, at, _), bound in zip(ended, (0.45, 0.85, 1.2), strict=True):
        assert bound - 0.01 <= at < bound + 1.0  # at its bound, not the request's 5 s slack


async def test_a_fetch_waiting_when_its_session_ends_is_told_at_once() -> None:
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tg,
    ):
        asked = anyio.Event()
        tg.start_soon(functools.partial(_never_answer, listener, asked))
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        session = FetchSession(f"127.0.0.1:{port}", CONFIG)
        session.users = 1
        ended = anyio.Event()
        session_scope = anyio.CancelScope()
        outcome: list[BaseException] = []

        async def run_session() -> None:
            with session_scope:
                await session.run()

        async def fetch() -> None:
            try:
                await session.fetch(_part("s"), 30.0)
            except Exception as exc:
                outcome.append(exc)
            ended.set()

        tg.start_soon(run_session)
        tg.start_soon(fetch)
        with anyio.fail_after(10.0):
            await asked.wait()  # the fetch's request is out, unanswered
        session_scope.cancel()  # the session ends (as its server's shutdown ends it)
        with anyio.fail_after(5.0):  # far below the fetch's 30 s bound
            await ended.wait()
        tg.cancel_scope.cancel()
    assert len(outcome) == 1
    assert isinstance(outcome[0], ClientClosed)


LATE_S = 0.6
"""The late leader answers every request this long after it came."""
SHORT = ReplicationConfig(fetch_max_wait_s=0.1, request_slack_s=0.1)
"""A request's long poll plus slack: 0.2 s, well below ``LATE_S``."""


async def _answer_late(listener: anyio.abc.SocketListener) -> None:
    """Answer every partition of every request (no records, HW 0), ``LATE_S`` after it."""

    async def handle(conn: anyio.abc.SocketStream) -> None:
        async with conn:
            async for frame, req in replica_fetches(conn):
                await anyio.sleep(LATE_S)  # (the leader's delay, not a synchronisation)
                answers = [
                    ReplicaFetchAnswer(i, 0, hw=0, log_start=0, leo=0)
                    for i in range(len(req.partitions))
                ]
                await conn.send(replica_fetch_reply(frame, answers))

    await listener.serve(handle)


async def test_a_late_answer_reaches_the_fetches_whose_own_bounds_have_not_passed() -> None:
    """Issue 34: a request is awaited until the last of its partitions' bounds, not the
    first's: a loaded leader's late answer used to be thrown away with every partition in
    it (each asked again, and the leader served the whole request again)."""
    outcome: dict[str, BaseException | int] = {}
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(_answer_late, listener)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        session = FetchSession(f"127.0.0.1:{port}", SHORT)
        session.users = 2

        async def fetch(stream: str, bound_s: float) -> None:
            try:
                outcome[stream] = (await session.fetch(_part(stream), bound_s)).hw
            except Exception as exc:
                outcome[stream] = exc

        with anyio.fail_after(10.0):
            async with anyio.create_task_group() as fetches:
                # Both ask before the session runs (tasks start in order): it dials, then
                # one request carries both.
                fetches.start_soon(fetch, "short", 0.2)
                fetches.start_soon(fetch, "long", 3.0)
                tg.start_soon(session.run)
        tg.cancel_scope.cancel()
    assert session.requests == 1, session.requests
    assert isinstance(outcome["short"], Timeout), outcome  # its own bound passed first
    assert outcome["long"] == 0, outcome  # answered, not timed out with the other
