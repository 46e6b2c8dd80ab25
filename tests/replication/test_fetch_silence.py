"""Which replica-fetch timeouts a follower reports as a silent leader (spec/cluster.md,
"Silent leaders").

The leader here is a small ReplicaFetch peer on a real 127.0.0.1 socket: it answers the
session's requests for some partitions and never for the stuck one, or answers nothing at
all. The follower is a real :class:`FollowerFetcher` over a real log, with a control plane
that records reports and a liveness view that finds the leader's server up.

- A session whose requests all go unanswered is the leader's server's silence: its
  partitions do not report it (the liveness view decides), however many timeouts.
- A partition left unanswered while the session's other requests are answered is stuck at
  a live leader: two timeouts in a row report it.
- A silent leader is reported once the liveness view finds its server down (the event the
  follower waits on), not before.
- A leader whose server answers the follower's fetches with NOT_LEADER in the epoch it was
  given (it stepped aside: recovery found damaged records) is reported once that has
  lasted the bound without a break, although its server answers probes; answers of a
  leader still taking its role (UNAVAILABLE) are not reported.
- A busy leader that answers the session's requests early (news of other partitions) and
  its zero-wait requests late (a loaded server) is not reported, however many of the
  partition's fetches time out meanwhile: only the answer to a request without a long
  poll (the partition was due) that leaves it out shows it stuck. At 5,000 partitions on a
  loaded 2-core machine,
  "the session got any answer meanwhile" reported live leaders by the hundred.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
import attrs
import pytest
from anyio.abc import TaskGroup

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import FLAG_RESPONSE, Api, encode_frame
from jetsdk.codec.replica_fetch import (
    ReplicaFetchAnswer,
    ReplicaFetchPartition,
    decode_replica_fetch_request,
    encode_replica_fetch_response,
)
from jetserver.replication.config import ReplicationConfig
from jetserver.replication.fetcher import FollowerFetcher
from jetserver.replication.follower import NotLeaderRun
from jetserver.replication.session import FetchSession
from jetserver.storage import Log
from support.control_plane import RecordingControl
from support.fetchers import FAST_FETCH, follower_fetcher, ignore_hw, session_to
from support.frames_in import frames_from, replica_fetch_reply, replica_fetches

pytestmark = pytest.mark.anyio

CONFIG = FAST_FETCH
BOUND_S = 10.0
"""Bound on each wait for the follower's fetches to time out."""


class Reports(RecordingControl):
    """The recording control plane with liveness probes (server_down: only when set)."""

    def __init__(self) -> None:
        super().__init__("f1")
        self.down = False
        self.gone = False
        self.down_event = anyio.Event()

    def server_down(self, server_id: str) -> bool:
        return self.down  # while False, only a stuck partition is reported

    def server_down_event(self, server_id: str) -> anyio.Event:
        return self.down_event

    def server_gone(self, server_id: str) -> bool:
        return self.gone


async def serve_leader(listener: anyio.abc.SocketListener, answer_streams: set[str]) -> None:
    """Answer each ReplicaFetch after its long poll, for the partitions of
    ``answer_streams`` only; with none, never answer."""

    async def handle(conn: anyio.abc.SocketStream) -> None:
        async with conn, anyio.create_task_group() as tg:
            async for frame, req in replica_fetches(conn):
                if not answer_streams:
                    continue
                answers = [
                    ReplicaFetchAnswer(i, 0, hw=0, log_start=0, leo=0)
                    for i, p in enumerate(req.partitions)
                    if p.stream in answer_streams
                ]
                reply = replica_fetch_reply(frame, answers)
                tg.start_soon(answer_later, conn, req.max_wait_ms / 1000, reply)

    await listener.serve(handle)


async def serve_busy_leader(listener: anyio.abc.SocketListener) -> None:
    """A loaded leader with news elsewhere: a request with a long poll is answered at once
    without this follower's partitions (other partitions' news); one without (its
    partitions are due) is answered fully, but after more than ``request_slack_s``."""

    async def handle(conn: anyio.abc.SocketStream) -> None:
        sending = anyio.Lock()

        async def answer(delay_s: float, reply: bytes) -> None:
            await anyio.sleep(delay_s)
            async with sending:
                await conn.send(reply)

        async with conn, anyio.create_task_group() as tg:
            async for frame, req in replica_fetches(conn):
                late = req.max_wait_ms == 0
                answers = [
                    ReplicaFetchAnswer(i, 0, hw=0, log_start=0, leo=0)
                    for i in range(len(req.partitions))
                    if late
                ]
                reply = replica_fetch_reply(frame, answers)
                tg.start_soon(answer, 2 * CONFIG.request_slack_s if late else 0.01, reply)

    await listener.serve(handle)


