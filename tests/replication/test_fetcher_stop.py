"""A stopped follower fetcher writes nothing more to its log (``FollowerFetcher.stop``).

A role change no longer waits for the fetcher's task to end (a failover's new leaders
waited for a thousand cancellations on a busy loop): it stops the fetcher, which from then
on appends nothing, sets no HW and reports nothing, and waits only for a write already in
progress. Here the leader is a small ReplicaFetch peer on a real 127.0.0.1 socket that
holds its answer (one record) until the fetcher was stopped; the follower's log is real.
The fetcher ends on its own (its fetch parked in the session is dropped, no cancellation),
and the record that comes afterwards is not appended.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.abc
import pytest

from jetsdk.codec.record import encode_body, frame_body
from jetsdk.codec.replica_fetch import (
    ReplicaFetchAnswer,
)
from jetserver.replication.config import ReplicationConfig
from jetserver.replication.fetcher import FollowerFetcher
from jetserver.storage import Log
from jetserver.testing import wait_until_async
from support.fetchers import follower_fetcher, session_to
from support.frames_in import replica_fetch_reply, replica_fetches

pytestmark = pytest.mark.anyio

CONFIG = ReplicationConfig(fetch_max_wait_s=5.0, request_slack_s=5.0)
BOUND_S = 10.0


async def test_a_stopped_fetcher_appends_nothing_and_ends(tmp_path: Path) -> None:
    asked = anyio.Event()
    release = anyio.Event()
    hw_set: list[int] = []

    async def serve(listener: anyio.abc.SocketListener) -> None:
        async def handle(conn: anyio.abc.SocketStream) -> None:
            async with conn:
                async for frame, _req in replica_fetches(conn):
                    asked.set()
                    await release.wait()  # answered once the fetcher was stopped
                    record = frame_body(0, 5, 0, encode_body(b"x"))
                    answer = ReplicaFetchAnswer(0, 0, hw=1, log_start=0, leo=1, records=record)
                    await conn.send(replica_fetch_reply(frame, [answer]))

        await listener.serve(handle)

    async def on_hw(hw: int) -> None:
        hw_set.append(hw)

    log_ = Log.open(tmp_path / "p-0")
    ended = anyio.Event()
    async with session_to(serve, CONFIG) as (tg, port, session):
        fetcher = follower_fetcher(
            FollowerFetcher, "p", port, log_, CONFIG, on_hw=on_hw, session=session
        )

        async def run() -> None:
            await fetcher.run()
            ended.set()

        tg.start_soon(run)
        with anyio.fail_after(BOUND_S):
            await asked.wait()  # its fetch is parked at the leader (a 5 s long poll)
            fetcher.stop()
            await fetcher.writes_done()  # no write in progress: returns at once
            await ended.wait()  # it ended by itself, not cancelled: its fetch was dropped
            release.set()  # the answer (one record) comes now
            await wait_until_async(
                lambda: session.requests >= 1, BOUND_S, "the leader's answer", interval_s=0.01
            )
        tg.cancel_scope.cancel()
    assert log_.log_end_offset == 0
    assert hw_set == []
    assert fetcher.fetches == 0
    log_.close()