@asynccontextmanager
async def serving_leader(answer_streams: set[str]) -> AsyncIterator[tuple[TaskGroup, int]]:
    """A task group running :func:`serve_leader` for ``answer_streams`` on a loopback port;
    yields the group and the port."""
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(serve_leader, listener, answer_streams)
        yield tg, listener.extra(anyio.abc.SocketAttribute.local_port)


async def answer_later(conn: anyio.abc.SocketStream, wait_s: float, reply: bytes) -> None:
    await anyio.sleep(wait_s)  # the long poll: nothing new
    await conn.send(reply)


class CountingFetcher(FollowerFetcher):
    """A follower that sets :attr:`failed` once its fetches failed ``enough`` times."""

    enough: int = 1
    failed: anyio.Event

    async def _pause_after(self, exc: Exception, *, quiet: bool = False) -> None:
        await super()._pause_after(exc, quiet=quiet)
        if self.interruptions.failures >= self.enough:
            self.failed.set()


F = TypeVar("F", bound=FollowerFetcher)


def stuck_follower(
    cls: type[F],
    port: int,
    log_: Log,
    config: ReplicationConfig,
    reports: Reports,
    **extra: Any,
) -> F:
    """A ``cls`` following ``stuck/0`` (leader ``l1`` at ``port``) as ``f1``, reporting to
    ``reports``; ``extra``: more fetcher arguments."""
    return follower_fetcher(
        cls,
        "stuck",
        port,
        log_,
        config,
        on_hw=ignore_hw,
        controller=reports,
        server_down=reports.server_down,
        server_down_event=reports.server_down_event,
        **extra,
    )


async def follow(
    tmp_path: Path,
    answer_streams: set[str],
    stuck_timeouts: int,
    *,
    down_after: bool = False,
) -> tuple[Reports, FollowerFetcher, FetchSession]:
    """Run a follower of ``stuck/0`` (and a fetch loop of ``ok/0`` on the same session)
    until ``stuck/0``'s fetches have failed ``stuck_timeouts`` times (with ``down_after``:
    then the liveness view finds the leader's server down, until it is reported); the
    recorder."""
    reports = Reports()
    log_ = Log.open(tmp_path / "stuck-0")
    leader = functools.partial(serve_leader, answer_streams=answer_streams)
    async with session_to(leader, CONFIG, users=2) as (tg, port, session):
        fetcher = stuck_follower(CountingFetcher, port, log_, CONFIG, reports, session=session)
        fetcher.enough, fetcher.failed = stuck_timeouts, anyio.Event()

        async def ok_partition() -> None:
            part = ReplicaFetchPartition("ok", 0, 0, 1, 0, 0, 1 << 20)
            while True:
                try:
                    await session.fetch(part, CONFIG.fetch_max_wait_s + CONFIG.request_slack_s)
                except Exception:
                    await anyio.sleep(CONFIG.retry_min_s)

        tg.start_soon(ok_partition)
        tg.start_soon(fetcher.run)
        with anyio.fail_after(BOUND_S):
            await fetcher.failed.wait()
        if down_after:
            assert reports.reports == []  # silent for many periods, but its server is up
            reports.down = True
            reports.down_event.set()
            with anyio.fail_after(BOUND_S):
                await reports.reported.wait()
        tg.cancel_scope.cancel()
    log_.close()
    return reports, fetcher, session


async def test_a_session_left_unanswered_is_not_reported_by_its_partitions(
    tmp_path: Path,
) -> None:
    reports, _fetcher, session = await follow(tmp_path, set(), stuck_timeouts=4)
    assert session.requests == 0
    assert reports.reports == []


async def test_a_partition_left_unanswered_by_a_live_leader_is_reported(tmp_path: Path) -> None:
    reports, _fetcher, session = await follow(tmp_path, {"ok"}, stuck_timeouts=3)
    assert session.requests >= 2
    assert ("stuck", 0) in reports.reports


async def test_a_silent_leader_is_reported_once_its_server_is_down(tmp_path: Path) -> None:
    reports, _fetcher, _session = await follow(tmp_path, set(), stuck_timeouts=4, down_after=True)
    assert reports.reports[0] == ("stuck", 0)


@pytest.mark.parametrize("gone", [True, False])
async def test_a_leader_whose_server_is_gone_is_reported_without_waiting_the_silence(
    tmp_path: Path, gone: bool
) -> None:
    """The liveness view finds the leader's server down just after the follower last heard
    from it. Its probe refused (``gone``: the process is gone): the report goes out at once,
    not ``leader_silence_s`` later (1-1.5 s of every failover). Its probes only timing out
    (a busy server, which may still answer fetches): the silence rule holds."""
    config = attrs.evolve(CONFIG, leader_silence_s=30.0, fetch_max_wait_s=5.0)
    reports = Reports()
    log_ = Log.open(tmp_path / "stuck-0")
    async with serving_leader({"stuck"}) as (tg, port):  # answers: heard recently
        fetcher = stuck_follower(FollowerFetcher, port, log_, config, reports)
        tg.start_soon(fetcher.run)
        await anyio.sleep(0.1)  # the follower is under way (nothing to wait on)
        reports.down, reports.gone = True, gone
        reports.down_event.set()
        with anyio.move_on_after(3.0):  # far below the 30 s silence
            await reports.reported.wait()
        tg.cancel_scope.cancel()
    log_.close()
    assert reports.reports == ([("stuck", 0)] if gone else [])


async def test_a_busy_leader_answering_early_and_late_is_not_reported(tmp_path: Path) -> None:
    reports = Reports()
    log_ = Log.open(tmp_path / "stuck-0")
    async with session_to(serve_busy_leader, CONFIG) as (tg, port, session):
        fetcher = stuck_follower(CountingFetcher, port, log_, CONFIG, reports, session=session)
        fetcher.enough, fetcher.failed = 4, anyio.Event()
        tg.start_soon(fetcher.run)
        with anyio.fail_after(BOUND_S):
            await fetcher.failed.wait()  # four of its fetches timed out
        tg.cancel_scope.cancel()
    log_.close()
    assert session.requests >= 4  # the session was answered meanwhile, often
    assert reports.reports == []


def not_leading_reply(body: bytes, correlation_id: int, code: ErrorCode) -> bytes | None:
    """The answer to a ReplicaFetch ``body``: ``code`` for each of its partitions (None
    for a wake request, which gets none)."""
    req = decode_replica_fetch_request(body)
    if req.wake:
        return None
    answers = [
        ReplicaFetchAnswer(i, int(code), -1, -1, -1, "not leading")
        for i in range(len(req.partitions))
    ]
    response = encode_replica_fetch_response(answers)
    return encode_frame(Api.REPLICA_FETCH, correlation_id, response, flags=FLAG_RESPONSE)


async def serve_not_leading(listener: anyio.abc.SocketListener, code: ErrorCode) -> None:
    """Answer every ReplicaFetch at once with ``code`` for each partition (a leader that
    does not lead the epoch it was given, or one not open as leader yet)."""

    async def handle(conn: anyio.abc.SocketStream) -> None:
        async with conn:
            async for frame in frames_from(conn):
                if frame.api == Api.REPLICA_FETCH:
                    reply = not_leading_reply(frame.body, frame.correlation_id, code)
                    if reply is not None:
                        await conn.send(reply)

    await listener.serve(handle)


@pytest.mark.parametrize("code", [ErrorCode.NOT_LEADER, ErrorCode.UNAVAILABLE])
async def test_a_leader_answering_not_leader_in_its_epoch_is_reported(
    tmp_path: Path, code: ErrorCode
) -> None:
    """Its server answers every probe (``down`` stays False) and every fetch, with
    NOT_LEADER: before, each answer counted as hearing from the leader and the follower
    never reported it, so the partition kept a leader that does not lead."""
    after_s = 0.3
    reports = Reports()
    log_ = Log.open(tmp_path / "stuck-0")
    serve = functools.partial(serve_not_leading, code=code)
    async with session_to(serve, CONFIG) as (tg, port, session):
        fetcher = stuck_follower(
            CountingFetcher,
            port,
            log_,
            CONFIG,
            reports,
            session=session,
            not_leader=NotLeaderRun(after_s),
        )
        fetcher.enough, fetcher.failed = 1_000_000, anyio.Event()
        tg.start_soon(fetcher.run)
        started = anyio.current_time()
        with anyio.move_on_after(after_s + 3.0):
            await reports.reported.wait()
        waited_s = anyio.current_time() - started
        tg.cancel_scope.cancel()
    log_.close()
    assert fetcher.interruptions.failures >= 3  # answered, again and again
    if code == ErrorCode.NOT_LEADER:
        assert reports.reports[:1] == [("stuck", 0)]
        assert waited_s >= after_s  # not at the first answer: a new leader takes its role
    else:
        assert reports.reports == []  # taking its role: not reported
